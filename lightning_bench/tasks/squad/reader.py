"""SQuAD v1.1 / v2.0 from the official JSON: {"version", "data": [{"title", "paragraphs": [{"context",
"qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible" (v2.0 only),
"plausible_answers" (v2.0, unanswerable questions only)}]}]}]}.

Also read: the HF flat rows `datasets` gives for rajpurkar/squad(_v2) ({"id", "title", "context", "question",
"answers": {"text": [...], "answer_start": [...]}}), as JSON lines or as {"data": [rows]} (the
transformers test fixture). Rows: id, title ("" when the file has none), context, question, answers
(the gold texts in file order, duplicates kept as the hub keeps them; [] = unanswerable).
"""

from __future__ import annotations

import json
from pathlib import Path

from lightning_bench.tasks.file_readers import json_lines, no_rows, read_text, rows_of_files
from lightning_bench.errors import ConfigError

EXPECTED = ('a SQuAD JSON file ({"data": [{"title", "paragraphs": [{"context", "qas": [...]}]}]}) '
            "or HF-style rows with id, context, question, answers")


def read(task, paths: list[Path]) -> list[dict]:
    return rows_of_files(task.name, paths, _file_rows, lambda _, rows, source: from_rows(task, rows, source))


def from_hub(task, split: str, rows: list[dict]) -> list[dict]:
    return from_rows(task, rows, f"hub split {split!r}")


def from_rows(task, rows: list[dict], source: str) -> list[dict]:
    """Rows of `task` (a TaskDefinition); a task without a no-answer string requires an answer everywhere."""
    out = []
    for article in rows:
        if "paragraphs" in article:  # official nested format
            out += [_row(task, source, qa | {"title": article.get("title", ""), "context": p["context"]})
                    for p in article["paragraphs"] for qa in p["qas"]]
        else:
            out.append(_row(task, source, article))
    return out


def _file_rows(task: str, path: Path) -> list[dict]:
    text = read_text(task, path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = None  # maybe JSON lines
    if isinstance(data, dict):
        if not isinstance(data.get("data"), list):
            raise ConfigError(f"{task}: {path} is not {EXPECTED}; pass the file with --data.paths")
        rows = data["data"]
    else:
        rows = json_lines(task, path, text, EXPECTED)
    if not rows:
        raise no_rows(task, path)
    return rows


def _row(task, source: str, qa: dict) -> dict:
    if not all(k in qa for k in ("id", "context", "question", "answers")):
        raise ConfigError(f"{task.name}: {source} is not {EXPECTED}; pass the file with --data.paths")
    answers = qa["answers"]
    texts = list(answers["text"]) if isinstance(answers, dict) else [a["text"] for a in answers]
    if qa.get("is_impossible"):
        texts = []
    if not texts and task.generation.no_answer is None:
        raise ConfigError(f"{task.name}: {source} question {qa['id']} has no answer; every SQuAD v1.1 question has one "
                          "(unanswerable questions belong to squad_v2)")
    return {"id": str(qa["id"]), "title": qa.get("title", ""), "context": qa["context"],
            "question": qa["question"], "answers": texts}
