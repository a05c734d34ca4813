"""Prompts built from the task definitions (lightning_bench/tasks/<benchmark>/definitions.py, assembled by
tasks/prompts.py): a request for a row of every task, gold indices, k-shot contexts, MMLU's
original format, versions, the fine-tuning text pairs, and every registered definition complete."""

import re
from pathlib import Path

import pytest

from lightning_bench.tasks import TASKS, check_definition, get_task, load_rows, local_layout
from lightning_bench.errors import ConfigError
from lightning_bench.tasks.prompts import Generation, MultipleChoice, build_request, finetune_input, prompt_version
from lightning_bench.tasks.official_metrics import KNOWN_METRICS
from lightning_bench.tasks.registry import SUITES

FINETUNE_NUM_LABELS = {name: t.finetune.num_labels for name, t in TASKS.items() if t.finetune is not None}

TASK_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "tasks"
FILES = {
    "glue/cola": "glue/cola/in_domain_dev.tsv", "glue/sst2": "glue/sst2/dev.tsv",
    "glue/mrpc": "glue/mrpc/msr_paraphrase_test.txt", "glue/qqp": "glue/qqp/dev.tsv", "glue/stsb": "glue/stsb/dev.tsv",
    "glue/mnli": "glue/mnli/dev_matched.tsv", "glue/qnli": "glue/qnli/dev.tsv", "glue/rte": "glue/rte/dev.tsv",
    "glue/wnli": "glue/wnli/dev.tsv", "superglue/boolq": "superglue/BoolQ/val.jsonl",
    "superglue/cb": "superglue/CB/val.jsonl", "superglue/copa": "superglue/COPA/val.jsonl",
    "superglue/multirc": "superglue/MultiRC/val.jsonl", "superglue/record": "superglue/ReCoRD/val.jsonl",
    "superglue/rte": "superglue/RTE/val.jsonl", "superglue/wic": "superglue/WiC/val.jsonl",
    "superglue/wsc": "superglue/WSC/val.jsonl", "squad": "squad_v1.1/dev.json", "squad_v2": "squad_v2.0/dev.json",
    "mmlu/astronomy": "mmlu/test/astronomy_test.csv", "superglue/axb": "superglue/AX-b/AX-b.jsonl",
    "superglue/axg": "superglue/AX-g/AX-g.jsonl",
}
HEADED = {"squad_v2", "mmlu/astronomy"}
# task -> the gold continuation of each fixture row (checks that label i maps to the right word)
GOLD = {
    "glue/cola": [" yes", " no", " no"], "glue/sst2": [" positive", " negative", " negative"],
    "glue/mrpc": [" yes", " no", " yes"], "glue/qqp": [" yes", " no"], "glue/stsb": [" 5", " 0", " 3"],
    "glue/mnli": [" True", " Neither", " False"], "glue/qnli": [" yes", " no"], "glue/rte": [" True", " False"],
    "glue/wnli": [" False", " True"], "superglue/boolq": [" yes", " no"],
    "superglue/cb": [" False", " True", " Neither"],
    "superglue/copa": [" it was left in the sun.", " the ball rolled away."],
    "superglue/multirc": [" yes", " no", " yes", " no", " yes", " yes", " no"], "superglue/rte": [" True", " False"],
    "superglue/wic": [" no", " yes"], "superglue/wsc": [" yes", " no"], "mmlu/astronomy": [" B", " A", " B"],
    "superglue/axb": [" True", " False", " False", " True"], "superglue/axg": [" False", " False", " True", " True"],
}


def rows(task):
    return load_rows(task, get_task(task).splits.eval, paths=[TASK_FIXTURES / FILES[task]])


@pytest.mark.parametrize("task", FILES)
def test_zero_and_k_shot_requests(task):
    data = rows(task)
    query, shots = data[-1], data[:-1]
    zero, k_shot = build_request(task, query), build_request(task, query, shots)
    head = zero.context.split("\n\n")[0] + "\n\n" if task in HEADED else ""  # the task's description line
    assert type(zero) is type(k_shot) and k_shot.context.startswith(head)
    assert k_shot.context.endswith(zero.context[len(head):]) and len(k_shot.context) > len(zero.context)
    if isinstance(zero, MultipleChoice):
        assert all(c.startswith(" ") for c in zero.choices) and zero.choices == k_shot.choices
        golds = zero.gold if isinstance(zero.gold, tuple) else (zero.gold,)
        assert golds and all(0 <= g < len(zero.choices) for g in golds)
        for shot in shots:  # every shot is shown with its gold continuation, then a blank line
            request = build_request(task, shot)
            gold = request.gold[0] if isinstance(request.gold, tuple) else request.gold
            assert request.context[len(head):] + request.choices[gold] + "\n\n" in k_shot.context
    else:
        assert zero.stop == ("\n",) and zero.answers == tuple(query["answers"])
        for shot in shots:
            answer = (shot["answers"] or ["unanswerable"])[0]
            assert build_request(task, shot).context[len(head):] + f" {answer}\n\n" in k_shot.context
    if task in GOLD:
        assert [build_request(task, r).choices[build_request(task, r).gold] for r in data] == GOLD[task]


def test_exact_templates():
    sst2 = build_request("glue/sst2", {"sentence": "a fine film", "label": 1})
    assert sst2 == MultipleChoice("a fine film\nQuestion: Is this sentence positive or negative?\nAnswer:",
                                  (" negative", " positive"), 1)
    mnli = build_request("glue/mnli", {"premise": "It rained.", "hypothesis": "The ground is wet", "label": 0})
    assert mnli.context == "It rained.\nQuestion: The ground is wet. True, False or Neither?\nAnswer:"
    copa = build_request("superglue/copa", rows("superglue/copa")[0])
    assert copa.context == "The ice cream melted because"
    boolq = build_request("superglue/boolq", rows("superglue/boolq")[0])
    assert boolq.context.endswith("\nQuestion: is a tomato a fruit?\nAnswer:") and boolq.choices == (" no", " yes")


def test_stsb_choice_values():
    request = build_request("glue/stsb", rows("glue/stsb")[0])
    assert request.choices == (" 0", " 1", " 2", " 3", " 4", " 5") and request.choice_values == (0, 1, 2, 3, 4, 5)


def test_record_gold_is_every_answer_entity():
    data = rows("superglue/record")
    request = build_request("superglue/record", data[0], data[1:])
    assert [request.choices[g] for g in request.gold] == [
        "  - Lena Ortiz said the hills near Denver made the race feel easy.",
        "  - Ortiz said the hills near Denver made the race feel easy."]
    assert "  - Paul Kim finishes second.\n" in request.context and "@highlight" not in request.context
    assert "  - Runner-up Paul Kim promised to return next year.\n\n" in request.context  # the shot's answer


def test_mmlu_original_format():
    dev = load_rows("mmlu/astronomy", "dev", paths=[TASK_FIXTURES / "mmlu/dev/astronomy_dev.csv"])
    request = build_request("mmlu/astronomy", rows("mmlu/astronomy")[0], dev)
    assert request.context == (
        "The following are multiple choice questions (with answers) about astronomy.\n\n"
        "What is the Sun mostly made of?\nA. Iron\nB. Hydrogen\nC. Carbon\nD. Oxygen\nAnswer: B\n\n"
        "How many moons does Mars have?\nA. 0\nB. 1\nC. 2\nD. 3\nAnswer: C\n\n"
        "Which planet is closest to the Sun?\nA. Venus\nB. Mercury\nC. Earth\nD. Mars\nAnswer:")
    assert request.choices == (" A", " B", " C", " D") and request.gold == 1
    subject = build_request("mmlu/high_school_us_history", {"question": "q", "choices": list("abcd"), "label": 3})
    assert subject.context.startswith("The following are multiple choice questions (with answers) about high school "
                                      "us history.\n\n")


def test_squad_generation():
    v1 = build_request("squad", rows("squad")[1], rows("squad")[:1])
    assert v1.context.startswith("Title: Point_Arlo_Lighthouse\n\nBackground: The lighthouse")
    assert "Question: When was the lighthouse built?\n\nAnswer: 1872\n\n" in v1.context
    assert v1.context.endswith("Question: Who built the lighthouse?\n\nAnswer:") and v1.no_answer is None
    data = rows("squad_v2")
    v2 = build_request("squad_v2", data[2], data[:2])
    assert isinstance(v2, Generation) and v2.no_answer == "unanswerable" and v2.answers == ("Their skin", "skin")
    assert v2.context.startswith('Answer from the background; when it does not contain the answer, answer '
                                 '"unanswerable".\n\n')
    assert "How long do glass frogs live?\n\nAnswer: unanswerable\n\n" in v2.context
    assert build_request("squad_v2", data[1]).answers == ()


def test_prompt_versions():
    assert all(re.fullmatch(r".+@[0-9]+", prompt_version(task)) for task in TASKS)
    assert prompt_version("mmlu/anatomy") == get_task("mmlu/astronomy").template_version == "mmlu@1"
    assert prompt_version("glue/sst2") == "glue/sst2@1"
    with pytest.raises(ConfigError, match="unknown glue task 'sst'"):
        build_request("glue/sst", {})


def test_finetune_inputs():
    assert set(FINETUNE_NUM_LABELS) == {*(t for t in TASKS if t.startswith("glue/")), "superglue/boolq",
                                        "superglue/cb", "superglue/multirc", "superglue/rte", "superglue/wic",
                                        "superglue/wsc"}
    assert FINETUNE_NUM_LABELS["glue/stsb"] == 1 and FINETUNE_NUM_LABELS["glue/mnli"] == 3
    for task in FINETUNE_NUM_LABELS:
        a, b = finetune_input(task, rows(task)[0])
        assert a and (b is None) == (task in ("glue/cola", "glue/sst2"))
    assert finetune_input("superglue/multirc", rows("superglue/multirc")[0]) == (
        "Mara planted tomatoes and beans. The beans grew faster than the tomatoes.", "What grew faster? The beans")
    assert finetune_input("superglue/wic", rows("superglue/wic")[0])[0] == "bank: We sat on the bank of the river."
    with pytest.raises(ConfigError) as info:
        finetune_input("squad", {})
    assert "squad cannot be fine-tuned" in str(info.value) and "glue/sst2" in str(info.value)


def test_copa_alternatives_continue_the_premise_keeping_i_and_acronyms():
    row = {"id": "0", "premise": "My radio was too loud.", "question": "effect", "label": 0,
           "choice1": "I shut it off.", "choice2": "The neighbours complained."}
    request = build_request("superglue/copa", row)
    assert request.context == "My radio was too loud therefore"
    assert request.choices == (" I shut it off.", " the neighbours complained.")
    assert prompt_version("superglue/copa") == "superglue/copa@2"


# one row per generative reader format, in the row contract its reader produces (the readers themselves:
# tests/test_generative_readers.py)
GENERATIVE_ROWS = {
    "summarization": {"id": "a1", "document": "The council met on Monday.\nIt voted to fix the bridge.",
                      "summary": "Council votes to fix bridge .\nWork starts in May ."},
    "open_qa": {"id": "q1", "question": "who wrote hamlet", "answers": ["Shakespeare", "William Shakespeare"],
                "normalized_aliases": ["shakespeare", "william shakespeare"],
                "context": "Hamlet is a tragedy written by William Shakespeare."},
    "multiwoz": {"id": "D1/0", "dialogue_id": "D1", "turn": 0, "domains": ["taxi"],
                 "history": [{"speaker": "user", "text": "I need a taxi to the station."}],
                 "belief_state": {"taxi-destination": "station"}},
    "codexglue_code_to_text": {"id": "0", "language": "python", "code": "def one(): return 1",
                               "code_original": "def one():\n    return 1", "docstring": "Return one ."},
    "codexglue_line_completion": {"id": "0", "input": "<s> x = 1 <EOL>", "input_raw": "<s> x = 1 <EOL>",
                                  "gt": "y = x + 1"},
    "humaneval": {"id": "HumanEval/0", "task_id": "HumanEval/0", "entry_point": "one",
                  "prompt": 'def one():\n    """Return 1."""\n', "canonical_solution": "    return 1\n",
                  "test": "def check(candidate):\n    assert candidate() == 1\n"},
}
GENERATIVE_ROWS["long_context_rows"] = {"id": "0", "context": "The pass key is 4412. The grass is green.",
                                        "question": "\nWhat is the pass key?", "answer_prefix": "\nAnswer:",
                                        "answers": ["4412"]}
GENERATIVE_FORMATS = {"long_context_rows": "long_context_rows","cnn_dailymail": "summarization", "xsum": "summarization", "multi_news": "summarization",
                      "nq_open": "open_qa", "triviaqa": "open_qa", "multiwoz": "multiwoz",
                      "codexglue_code_to_text": "codexglue_code_to_text",
                      "codexglue_line_completion": "codexglue_line_completion", "humaneval": "humaneval"}


LONG_CONTEXT_SCORERS = {family for suite in SUITES if suite.long_context for family in suite.scorers}


@pytest.mark.parametrize("name", TASKS)
def test_every_definition_is_complete_and_renders_a_fixture_row(name):
    task = TASKS[name]
    assert check_definition(task) == [] and set(task.metrics) <= KNOWN_METRICS
    assert task.splits.eval in local_layout(task)  # a local data folder can serve its eval split
    if task.scorer in LONG_CONTEXT_SCORERS:
        return  # the suites' own test files render their rows (tests/test_ruler.py, ...)
    if task.source.format in GENERATIVE_FORMATS:
        row = GENERATIVE_ROWS[GENERATIVE_FORMATS[task.source.format]]
        request = build_request(name, row)
        context, answers = task.template(row)
        assert request.context == task.description + context and request.answers == tuple(answers) and answers[0]
        assert request.stop == task.generation.stop
        assert request.document is None or request.document in request.context  # the part cut when too long
        return
    fixture = name if name in FILES else f"{task.benchmark}/astronomy"  # every MMLU subject shares one template
    row = rows(fixture)[0]
    request = build_request(name, row, rows(fixture)[1:2])
    assert request.context.endswith(build_request(name, row).context[len(task.description):])
    if task.output_type == "multiple_choice":
        golds = request.gold if isinstance(request.gold, tuple) else (request.gold,)
        assert request.choices and golds and all(0 <= g < len(request.choices) for g in golds)
        assert len(request.choices) == (task.num_classes or len(request.choices))
    else:
        assert request.stop == task.generation.stop and request.answers == tuple(row["answers"])
    if task.finetune is not None:
        a, b = finetune_input(name, row)
        assert a and (b is None) == (task.finetune.text_pair[1] is None and task.finetune.input is None)
