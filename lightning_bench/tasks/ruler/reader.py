"""RULER rows: the generated JSON lines (`lightning_bench generate_ruler`, RULER's own prepare.py output) and
kvpress's pre-generated sets on the hub (simonjegou/ruler: one config per length, every task in split test).

A generated row is `{index, input, outputs, length}` as RULER writes it; ours add `context`, `question`,
`answer_prefix` (input = context + question + answer_prefix), `max_new_tokens`, `depth`, `target_length`,
`task`, `haystack` (and `needle_depths` for niah). RULER's own files have no split: the input is cut before
its question as kvpress cuts it (the last "What is/are all the special magic" for niah, "Question: ..." for
vt / cwe / fwe, "Answer the question based on the given documents." for qa; the answer prefix from the
last "The special magic" / "Answer:" after it). Hub rows are `{context, question, answer_prefix, answer,
task, max_new_tokens}`; a task keeps its own rows (by `task`).

Rows: `id` (position), `index`, `input` (the whole prompt), `context`, `question`, `answer_prefix`, `outputs`
(the gold strings), `max_new_tokens` (the row's, else RULER's for the family), `length`, `depth`,
`target_length`, `task` (None where unknown), and `haystack` / `needle_depths` where given. A row of another
task, without gold, or whose input is not context + question + answer_prefix is a one-line ConfigError.
"""

from __future__ import annotations

import re
from pathlib import Path

from lightning_bench.tasks.generative_readers import Reader, json_rows, no_reference
from lightning_bench.errors import ConfigError

EXPECTED = ("RULER's generated JSON lines (index, input, outputs[, length]; lightning_bench generate_ruler adds "
            "context, question, answer_prefix, max_new_tokens, depth, target_length)")

# where RULER's input turns from the context to the question, and from the question to the answer prefix
QUESTION_PATTERNS = {
    "niah": re.compile(r"What (?:is|are all) the special magic"),
    "vt": re.compile(r"Question: Find all variables that are assigned the value"),
    "cwe": re.compile(r"Question: What are the 10 most common words in the above list\?"),
    "fwe": re.compile(r"Question: Do not provide any explanation\."),
    "qa": re.compile(r"Answer the question based on the given documents\."),
}
ANSWER_PATTERNS = {"niah": re.compile(r" ?The special magic"), "vt": re.compile(r" ?Answer:"),
                   "cwe": re.compile(r" ?Answer:"), "fwe": re.compile(r" ?Answer:"), "qa": re.compile(r" ?Answer:")}
PASSED_ON = ("haystack", "needle_depths")


def family(short_name: str) -> str:
    """RULER's task family: niah_single_1 -> niah, qa_2 -> qa, vt, cwe, fwe."""
    return short_name.split("_")[0]


def _is_mine(task, named) -> bool:
    """Whether a row's `task` ("vt", or "ruler/vt") names this task."""
    return str(named).removeprefix("ruler/") == task.short_name


def split_input(task, text: str, where: str) -> tuple[str, str, str]:
    """(context, question, answer_prefix) of a RULER input, cut as kvpress cuts it."""
    kind = family(task.short_name)
    found = list(QUESTION_PATTERNS[kind].finditer(text))
    if not found:
        raise ConfigError(f"{task.name}: {where}: the input has no RULER {kind} question "
                          f"({QUESTION_PATTERNS[kind].pattern!r}); is this {task.short_name}'s file? "
                          f"expected {EXPECTED}")
    start = found[-1].start()
    answers = list(ANSWER_PATTERNS[kind].finditer(text, start))
    end = answers[-1].start() if answers else len(text)
    return text[:start], text[start:end], text[end:]


def _outputs(task, row: dict, where: str) -> list[str]:
    gold = row["outputs"] if "outputs" in row else row.get("answer")
    gold = [gold] if isinstance(gold, str) else gold
    if not isinstance(gold, (list, tuple)) or not gold or not all(isinstance(g, str) and g.strip() for g in gold):
        raise no_reference(task.name, where, "outputs (a list of gold strings)")
    return list(gold)


def _row(task, row: dict, where: str, position: int) -> dict:
    if not isinstance(row, dict):
        raise ConfigError(f"{task.name}: {where} is not a JSON object; expected {EXPECTED}")
    named = row.get("task")
    if named is not None and not _is_mine(task, named):
        raise ConfigError(f"{task.name}: {where} is a {named} row, not {task.short_name}; name "
                          f"ruler/{task.short_name}.jsonl files for this task")
    outputs = _outputs(task, row, where)
    prefix = row.get("answer_prefix") or ""
    if "context" in row and "question" in row:
        context, question = row["context"], row["question"]
        if not all(isinstance(x, str) for x in (context, question, prefix)):
            raise ConfigError(f"{task.name}: {where}: context, question and answer_prefix must be strings")
        text = context + question + prefix
        if row.get("input") not in (None, text):
            raise ConfigError(f"{task.name}: {where}: input is not context + question + answer_prefix; the row "
                              "was changed after generation: generate it again")
    elif isinstance(row.get("input"), str):
        text = row["input"] if row["input"].endswith(prefix) else row["input"] + prefix
        context, question, prefix = split_input(task, text, where)
    else:
        raise ConfigError(f"{task.name}: {where} has neither input nor context + question; expected {EXPECTED}")
    if not context.strip():
        raise ConfigError(f"{task.name}: {where} has an empty context; expected {EXPECTED}")
    limit = row.get("max_new_tokens", task.generation.max_new_tokens)  # RULER's tokens_to_generate
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"{task.name}: {where}: max_new_tokens must be a positive integer, got {limit!r}")
    return {"id": str(position), "index": row.get("index", position), "input": text, "context": context,
            "question": question, "answer_prefix": prefix, "outputs": outputs, "max_new_tokens": limit,
            "length": row.get("length"), "depth": row.get("depth"), "target_length": row.get("target_length"),
            "task": task.short_name, **{k: row[k] for k in PASSED_ON if k in row}}


def _file_rows(task, path: Path, start: int = 0) -> list[dict]:
    raw = json_rows(task.name, path, EXPECTED)
    return [_row(task, row, f"{path} row {i}", start + i) for i, row in enumerate(raw)]


def _hub_rows(task, raw: list[dict], where: str, start: int = 0) -> list[dict]:
    """The task's own rows of a hub split holding every RULER task (kvpress's simonjegou/ruler)."""
    mine = [r for r in raw if _is_mine(task, r.get("task", task.short_name))]
    if raw and not mine:
        names = sorted({str(r.get("task")) for r in raw})
        raise ConfigError(f"{task.name}: {where} holds no {task.short_name} rows (its tasks: {', '.join(names)})")
    length = task.source.hub_config
    rows = [_row(task, r, f"{where} row {i}", start + i) for i, r in enumerate(mine)]
    for r in rows:
        if r["target_length"] is None and length and str(length).isdigit():
            r["target_length"] = int(length)  # the hub config is the context length
    return rows


def hub_layout(task, split: str) -> dict:
    """kvpress's simonjegou/ruler: one config per context length, every task in its split "test". A split
    named by a length reads that config; "test" the definition's (4096), as layout.yaml has it."""
    if split != "test" and not split.isdigit():
        raise ConfigError(f"{task.name}: RULER has no split {split!r} on the hub; ask 'test' ({task.source.hub_config} "
                          "tokens) or a context length ('8192', ...)")
    return {"config": task.source.hub_config if split == "test" else split, "hub_splits": ("test",),
            # the task's rows before max_rows is counted: the first rows of the set are mostly other tasks'
            "task_rows": ("task", lambda named: _is_mine(task, named))}


READERS = {"ruler": Reader(_file_rows, _hub_rows)}
READERS["ruler"].hub_layout = hub_layout  # loading.py's hub path asks it which config and rows to read
FORMAT_FILES = {"ruler": "RULER's <length>/<task>.jsonl, generated with `lightning_bench generate_ruler --tokenizer "
                         "MODEL --out DATA/ruler --lengths 4096 ...` (or RULER's own prepare.py output)"}
