"""HumanEval (Chen et al., 2021): HumanEval.jsonl(.gz) as openai/human-eval ships it, one problem a line
{"task_id", "prompt", "canonical_solution", "test", "entry_point"}, and the hub's openai_humaneval rows
(the same fields). Row: those five fields as given (no stripping: the prompt's trailing newline and the
solution's indentation matter when the completion is appended and run) and "id" = task_id.
"""

from __future__ import annotations

from pathlib import Path

from lightning_bench.tasks.generative_readers import Reader, json_rows, need

EXPECTED = "HumanEval JSON lines with task_id, prompt, canonical_solution, test, entry_point"
FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")


def from_rows(task, rows: list[dict], where: str, start: int = 0) -> list[dict]:
    out = []
    for n, row in enumerate(rows):
        need(task.name, f"{where} row {n}", row, FIELDS, EXPECTED)
        out.append({"id": str(row["task_id"]), **{f: row[f] for f in FIELDS}})
    return out


def _file_rows(task, path: Path, start: int = 0) -> list[dict]:
    return from_rows(task, json_rows(task.name, path, EXPECTED), str(path))


HUMANEVAL = Reader(_file_rows, from_rows)
read, from_hub = HUMANEVAL.read, HUMANEVAL.from_hub
