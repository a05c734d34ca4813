"""Downstream-task readers (lightning_bench/tasks): every format on a tiny hand-written fixture,
the errors, expand_tasks, the hub path (with a stand-in `datasets`), and the real ../shared/data files."""

import json
import sys
import types
from pathlib import Path

import pytest

from lightning_bench.tasks import TASKS, expand_tasks, get_task, load_rows, local_layout
from lightning_bench.tasks.mmlu.definitions import MMLU_SUBJECTS
from lightning_bench.errors import ConfigError

TASK_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tasks"

# task -> (fixture files under tests/fixtures/tasks, labels in file order)
CASES = {
    "glue/cola": (["glue/cola/in_domain_dev.tsv", "glue/cola/out_of_domain_dev.tsv"], [1, 0, 0, 1, 0]),
    "glue/sst2": (["glue/sst2/dev.tsv"], [1, 0, 0]),
    "glue/mrpc": (["glue/mrpc/msr_paraphrase_test.txt"], [1, 0, 1]),
    "glue/qqp": (["glue/qqp/dev.tsv"], [1, 0]),
    "glue/stsb": (["glue/stsb/dev.tsv"], [4.8, 0.0, 2.5]),
    "glue/mnli": (["glue/mnli/dev_matched.tsv", "glue/mnli/dev_mismatched.tsv"], [0, 1, 2, 0, 2]),
    "glue/qnli": (["glue/qnli/dev.tsv"], [0, 1]),
    "glue/rte": (["glue/rte/dev.tsv"], [0, 1]),
    "glue/wnli": (["glue/wnli/dev.tsv"], [0, 1]),
    "superglue/boolq": (["superglue/BoolQ/val.jsonl"], [1, 0]),
    "superglue/cb": (["superglue/CB/val.jsonl"], [1, 0, 2]),
    "superglue/copa": (["superglue/COPA/val.jsonl"], [0, 1]),
    "superglue/multirc": (["superglue/MultiRC/val.jsonl"], [1, 0, 1, 0, 1, 1, 0]),
    "superglue/rte": (["superglue/RTE/val.jsonl"], [0, 1]),
    "superglue/wic": (["superglue/WiC/val.jsonl"], [0, 1]),
    "superglue/wsc": (["superglue/WSC/val.jsonl"], [1, 0]),
    "mmlu/astronomy": (["mmlu/test/astronomy_test.csv"], [1, 0, 1]),
}
FIELDS = {"glue/cola": {"sentence"}, "glue/sst2": {"sentence"}, "glue/mrpc": {"sentence1", "sentence2"},
          "glue/qqp": {"question1", "question2"}, "glue/stsb": {"sentence1", "sentence2"},
          "glue/mnli": {"premise", "hypothesis", "subset"}, "glue/qnli": {"question", "sentence"},
          "glue/rte": {"sentence1", "sentence2"}, "glue/wnli": {"sentence1", "sentence2"},
          "superglue/boolq": {"question", "passage"}, "superglue/cb": {"premise", "hypothesis"},
          "superglue/copa": {"premise", "choice1", "choice2", "question"},
          "superglue/multirc": {"paragraph", "question", "answer", "question_id"},
          "superglue/rte": {"premise", "hypothesis"}, "superglue/wic": {"word", "sentence1", "sentence2"},
          "superglue/wsc": {"text", "span1_text", "span2_text", "span1_index", "span2_index"},
          "mmlu/astronomy": {"question", "choices", "subject"}}


def fixture_rows(task, *files, **kw):
    return load_rows(task, "validation", data_dir=TASK_FIXTURES, paths=list(files), **kw)


@pytest.mark.parametrize("task", CASES)
def test_reader_rows_and_labels(task):
    files, labels = CASES[task]
    rows = fixture_rows(task, *files)
    assert [r["label"] for r in rows] == labels
    assert all(set(r) == {"id", "label", *FIELDS[task]} for r in rows)
    assert len({r["id"] for r in rows}) == len(rows) and all(isinstance(r["id"], str) for r in rows)


def test_glue_details():
    cola = fixture_rows("glue/cola", *CASES["glue/cola"][0])
    assert [r["id"] for r in cola] == ["0", "1", "2", "3", "4"]  # one split over both files, as on the hub
    assert cola[4]["sentence"] == "The parade was started early by."  # last line without a newline
    mrpc = fixture_rows("glue/mrpc", "glue/mrpc/msr_paraphrase_test.txt")
    assert mrpc[1]["sentence2"].startswith('"Shares fell')  # stray quote kept, the BOM did not hide the header
    sst2 = fixture_rows("glue/sst2", "glue/sst2/dev.tsv")
    assert sst2[2]["sentence"] == '" an oddly hollow spectacle'
    assert isinstance(fixture_rows("glue/stsb", "glue/stsb/dev.tsv")[0]["label"], float)
    mnli = fixture_rows("glue/mnli", *CASES["glue/mnli"][0])
    assert [(r["id"], r["subset"]) for r in mnli] == [("matched-0", "matched"), ("matched-1", "matched"),
                                                       ("matched-2", "matched"), ("mismatched-0", "mismatched"),
                                                       ("mismatched-1", "mismatched")]
    assert mnli[0]["premise"] == "The old man fed the pigeons every morning."


def test_superglue_nested_formats():
    multirc = fixture_rows("superglue/multirc", "superglue/MultiRC/val.jsonl")
    assert [r["question_id"] for r in multirc] == ["0-0", "0-0", "0-1", "0-1", "0-1", "1-2", "1-2"]
    assert multirc[2]["id"] == "0-1-2" and multirc[2]["answer"] == "Tomatoes and beans"
    record = fixture_rows("superglue/record", "superglue/ReCoRD/val.jsonl")
    assert [r["id"] for r in record] == ["3-5", "3-6"]
    assert record[0]["entities"] == ["Denver", "Lena Ortiz", "Ortiz", "Paul Kim"]  # unique, sorted (as on the hub)
    assert record[0]["answers"] == ["Lena Ortiz", "Ortiz"] and record[1]["answers"] == ["Paul Kim"]
    assert "@placeholder" in record[0]["query"] and "\n@highlight\n" in record[0]["passage"]
    wsc = fixture_rows("superglue/wsc", "superglue/WSC/val.jsonl")[0]
    assert (wsc["span1_text"], wsc["span2_text"], wsc["span1_index"], wsc["span2_index"]) == ("The trophy", "it", 0, 9)


@pytest.mark.parametrize("task,nested,flat", [
    ("superglue/multirc", "superglue/MultiRC/val.jsonl", "superglue/hf_flat/multirc.jsonl"),
    ("superglue/wsc", "superglue/WSC/val.jsonl", "superglue/hf_flat/wsc.jsonl"),
    ("superglue/cb", "superglue/CB/val.jsonl", "superglue/hf_flat/cb.jsonl"),
    ("squad_v2", "squad_v2.0/dev.json", "squad_v2.0/hf_flat.jsonl"),
])
def test_hf_flat_rows_read_like_the_original_format(task, nested, flat):
    flat_rows = fixture_rows(task, flat)
    assert flat_rows == fixture_rows(task, nested)[:len(flat_rows)]


def test_squad():
    v1 = fixture_rows("squad", "squad_v1.1/dev.json")
    assert v1[0] == {"id": "q1", "title": "Point_Arlo_Lighthouse", "context": v1[0]["context"],
                     "question": "When was the lighthouse built?", "answers": ["1872", "in 1872"]}
    v2 = fixture_rows("squad_v2", "squad_v2.0/dev.json")
    assert [r["answers"] for r in v2] == [["rainforests of Central America"], [], ["Their skin", "skin"]]


def test_mmlu_csv_quoting_and_line_ends():
    rows = fixture_rows("mmlu/astronomy", "mmlu/test/astronomy_test.csv")
    assert rows[1]["choices"][0] == "Moon, Earth, Sun"
    assert rows[2]["question"] == "Read the statement.\nWhat is a light-year?"
    assert rows[0]["choices"] == ["Venus", "Mercury", "Earth", "Mars"] and rows[0]["label"] == 1
    assert [r["id"] for r in rows] == ["astronomy-0", "astronomy-1", "astronomy-2"]
    assert {r["subject"] for r in rows} == {"astronomy"}


def test_data_dir_roles_max_rows_and_origin():
    rows = load_rows("glue/sst2", "eval", data_dir=TASK_FIXTURES, max_rows=2)  # registry path glue/sst2/dev.tsv
    assert len(rows) == 2
    dev = load_rows("mmlu/astronomy", "fewshot", data_dir=TASK_FIXTURES)
    assert [r["label"] for r in dev] == [1, 2]
    rows, origin = load_rows("glue/qqp", "validation", paths=str(TASK_FIXTURES / "glue/qqp/dev.tsv"),
                             with_origin=True)
    assert len(rows) == 2 and origin["split"] == "validation" and len(origin["files"][0]["sha256"]) == 64
    assert "note" not in origin  # files named by the user
    _, origin = load_rows("glue/mrpc", "eval", data_dir=TASK_FIXTURES, with_origin=True)
    assert origin["note"].startswith("the official MRPC test file")
    with pytest.raises(ConfigError, match="mmlu has no train split"):
        load_rows("mmlu/astronomy", "train", data_dir=TASK_FIXTURES)


# ---- errors: one line, naming the file and what to change ------------------------------------
def one_line_error(task, path, split="validation"):
    with pytest.raises(ConfigError) as info:
        load_rows(task, split, paths=[path])
    message = str(info.value)
    assert "\n" not in message and message.startswith(task + ":")
    return message


def test_missing_file_and_split(tmp_path):
    message = one_line_error("glue/sst2", tmp_path / "nope.tsv")
    assert "nope.tsv not found" in message and "--data.data_dir" in message and "--data.paths" in message
    with pytest.raises(ConfigError, match="no local file is known for split 'test'"):
        load_rows("glue/sst2", "test", data_dir=tmp_path)
    with pytest.raises(ConfigError, match="dev.tsv not found"):
        load_rows("glue/sst2", "validation", data_dir=tmp_path)


@pytest.mark.parametrize("task,fixture,expected", [
    ("glue/sst2", "squad_v1.1/dev.json",
     "is not a GLUE SST-2 TSV (expected a header with the columns 'sentence<TAB>label')"),
    ("glue/mrpc", "glue/sst2/dev.tsv", "is not a GLUE MRPC TSV"),
    ("glue/cola", "glue/sst2/dev.tsv", "is not a GLUE CoLA TSV"),
    ("superglue/boolq", "glue/sst2/dev.tsv",
     "is not a JSON object; expected SuperGLUE BoolQ JSON lines (fields question, passage, idx, label)"),
    ("superglue/boolq", "superglue/CB/val.jsonl", "row 1 does not match SuperGLUE BoolQ JSON lines"),
    ("superglue/multirc", "superglue/BoolQ/val.jsonl", "does not match SuperGLUE MultiRC JSON lines"),
    ("squad", "glue/sst2/dev.tsv", "line 1 is not a JSON object; expected a SQuAD JSON file"),
    ("squad", "superglue/CB/val.jsonl", "is not a SQuAD JSON file"),
    ("mmlu/astronomy", "glue/sst2/dev.tsv", "expected an MMLU CSV"),
])
def test_wrong_format(task, fixture, expected):
    assert expected in one_line_error(task, TASK_FIXTURES / fixture)


@pytest.mark.parametrize("task,name,text,expected", [
    ("glue/sst2", "empty.tsv", "", "is empty"),
    ("glue/sst2", "header_only.tsv", "sentence\tlabel\n", "holds no rows"),
    ("superglue/cb", "empty.jsonl", "\n\n", "is empty"),
    ("glue/qnli", "bad_label.tsv", "index\tquestion\tsentence\tlabel\n0\tq?\ts.\tmaybe\n",
     "line 2: unknown label 'maybe'; expected one of entailment, not_entailment"),
    ("superglue/cb", "bad_label.jsonl", '{"premise": "p", "hypothesis": "h", "label": "unsure", "idx": 0}\n',
     "unknown label 'unsure'"),
    ("mmlu/astronomy", "bad_answer.csv", "q,a,b,c,d,E\n", "unknown label 'E'; expected one of A, B, C, D"),
    ("glue/stsb", "bad_score.tsv", "sentence1\tsentence2\tscore\na\tb\thigh\n", "score 'high' is not a number"),
    ("glue/qqp", "short_row.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t2\t3\tq1\n",
     "line 2 has 4 columns, the header 6"),
    ("squad", "unanswered.json", json.dumps({"data": [{"title": "t", "paragraphs": [
        {"context": "c", "qas": [{"id": "x", "question": "q", "answers": []}]}]}]}), "question x has no answer"),
])
def test_bad_content(tmp_path, task, name, text, expected):
    (tmp_path / name).write_text(text)
    assert expected in one_line_error(task, tmp_path / name)


@pytest.mark.parametrize("task,name,text", [
    ("glue/sst2", "test.tsv", None),
    ("glue/cola", "test.tsv", None),
    ("glue/mnli", "test_matched.tsv", "index\tsentence1\tsentence2\n0\tp\th\n"),
    ("superglue/boolq", "test.jsonl", '{"question": "q", "passage": "p", "idx": 0}\n'),
    ("superglue/multirc", "test.jsonl", json.dumps({"idx": 0, "passage": {"text": "t", "questions": [
        {"question": "q", "idx": 0, "answers": [{"text": "a", "idx": 0}]}]}}) + "\n"),
])
def test_test_splits_without_labels(tmp_path, task, name, text):
    path = TASK_FIXTURES / task / name if text is None else tmp_path / name
    if text is not None:
        path.write_text(text)
    assert "no labels" in one_line_error(task, path)


# ---- the hub path, with a stand-in for `datasets` ----------------------------------------------
HUB = {
    ("nyu-mll/glue", "sst2", "validation"): [{"sentence": "a warm , funny and quietly moving film . ", "label": 1,
                                               "idx": 0}],
    ("nyu-mll/glue", "mnli", "validation_matched"): [{"premise": "p0", "hypothesis": "h0", "label": 2, "idx": 0}],
    ("nyu-mll/glue", "mnli", "validation_mismatched"): [{"premise": "p1", "hypothesis": "h1", "label": 0, "idx": 0}],
    ("nyu-mll/glue", "sst2", "test"): [{"sentence": "s", "label": -1, "idx": 0}],
    ("aps/super_glue", "record", "validation"): [{"passage": "P", "query": "@placeholder won", "entities": ["A", "B"],
                                                   "answers": ["B"], "idx": {"passage": 3, "query": 5}}],
    ("cais/mmlu", "astronomy", "test"): [{"question": "Which planet is closest to the Sun?", "subject": "astronomy",
                                          "choices": ["Venus", "Mercury", "Earth", "Mars"], "answer": 1}],
    ("rajpurkar/squad_v2", None, "validation"): [{"id": "v2", "title": "Glass_frog", "context": "c", "question": "q",
                                                  "answers": {"text": [], "answer_start": []}}],
}


@pytest.fixture
def fake_hub(monkeypatch):
    def load_dataset(hub_id, config, split):
        if (hub_id, config, split) not in HUB:
            raise ConnectionError("offline")
        return list(HUB[hub_id, config, split])

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))


def test_hub_rows_are_normalised_like_local_rows(fake_hub):
    assert load_rows("glue/sst2", "validation") == fixture_rows("glue/sst2", "glue/sst2/dev.tsv")[:1]
    mnli, origin = load_rows("glue/mnli", "eval", with_origin=True)
    assert [(r["id"], r["subset"], r["label"]) for r in mnli] == [("matched-0", "matched", 2),
                                                                  ("mismatched-0", "mismatched", 0)]
    assert origin["hub_splits"] == ["validation_matched", "validation_mismatched"]
    assert load_rows("superglue/record", "validation")[0]["id"] == "3-5"
    assert load_rows("mmlu/astronomy", "test") == fixture_rows("mmlu/astronomy", "mmlu/test/astronomy_test.csv")[:1]
    assert load_rows("squad_v2", "validation")[0]["answers"] == []


def test_hub_errors(fake_hub):
    with pytest.raises(ConfigError, match="has no labels"):
        load_rows("glue/sst2", "test")
    with pytest.raises(ConfigError, match=r"cannot load nyu-mll/glue \(cola\) .*--data.data_dir"):
        load_rows("glue/cola", "validation")


# ---- task names ---------------------------------------------------------------------------------
def test_expand_tasks():
    assert len(expand_tasks("glue")) == 9 and len(expand_tasks("superglue")) == 8
    assert expand_tasks("mmlu") == [f"mmlu/{s}" for s in MMLU_SUBJECTS] and len(MMLU_SUBJECTS) == 57
    assert expand_tasks("glue/sst2") == ["glue/sst2"]
    assert expand_tasks("squad_v2, glue/rte,glue") == ["squad_v2", "glue/rte", *[t for t in expand_tasks("glue")
                                                                                 if t != "glue/rte"]]
    assert expand_tasks(["squad", "superglue/rte", "squad"]) == ["squad", "superglue/rte"]
    assert expand_tasks("superglue_diagnostics") == ["superglue/axb", "superglue/axg"]
    assert expand_tasks("summarization") == ["cnn_dailymail", "xsum", "multi_news"]
    assert expand_tasks("qa") == ["natural_questions", "triviaqa/rc", "triviaqa/unfiltered", "squad_v2"]
    assert expand_tasks("dialogue") == ["multiwoz/2.1", "multiwoz/2.2"]
    assert len(expand_tasks("code")) == 6 + 2 + 1 and expand_tasks("code")[-1] == "humaneval"
    # GLUE, SuperGLUE, SQuAD x2, MMLU; summarization, open QA, MultiWOZ, CodeXGLUE x2 + HumanEval; the
    # long-context suites (tests/test_ruler.py, ... count theirs)
    from lightning_bench.tasks.registry import SUITES

    long_context = [t for suite in SUITES if suite.long_context for t in suite.tasks]
    assert len(TASKS) - len(long_context) == 9 + 8 + 2 + 2 + 57 + 3 + 3 + 2 + 6 + 2 + 1


@pytest.mark.parametrize("spec,expected", [
    ("glue/sts", "unknown glue task 'sts'; valid: cola, mnli"),
    ("superglue/axc", "unknown superglue task 'axc'; valid: axb, axg, boolq"),
    ("mmlu/astronmy", "unknown MMLU subject 'astronmy'; valid: abstract_algebra, anatomy, astronomy"),
    ("glu", "unknown benchmark or task 'glu'; valid: groups code, codexglue_code_completion_line"),
    ("glue,nope", "unknown benchmark or task 'nope'"),
    ("", "no task given"),
])
def test_expand_tasks_errors(spec, expected):
    with pytest.raises(ConfigError) as info:
        expand_tasks(spec)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_registry():
    assert get_task("glue/mnli").source.hub_splits["validation"] == ("validation_matched", "validation_mismatched")
    assert local_layout(TASKS["glue/mrpc"])["note"].startswith("the official MRPC test file")
    from lightning_bench.tasks.registry import SUITES

    long = {t.name for suite in SUITES if suite.long_context for t in suite.tasks}
    assert {(t.benchmark, t.source.hub_id) for t in TASKS.values() if t.name not in long} == {
        ("glue", "nyu-mll/glue"), ("superglue", "aps/super_glue"), ("squad", "rajpurkar/squad"),
        ("squad_v2", "rajpurkar/squad_v2"), ("mmlu", "cais/mmlu"), ("cnn_dailymail", "abisee/cnn_dailymail"),
        ("xsum", "EdinburghNLP/xsum"), ("multi_news", "alexfabbri/multi_news"),
        ("natural_questions", "google-research-datasets/nq_open"), ("triviaqa", "mandarjoshi/trivia_qa"),
        ("multiwoz", "pfb30/multi_woz_v22"), ("codexglue_code_to_text", "google/code_x_glue_ct_code_to_text"),
        ("codexglue_code_completion_line", "google/code_x_glue_cc_code_completion_line"),
        ("humaneval", "openai/openai_humaneval")}
    assert local_layout(TASKS["mmlu/anatomy"])["dev"] == ["mmlu/dev/anatomy_dev.csv"]
    with pytest.raises(ConfigError, match="'superglue' names 8 tasks, not one"):
        get_task("superglue")


# ---- the real files in ../shared/data -----------------------------------------------------------
SHARED_COUNTS = {"glue/cola": 1043, "glue/sst2": 872, "glue/mrpc": 1725, "glue/qqp": 2, "glue/stsb": 1500,
                 "glue/mnli": 4, "glue/qnli": 5463, "glue/rte": 2, "glue/wnli": 2, "superglue/boolq": 3270,
                 "superglue/cb": 56, "superglue/copa": 100, "superglue/multirc": 4848, "superglue/record": 2,
                 "superglue/rte": 277, "superglue/wic": 638, "superglue/wsc": 104, "squad": 1190, "squad_v2": 6078}


@pytest.mark.shared_data
def test_shared_row_counts(shared_data):
    for task, count in SHARED_COUNTS.items():
        assert len(load_rows(task, "eval", data_dir=shared_data)) == count, task


@pytest.mark.shared_data
def test_shared_details(shared_data):
    multirc = load_rows("superglue/multirc", "eval", data_dir=shared_data)
    assert len({r["id"].split("-")[0] for r in multirc}) == 83 and len({r["question_id"] for r in multirc}) == 953
    v2 = load_rows("squad_v2", "eval", data_dir=shared_data)
    assert sum(not r["answers"] for r in v2) == 3168
    assert all(r["answers"] for r in load_rows("squad", "eval", data_dir=shared_data))
    record = load_rows("superglue/record", "eval", data_dir=shared_data)
    assert record[0]["answers"] == ["Morgan", "Tracy Morgan"]
    assert set(record[0]["answers"]) <= set(record[0]["entities"])
    assert len(load_rows("superglue/record", "eval", paths=[shared_data / "superglue/ReCoRD/dev32.jsonl"])) == 32
    assert load_rows("superglue/record", "eval", paths=[shared_data / "superglue/ReCoRD/allennlp_fixture_record.json"]
                     )[0]["answers"] == ["Morgan", "Tracy Morgan"]
    assert len(load_rows("squad_v2", "eval", paths=[shared_data / "squad_v2.0/transformers_fixture_sample.json"])) == 14
    assert len(load_rows("glue/mrpc", "eval", paths=[shared_data / "glue/mrpc/dev.transformers_fixture.tsv"])) == 6
    cola = load_rows("glue/cola", "eval", data_dir=shared_data)
    assert sum(r["label"] for r in cola) == 365 + 354


@pytest.mark.shared_data
def test_shared_mmlu(shared_data):
    assert sorted(p.name[:-len("_test.csv")] for p in (shared_data / "mmlu/test").glob("*_test.csv")) == sorted(
        MMLU_SUBJECTS)
    test = [load_rows(t, "eval", data_dir=shared_data) for t in expand_tasks("mmlu")]
    assert sum(map(len, test)) == 5700 and all(len(rows) == 100 for rows in test)
    assert all(len(load_rows(t, "fewshot", data_dir=shared_data)) == 5 for t in expand_tasks("mmlu"))
    assert sum(len(load_rows(t, "validation", data_dir=shared_data)) for t in expand_tasks("mmlu")) == 1529


def test_the_registry_refuses_an_incomplete_definition_when_it_is_built():
    """A generation task without its headline or scorer, or in a format no suite reads, never reaches a run."""
    from dataclasses import replace

    from lightning_bench.tasks import Suite
    from lightning_bench.tasks.registry import SUITES, build

    ruler = next(s for s in SUITES if "ruler/vt" in {t.name for t in s.tasks})
    vt = next(t for t in ruler.tasks if t.name == "ruler/vt")
    for broken, expected in ((replace(vt, headline=None), "names its scorer and headline"),
                             (replace(vt, scorer="nope"), "no suite scores its family 'nope'"),
                             (replace(vt, source=replace(vt.source, format="nope")), "no suite reads its format 'nope'")):
        suite = Suite((broken,), (), ruler.readers, ruler.layout, ruler.scorers)
        with pytest.raises(AssertionError, match=expected):
            build((suite,))
    assert build((ruler,))[0]["ruler/vt"] is vt
