"""MMLU from the original release's CSV files (data/{dev,val,test}/<subject>_<split>.csv): no header,
one question a record: question, A, B, C, D, answer letter. Fields are CSV-quoted where they hold
commas or line breaks; some files end lines with CRLF.

Rows follow cais/mmlu (question, choices, subject) with its `answer` index renamed `label`, and
`id` = "<subject>-<position in the split>".
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from lightning_bench.tasks.file_readers import no_rows, read_text, to_label
from lightning_bench.errors import ConfigError

LETTERS = ("A", "B", "C", "D")
EXPECTED = "an MMLU CSV (no header, 6 columns: question, A, B, C, D, answer letter)"


def read(task, paths: list[Path]) -> list[dict]:
    name, subject = task.name, task.short_name
    rows = []
    for path in paths:
        records = list(csv.reader(io.StringIO(read_text(name, path))))
        if not records:
            raise no_rows(name, path)
        for n, rec in enumerate(records, 1):
            if len(rec) != 6:
                raise ConfigError(f"{name}: {path} record {n} has {len(rec)} columns; expected {EXPECTED}")
            label = to_label(name, f"{path} record {n}", rec[5].strip(), LETTERS)
            rows.append({"question": rec[0], "choices": rec[1:5], "label": label, "subject": subject})
    return _numbered(rows)


def from_hub(task, split: str, rows: list[dict]) -> list[dict]:
    return _numbered([{"question": r["question"], "choices": list(r["choices"]),
                       "label": to_label(task.name, f"hub split {split!r}", r["answer"], LETTERS),
                       "subject": r["subject"]} for r in rows])


def _numbered(rows: list[dict]) -> list[dict]:
    return [{"id": f"{r['subject']}-{i}", **r} for i, r in enumerate(rows)]
