"""Helpers the generative-task readers share (summarization, open QA, MultiWOZ, CodeXGLUE, HumanEval).

`Reader` bundles a format's `read(task, paths)` and `from_hub(task, split, rows)` where one module holds
several formats. The file helpers read `.gz` and one-member `.zip` files as text, take the rows of a JSON
file in the usual layouts (JSON lines, a JSON list, {"data": [...]}) and turn every problem into a
one-line ConfigError (MissingData for a file that is not there) naming the file and the format expected.
"""

from __future__ import annotations

import gzip
import json
import zipfile
from pathlib import Path
from typing import Callable

from lightning_bench.tasks.file_readers import json_lines, no_rows
from lightning_bench.errors import ConfigError, MissingData


class Reader:
    """One format: `file_rows(task, path)` gives a file's rows, `from_rows(task, rows, where)` normalises
    raw rows (a file's or the hub's) into the task's rows. `reads_folders`: a path may be a folder of the
    format's files, read as one (CNN/DailyMail's story folders)."""

    def __init__(self, file_rows: Callable, from_rows: Callable, finish: Callable = lambda rows: rows,
                 reads_folders: bool = False):
        self.file_rows, self.from_rows, self.finish = file_rows, from_rows, finish  # finish: over all files' rows
        self.reads_folders = reads_folders

    def read(self, task, paths: list[Path]) -> list[dict]:
        """All files' rows; a row numbered by its position gets it counted over the files before it too
        (`file_rows` may take `start`, the number of rows read so far), as the hub numbers a split."""
        rows: list[dict] = []
        for path in paths:
            rows += self.file_rows(task, Path(path), start=len(rows))
        return self.finish(rows)

    def from_hub(self, task, split: str, rows: list[dict]) -> list[dict]:
        return self.finish(self.from_rows(task, list(rows), f"hub split {split!r}"))


def missing(task: str, path: Path, what: str) -> MissingData:
    return MissingData(f"{task}: {path} not found; expected {what} there (set --data.data_dir or --data.paths)")


def no_reference(task: str, where: str, what: str) -> ConfigError:
    """A row without its gold (an empty reference, or a test split that hides it)."""
    return ConfigError(f"{task}: {where} has no {what}, so nothing to score against; pass files with their "
                       "references with --data.paths")


def text_of(task: str, path: Path, expected: str) -> str:
    """The file's text (`.gz` decompressed; a `.zip` must hold one file, or one named like the zip without
    `.zip`), without a byte-order mark; an empty, binary or unreadable file is a one-line error."""
    if not path.is_file():
        raise missing(task, path, expected)
    try:
        if path.suffix == ".gz":
            data = gzip.decompress(path.read_bytes())
        elif path.suffix == ".zip":
            data = _zip_member(task, path, expected)
        else:
            data = path.read_bytes()
        text = data.decode("utf-8-sig")
    except (OSError, EOFError, zipfile.BadZipFile, UnicodeDecodeError) as err:
        raise ConfigError(f"{task}: {path} cannot be read ({type(err).__name__}); expected {expected}") from None
    if not text.strip():
        raise ConfigError(f"{task}: {path} is empty; expected {expected}")
    return text


def _zip_member(task: str, path: Path, expected: str) -> bytes:
    with zipfile.ZipFile(path) as z:
        names = [n for n in z.namelist() if not n.endswith("/") and not n.startswith("__MACOSX")]
        named = [n for n in names if Path(n).name == path.stem]  # test.json.zip -> test.json
        if len(named) != 1 and len(names) != 1:
            raise ConfigError(f"{task}: {path} holds {len(names)} files, not one {path.stem}; expected {expected}")
        return z.read(named[0] if len(named) == 1 else names[0])


def json_data(task: str, path: Path, expected: str):
    """The file's JSON value, or its rows when it is JSON lines (a list of objects)."""
    text = text_of(task, path, expected)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json_lines(task, path, text, expected)


def json_rows(task: str, path: Path, expected: str, keys: tuple[str, ...] = ("data", "Data")) -> list[dict]:
    """The objects of a JSON-lines file, a JSON list, or a JSON object holding them under one of `keys`."""
    data = json_data(task, path, expected)
    if isinstance(data, dict):
        found = [data[k] for k in keys if isinstance(data.get(k), list)]
        data = found[0] if found else [data]  # a one-line JSON-lines file is one object
    if not isinstance(data, list) or not all(isinstance(row, dict) for row in data):
        raise ConfigError(f"{task}: {path} is not {expected}")
    if not data:
        raise no_rows(task, path)
    return data


def need(task: str, where: str, row: dict, fields: tuple[str, ...], expected: str) -> None:
    """A one-line error when `row` lacks one of `fields`."""
    absent = [f for f in fields if f not in row]
    if absent:
        raise ConfigError(f"{task}: {where} has no {', '.join(absent)}; expected {expected}")


def records(value) -> list[dict]:
    """A `datasets` Sequence of dicts as a list of dicts: the hub gives it as a dict of lists
    ({"a": [1, 2], "b": [3, 4]} -> [{"a": 1, "b": 3}, {"a": 2, "b": 4}]); a list passes unchanged."""
    if isinstance(value, dict):
        columns = list(value)
        lengths = {len(value[c]) for c in columns}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")
        return [dict(zip(columns, items)) for items in zip(*(value[c] for c in columns))]
    return list(value or [])


def number_repeats(rows: list[dict]) -> list[dict]:
    """Ids made unique: the k-th repeat of an id (k >= 2) becomes "<id>#k" (TriviaQA rc holds a question
    once for each domain it is in)."""
    seen: dict[str, int] = {}
    for row in rows:
        seen[row["id"]] = seen.get(row["id"], 0) + 1
        if seen[row["id"]] > 1:
            row["id"] = f"{row['id']}#{seen[row['id']]}"
    return rows


def unique(values) -> list[str]:
    """Stripped strings in order, each once, empty ones left out."""
    out: list[str] = []
    for v in values:
        v = str(v).strip()
        if v and v not in out:
            out.append(v)
    return out
