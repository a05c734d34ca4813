"""The kvpress-style unified long-context row: {context, question, answer_prefix, answer, max_new_tokens}
(answer: a string or a list of strings), JSON lines or a JSON list, or hub rows in the same layout. Rows
get an `id` (their `id` or `_id`, else their position) and `answers` (a list)."""

from __future__ import annotations

from pathlib import Path

from lightning_bench.tasks.generative_readers import Reader, json_rows
from lightning_bench.errors import ConfigError

EXPECTED = "JSON lines of {context, question, answer_prefix, answer, max_new_tokens}"


def _rows(task, raw: list[dict], where: str, start: int = 0) -> list[dict]:
    out = []
    for i, row in enumerate(raw):
        missing = [k for k in ("context", "question", "answer") if k not in row]
        if missing:
            raise ConfigError(f"{task.name}: {where} row {i} has no {', '.join(missing)}; expected {EXPECTED}")
        answers = row["answer"] if isinstance(row["answer"], list) else [row["answer"]]
        if not answers or not all(isinstance(a, str) and a.strip() for a in answers):
            raise ConfigError(f"{task.name}: {where} row {i} has an empty answer, so nothing to score against")
        limit = row.get("max_new_tokens")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"{task.name}: {where} row {i}: max_new_tokens must be a positive integer, got {limit!r}")
        out.append({"id": str(row.get("id", row.get("_id", start + i))), "context": row["context"],
                    "question": row["question"], "answer_prefix": row.get("answer_prefix") or "",
                    "answers": answers, **({"max_new_tokens": limit} if limit else {}),
                    **({"task": row["task"]} if "task" in row else {})})
    return out


def _file_rows(task, path: Path, start: int = 0) -> list[dict]:
    return _rows(task, json_rows(task.name, path, EXPECTED), str(path), start)


READERS = {"long_context_rows": Reader(_file_rows, _rows)}
FORMAT_FILES = {"long_context_rows": EXPECTED}
