"""The store of finished cells the runner reads and writes (docs/experiments.md). `CellStore` keeps one
JSON file per cell (`{folder}/{cell.key}.json`) with the settings it was made under (`protocol`) and a
checksum: a damaged file is moved aside and the cell computed again; a cell of the earlier layout,
without a checksum, is read as it is; a cell made under other settings is refused, never mixed in. Every
write is atomic. A long group saves its progress after each example (`progress`). The sweep's one JSON
(sweep/store.py) and the trainer's records (multi_dataset.py `RecordStore`) offer the runner the same methods.

Two runs into one store compute each cell once: a cell, or a group computed together, is locked while a
run computes it (`claim`: the groups no other run holds first, then the others once free). The locks
are OS file locks (flock, `filelock`) on `<folder>/../.locks/<folder name>/<name>.lock`: a killed run's
locks go with its process, and the empty lock files left behind block nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from filelock import FileLock, Timeout

from lightning_bench.errors import PROG, ConfigError
from lightning_bench.results.io import jsonable, read_json, write_json_atomic


def fingerprint(settings: dict) -> str:
    """sha256 of the settings as sorted JSON: equal settings, equal fingerprint, in any key order."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def _set_aside(path: Path, suffix: str, why: str) -> None:
    aside, n = path.with_name(path.name + suffix), 1
    while aside.exists():  # a file set aside earlier is kept for the user to inspect, never replaced
        aside, n = path.with_name(f"{path.name}{suffix}.{n}"), n + 1
    try:
        path.replace(aside)
    except FileNotFoundError:  # another run found it at the same moment and moved it first
        return
    print(f"{PROG}: {path} {why}: moved to {aside.name}; {'its examples are' if suffix == '.stale' else 'the cell is'} "
          "computed again", file=sys.stderr)


class CellStore:
    def __init__(self, folder: str | Path, file_pattern: re.Pattern, refusal: str,
                 progress_folder: Optional[Path] = None):
        self.folder = Path(folder)
        self.file_pattern = file_pattern  # which files in the folder are cells (not the summaries)
        self.refusal = refusal  # what follows the path when a cell was made under other settings
        self.progress_folder = Path(progress_folder) if progress_folder else self.folder / "partial"

    def path(self, cell) -> Path:
        return self.folder / f"{cell.key}.json"

    def read(self, cell, settings: dict) -> Optional[dict]:
        """The cell's record if a run finished it under `settings`; None if it was not made, or its file is
        damaged (unreadable, or its checksum does not match: moved to `<key>.json.corrupt`). A record made
        under other settings is refused: it would be mixed with this run's cells."""
        path = self.path(cell)
        if not path.exists():
            return None
        try:
            record = read_json(path)
            ok = isinstance(record, dict) and ("checksum" not in record or record["checksum"] == fingerprint(
                {k: v for k, v in record.items() if k != "checksum"}))  # no checksum: the earlier layout
        except (OSError, ValueError):
            ok = False
        if not ok:
            _set_aside(path, ".corrupt", "is damaged (unreadable or its checksum does not match)")
            return None
        if record.get("protocol") != settings:
            raise ConfigError(f"{path} {self.refusal}")
        return record

    def write(self, cell, settings: dict, record: dict) -> Path:
        """Atomically, with the settings and the checksum of the content as JSON holds it (NaN -> null,
        tuples -> lists), so a reread matches."""
        record = jsonable({**record, "protocol": settings})
        return write_json_atomic(self.path(cell), {**record, "checksum": fingerprint(record)})

    def lock(self, name: str) -> FileLock:
        """The lock of cell or group `name` (`claim` takes it), beside the folder: the folder holds cells only."""
        folder = self.folder.parent / ".locks" / self.folder.name
        folder.mkdir(parents=True, exist_ok=True)
        return FileLock(folder / f"{name}.lock")

    def keys(self) -> list[str]:
        """The keys of every cell file in the folder (from the names: nothing is read), in name order."""
        return [p.stem for p in sorted(self.folder.glob("*.json")) if self.file_pattern.match(p.name)]

    def records(self) -> list[dict]:
        """Every cell file in the folder (also those of earlier, smaller grids), in file-name order."""
        return [read_json(p) for p in sorted(self.folder.glob("*.json")) if self.file_pattern.match(p.name)]

    def progress(self, group: str, settings: dict) -> "Progress":
        return Progress(self.progress_folder / f"{group}.json", fingerprint(settings))

    def clear_progress(self, group: str) -> None:
        """Once the group's cells are written, its progress is no longer needed."""
        (self.progress_folder / f"{group}.json").unlink(missing_ok=True)


class Progress:
    """A group of hours writes its cell files only when it ends, so after each example its rows so far go
    atomically to `partial/<group>.json` with the fingerprint of its cells' settings: a run finding the
    same fingerprint continues after the last example; another, or an unreadable file, is set aside."""

    def __init__(self, path: Path, settings_fingerprint: str):
        self.path, self.fingerprint = path, settings_fingerprint

    def load(self) -> Optional[dict]:
        """{"examples": n done, "cells": {key: what the command saved}} or None."""
        if not self.path.exists():
            return None
        try:
            saved = read_json(self.path)
        except (OSError, ValueError):
            saved = None
        if isinstance(saved, dict) and saved.get("fingerprint") == self.fingerprint:
            return saved
        _set_aside(self.path, ".stale", "was left by a run under other settings (or is damaged)")
        return None

    def save(self, examples: int, cells: dict) -> None:
        write_json_atomic(self.path, {"fingerprint": self.fingerprint, "examples": examples, "cells": cells})


def claim(items: Iterable, lock_of: Callable[[object], FileLock], say: Callable[[object, str], None]) -> Iterator:
    """Each item, yielded while this run holds its lock: first the items no other run holds, then the others,
    each once its lock is free. The caller checks under the lock whether another run finished the item
    meanwhile. Close the generator (contextlib.closing) so that an error releases the lock it holds."""
    later = []
    for item in items:
        lock = lock_of(item)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            say(item, "another run is computing it; coming back to it after the rest")
            later.append(item)
            continue
        try:
            yield item
        finally:
            lock.release()
    for item in later:
        say(item, "waiting for the other run to finish it")
        with lock_of(item):
            yield item
