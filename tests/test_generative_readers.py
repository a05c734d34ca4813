"""Readers of the generative tasks' formats (lightning_bench/tasks/<benchmark>/: summarization, open_qa, multiwoz, code:
codexglue and humaneval): the real ../shared/data samples through the local layout, every format's details on small
hand-made files in each benchmark's own layout (tests/fixtures/generative/), the hub path (rows shaped like
the HF `datasets` rows give the same rows as the files), and the one-line errors."""

import gzip
import hashlib
import json
import shutil
import sys
import types
import zipfile
from pathlib import Path

import pytest

from lightning_bench.tasks import TASKS, get_task, load_rows, local_layout
from lightning_bench.tasks.registry import READERS
from lightning_bench.tasks.summarization.reader import story
from lightning_bench.errors import ConfigError, MissingData

GEN = Path(__file__).resolve().parent / "fixtures" / "generative"
FORMATS = ("cnn_dailymail", "xsum", "multi_news", "nq_open", "triviaqa", "multiwoz", "codexglue_code_to_text",
           "codexglue_line_completion", "humaneval")
NEW_TASKS = sorted(name for name, t in TASKS.items() if t.source.format in FORMATS)

# the fields of each format's rows (extra fields are allowed where a reader adds them, listed in EXTRA)
CONTRACT = {
    "cnn_dailymail": {"id", "document", "summary"}, "xsum": {"id", "document", "summary"},
    "multi_news": {"id", "document", "summary"}, "nq_open": {"id", "question", "answers", "context"},
    "triviaqa": {"id", "question", "answers", "normalized_aliases", "context"},
    "multiwoz": {"id", "dialogue_id", "turn", "history", "belief_state", "domains"},
    "codexglue_code_to_text": {"id", "language", "code", "code_original", "docstring"},
    "codexglue_line_completion": {"id", "input", "input_raw", "gt"},
    "humaneval": {"id", "task_id", "prompt", "canonical_solution", "test", "entry_point"},
}
EXTRA = {"multi_news": {"documents"}, "multiwoz": {"belief_state_values"},
         "codexglue_code_to_text": {"original_string"}}


def check_rows(task: str, rows: list[dict]) -> None:
    """Rows of the format's contract: its fields, a non-empty reference, unique string ids."""
    fmt = get_task(task).source.format
    assert rows, task
    for r in rows:
        assert CONTRACT[fmt] <= set(r) <= CONTRACT[fmt] | EXTRA.get(fmt, set()), (task, sorted(r))
        assert isinstance(r["id"], str) and r["id"], task
    assert len({r["id"] for r in rows}) == len(rows), task
    if fmt in ("cnn_dailymail", "xsum", "multi_news"):
        assert all(r["summary"].strip() and r["document"].strip() for r in rows)
    elif fmt in ("nq_open", "triviaqa"):
        assert all(r["answers"] and all(isinstance(a, str) and a == a.strip() and a for a in r["answers"])
                   and r["question"].strip() for r in rows)
        rc = task == "triviaqa/rc"
        assert all((isinstance(r["context"], str) and r["context"]) if rc else r["context"] is None for r in rows)
    elif fmt == "multiwoz":
        for r in rows:
            assert isinstance(r["belief_state"], dict) and isinstance(r["turn"], int)
            assert all(isinstance(k, str) and "-" in k and isinstance(v, str) and v for k, v in r["belief_state"].items())
            assert r["id"] == f"{r['dialogue_id']}/{r['turn']}" and r["history"][-1]["speaker"] == "user"
            assert all(set(t) == {"speaker", "text"} and t["speaker"] in ("user", "system") for t in r["history"])
            assert len(r["history"]) == 2 * r["turn"] + 1 and r["domains"] == sorted(r["domains"])
        assert any(r["belief_state"] for r in rows)  # a greeting turn may have none, a whole split not
    elif fmt == "codexglue_code_to_text":
        assert all(r["docstring"].strip() and r["code"].strip() and r["language"] == get_task(task).short_name
                   for r in rows)
    elif fmt == "codexglue_line_completion":
        assert all(r["gt"].strip() and r["input"] and not r["input"].startswith("<s>") for r in rows)
    else:
        assert all(r["id"] == r["task_id"] and r["test"].strip() and r["entry_point"] in r["prompt"] for r in rows)


def one_line(err) -> str:
    message = str(err.value)
    assert "\n" not in message, message
    return message


# ---- the registry and the real files in ../shared/data ----------------------------------------------
def test_new_tasks_have_a_reader_and_a_local_layout():
    assert len(NEW_TASKS) == 17 and {TASKS[t].source.format for t in NEW_TASKS} == set(FORMATS)
    for name in NEW_TASKS:
        task = TASKS[name]
        reader = READERS[task.source.format]
        assert callable(reader.read) and callable(reader.from_hub)
        assert local_layout(task)[task.splits.eval], name  # the eval split has local files


# tasks whose eval files ../shared/data does not have: the error names the layout's path
NOT_IN_SHARED = {"multi_news": "multi_news/test.src",
                 "codexglue_code_completion_line/py150": "codexglue/code_completion_line/py150/line_completion/test.json"}


@pytest.mark.shared_data
@pytest.mark.parametrize("task", NEW_TASKS)
def test_shared_sample_rows(shared_data, task):
    if task in NOT_IN_SHARED:
        with pytest.raises(MissingData) as info:
            load_rows(task, "eval", data_dir=shared_data)
        assert f"{shared_data / NOT_IN_SHARED[task]} not found" in one_line(info)
        return
    rows, origin = load_rows(task, "eval", data_dir=shared_data, with_origin=True)
    check_rows(task, rows)
    assert all(len(f["sha256"]) == 64 for f in origin["files"])


SHARED_COUNTS = {"cnn_dailymail": 10, "xsum": 300, "natural_questions": 3610, "triviaqa/rc": 4,
                 "triviaqa/unfiltered": 2, "multiwoz/2.1": 7372, "multiwoz/2.2": 2,
                 "codexglue_code_completion_line/javacorpus": 5, "humaneval": 164,
                 **{f"codexglue_code_to_text/{lang}": 3 for lang in ("go", "java", "javascript", "php", "python",
                                                                     "ruby")}}


@pytest.mark.shared_data
def test_shared_sample_values(shared_data):
    rows = {t: load_rows(t, "eval", data_dir=shared_data) for t in SHARED_COUNTS}
    assert {t: len(r) for t, r in rows.items()} == SHARED_COUNTS
    # the few-shot pools the layout names (train) and MultiWOZ 2.2's dev sample
    assert [len(load_rows(t, split, data_dir=shared_data)) for t, split in (
        ("cnn_dailymail", "fewshot"), ("xsum", "fewshot"), ("triviaqa/rc", "fewshot"), ("multiwoz/2.2", "validation"),
        ("codexglue_code_to_text/ruby", "validation"))] == [10, 10, 7, 2, 3]
    nq = rows["natural_questions"][0]
    assert nq == {"id": "0", "question": "when was the last time anyone was on the moon",
                  "answers": ["14 December 1972 UTC", "December 1972"], "context": None}
    cnn = {r["id"]: r for r in rows["cnn_dailymail"]}["f001ec5c4704938247d27a44948eebb37ae98d01"]
    assert cnn["document"].startswith("(CNN)The Palestinian Authority officially became the 123rd member")
    assert cnn["summary"].split("\n")[0] == ("Membership gives the ICC jurisdiction over alleged crimes committed in "
                                             "Palestinian territories since last June .")
    xsum = rows["xsum"][0]
    assert xsum["id"] == "0" and xsum["document"].startswith("Prison Link Cymru had 1,099 referrals in 2015-16")
    assert xsum["document"].endswith("20,000 new affordable homes in the next five years.")
    assert xsum["summary"] == ('There is a "chronic" need for more housing for prison leavers in Wales, according '
                               "to a charity.")
    rc = rows["triviaqa/rc"]
    assert [r["id"] for r in rc] == ["tc_2", "tc_33", "tc_33#2", "tc_40"]
    assert rc[0]["answers"] == ["David Seville"] and rc[0]["context"].startswith("Alvin and the Chipmunks (2007)")
    assert rc[1]["context"] != rc[2]["context"]  # web and wikipedia evidence of the same question
    assert [r["context"] for r in rows["triviaqa/unfiltered"]] == [None, None]
    woz = rows["multiwoz/2.1"]
    assert len({r["dialogue_id"] for r in woz}) == 1000
    assert woz[0]["id"] == "SNG0073/0" and woz[0]["domains"] == ["taxi"]
    assert woz[0]["belief_state"] == {"taxi-destination": "pizza hut fenditton",
                                      "taxi-departure": "saint johns college"}
    assert [r["belief_state"] for r in rows["multiwoz/2.2"]][0] == {"train-departure": "norwich",
                                                                   "train-destination": "cambridge"}
    python = rows["codexglue_code_to_text/python"][0]
    assert python["docstring"] == "Extracts video ID from URL ."
    assert "Extracts video ID" in python["original_string"] and "Extracts video ID" not in python["code_original"]
    assert python["code_original"].startswith("def get_vid_from_url(url):\n        return match1(")
    go = rows["codexglue_code_to_text/go"][0]
    assert go["code_original"] == go["original_string"] and go["code_original"].startswith("func mustWaitPinReady")
    java = rows["codexglue_code_completion_line/javacorpus"][0]
    assert (java["id"], java["gt"]) == ("4755", "owner , final Point location )")
    assert rows["humaneval"][0]["id"] == "HumanEval/0" and rows["humaneval"][0]["entry_point"] == "has_close_elements"


# ---- summarization -------------------------------------------------------------------------------------
CNN_ROW = {"id": "abc68765587ae3956702ab9a92c8dc2064b30205",
           "document": 'PORTLAND, Maine (CNN) -- The last keeper of the Point Arlo light retired on Friday. He had '
                       'climbed its 112 steps every night since 1979 . "It was never lonely," he said.',
           "summary": "The last keeper of Point Arlo light retires .\nHe climbed the tower every night for 36 years."}


def read(task: str, *files):
    return READERS[get_task(task).source.format].read(get_task(task), [Path(f) for f in files])


def test_cnn_story_url_list_folder_and_hub_layouts():
    cnn = GEN / "cnn_dailymail"
    url = (cnn / "url_lists/all_test.txt").read_text().strip()
    assert hashlib.sha1(url.encode()).hexdigest() == CNN_ROW["id"]  # the story's file name is the url's sha1
    assert load_rows("cnn_dailymail", "test", paths=[cnn / "url_lists/all_test.txt"]) == [CNN_ROW]
    assert load_rows("cnn_dailymail", "test", paths=[cnn / f"cnn_stories/{CNN_ROW['id']}.story"]) == [CNN_ROW]
    assert read("cnn_dailymail", cnn / "cnn_stories") == [CNN_ROW]  # a folder of stories
    second = {"id": "b2", "document": "A second article.", "summary": "Second highlight ."}
    assert load_rows("cnn_dailymail", "test", paths=[cnn / "hf_rows.jsonl"]) == [CNN_ROW, second]
    assert load_rows("cnn_dailymail", "test", paths=[cnn / "hf_rows.csv"]) == [CNN_ROW, second]


def test_cnn_story_parsing():
    text = ("First line of the article\r\n\r\nSecond\u2028line, one line as the hub reads it\r\n"
            "Quoted ends stay \u201cas they are\u201d\n\n@highlight\n\n  first highlight  \n\n@highlight\n\n"
            "second highlight!\nthird line after the highlights\n")
    article, highlights = story(text)
    assert article == ("First line of the article . Second\u2028line, one line as the hub reads it . "
                       "Quoted ends stay \u201cas they are\u201d")
    assert highlights == ["first highlight .", "second highlight!", "third line after the highlights ."]
    assert story("An article with no highlights.\n") == ("An article with no highlights.", [])


def test_xsum_h2o_prompts_and_hub_json():
    xsum = GEN / "xsum"
    hub = load_rows("xsum", "test", paths=[xsum / "hf_data.json"])
    assert [r["id"] for r in hub] == ["30000000", "30000001"]
    h2o = load_rows("xsum", "test", paths=[xsum / "h2o_prompts.jsonl"])
    assert [r["id"] for r in h2o] == ["0", "1"]  # row numbers, counted over the files read
    assert [(r["document"], r["summary"]) for r in h2o] == [(r["document"], r["summary"]) for r in hub]
    assert h2o[1]["document"] == "A rare orchid has flowered in a Cardiff greenhouse for the first time in 30 years."
    assert [r["id"] for r in load_rows("xsum", "test", paths=[xsum / "h2o_prompts.jsonl"] * 2)] == ["0", "1", "2", "3"]


MULTI_NEWS_ROWS = [
    {"id": "0", "document": "Storm hits coast . \n \n Thousands lose power .\n\nResidents were told to stay home .",
     "documents": ["Storm hits coast . \n \n Thousands lose power .", "Residents were told to stay home ."],
     "summary": "A storm left thousands without power, and residents were told to stay home."},
    {"id": "1", "document": "Museum reopens after repairs .\n\nThe museum's roof was fixed .",
     "documents": ["Museum reopens after repairs .", "The museum's roof was fixed ."],
     "summary": "The museum has reopened after its roof was repaired."},
]


def test_multi_news_src_tgt_and_hub_rows():
    assert load_rows("multi_news", "eval", data_dir=GEN) == MULTI_NEWS_ROWS  # local layout: multi_news/test.src
    assert load_rows("multi_news", "eval", paths=[GEN / "multi_news/test.tgt"]) == MULTI_NEWS_ROWS
    hub = [json.loads(line) for line in (GEN / "multi_news/hf_rows.jsonl").read_text().splitlines()]
    assert all(r["summary"].startswith("\u2013 ") for r in hub)  # the hub keeps the "– " of the targets
    assert READERS["multi_news"].from_hub(get_task("multi_news"), "test", hub) == MULTI_NEWS_ROWS
    assert load_rows("multi_news", "eval", paths=[GEN / "multi_news/hf_rows.jsonl"]) == MULTI_NEWS_ROWS


# ---- open QA -------------------------------------------------------------------------------------------
EVEREST = ["Mount Everest", "Everest", "Chomolungma", "Mt. Everest"]
EVIDENCE = {"Mount_Everest.txt": "Mount Everest is Earth's highest mountain above sea level.\n\n"
                                 "It lies in the Mahalangur Himal.",
            "Himalayas.txt": "The Himalayas are a mountain range in Asia.",
            "7/7_1.txt": "Everest facts\nAt 8,849 m, Everest is the highest peak.",
            "7/7_2.txt": "Ottawa is the capital city of Canada."}
TQA = GEN / "triviaqa"


def test_nq_open_jsonl():
    rows = load_rows("natural_questions", "eval", data_dir=GEN)
    assert [r["id"] for r in rows] == ["0", "1", "2"]
    assert rows[1] == {"id": "1", "question": "what is the boiling point of water at sea level in fahrenheit",
                       "answers": ["212 °F", "212"], "context": None}  # stripped, each answer once
    check_rows("natural_questions", rows)


def test_triviaqa_rc_reads_evidence_and_unfiltered_has_no_context():
    rows = load_rows("triviaqa/rc", "validation", paths=[TQA / "qa/web-dev.json", TQA / "qa/wikipedia-dev.json"])
    assert [r["id"] for r in rows] == ["qz_101", "qz_102", "qz_101#2"]
    assert rows[0]["answers"] == EVEREST and rows[0]["normalized_aliases"] == ["mount everest", "everest",
                                                                               "chomolungma", "mt everest"]
    assert rows[1]["question"] == "What is the capital city of Canada?" and rows[1]["answers"] == ["Ottawa",
                                                                                                  "Ottawa, Ontario"]
    # EntityPages (evidence/wikipedia/) then SearchResults (evidence/web/), each stripped, a blank line between
    assert [r["context"] for r in rows] == [EVIDENCE["Mount_Everest.txt"] + "\n\n" + EVIDENCE["7/7_1.txt"],
                                            EVIDENCE["7/7_2.txt"],
                                            EVIDENCE["Mount_Everest.txt"] + "\n\n" + EVIDENCE["Himalayas.txt"]]
    check_rows("triviaqa/rc", rows)
    closed = load_rows("triviaqa/unfiltered", "validation", paths=[TQA / "unfiltered/unfiltered-web-dev.json"])
    assert closed == [{"id": "qz_201", "question": "Which is the largest planet in the Solar System?",
                       "answers": ["Jupiter", "Planet Jupiter"], "normalized_aliases": ["jupiter", "planet jupiter"],
                       "context": None}]  # its evidence files are not there: unfiltered does not read them
    web = load_rows("triviaqa/unfiltered", "validation", paths=[TQA / "qa/web-dev.json"])
    assert [(r["id"], r["context"]) for r in web] == [("qz_101", None), ("qz_102", None)]


def columns(rows: list[dict], keys: tuple[str, ...]) -> dict:
    """A list of dicts as `datasets` gives a Sequence of dicts: a dict of lists."""
    return {k: [r[k] for r in rows] for k in keys}


def triviaqa_hub_rows(path: Path) -> list[dict]:
    """mandarjoshi/trivia_qa rows (rc) for the questions of an official TriviaQA file."""
    out = []
    for q in json.loads(path.read_text())["Data"]:
        a = q["Answer"]
        pages = [{"doc_source": p["DocSource"], "filename": p["Filename"], "title": p["Title"],
                  "wiki_context": (TQA / "evidence/wikipedia" / p["Filename"]).read_text()} for p in q["EntityPages"]]
        results = [{"description": r["Description"], "filename": r["Filename"], "rank": r["Rank"], "title": r["Title"],
                    "url": r["Url"], "search_context": (TQA / "evidence/web" / r["Filename"]).read_text()}
                   for r in q.get("SearchResults", [])]
        out.append({"question": q["Question"], "question_id": q["QuestionId"], "question_source": q["QuestionSource"],
                    "entity_pages": columns(pages, ("doc_source", "filename", "title", "wiki_context")),
                    "search_results": columns(results, ("description", "filename", "rank", "title", "url",
                                                        "search_context")),
                    "answer": {"aliases": a["Aliases"], "normalized_aliases": a["NormalizedAliases"],
                               "matched_wiki_entity_name": a["MatchedWikiEntityName"],
                               "normalized_matched_wiki_entity_name": a["NormalizedMatchedWikiEntityName"],
                               "normalized_value": a["NormalizedValue"], "type": a["Type"], "value": a["Value"]}})
    return out


# ---- MultiWOZ ------------------------------------------------------------------------------------------
HOTEL = {"hotel-pricerange": "cheap", "hotel-stars": "4"}
HOTEL_BOOKED = HOTEL | {"hotel-name": "alexander bed and breakfast", "hotel-book people": "2",
                        "hotel-book day": "friday", "hotel-book stay": "3"}
RESTAURANT = {"restaurant-area": "centre", "restaurant-food": "italian"}
RESTAURANT_BOOKED = RESTAURANT | {"restaurant-name": "pizza express", "restaurant-book day": "sunday",
                                  "restaurant-book people": "4", "restaurant-book time": "18:30"}


def test_multiwoz21_convlab2_zip_states_per_user_turn(tmp_path):
    rows = load_rows("multiwoz/2.1", "eval", data_dir=GEN)  # multiwoz/convlab2_multiwoz21/test.json.zip
    assert [r["id"] for r in rows] == ["MUL9001/0", "MUL9001/1", "MUL9001/2", "SNG9002/0"]
    assert [r["belief_state"] for r in rows] == [  # the state after each user turn, cumulative; "booked" is no slot
        HOTEL, HOTEL_BOOKED,
        HOTEL_BOOKED | {"train-destination": "cambridge", "train-day": "saturday", "train-leaveat": "dontcare"}, {}]
    assert rows[2]["history"][-1] == {"speaker": "user",
                                      "text": "I also need a train to cambridge on saturday , any time is fine ."}
    assert [t["speaker"] for t in rows[2]["history"]] == ["user", "system", "user", "system", "user"]
    assert rows[0]["domains"] == ["hotel", "train"] and rows[3]["domains"] == ["police"]
    assert rows[1]["belief_state_values"] == {k: [v] for k, v in HOTEL_BOOKED.items()}
    check_rows("multiwoz/2.1", rows)
    with zipfile.ZipFile(GEN / "multiwoz/convlab2_multiwoz21/test.json.zip") as z:  # the extracted file too
        z.extract("test.json", tmp_path)
    assert load_rows("multiwoz/2.1", "test", paths=[tmp_path / "test.json"]) == rows


def test_multiwoz22_dialogues_json_states_per_user_turn():
    path = GEN / "multiwoz/MultiWOZ_2.2/test/dialogues_001.json"
    rows = load_rows("multiwoz/2.2", "test", paths=[path])
    assert [r["id"] for r in rows] == ["PMUL9101.json/0", "PMUL9101.json/1", "PMUL9101.json/2"]
    taxi = {"taxi-destination": "pizza express", "taxi-arriveby": "18:30", "taxi-departure": "dontcare"}
    assert [r["belief_state"] for r in rows] == [RESTAURANT, RESTAURANT_BOOKED, RESTAURANT_BOOKED | taxi]
    assert all(rows[i]["belief_state"].items() <= rows[i + 1]["belief_state"].items() for i in range(2))
    assert rows[1]["belief_state_values"]["restaurant-name"] == ["pizza express", "pizza express fen ditton"]
    assert rows[2]["domains"] == ["restaurant", "taxi"] and len(rows[2]["history"]) == 5
    check_rows("multiwoz/2.2", rows)


def multiwoz22_hub_rows(path: Path) -> list[dict]:
    """pfb30/multi_woz_v22 rows for the dialogues of a MultiWOZ 2.2 file (speaker: 0 USER, 1 SYSTEM)."""
    out = []
    for d in json.loads(path.read_text()):
        turns = []
        for t in d["turns"]:
            frames = [{"service": f["service"], "slots": columns(f["slots"], ("slot", "value", "start",
                                                                                "exclusive_end")),
                       "state": {"active_intent": f["state"]["active_intent"],
                                 "requested_slots": f["state"]["requested_slots"],
                                 "slots_values": columns([{"slots_values_name": k, "slots_values_list": v}
                                                          for k, v in f["state"]["slot_values"].items()],
                                                         ("slots_values_name", "slots_values_list"))}}
                      for f in t["frames"]]
            turns.append({"turn_id": t["turn_id"], "speaker": 0 if t["speaker"] == "USER" else 1,
                          "utterance": t["utterance"], "frames": columns(frames, ("service", "state", "slots"))})
        out.append({"dialogue_id": d["dialogue_id"], "services": d["services"],
                    "turns": columns(turns, ("turn_id", "speaker", "utterance", "frames"))})
    return out


# ---- code ----------------------------------------------------------------------------------------------
def test_code_to_text_gz_jsonl():
    rows = load_rows("codexglue_code_to_text/python", "eval", data_dir=GEN)  # python_test_0.jsonl.gz
    assert [r["id"] for r in rows] == ["0", "1", "2"]
    assert rows[0]["docstring"] == "Return the area of the rectangle multiplied by scale ."
    assert rows[0]["code"] == "def area ( self , scale = 1.0 ) : return self . width * self . height * scale"
    # the docstring (the reference) is cut out of the code shown to the model, with its lines
    assert rows[0]["code_original"] == "def area(self, scale=1.0):\n        return self.width * self.height * scale"
    assert rows[1]["code_original"] == ('@lru_cache(maxsize=None)\ndef parse(text: str, sep: str = ":") -> '
                                        "Dict[str, str]:\n    return dict(line.split(sep, 1) for line in "
                                        "text.splitlines())")
    assert rows[2]["code_original"] == "def double(x): return 2 * x" and rows[2]["docstring"] == "Twice x ."
    assert all(r["original_string"].count('"""') + r["original_string"].count("'''") == 2 for r in rows[:2])
    java = load_rows("codexglue_code_to_text/java", "eval", data_dir=GEN)
    assert java[0]["language"] == "java" and java[0]["code_original"] == java[0]["original_string"]
    assert java[0]["docstring"] == "Whether the string is null or holds only white space ."
    check_rows("codexglue_code_to_text/python", rows)


def test_line_completion_json_with_gt():
    rows = load_rows("codexglue_code_completion_line/py150", "eval", data_dir=GEN)  # py150/line_completion/test.json
    assert [r["id"] for r in rows] == ["0", "1"]
    assert rows[0]["input"] == ("import os\ndef data_path ( name ) :\nbase = os . path . dirname ( __file__ )\n"
                                "return")
    assert rows[0]["input_raw"].startswith("<s> import os <EOL>")
    assert rows[0]["gt"] == 'os . path . join ( base , "<STR_LIT>" , name )'  # as given: the evaluator's gold
    assert rows[1]["input"].endswith("def inc ( self ) :\n")  # a context ending with <EOL>: the line is new
    java = load_rows("codexglue_code_completion_line/javacorpus", "eval",
                     paths=[GEN / "codexglue/code_completion_line/javaCorpus/test.json"])
    assert [(r["id"], r["gt"]) for r in java] == [("17", "return size ;"), ("42", "String right ) {")]
    check_rows("codexglue_code_completion_line/py150", rows)


def test_humaneval_jsonl_gz():
    rows = load_rows("humaneval", "eval", data_dir=GEN)
    assert [r["id"] for r in rows] == ["HumanEval/0", "HumanEval/1"]
    assert rows[0]["prompt"].endswith('    """\n') and rows[0]["canonical_solution"] == "    return a + b\n"
    assert rows[1]["entry_point"] == "evens" and rows[1]["test"].startswith("\n\ndef check(candidate):")
    check_rows("humaneval", rows)


# ---- the hub path: rows shaped like the `datasets` rows read like the files -------------------------------
def jsonl(path: Path) -> list[dict]:
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def hub_rows() -> dict:
    tqa = triviaqa_hub_rows(TQA / "qa/web-dev.json") + triviaqa_hub_rows(TQA / "qa/wikipedia-dev.json")
    code = [{"id": n} | {k: v for k, v in r.items() if k != "partition"}
            for n, r in enumerate(jsonl(GEN / "codexglue/code_to_text/python_test_0.jsonl.gz"))]
    lines = [{"id": n} | r for n, r in enumerate(jsonl(GEN / "codexglue/code_completion_line/py150/line_completion/"
                                                              "test.json"))]
    return {
        ("abisee/cnn_dailymail", "3.0.0", "test"): jsonl(GEN / "cnn_dailymail/hf_rows.jsonl")[:1],
        ("EdinburghNLP/xsum", None, "test"): json.loads((GEN / "xsum/hf_data.json").read_text())["data"],
        ("alexfabbri/multi_news", None, "test"): jsonl(GEN / "multi_news/hf_rows.jsonl"),
        ("google-research-datasets/nq_open", "nq_open", "validation"): jsonl(GEN / "natural_questions/"
                                                                                  "NQ-open.dev.jsonl"),
        ("mandarjoshi/trivia_qa", "rc", "validation"): tqa,
        ("mandarjoshi/trivia_qa", "unfiltered.nocontext", "validation"): tqa[:2],
        ("pfb30/multi_woz_v22", "v2.2", "test"): multiwoz22_hub_rows(GEN / "multiwoz/MultiWOZ_2.2/test/"
                                                                           "dialogues_001.json"),
        ("google/code_x_glue_ct_code_to_text", "python", "test"): code,
        ("google/code_x_glue_cc_code_completion_line", "py150", "train"): lines,
        ("openai/openai_humaneval", None, "test"): jsonl(GEN / "humaneval/HumanEval.jsonl.gz"),
    }


HUB_VS_FILES = {
    "cnn_dailymail": ["cnn_dailymail/url_lists/all_test.txt"],
    "xsum": ["xsum/h2o_prompts.jsonl"],  # same documents and summaries; ids differ (see below)
    "multi_news": ["multi_news/test.src"],
    "natural_questions": ["natural_questions/NQ-open.dev.jsonl"],
    "triviaqa/rc": ["triviaqa/qa/web-dev.json", "triviaqa/qa/wikipedia-dev.json"],
    "triviaqa/unfiltered": ["triviaqa/qa/web-dev.json"],
    "multiwoz/2.2": ["multiwoz/MultiWOZ_2.2/test/dialogues_001.json"],
    "codexglue_code_to_text/python": ["codexglue/code_to_text/python_test_0.jsonl.gz"],
    "codexglue_code_completion_line/py150": ["codexglue/code_completion_line/py150/line_completion/test.json"],
    "humaneval": ["humaneval/HumanEval.jsonl.gz"],
}


@pytest.fixture
def fake_hub(monkeypatch):
    rows = hub_rows()

    def load_dataset(hub_id, config, split):
        if (hub_id, config, split) not in rows:
            raise ConnectionError(f"offline: {hub_id} {config} {split}")
        return list(rows[hub_id, config, split])

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))


@pytest.mark.parametrize("task", HUB_VS_FILES)
def test_hub_rows_read_like_the_files(fake_hub, task):
    hub, origin = load_rows(task, "eval", with_origin=True)
    files = load_rows(task, "eval", paths=[GEN / f for f in HUB_VS_FILES[task]])
    if task == "xsum":  # H2O's prompt file has no ids: its rows are numbered
        hub = [r | {"id": str(n)} for n, r in enumerate(hub)]
    assert hub == files and origin["hub"] == get_task(task).source.hub_id
    check_rows(task, hub)


# ---- errors: one line, naming the file and the format expected -------------------------------------------
def test_missing_files(tmp_path):
    with pytest.raises(MissingData) as info:
        load_rows("humaneval", "eval", data_dir=tmp_path)
    assert f"{tmp_path / 'humaneval/HumanEval.jsonl.gz'} not found; expected HumanEval" in one_line(info)
    # the readers themselves name the format they expected there
    with pytest.raises(MissingData) as info:
        read("humaneval", tmp_path / "HumanEval.jsonl.gz")
    message = one_line(info)
    assert f"{tmp_path / 'HumanEval.jsonl.gz'} not found; expected HumanEval JSON lines" in message
    shutil.copy(GEN / "multi_news/test.src", tmp_path / "test.src")
    with pytest.raises(MissingData) as info:
        load_rows("multi_news", "test", paths=[tmp_path / "test.src"])
    assert f"{tmp_path / 'test.tgt'} not found; expected the Multi-News targets" in one_line(info)
    (tmp_path / "url_lists").mkdir()
    (tmp_path / "url_lists/all_test.txt").write_text("http://www.cnn.com/2015/01/01/no-story-here/\n")
    name = hashlib.sha1(b"http://www.cnn.com/2015/01/01/no-story-here/").hexdigest() + ".story"
    with pytest.raises(MissingData) as info:
        load_rows("cnn_dailymail", "test", paths=[tmp_path / "url_lists/all_test.txt"])
    assert f"story {name}" in one_line(info) and str(tmp_path / "cnn_stories") in str(info.value)
    (tmp_path / "qa").mkdir()
    shutil.copy(TQA / "qa/web-dev.json", tmp_path / "qa/web-dev.json")
    with pytest.raises(MissingData) as info:
        load_rows("triviaqa/rc", "validation", paths=[tmp_path / "qa/web-dev.json"])
    assert f"evidence folder {tmp_path / 'evidence'} not found" in one_line(info)
    (tmp_path / "evidence/wikipedia").mkdir(parents=True)
    (tmp_path / "evidence/wikipedia/Mount_Everest.txt").write_bytes(b"Everest \xff\xfe")
    with pytest.raises(ConfigError) as info:
        load_rows("triviaqa/rc", "validation", paths=[tmp_path / "qa/web-dev.json"])
    assert f"evidence file {tmp_path / 'evidence/wikipedia/Mount_Everest.txt'} cannot be read" in one_line(info)
    with pytest.raises(MissingData) as info:  # evidence/ is there, the file a question names is not
        load_rows("triviaqa/rc", "validation", paths=[TQA / "unfiltered/unfiltered-web-dev.json"])
    assert f"evidence file {TQA / 'evidence/wikipedia/Jupiter.txt'} not found" in one_line(info)


@pytest.mark.parametrize("task,name,expected", [
    ("cnn_dailymail", "x.story", "a CNN/DailyMail .story file"),
    ("cnn_dailymail", "all_test.txt", "a CNN/DailyMail url list"),
    ("xsum", "test.jsonl", "XSum rows with document, summary"),
    ("multi_news", "test.jsonl", "Multi-News rows with document"),
    ("natural_questions", "NQ-open.dev.jsonl", "NQ-open JSON lines with question, answer"),
    ("triviaqa/rc", "web-dev.json", "a TriviaQA JSON file"),
    ("multiwoz/2.1", "test.json", "MultiWOZ 2.1 dialogues"),
    ("codexglue_code_to_text/go", "go_test_0.jsonl", "CodeSearchNet JSON lines"),
    ("codexglue_code_completion_line/py150", "test.json", "CodeXGLUE line-completion JSON lines"),
    ("humaneval", "HumanEval.jsonl", "HumanEval JSON lines"),
])
def test_empty_files(tmp_path, task, name, expected):
    (tmp_path / name).write_text("\n")
    with pytest.raises(ConfigError) as info:
        load_rows(task, "eval", paths=[tmp_path / name])
    message = one_line(info)
    assert message.startswith(f"{task}: {tmp_path / name} is empty; expected {expected}"), message


MULTIWOZ_USER_LAST = {"MUL1": {"goal": {}, "log": [{"text": "hi", "metadata": {}}]}}


@pytest.mark.parametrize("task,name,text,expected", [
    ("codexglue_code_completion_line/py150", "test.json", '{"input": "<s> x = <NUM_LIT:1> <EOL>", "gt": ""}\n',
     "row 0 has no gt (the line to complete), so nothing to score against"),
    ("codexglue_code_completion_line/py150", "test.json", '{"input": "<s> x = <NUM_LIT:1> <EOL>"}\n',
     "row 0 has no gt; expected CodeXGLUE line-completion JSON lines"),
    ("cnn_dailymail", "x.story", "An article.\n\nNo highlights at all.\n", "has no @highlight lines"),
    ("cnn_dailymail", "rows.jsonl", '{"id": "a", "article": "text", "highlights": " "}\n', "row 0 has no highlights"),
    ("cnn_dailymail", "all_test.txt", "cnn_stories/x.story\n", "is not a url list"),
    ("xsum", "test.jsonl", '{"document": "d", "summary": "s"}\n{"document": "d", "summary": ""}\n',
     "row 1 has no summary"),
    ("xsum", "test.jsonl", '{"article": "Summarize this: d", "summary_gt": "s"}\n', "is not H2O's XSum prompt"),
    ("multi_news", "test.jsonl", '{"document": "a ||||| b", "summary": "\u2013 "}\n', "row 0 has no summary"),
    ("natural_questions", "dev.jsonl", '{"question": "who", "answer": []}\n', "row 0 has no answer"),
    ("natural_questions", "dev.jsonl", '{"question": "who", "answers": ["x"]}\n', "row 0 has no answer; expected"),
    ("triviaqa/unfiltered", "unfiltered-web-test-without-answers.json",
     '{"Data": [{"Question": "q?", "QuestionId": "t1", "SearchResults": []}]}', "question 0 has no answer"),
    ("multiwoz/2.1", "test.json", json.dumps(MULTIWOZ_USER_LAST), "user turn 0 has no system turn after it"),
    ("multiwoz/2.2", "dialogues_001.json", '[{"dialogue_id": "d1"}]', "dialogue d1 has no turns"),
    ("codexglue_code_to_text/python", "python_test_0.jsonl",
     '{"code_tokens": ["def", "f", "(", ")", ":", "pass"], "docstring_tokens": []}\n', "row 0 has no docstring"),
    ("humaneval", "HumanEval.jsonl", '{"task_id": "HumanEval/0", "prompt": "def f():\\n", "canonical_solution": '
     '"    pass\\n", "entry_point": "f"}\n', "row 0 has no test; expected HumanEval JSON lines"),
])
def test_rows_without_a_reference_or_field(tmp_path, task, name, text, expected):
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as info:
        load_rows(task, "eval", paths=[tmp_path / name])
    message = one_line(info)
    assert message.startswith(f"{task}: {tmp_path / name}") and expected in message, message
    assert message.count(f"{task}:") == 1, message  # not wrapped in a second error


def test_a_folder_of_stories_is_one_path_with_a_content_hash(tmp_path):
    def load_rows_with_origin(task, split, paths):
        return load_rows(task, split, paths=paths, with_origin=True)

    folder = GEN / "cnn_dailymail" / "cnn_stories"
    rows, origin = load_rows_with_origin("cnn_dailymail", "eval", paths=[folder])
    assert rows and all(r["summary"] for r in rows)
    copy = tmp_path / "stories"
    shutil.copytree(folder, copy)
    assert load_rows_with_origin("cnn_dailymail", "eval", paths=[copy])[1]["files"][0]["sha256"] == \
        origin["files"][0]["sha256"]
    next(copy.glob("*.story")).write_text("changed\n\n@highlight\n\nnew")
    assert load_rows_with_origin("cnn_dailymail", "eval", paths=[copy])[1]["files"][0]["sha256"] != \
        origin["files"][0]["sha256"]
