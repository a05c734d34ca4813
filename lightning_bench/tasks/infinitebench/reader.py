"""InfiniteBench (Zhang et al., 2024; OpenBMB/InfiniteBench) rows: the benchmark's own JSON lines, one
object per sample, `{id, context, input, answer, options}` (the benchmark's generated-task files, and the 8k
passkey sample in ../shared/data, have `len` instead of `id`/`options`; `lightning_bench infinitebench_generate`
writes `id`, `len`, `target_length` and `depth`), or the hub's rows of
xinrongzhang2022/InfiniteBench (one split per task, `answer` and `options` as lists of strings).

Rows get `id` (the file's, else the position), `context`, `input` (the question), `answers` (strings) and
`options`; the gold is kept as compute_scores.py reads it after the evaluation scripts' `get_answer`:
- the answer list as strings (a bare string or number becomes a one-item list);
- longbook_choice_eng and code_debug: `[option text, letter]`, the letter from the answer's position in
  `options` (a row that already holds `[text, letter]` keeps it);
- math_find: the number as a string ("3", "2.5"); the scorer reads it back as an int or a float;
- math_calc: the list of intermediate values, each an integer as a string; code_run: the one integer returned.
code_run rows also get `func` and `func_call` (the call asked about: the row's own, as the benchmark's
scripts read them, else the `func_<n>(<integer>)` named in its `input`, as the hub's rows name it).
Generated rows keep `len`, `target_length` and `depth` (tasks/infinitebench/generate.py) for the scorer.
Every problem (no such file, a line that is not JSON, a row without context/input/answer, a choice answer
not among the options) is a one-line ConfigError naming the file and row.
"""

from __future__ import annotations

import re
from pathlib import Path

from lightning_bench.tasks.generative_readers import Reader, json_rows, no_reference
from lightning_bench.errors import ConfigError

EXPECTED = "InfiniteBench's JSON lines (id, context, input, answer, options; one object a line)"
CHOICE_TASKS = ("longbook_choice_eng", "code_debug")
LETTERS = "ABCD"
# math_find's instruction names the number asked for: "The largest number" (OpenBMB's eval_utils.py); forks
# of it read "The ... of" instead, tried second
TARGET_NUMBER = (re.compile(r"The \w+ number"), re.compile(r"The .+ of"))
CODE_CALL = re.compile(r"func_\d+\(-?\d+\)")  # the call a code_run question names: func_<n>(<integer>)
INTEGER = re.compile(r"-?\d+")
INTEGER_TASKS = ("math_calc", "code_run")  # golds the scorer reads as integers
KEPT = ("len", "target_length", "depth")  # generated rows' fields the scorer groups by


def _answers(value) -> list:
    if isinstance(value, list):
        return list(value)
    return [] if value is None else [value]


def _choice_gold(task, where: str, answers: list, options: list) -> list[str]:
    """[option text, letter], as the evaluation scripts' get_answer builds it for En.MC and Code.Debug."""
    if len(answers) == 2 and answers[1] in tuple(LETTERS):
        return [str(answers[0]), answers[1]]
    if len(answers) != 1 or answers[0] not in options:
        raise ConfigError(f"{task.name}: {where}: answer {answers!r} is not one of its options {options!r}; "
                          f"expected {EXPECTED}")
    return [str(answers[0]), LETTERS[options.index(answers[0])]]


def math_prefix(task_name: str, where: str, question: str) -> str:
    """The line math_find's prompt opens with: "What is the largest number in the following list?"."""
    for pattern in TARGET_NUMBER:
        found = pattern.findall(question)
        if found:
            target = found[0].lower()
            target = target[:-3] if pattern.pattern.endswith(" of") else target
            return f"What is {target} in the following list?"
    raise ConfigError(f"{task_name}: {where}: the question {question[:80]!r} names no 'The <...> number' to look "
                      "for, as math_find's prompt needs")


def code_call(task_name: str, where: str, row: dict) -> tuple[str, str]:
    """(function, call) of a code_run row: its own `func_call` (and `func`), else the first func_<n>(<integer>)
    in its question; the prompt names both."""
    call = row.get("func_call")
    if not call:
        found = CODE_CALL.search(str(row.get("input") or ""))
        if found is None:
            raise ConfigError(f"{task_name}: {where}: neither a func_call field nor a call 'func_<n>(<integer>)' in "
                              f"its input {str(row.get('input'))[:80]!r}; code_run's prompt names the call")
        call = found.group(0)
    return str(row.get("func") or str(call).split("(")[0]), str(call)


def _integer_gold(task, where: str, answers: list[str]) -> list[str]:
    bad = [a for a in answers if not INTEGER.fullmatch(a.strip())]
    if bad or (task.short_name == "code_run" and len(answers) != 1):
        want = "one integer" if task.short_name == "code_run" else "a list of integers"
        raise ConfigError(f"{task.name}: {where}: answer {answers!r} is not {want}; expected {EXPECTED}")
    return [a.strip() for a in answers]


def _gold(task, here: str, row: dict, options: list[str]) -> list[str]:
    """The answers as compute_scores.py reads them (module docstring), checked."""
    answers = _answers(row["answer"])
    if not answers or any(a is None or str(a).strip() == "" for a in answers):
        raise no_reference(task.name, here, "answer")
    if task.short_name in CHOICE_TASKS:
        if len(options) != 4:
            raise ConfigError(f"{task.name}: {here} has {len(options)} options, not 4 (A-D); expected {EXPECTED}")
        answers = _choice_gold(task, here, answers, options)
    answers = [str(a) for a in answers]
    return _integer_gold(task, here, answers) if task.short_name in INTEGER_TASKS else answers


def _row(task, row: dict, here: str, position: int) -> dict:
    absent = [k for k in ("context", "input", "answer") if k not in row]
    if absent:
        raise ConfigError(f"{task.name}: {here} has no {', '.join(absent)}; expected {EXPECTED}")
    if not isinstance(row["context"], str) or not row["context"].strip():
        raise ConfigError(f"{task.name}: {here} has an empty context; expected {EXPECTED}")
    options = [str(o) for o in (row.get("options") or [])]
    answers = _gold(task, here, row, options)
    question = str(row["input"] or "")
    extra = {k: row[k] for k in KEPT if k in row}
    if task.short_name == "math_find":
        math_prefix(task.name, here, question)  # fail here, not at prompting time
    if task.short_name == "code_run":
        extra["func"], extra["func_call"] = code_call(task.name, here, {**row, "input": question})
    ident = row.get("id")
    return {"id": str(position if ident is None else ident), "context": row["context"], "input": question,
            "answers": answers, "options": options, **extra}


def _rows(task, raw: list[dict], where: str, start: int = 0) -> list[dict]:
    return [_row(task, row, f"{where} row {start + i}", start + i) for i, row in enumerate(raw)]


def _file_rows(task, path: Path, start: int = 0) -> list[dict]:
    return _rows(task, json_rows(task.name, path, EXPECTED), str(path), start)


def hub_layout(task, split: str) -> dict:
    """xinrongzhang2022/InfiniteBench: one <task>.jsonl per task (the card's split of that name). The task files
    do not agree on their columns' types, so `load_dataset(hub_id, split=...)` fails casting them to one
    schema: read only this task's file, with the columns typed as the card's usage section types them."""
    from datasets import Features, Sequence, Value

    strings = Sequence(Value("string"))
    features = Features({"id": Value("int64"), "context": Value("string"), "input": Value("string"),
                         "answer": strings, "options": strings})
    # a split named by a length (--max_context N picks the generated N-token set under a data folder) has no
    # set of its own on the hub: the task's one set is read, its prompts cut to N as without per-length sets
    split = "test" if split.isdigit() else split
    hub_splits = task.source.hub_splits.get(split, (split,))
    return {"hub_splits": hub_splits,
            "load_args": lambda hub_split: {"data_files": {hub_split: f"{hub_split}.jsonl"}, "features": features}}


READERS = {"infinitebench": Reader(_file_rows, _rows)}
READERS["infinitebench"].hub_layout = hub_layout  # loading.py's hub path asks it how to load the task's file
FORMAT_FILES = {"infinitebench": "InfiniteBench's <task>.jsonl (id, context, input, answer, options), or one made by "
                                 "`lightning_bench infinitebench_generate`"}
