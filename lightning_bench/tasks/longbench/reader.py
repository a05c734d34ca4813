"""LongBench file readers (issue 16): READERS maps a format name to a reader object with read(task, paths)
and from_hub(task, split, rows).

- "longbench": LongBench v1 / LongBench-E as released (data.zip: data/<task>.jsonl and data/<task>_e.jsonl),
  one JSON object per line with input, context, answers (a list), length (words for English, characters for
  Chinese), dataset, language, all_classes (the labels of trec/lsht, else null) and _id; the hub's
  THUDM/LongBench configs (<task>, <task>_e; split "test") hold the same fields.
- "longbench_v2": LongBench v2's data.json, one JSON list of objects with _id, domain, sub_domain,
  difficulty (easy/hard), length (short/medium/long), question, choice_A..choice_D, answer (a letter) and
  context; the hub's THUDM/LongBench-v2 (its one split is "train") holds the same.

Rows keep those fields; `id` is the row's `_id` (its position where it has none), `answers` a list, and v2's
context is stripped at both ends, as the official prompt shows it. Every problem is a one-line ConfigError
naming the file (or hub split), the row and the format expected.
"""

from __future__ import annotations

from pathlib import Path

from lightning_bench.tasks.generative_readers import Reader, json_rows, need, no_reference
from lightning_bench.errors import ConfigError

EXPECTED = ("LongBench's data/<task>.jsonl (or <task>_e.jsonl for LongBench-E): JSON lines of "
            "{input, context, answers, length, dataset, language, all_classes, _id}")
EXPECTED_V2 = ("LongBench v2's data.json: a JSON list of {_id, domain, sub_domain, difficulty, length, question, "
               "choice_A, choice_B, choice_C, choice_D, answer, context}")
FORMAT_FILES = {"longbench": EXPECTED, "longbench_v2": EXPECTED_V2}  # what a missing file should have been

CLASSIFICATION = ("trec", "lsht")  # scored against all_classes
DIFFICULTIES, LENGTHS = ("easy", "hard"), ("short", "medium", "long")


def _dataset(task) -> str:
    return task.short_name  # "longbench/qasper" and "longbench_e/qasper" both read qasper's rows


def _text(task, where: str, row: dict, key: str, expected: str) -> str:
    value = row[key]
    if not isinstance(value, str):
        raise ConfigError(f"{task.name}: {where} field {key!r} is a {type(value).__name__}, not a string; "
                          f"expected {expected}")
    return value


def _v1_rows(task, raw: list[dict], where: str, start: int = 0) -> list[dict]:
    dataset, out = _dataset(task), []
    for i, row in enumerate(raw):
        at = f"{where} row {i}"
        need(task.name, at, row, ("input", "context", "answers"), EXPECTED)
        answers = row["answers"]
        if isinstance(answers, str):
            answers = [answers]
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise ConfigError(f"{task.name}: {at}: answers must be a list of strings; expected {EXPECTED}")
        if not any(a.strip() for a in answers):
            raise no_reference(task.name, at, "gold answer")
        named = row.get("dataset")
        if named not in (None, dataset, f"{dataset}_e"):
            raise ConfigError(f"{task.name}: {at} belongs to LongBench dataset {named!r}, not {dataset!r}; "
                              f"pass data/{dataset}.jsonl (or {dataset}_e.jsonl)")
        classes = row.get("all_classes")
        if dataset in CLASSIFICATION and not (isinstance(classes, list) and classes):
            raise ConfigError(f"{task.name}: {at} has no all_classes, which {dataset} is scored against; "
                              f"expected {EXPECTED}")
        length = row.get("length")
        if task.benchmark == "longbench_e" and (isinstance(length, bool) or not isinstance(length, int)):
            raise ConfigError(f"{task.name}: {at} has no integer length, which LongBench-E's length buckets "
                              f"need; expected {EXPECTED}")
        out.append({"id": str(row.get("_id", start + i)), "input": _text(task, at, row, "input", EXPECTED),
                    "context": _text(task, at, row, "context", EXPECTED), "answers": answers, "length": length,
                    "language": row.get("language"), "all_classes": classes, "dataset": named or dataset})
    return out


def _v2_rows(task, raw: list[dict], where: str, start: int = 0) -> list[dict]:
    fields = ("question", "choice_A", "choice_B", "choice_C", "choice_D", "answer", "context")
    out = []
    for i, row in enumerate(raw):
        at = f"{where} row {i}"
        need(task.name, at, row, fields + ("difficulty", "length"), EXPECTED_V2)
        text = {k: _text(task, at, row, k, EXPECTED_V2) for k in fields}
        if text["answer"] not in ("A", "B", "C", "D"):
            raise ConfigError(f"{task.name}: {at}: answer {row['answer']!r} is not one of A, B, C, D")
        if row["difficulty"] not in DIFFICULTIES or row["length"] not in LENGTHS:
            raise ConfigError(f"{task.name}: {at}: difficulty {row['difficulty']!r} / length {row['length']!r} "
                              f"must be one of {DIFFICULTIES} / {LENGTHS}")
        out.append({"id": str(row.get("_id", start + i)), "domain": row.get("domain"),
                    "sub_domain": row.get("sub_domain"), "difficulty": row["difficulty"], "length": row["length"],
                    **{k: v.strip() for k, v in text.items()}, "answers": [text["answer"]]})
    return out


def _v1_file(task, path: Path, start: int = 0) -> list[dict]:
    return _v1_rows(task, json_rows(task.name, path, EXPECTED), str(path), start)


def _v2_file(task, path: Path, start: int = 0) -> list[dict]:
    return _v2_rows(task, json_rows(task.name, path, EXPECTED_V2), str(path), start)


READERS = {"longbench": Reader(_v1_file, _v1_rows), "longbench_v2": Reader(_v2_file, _v2_rows)}
