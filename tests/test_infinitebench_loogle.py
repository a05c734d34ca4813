"""InfiniteBench and LooGLE: readers (the shared samples and tiny hand-made fixtures), one-line errors, the
definitions rendered, the synthetic generator (determinism, length after tokenization, depth), and every
scorer on worked examples whose figures are computed by hand in the comments."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from lightning_bench.tasks.datamodules.encoding import split_prompt
from lightning_bench.tasks.infinitebench.generate import depths_of, generate, main as generate_main, write_jsonl
from lightning_bench.tasks import TASKS, check_definition, get_task, load_rows, local_layout
from lightning_bench.tasks.registry import READERS
from lightning_bench.tasks.prompts import build_request, render_generation
from lightning_bench.errors import ConfigError, MissingData
from lightning_bench.tasks.generative_scoring import score_generative, task_means_entry
from lightning_bench.tasks.registry import SCORERS
from lightning_bench.tasks.infinitebench.scorer import score_one
from lightning_bench.tasks.loogle.scorer import bleu, cloze_counts, rouge_recall, sentence_bleu_one_order
from lightning_bench.tasks.official_metrics import KNOWN_METRICS
from tests.helpers import grid_results

FIX = Path(__file__).resolve().parent / "fixtures" / "long_context"
IB_TASKS = ("passkey", "number_string", "kv_retrieval", "longbook_qa_eng", "longbook_choice_eng", "longdialogue_qa_eng",
            "math_find", "math_calc", "code_run", "code_debug", "longbook_sum_eng")
LOOGLE_TASKS = ("shortdep_qa", "shortdep_cloze", "longdep_qa", "longdep_summarization")


def _rows(task: str, path: Path) -> list[dict]:
    return load_rows(task, "eval", paths=str(path))


def _score(task: str, rows: list[dict], preds: list[str]):
    return score_generative(get_task(task), [(SimpleNamespace(row=r), {"prediction": p}) for r, p in zip(rows, preds)])


# ---- definitions -----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [f"infinitebench/{t}" for t in IB_TASKS] + [f"loogle/{t}" for t in LOOGLE_TASKS])
def test_every_definition_is_complete_and_renders_its_fixture_row(name):
    task = get_task(name)
    assert check_definition(task) == [] and set(task.metrics) <= KNOWN_METRICS
    assert task.splits.eval == "test" and local_layout(task)["test"]
    row = _rows(name, FIX / task.benchmark / f"{task.short_name}.jsonl")[0]
    request = build_request(name, row)
    assert request.document == row["context"] and request.context.count(row["context"]) == 1
    question_follows = request.context.rindex(row["context"]) + len(row["context"]) < len(request.context)
    # En.Sum's prompt ends with the book, Math.Calc's with the expression
    assert question_follows or task.short_name in ("longbook_sum_eng", "math_calc")
    assert request.answers == tuple(row["answers"]) and request.stop == ()
    assert task.generation.chat and task.scorer in SCORERS and task.headline == "score"


def test_benchmarks_group_their_tasks_and_generation_limits_follow_the_scripts():
    from lightning_bench.tasks import BENCHMARKS

    assert BENCHMARKS["infinitebench"].tasks == tuple(f"infinitebench/{t}" for t in IB_TASKS)
    assert BENCHMARKS["loogle"].aggregation == BENCHMARKS["infinitebench"].aggregation == "task_means"
    # DATA_NAME_TO_MAX_NEW_TOKENS (InfiniteBench) and config/task2maxlen.json (LooGLE)
    limits = {t: TASKS[f"infinitebench/{t}"].generation.max_new_tokens for t in IB_TASKS}
    assert limits == {"passkey": 6, "number_string": 12, "kv_retrieval": 50, "longbook_qa_eng": 40,
                      "longbook_choice_eng": 40, "longdialogue_qa_eng": 40, "math_find": 3, "math_calc": 30000,
                      "code_run": 5, "code_debug": 5, "longbook_sum_eng": 1200}
    assert [TASKS[f"loogle/{t}"].generation.max_new_tokens for t in LOOGLE_TASKS] == [300, 50, 500, 500]
    assert TASKS["infinitebench/kv_retrieval"].source.hub_splits == {"test": ("kv_retrieval",)}
    assert TASKS["loogle/longdep_summarization"].source.hub_config == "summarization"


def test_prompts_are_the_benchmarks_own():
    choice = _rows("infinitebench/longbook_choice_eng", FIX / "infinitebench/longbook_choice_eng.jsonl")[0]
    text = build_request("infinitebench/longbook_choice_eng", choice).context
    assert text.startswith("Read the book and answer the question.\n\nMara grew up")
    assert text.endswith("Question: Which of them is not Mara's sibling?\n\nOnly one of the following options is "
                         "correct, tell me the answer using one single letter (A, B, C, or D). Don't say anything "
                         "else.\nA. Seb\nB. Peyton\nC. Mara\nD. Hollin")
    math_row = _rows("infinitebench/math_find", FIX / "infinitebench/math_find.jsonl")[1]
    # "The median number" found in the question -> the prompt's first line
    assert build_request("infinitebench/math_find", math_row).context.startswith(
        "What is the median number in the following list?\n\n[3.5, 1.25, 2.5]\n\n")
    # gpt4_templates' math_calc and code_run; code_run's call found in the question, or the row's own fields
    math_calc = _rows("infinitebench/math_calc", FIX / "infinitebench/math_calc.jsonl")[0]
    assert build_request("infinitebench/math_calc", math_calc).context == (
        "Compute the intermediate values in the following long expression.\n\n8 - 3 + 2 - 4")
    code_run = _rows("infinitebench/code_run", FIX / "infinitebench/code_run.jsonl")
    assert build_request("infinitebench/code_run", code_run[0]).context == (
        "Following is a set of Python functions. There is a function called named func_1.\n\n"
        "def func_1(x):\n    return x + func_2(x)\n\n\ndef func_2(x):\n    return 2 * x\n\n\n"
        "Please give me the exact number of the return value of func_1(3). Be concise. Your response must end with "
        "the final returned value.")
    assert "called named func_2." in build_request("infinitebench/code_run", code_run[1]).context
    assert "return value of func_2(-4). Be concise." in build_request("infinitebench/code_run", code_run[1]).context
    qa = _rows("loogle/shortdep_qa", FIX / "loogle/shortdep_qa.jsonl")[0]
    assert build_request("loogle/shortdep_qa", qa).context == (
        "Please answer the question based on the long texts below. \n" + qa["context"]
        + "\nQuestion: When was Mara Quill born?\nAnswer: ")
    cloze = _rows("loogle/shortdep_cloze", FIX / "loogle/shortdep_cloze.jsonl")[0]
    text = build_request("loogle/shortdep_cloze", cloze).context
    example = "{'<mask-0>': 'Bob', '<mask-1>': 'Gorrosion Magazine','<mask-2>': 'Bethel Horizon'}\n"
    assert "Organiocation" in text and example in text
    assert text.endswith("\n Question: <mask-0> was born in <mask-1> in 1961. What are the masked entities? \nAnswer:")


# ---- readers: the shared samples ---------------------------------------------------------------------
@pytest.mark.shared_data
def test_shared_infinitebench_passkey_sample(shared_data):
    rows, origin = load_rows("infinitebench/passkey", "eval", data_dir=shared_data, with_origin=True)
    assert len(rows) == 20 and origin["note"].startswith("first 20 of the 275 rows")
    first = rows[0]
    assert first["id"] == "0" and first["answers"] == ["69682"] and first["len"] == 8476
    assert first["input"] == "What is the pass key?" and first["options"] == []
    assert first["context"].startswith("The pass key is 69682. Remember it. 69682 is the pass key.\nThe grass is")
    assert [r["len"] for r in rows[::5]] == [8476, 8320, 8164, 8008]  # 26 x noise lines after the needle


@pytest.mark.shared_data
def test_shared_loogle_samples(shared_data):
    counts = {t: len(load_rows(f"loogle/{t}", "eval", data_dir=shared_data)) for t in LOOGLE_TASKS}
    assert counts == {"shortdep_qa": 80, "shortdep_cloze": 94, "longdep_qa": 43, "longdep_summarization": 5}
    qa = load_rows("loogle/shortdep_qa", "eval", data_dir=shared_data)[0]
    assert qa["title"] == "José Luis Picardo" and qa["question"] == "Where was José Luis Picardo born and raised?"
    assert qa["answers"][0].startswith("He was born in Jerez de la Frontera") and qa["id"] == "0" and qa["doc"] == 0
    cloze = load_rows("loogle/shortdep_cloze", "eval", data_dir=shared_data)[0]
    assert cloze["masks"] == {"<mask-0>": "Justin Timberlake", "<mask-1>": "Cerina Aragones", "<mask-2>": "Kentwood"}
    assert json.loads(cloze["answers"][0]) == cloze["masks"]
    longdep = load_rows("loogle/longdep_qa", "eval", data_dir=shared_data)[0]
    assert longdep["answers"] == ["3"] and longdep["type"] == "comprehension_and_reasoning"
    summ = load_rows("loogle/longdep_summarization", "eval", data_dir=shared_data)
    assert summ[0]["title"] == "2201.00447" and summ[0]["question"] == ""
    assert summ[0]["answers"][0].startswith("In this article, we study Prasad's conjecture")


# ---- readers: hand-made fixtures and the hub layout -----------------------------------------------------
def test_infinitebench_fixture_rows_and_choice_golds():
    rows = load_rows("infinitebench/longbook_choice_eng", "eval", data_dir=FIX)  # infinitebench/{name}.jsonl
    # get_answer: [option text, letter of its position]
    assert [r["answers"] for r in rows] == [["Peyton", "B"], ["Seb", "D"]] and rows[1]["id"] == "1"
    passkey = _rows("infinitebench/passkey", FIX / "infinitebench/passkey.jsonl")
    assert [r["id"] for r in passkey] == ["0", "1"] and passkey[1]["answers"] == ["07311"] and passkey[0]["len"] == 26
    math_find = _rows("infinitebench/math_find", FIX / "infinitebench/math_find.jsonl")
    assert [r["answers"] for r in math_find] == [["42"], ["2.5"]]
    code_debug = _rows("infinitebench/code_debug", FIX / "infinitebench/code_debug.jsonl")
    assert code_debug[0]["answers"] == ["parse_header", "B"]
    # the official files' integers, as strings (the hub's features type them so)
    math_calc = _rows("infinitebench/math_calc", FIX / "infinitebench/math_calc.jsonl")
    assert [r["answers"] for r in math_calc] == [["8", "5", "7", "3"], ["1", "4", "8", "-2"]]
    code_run = _rows("infinitebench/code_run", FIX / "infinitebench/code_run.jsonl")
    assert [(r["answers"], r["func"], r["func_call"]) for r in code_run] == [
        (["9"], "func_1", "func_1(3)"), (["-8"], "func_2", "func_2(-4)")]
    reader = READERS["infinitebench"]
    task = get_task("infinitebench/longbook_choice_eng")
    hub = reader.from_hub(task, "longbook_choice_eng", [{"id": 7, "context": "book", "input": "q?", "answer": ["c"],
                                                        "options": ["a", "b", "c", "d"]}])
    assert hub == [{"id": "7", "context": "book", "input": "q?", "answers": ["c", "C"],
                    "options": ["a", "b", "c", "d"]}]


def test_loogle_fixture_rows_one_request_per_question():
    rows = _rows("loogle/shortdep_qa", FIX / "loogle/shortdep_qa.jsonl")  # the second document asks nothing
    assert [(r["id"], r["doc"], r["question"], r["answers"]) for r in rows] == [
        ("0", 0, "When was Mara Quill born?", ["She was born in 1961."]),
        ("1", 0, "Where did Mara hide the key?", ["Under the old mill."])]
    assert rows[0]["evidence"] == "Mara Quill was born there in 1961." and rows[0]["context"] == rows[1]["context"]
    cloze = _rows("loogle/shortdep_cloze", FIX / "loogle/shortdep_cloze.jsonl")  # qa_pairs as a JSON list
    assert cloze[0]["masks"] == {"<mask-0>": "Mara Quill", "<mask-1>": "Hollin"}
    summ = _rows("loogle/longdep_summarization", FIX / "loogle/longdep_summarization.jsonl")
    assert summ[0]["answers"] == ["Mara Quill of Hollin hides a key under the mill."] and summ[0]["question"] == ""
    # the hub's current layout: one question a row; cloze answers as a list of entities
    task = get_task("loogle/shortdep_cloze")
    hub = READERS["loogle"].from_hub(task, "test", [{"context": "doc", "title": "t", "answer": ["Ann", "Bo"],
                                                     "question": "<mask-0> met <mask-1>.", "doc_id": "d1"}])
    assert hub[0]["masks"] == {"<mask-0>": "Ann", "<mask-1>": "Bo"} and hub[0]["doc"] == "d1" and hub[0]["id"] == "0"


def test_errors_are_one_line_and_name_the_file():
    task = get_task("infinitebench/passkey")
    missing = FIX / "infinitebench" / "nope.jsonl"
    with pytest.raises(MissingData) as info:
        READERS["infinitebench"].read(task, [missing])
    message = str(info.value)
    assert str(missing) in message and "InfiniteBench's JSON lines (id, context, input, answer, options" in message
    with pytest.raises(MissingData, match=r"nope.jsonl not found; expected InfiniteBench's <task>.jsonl \(id, context"):
        load_rows("infinitebench/passkey", "eval", paths=str(missing))
    with pytest.raises(MissingData, match=r"nope.jsonl not found; expected LooGLE-testdata/<task>.jsonl \(input"):
        load_rows("loogle/shortdep_qa", "eval", paths=str(FIX / "loogle" / "nope.jsonl"))
    cases = [
        ("infinitebench/longbook_qa_eng", "infinitebench/broken_row.jsonl", r"broken_row.jsonl row 1 has no context"),
        ("infinitebench/passkey", "infinitebench/not_json.jsonl", r"not_json.jsonl line 2 is not a JSON object"),
        ("loogle/shortdep_qa", "loogle/broken_pairs.jsonl", r"broken_pairs.jsonl row 0 question 0 has no Q or A"),
        ("loogle/shortdep_qa", "loogle/bad_literal.jsonl", r"bad_literal.jsonl row 0: qa_pairs is not a Python/JSON"),
        ("loogle/shortdep_qa", "loogle/longdep_summarization.jsonl", r"holds no questions for shortdep_qa"),
    ]
    for name, path, expected in cases:
        with pytest.raises(ConfigError, match=expected) as info:
            _rows(name, FIX / path)
        assert "\n" not in str(info.value), str(info.value)
    bad_choice = {"id": 0, "context": "c", "input": "q", "answer": ["z"], "options": ["a", "b", "c", "d"]}
    with pytest.raises(ConfigError, match=r"answer \['z'\] is not one of its options") as info:
        READERS["infinitebench"].from_hub(get_task("infinitebench/code_debug"), "code_debug", [bad_choice])
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="names no 'The <...> number'"):
        READERS["infinitebench"].from_hub(get_task("infinitebench/math_find"), "math_find",
                                          [{"context": "[1, 2]", "input": "what is biggest?", "answer": ["2"]}])
    bad = [("code_run", {"context": "def f(): pass", "input": "What does f() return?", "answer": ["1"]},
            r"row 0: neither a func_call field nor a call 'func_<n>\(<integer>\)'"),
           ("code_run", {"context": "c", "input": "func_1(2)?", "answer": ["1", "2"]}, r"is not one integer"),
           ("math_calc", {"context": "1 + 2", "input": "", "answer": ["1", "three"]}, r"is not a list of integers")]
    for short, row, expected in bad:
        with pytest.raises(ConfigError, match=expected) as info:
            READERS["infinitebench"].from_hub(get_task(f"infinitebench/{short}"), short, [row])
        assert "\n" not in str(info.value)


# ---- the generator -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def smollm2_tokenizer():
    import os

    from lightning_bench.data.tokenization import HFTokenizer

    folder = Path(os.environ.get("LB_SMOLLM2_DIR", Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))
    if not (folder / "config.json").exists():  # as conftest's smollm2_dir: CI must have it
        if os.environ.get("LB_REQUIRE_SHARED") == "1":
            pytest.fail(f"SmolLM2 missing at {folder} (CI must provide it)")
        pytest.skip(f"SmolLM2 not available at {folder}")
    return HFTokenizer(str(folder))


def _measured_depth(tok, row: dict, needle_start: str) -> float:
    start = row["context"].index(needle_start)
    before = len(tok.encode(row["context"][:start]))
    return before / (before + row["len"])


@pytest.mark.smollm2
def test_generator_is_deterministic_per_seed(smollm2_dir, smollm2_tokenizer):
    a = generate("passkey", smollm2_tokenizer, [600], [0.0, 0.5], per_depth=2, seed=3)
    b = generate("passkey", smollm2_tokenizer, [600], [0.0, 0.5], per_depth=2, seed=3)
    c = generate("passkey", smollm2_tokenizer, [600], [0.0, 0.5], per_depth=2, seed=4)
    assert a == b and [r["answer"] for r in a] != [r["answer"] for r in c]
    assert [r["id"] for r in a] == [0, 1, 2, 3] and len({r["answer"] for r in a}) == 4
    kv = generate("kv_retrieval", smollm2_tokenizer, [800], [0.5], seed=1)
    assert kv == generate("kv_retrieval", smollm2_tokenizer, [800], [0.5], seed=1)
    assert kv != generate("kv_retrieval", smollm2_tokenizer, [800], [0.5], seed=2)


@pytest.mark.smollm2
@pytest.mark.parametrize("task,length", [("passkey", 2000), ("number_string", 3000), ("kv_retrieval", 16000)])
def test_generated_length_is_within_one_percent_after_tokenization(task, length, smollm2_dir, smollm2_tokenizer):
    for row in generate(task, smollm2_tokenizer, [length], [0.0, 0.5, 1.0], seed=0):
        tokens = len(smollm2_tokenizer.encode(row["context"]))
        assert 0.99 * length <= tokens <= length, (task, tokens)


@pytest.mark.smollm2
def test_needles_sit_at_the_requested_depth(smollm2_dir, smollm2_tokenizer):
    depths = [0.0, 0.3, 0.7, 1.0]
    rows = generate("passkey", smollm2_tokenizer, [4000], depths, seed=0)
    for depth, row in zip(depths, rows):
        key = row["answer"]
        assert len(key) == 5 and key.isdigit() and row["input"] == "What is the pass key?"
        needle = f"The pass key is {key}. Remember it. {key} is the pass key.\n"
        at = row["context"].index(needle)  # a line of its own, or the haystack's end
        assert row["context"].count(needle) == 1 and (at == 0 or row["context"][at - 1] == "\n"
                                                      or row["context"].endswith(needle))
        assert abs(_measured_depth(smollm2_tokenizer, row, needle) - depth) <= 0.01, depth
    assert rows[0]["context"].startswith("The pass key is") and rows[-1]["context"].endswith("is the pass key.\n")
    numbers = generate("number_string", smollm2_tokenizer, [1000], [0.5], seed=0)[0]
    assert len(numbers["answer"]) == 10 and numbers["input"] == "What is the sequence of digits?"
    # 5 digits, then 5 times one doubled in place: some digit repeats next to itself
    assert any(x == y for x, y in zip(numbers["answer"], numbers["answer"][1:]))
    kv = generate("kv_retrieval", smollm2_tokenizer, [3000], [0.0, 0.5, 1.0], seed=0)
    for depth, row in zip([0.0, 0.5, 1.0], kv):
        pairs = json.loads(row["context"][len("JSON data:\n"):])
        key = row["input"].split('"')[1]
        assert pairs[key] == row["answer"] and list(pairs).index(key) == round(depth * (len(pairs) - 1))
        assert row["input"] == f'\nKey: "{key}"\nThe value associated with the specified key is: '
    assert depths_of(3) == [0.0, 0.5, 1.0] and depths_of(1) == [0.5]
    with pytest.raises(ConfigError, match="shorter than the needle"):
        generate("passkey", smollm2_tokenizer, [5], [0.5])


@pytest.mark.smollm2
def test_generated_file_reads_back_and_scores(smollm2_dir, smollm2_tokenizer, tmp_path):
    out = tmp_path / "passkey.jsonl"
    code = generate_main(["--task", "passkey", "--tokenizer", str(smollm2_dir), "--length", "700", "--depths", "3",
                          "--seed", "5", "--output", str(out)])
    assert code == 0
    written = [json.loads(line) for line in out.read_text().splitlines()]
    assert [sorted(r) for r in written] == [["answer", "context", "depth", "id", "input", "len", "target_length"]] * 3
    assert written == generate("passkey", smollm2_tokenizer, [700], depths_of(3), seed=5)
    manifest = json.loads((tmp_path / "passkey.jsonl.manifest.json").read_text())
    assert (manifest["task"], manifest["rows"], manifest["lengths"], manifest["seed"]) == ("passkey", 3, [700], 5)
    assert manifest["depths"] == depths_of(3) and "smollm2" in json.dumps(manifest["tokenizer"]).lower()
    assert not list(tmp_path.glob(".*.tmp"))  # written atomically: no temporary file left
    rows = _rows("infinitebench/passkey", write_jsonl(written, tmp_path / "again.jsonl"))
    figures, per = _score("infinitebench/passkey", rows, [f"The pass key is {rows[0]['answers'][0]}.", "no idea", ""])
    assert [s["score"] for s in per] == [100.0, 0.0, 0.0] and figures["score"] == pytest.approx(100 / 3)
    assert figures["by_depth"] == {"0": 100.0, "50": 0.0, "100": 0.0} and figures["by_length"] == {"700": 100 / 3}


@pytest.mark.smollm2
def test_a_set_made_for_a_chat_model_fits_max_context_whole(smollm2_dir, smollm2_tokenizer, tmp_path):
    from lightning_bench.tasks.datamodules import PromptedDataModule
    from lightning_bench.tasks.infinitebench.generate import write_sets

    write_sets("passkey", smollm2_tokenizer, tmp_path / "infinitebench", [4096], [0.5], seed=2)
    dm = PromptedDataModule(tasks="infinitebench/passkey", data_dir=str(tmp_path), max_context=4096)
    dm.tokenizer = smollm2_tokenizer
    (row,) = dm.rows("infinitebench/passkey", dm.eval_split("infinitebench/passkey"))
    from lightning_bench.tasks.datamodules.encoding import split_prompt

    prompt, cue = dm.render("infinitebench/passkey", build_request("infinitebench/passkey", row))
    assert prompt.startswith("<|im_start|>system")  # SmolLM2's chat template, as --chat_template auto applies it
    # the answer starts with the benchmark's own words, in the assistant's turn, after the document
    assert prompt.endswith("What is the pass key?<|im_end|>\n<|im_start|>assistant\nThe pass key is")
    parts, _ = split_prompt(smollm2_tokenizer, prompt, cue, row["context"], 4096, "passkey")
    _, question, answer_cue = parts["query_agnostic"]
    assert smollm2_tokenizer.decode(question).endswith("What is the pass key?")
    assert smollm2_tokenizer.decode(answer_cue) == "<|im_end|>\n<|im_start|>assistant\nThe pass key is"
    # prompt + the 6 new tokens within 4096 (so nothing is cut, and the needle at depth 50 stays), within 1%
    total = len(smollm2_tokenizer.encode(prompt)) + dm.max_new_tokens("infinitebench/passkey", row)
    assert 0.99 * 4096 <= total <= 4096


# ---- the generator's per-length sets and --max_context (GPT-2's tokenizer: offline) -----------------------
@pytest.fixture(scope="module")
def gpt2_tokenizer():
    from lightning_bench.data.tokenization import HFTokenizer

    return HFTokenizer("gpt2")


SET_DEPTHS = [0.0, 0.3, 1.0]


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    """A data folder: passkey and kv_retrieval sets at 4096 and 8192 tokens written by the command (depths 0,
    0.3, 1), and the passkey sample's place (`test`) filled by the hand-made fixture."""
    data = tmp_path_factory.mktemp("ib") / "data"
    code = generate_main(["--task", "passkey", "kv_retrieval", "--tokenizer", "gpt2", "--lengths", "4096", "8192",
                          "--depth", *map(str, SET_DEPTHS), "--seed", "1", "--data_dir", str(data / "infinitebench")])
    assert code == 0
    (data / "infinitebench" / "passkey_8192.first20.jsonl").write_text(
        (FIX / "infinitebench" / "passkey.jsonl").read_text())
    return data


@pytest.mark.parametrize("length", [4096, 8192])
def test_generator_writes_one_set_per_length_with_its_manifest(generated, gpt2_tokenizer, length):
    folder = generated / "infinitebench" / str(length)
    assert sorted(p.name for p in folder.iterdir()) == ["kv_retrieval.jsonl", "manifest.json", "passkey.jsonl"]
    manifest = json.loads((folder / "manifest.json").read_text())
    for task in ("passkey", "kv_retrieval"):
        written = [json.loads(line) for line in (folder / f"{task}.jsonl").read_text().splitlines()]
        assert [r["id"] for r in written] == [0, 1, 2] and [r["depth"] for r in written] == [0.0, 30.0, 100.0]
        assert {r["target_length"] for r in written} == {length}
        # RULER's count, as the run feeds the prompt (GPT-2 has no chat template; each protocol's parts encoded
        # on their own, the longer protocol) + the task's new tokens: within the target, short of it by less
        # than one whole unit (a noise sentence, a key/value pair)
        name = f"infinitebench/{task}"
        rows = load_rows(name, str(length), data_dir=generated)
        settings = TASKS[name].generation
        requests = [build_request(name, r) for r in rows]
        fed = [split_prompt(gpt2_tokenizer, *render_generation(q), q.document, room=10**9)[0] for q in requests]
        counted = [max(sum(map(len, p)) for p in parts.values()) + settings.max_new_tokens for parts in fed]
        whole = [len(gpt2_tokenizer.encode(render_generation(q)[0])) + settings.max_new_tokens for q in requests]
        assert all(0 <= c - w <= 2 for c, w in zip(counted, whole))  # in parts, at most 2 tokens more than whole
        slack = 0.01 if task == "passkey" else 0.02
        assert all((1 - slack) * length <= n <= length for n in counted), (task, counted)
        entry = manifest[task]
        assert (entry["rows"], entry["target_length"], entry["depths"], entry["seed"]) == (3, length, SET_DEPTHS, 1)
        assert (entry["length_min"], entry["length_max"]) == (min(counted), max(counted))
        assert entry["tokenizer"]["name"] == "gpt2" and entry["generator"].endswith("@4")
    assert not list(folder.glob(".*.tmp"))  # written atomically: no temporary file left


def test_generated_needles_sit_at_the_recorded_depth(generated, gpt2_tokenizer):
    for length in (4096, 8192):
        folder = generated / "infinitebench" / str(length)
        for row in map(json.loads, (folder / "passkey.jsonl").read_text().splitlines()):
            needle = f"The pass key is {row['answer']}. Remember it. {row['answer']} is the pass key.\n"
            # the share of context tokens before the needle: within half a noise line (~25 tokens) of the depth
            assert abs(_measured_depth(gpt2_tokenizer, row, needle) - row["depth"] / 100) <= 0.01, row["depth"]
        for row in map(json.loads, (folder / "kv_retrieval.jsonl").read_text().splitlines()):
            pairs = json.loads(row["context"][len("JSON data:\n"):])
            key = row["input"].split('"')[1]
            assert pairs[key] == row["answer"]
            assert list(pairs).index(key) == round(row["depth"] / 100 * (len(pairs) - 1))


def test_generator_command_errors_are_one_line(tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"-o .*one.jsonl holds one task, got --task passkey kv_retrieval; use --data_dir"):
        generate_main(["--task", "passkey", "kv_retrieval", "--tokenizer", "gpt2", "--lengths", "4096",
                       "-o", str(tmp_path / "one.jsonl")])
    with pytest.raises(ConfigError, match="infinitebench_generate: give --data_dir DIR or -o/--output FILE, not both"):
        generate_main(["--task", "passkey", "--tokenizer", "gpt2", "--lengths", "4096", "--data_dir", str(tmp_path),
                       "-o", str(tmp_path / "one.jsonl")])
    assert not list(tmp_path.iterdir())


def test_max_context_reads_the_generated_set_of_that_length(generated):
    from lightning_bench.tasks.datamodules import PromptedDataModule

    task = "infinitebench/passkey"
    for max_context, split, path in ((None, "eval", "infinitebench/passkey_8192.first20.jsonl"),
                                     (4096, "4096", "infinitebench/4096/passkey.jsonl"),
                                     (8192, "8192", "infinitebench/8192/passkey.jsonl")):
        dm = PromptedDataModule(tasks=task, data_dir=str(generated), max_context=max_context)
        assert dm.eval_split(task) == split
        rows = dm.rows(task, split)
        assert dm.sources[task][split]["files"][0]["path"].endswith(path)
        assert {r.get("target_length") for r in rows} == {max_context}  # the sample's rows carry none
    # the benchmark's other tasks have one set whatever the length: read and cut to it
    dm = PromptedDataModule(tasks="infinitebench/longbook_qa_eng", data_dir=str(generated), max_context=4096)
    assert dm.eval_split("infinitebench/longbook_qa_eng") == "eval"
    with pytest.raises(ConfigError) as err:
        PromptedDataModule(tasks=task, data_dir=str(generated), max_context=5000).eval_split(task)
    assert "max_context 5000 has no infinitebench set;" in str(err.value) and "sets are 4096, 8192, 16384" in str(err.value)
    assert "\n" not in str(err.value)
    # the hub has no per-length sets: a split named by a length reads the task's one set, cut to the length
    from lightning_bench.tasks.infinitebench.reader import hub_layout

    assert hub_layout(get_task(task), "8192")["hub_splits"] == hub_layout(get_task(task), "test")["hub_splits"] == (
        "passkey",)


def test_downstream_under_max_context_scores_the_set_by_depth_and_length(tiny_hf, generated, tmp_path, capsys):
    from tests.test_cli import run

    code, _, err = run(["downstream", "--model.pretrained", str(tiny_hf), "--data_dir", str(generated),
                        "--results_dir", str(tmp_path), "--name", "t", "--tasks", "infinitebench/passkey",
                        "--methods", "dense", "--max_new_tokens", "3", "--max_context", "4096", "--max_length", "160"],
                       capsys)
    assert code == 0, err
    results = grid_results(tmp_path / "t" / "t_results.json")
    (cell,) = results["cells"].values()
    assert cell["protocol"]["data"]["files"][0]["path"].endswith("infinitebench/4096/passkey.jsonl")
    assert all(s["truncated_tokens"] > 0 for s in cell["samples"])  # 4096-token contexts cut to fit 160
    metrics = cell["metrics"]
    assert set(metrics["by_depth"]) == {"0", "30", "100"} and set(metrics["by_length"]) == {"4096"}
    assert metrics["by_length"]["4096"] == pytest.approx(metrics["score"])


# ---- InfiniteBench scores (compute_scores.py) ---------------------------------------------------------
@pytest.mark.parametrize("task,pred,gold,expected", [
    ("passkey", "The pass key is 69682.", ["69682"], 100.0),
    ("passkey", "Key 12345, or 69682", ["69682"], 0.0),  # the first integer only
    ("number_string", "0553391887", ["0553391887"], 100.0),  # compared as strings: a leading 0 kept
    ("kv_retrieval", 'It is "c4d5e6f7-0819-4a2b-9c3d-4e5f60718293".', ["c4d5e6f7-0819-4a2b-9c3d-4e5f60718293"], 100.0),
    ("kv_retrieval", "c4d5e6f7-0819-4a2b-9c3d-4e5f60718293abc", ["c4d5e6f7-0819-4a2b-9c3d-4e5f60718293"], 0.0),
    # normalised "old mill in paris" vs "old mill": 2 common, P = 2/4, R = 1, F1 = 2 * 0.5 / 1.5 = 66.67
    ("longbook_qa_eng", "The Old Mill, in Paris", ["the old mill", "Hollin"], 200 / 3),
    ("longbook_choice_eng", "B", ["Peyton", "B"], 100.0),
    ("longbook_choice_eng", "A. Seb", ["Peyton", "B"], 0.0),
    ("longbook_choice_eng", "Peyton", ["Peyton", "B"], 100.0),
    ("longbook_choice_eng", "I think the answer is: Peyton.", ["Peyton", "B"], 100.0),
    ("longbook_choice_eng", "I would say it is B", ["Peyton", "B"], 100.0),  # first word that is in "ABCD"
    ("longbook_choice_eng", "Clearly Peyton", ["Peyton", "B"], 0.0),  # starts with C: the script reads choice C
    ("longdialogue_qa_eng", "Jack.", ["JACK"], 100.0),
    ("longdialogue_qa_eng", "It is Jackson", ["JACK"], 0.0),
    ("math_find", "The answer is 42.", ["42"], 100.0),
    ("math_find", "42.5", ["42"], 0.0),
    ("math_find", "2.50 it is", ["2.5"], 100.0),
    ("math_find", "none", ["42"], 0.0),
    # math_calc: the digit runs in order against the gold list; the matched prefix over the list's length
    ("math_calc", "[8, 5, 7, 3]", ["8", "5", "7", "3"], 100.0),
    ("math_calc", "8, 5, 9, 3", ["8", "5", "7", "3"], 50.0),  # 8, 5 match; 9 != 7 ends it: 2/4
    ("math_calc", "The values are 8 5 7", ["8", "5", "7", "3"], 75.0),  # 3 of 4 given: 3/4
    ("math_calc", "1, 4, 8, -2", ["1", "4", "8", "-2"], 75.0),  # the minus is not read: 2 != -2, 3/4
    ("math_calc", "Step 1: 8, 5", ["8", "5"], 0.0),  # the first run is 1, not 8
    ("math_calc", "08, 5", ["8", "5"], 100.0),  # read as numbers: 08 is 8
    # code_run: \n . ` ' " : spaced out, then the last word as an integer
    ("code_run", "The return value is 9.", ["9"], 100.0),
    ("code_run", " -8.\n", ["-8"], 100.0),
    ("code_run", "func_1(3) = 9", ["9"], 100.0),
    ("code_run", "9 is the answer", ["9"], 0.0),  # last word "answer": no integer
    ("code_run", "6.25", ["25"], 100.0),  # "." spaced out: the last word is 25
    ("code_run", "", ["9"], 0.0),
    ("code_debug", "B. parse_header", ["parse_header", "B"], 100.0),
    ("code_debug", "The answer is: parse_header", ["parse_header", "B"], 100.0),
    ("code_debug", "The correct option is: B", ["parse_header", "B"], 100.0),  # "option" spaced out, then "is:"
    ("code_debug", "Option B", ["parse_header", "B"], 0.0),
    # rouge-score tokens: reference 11 words, prediction "mara hides a key" 4, LCS 4: P = 1, R = 4/11,
    # F = 2 * (4/11) / (1 + 4/11) = 8/15 = 53.33
    ("longbook_sum_eng", "Mara hides a key", ["Mara hides a key under the mill and only Seb knows."], 800 / 15),
])
def test_infinitebench_scores_by_hand(task, pred, gold, expected):
    assert score_one(task, pred, gold) == pytest.approx(expected)


def test_infinitebench_task_figures_and_benchmark_mean():
    qa = _rows("infinitebench/longbook_qa_eng", FIX / "infinitebench/longbook_qa_eng.jsonl")
    fig_qa, per = _score("infinitebench/longbook_qa_eng", qa, ["under the old mill"])
    assert per == [{"score": 100.0}] and fig_qa["score"] == 100.0 and fig_qa["score_ci95"] is None
    choice = _rows("infinitebench/longbook_choice_eng", FIX / "infinitebench/longbook_choice_eng.jsonl")
    fig_mc, per = _score("infinitebench/longbook_choice_eng", choice, ["B", "Peyton"])
    assert [s["score"] for s in per] == [100.0, 0.0] and fig_mc["score"] == 50.0 and len(fig_mc["score_ci95"]) == 2
    assert "by_depth" not in fig_mc and "by_length" not in fig_mc  # the benchmark's rows record neither
    entry = task_means_entry({"infinitebench/longbook_qa_eng": {"metrics": fig_qa, "num_samples": 1},
                              "infinitebench/longbook_choice_eng": {"metrics": fig_mc, "num_samples": 2}})
    assert entry["score"] == 75.0  # (100 + 50) / 2


def test_infinitebench_figures_by_depth_and_length_by_hand():
    rows = [{"answers": [gold], "depth": depth, "target_length": length} for gold, depth, length in (
        ("11111", 0.0, 4096), ("22222", 50.0, 4096), ("33333", 0.0, 8192), ("44444", 50.0, 8192),
        ("55555", 100.0, 8192))]
    figures, per = _score("infinitebench/passkey", rows, ["11111", "no", "It is 33333.", "44444", "5555"])
    assert [s["score"] for s in per] == [100.0, 0.0, 100.0, 100.0, 0.0]
    assert figures["score"] == 60.0  # 300 / 5
    # depth 0: (100 + 100) / 2; 50: (0 + 100) / 2; 100: 0 / 1 -- keys in percent, as RULER's
    assert figures["by_depth"] == {"0": 100.0, "50": 50.0, "100": 0.0}
    # 4096: (100 + 0) / 2; 8192: (100 + 100 + 0) / 3
    assert figures["by_length"] == {"4096": 50.0, "8192": pytest.approx(200 / 3)}
    assert list(figures["by_depth"]) == ["0", "50", "100"]  # numeric order, not "0", "100", "50"


def test_math_calc_and_code_run_task_figures_on_the_fixture_rows():
    math_calc = _rows("infinitebench/math_calc", FIX / "infinitebench/math_calc.jsonl")
    # [8, 5, 7, 3] against "8, 5, 7, 3": 4/4; [1, 4, 8, -2] against "1, 4, 8, -2": 3/4 (no minus read)
    figures, per = _score("infinitebench/math_calc", math_calc, ["8, 5, 7, 3", "1, 4, 8, -2"])
    assert [s["score"] for s in per] == [100.0, 75.0] and figures["score"] == 87.5
    code_run = _rows("infinitebench/code_run", FIX / "infinitebench/code_run.jsonl")
    figures, per = _score("infinitebench/code_run", code_run, ["func_1(3) returns 9", "The value is -8."])
    assert [s["score"] for s in per] == [100.0, 100.0] and figures["score_is"].startswith("accuracy: last word")


# ---- LooGLE scores -------------------------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore:\\nThe hypothesis contains 0 counts")
def test_loogle_bleu_by_hand_and_as_nltk():
    ref, hyp = "the cat sat on the mat", "the cat sat on a mat"
    # unigrams: 5 of 6 matched (clipped), c = r = 6 so no brevity penalty: BLEU-1 = 5/6
    # 4-grams: "the cat sat on" of 3 matched: BLEU-4 (weights 0,0,0,1) = 1/3
    assert bleu(ref, hyp) == {"bleu1": pytest.approx(500 / 6), "bleu4": pytest.approx(100 / 3)}
    # shorter: all 4 unigrams and the one 4-gram match, BP = exp(1 - 8/4) = e^-1
    assert bleu("a b c d e f g h", "a b c d") == {"bleu1": pytest.approx(100 / math.e),
                                                  "bleu4": pytest.approx(100 / math.e)}
    # no 4-gram at all: BLEU-4 0 (nltk: 2.2e-308); BLEU-1 = 2/2 x exp(1 - 6/2)
    assert bleu(ref, "the cat") == {"bleu1": pytest.approx(100 * math.exp(-2)), "bleu4": 0.0}
    nltk_bleu = pytest.importorskip("nltk.translate.bleu_score")
    pairs = [(ref, hyp), ("a b c d e f g h", "a b c d"), (ref, "the cat"), (ref, "dog"), (ref, "the the the the the"),
             ("x y z w x y z w q", "x y z w x y z w x y z w q q")]
    for r, h in pairs:
        for n, weights in ((1, (1, 0, 0, 0)), (4, (0, 0, 0, 1))):
            expected = nltk_bleu.sentence_bleu([r.split()], h.split(), weights=weights)
            assert sentence_bleu_one_order(r.split(), h.split(), n) == pytest.approx(expected, abs=1e-12), (r, h, n)


def test_loogle_qa_figures_by_hand():
    # the `rouge` package's recall (LooGLE's): DISTINCT reference unigrams {the, cat, sat, on, mat}, all 5 in
    # the prediction; 3 of the 5 distinct bigrams (the cat, cat sat, sat on; not on the, the mat); the LCS
    # "the cat sat on mat" covers all 5 distinct reference words
    assert rouge_recall("the cat sat on the mat", "the cat sat on a mat") == {
        "rouge1": pytest.approx(100.0), "rouge2": pytest.approx(60.0), "rougeL": pytest.approx(100.0)}
    rows = [{"answers": ["the cat sat on the mat"]}, {"answers": ["the cat sat on the mat"]}]
    figures, per = _score("loogle/shortdep_qa", rows, ["the cat sat on a mat", ""])
    assert per[0]["score"] == pytest.approx(100.0) and per[0]["bleu4"] == pytest.approx(100 / 3)
    # an empty prediction is scored as "None": nothing in common
    assert per[1] == {"bleu1": 0.0, "bleu4": 0.0, "rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0, "score": 0.0}
    assert figures["rouge1"] == pytest.approx(50.0) and figures["rouge2"] == pytest.approx(30.0)
    assert figures["omitted"] == ["meteor", "bertscore", "gpt4_score"] and "omitted offline" in figures["omitted_why"]


def test_loogle_cloze_exact_and_partial_match_by_hand():
    masks = {"<mask-0>": "Justin Timberlake", "<mask-1>": "Cerina Aragones", "<mask-2>": "Kentwood"}
    pred = "{'<mask-0>': 'Justin Timberlake', '<mask-1>': 'Aragones', '<mask-2>': 'Louisiana'}"
    # exact: mask-0 only; partial (a shared word): mask-0 and mask-1 ("Aragones")
    assert cloze_counts(masks, pred) == {"masks": 3, "exact_matched": 1, "partial_matched": 2, "parsed": True}
    # a number is no entity: no match (LooGLE's script would stop on it)
    assert cloze_counts(masks, '{"<mask-0>": 7}') == {"masks": 3, "exact_matched": 0, "partial_matched": 0,
                                                      "parsed": True}
    assert cloze_counts(masks, "__import__('os')")["parsed"] is False  # never executed
    rows = [{"masks": masks, "answers": [json.dumps(masks)]}, {"masks": {"<mask-0>": "Britney"}, "answers": ["{}"]}]
    figures, per = _score("loogle/shortdep_cloze", rows, [pred, "Britney"])  # the second is no dict: 0 of 1
    # micro over the task's 4 masks: exact 1/4 = 25, partial 2/4 = 50; per question 33.3 / 66.7 and 0 / 0
    assert figures["exact_match"] == 25.0 and figures["partial_match"] == 50.0 and figures["score"] == 25.0
    assert per[0]["exact_match"] == pytest.approx(100 / 3) and per[0]["partial_match"] == pytest.approx(200 / 3)
    assert per[1]["exact_match"] == 0.0 and figures["unparsed"] == 1 and len(figures["exact_match_ci95"]) == 2
    low, high = figures["partial_match_ci95"]
    assert 0.0 <= low <= 50.0 <= high <= 100.0
