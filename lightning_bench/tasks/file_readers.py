"""Helpers the format readers share; every problem becomes a one-line ConfigError naming the file."""

from __future__ import annotations

import json
from pathlib import Path

from lightning_bench.errors import ConfigError

NO_LABELS = (None, -1, "-1", "")  # how test splits hide a label: field absent, -1 on the hub, empty cell
FIX_PATHS = "pass labelled files with --data.paths or pick the validation split"


def rows_of_files(task: str, paths: list[Path], file_rows, from_rows) -> list[dict]:
    """Every file's raw rows (`file_rows(task, path)`) normalised by `from_rows(task, rows, source)`."""
    return [row for path in paths for row in from_rows(task, file_rows(task, path), str(path))]


def read_text(task: str, path: Path) -> str:
    """The file's text, without a byte-order mark (the MRPC files start with one)."""
    with open(path, encoding="utf-8-sig", newline="") as f:  # newline="": csv parses line ends itself
        text = f.read()
    if not text.strip():
        raise ConfigError(f"{task}: {path} is empty; point --data.data_dir or --data.paths at the real file")
    return text


def no_rows(task: str, path: Path) -> ConfigError:
    return ConfigError(f"{task}: {path} holds no rows; point --data.data_dir or --data.paths at the real file")


def no_labels(task: str, where: str) -> ConfigError:
    return ConfigError(f"{task}: {where} has no labels (a test split hides them); {FIX_PATHS}")


def to_label(task: str, where: str, value, names: tuple[str, ...]) -> int:
    """Label index from a name ("entailment"), a JSON boolean, or an index (as the hub gives it)."""
    if value in NO_LABELS:
        raise no_labels(task, where)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int) and 0 <= value < len(names):
        return value
    if value in names:
        return names.index(value)
    raise ConfigError(f"{task}: {where}: unknown label {value!r}; expected one of {', '.join(names)}")


def json_lines(task: str, path: Path, text: str, expected: str) -> list[dict]:
    """Rows of a JSON-lines file; `expected` says what the file should have been."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict):
            raise ConfigError(f"{task}: {path} line {n} is not a JSON object; expected {expected}")
        rows.append(row)
    return rows
