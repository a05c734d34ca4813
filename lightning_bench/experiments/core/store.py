"""Resumable stores of finished cells. Every write is atomic (a killed run leaves the previous file
whole), and a store made under other settings is refused instead of being mixed with new cells.

CellFolder    one JSON file per cell (`{folder}/{cell.key}.json`), each carrying the `protocol` it was
              made under; a cell whose file exists is done (generation).
CellDocument  every cell in ONE JSON document with a `fingerprint` of the settings all cells depend
              on, rewritten after each cell (the sweep's published layout).

Two runs into one store compute each cell once. A CellFolder locks a cell (or a group of cells computed
together) while a run computes it: `claim` hands a run the cells no other run holds first, then waits
for the others' locks, and the caller reuses what the other run wrote meanwhile. A CellDocument is
rewritten whole, so one run at a time holds it; a second waits, then finds the first's cells done.
The locks are OS file locks (flock, via `filelock`) on `<folder>/../.locks/<folder name>/<name>.lock` and
`.<document>.lock`: a killed run's locks go with its process, and the empty lock files left behind block
nothing.
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


class CellFolder:
    def __init__(self, folder: str | Path, file_pattern: re.Pattern, change_hint: str):
        self.folder = Path(folder)
        self.file_pattern = file_pattern  # which files in the folder are cells (not the summaries)
        self.change_hint = change_hint  # how to start a separate store, e.g. "use another --experiment_name"

    def path(self, cell) -> Path:
        return self.folder / f"{cell.key}.json"

    def done(self, cell) -> bool:
        return self.path(cell).exists()

    def verified(self, cell) -> Optional[dict]:
        """The cell's record if its file is whole: JSON whose `checksum` matches its content (written by
        `write(..., checksum=True)`). A truncated, edited or unreadable file is moved aside to
        `<key>.json.corrupt` with a warning, and None says the cell must be computed again: never merged."""
        path = self.path(cell)
        if not path.exists():
            return None
        try:
            record = read_json(path)
            ok = isinstance(record, dict) and record.get("checksum") == fingerprint(
                {k: v for k, v in record.items() if k != "checksum"})
        except (OSError, ValueError):
            ok = False
        if ok:
            return record
        aside = path.with_name(path.name + ".corrupt")
        try:
            path.replace(aside)
        except FileNotFoundError:  # another run found it damaged at the same moment and moved it first
            return None
        print(f"{PROG}: {path} is damaged (unreadable or its checksum does not match): moved to {aside.name}; "
              "the cell is computed again", file=sys.stderr)
        return None

    def refuse_other_protocols(self, cells: Iterable, protocol_of, what: str) -> None:
        """Before anything runs: a finished cell made under another protocol would be silently mixed."""
        for cell in cells:
            path = self.path(cell)
            if path.exists() and read_json(path).get("protocol") != protocol_of(cell):
                raise ConfigError(f"{path} was made under another protocol ({what}); {self.change_hint}")

    def write(self, cell, record: dict, checksum: bool = False) -> Path:
        """Atomically; with `checksum`, the record carries the fingerprint of its content (`verified`)."""
        if checksum:  # over the record as JSON will hold it (NaN -> null, tuples -> lists), so a reread matches
            record = jsonable(record)
            record = {**record, "checksum": fingerprint(record)}
        return write_json_atomic(self.path(cell), record)

    def lock(self, name: str) -> FileLock:
        """The lock of cell or group `name` (`claim` takes it), beside the folder: the folder holds cells only."""
        folder = self.folder.parent / ".locks" / self.folder.name
        folder.mkdir(parents=True, exist_ok=True)
        return FileLock(folder / f"{name}.lock")

    def records(self) -> list[dict]:
        """Every cell file in the folder (also those of earlier, smaller grids), in file-name order."""
        return [read_json(p) for p in sorted(self.folder.glob("*.json")) if self.file_pattern.match(p.name)]


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


class CellDocument:
    """Used as a context manager: the document is read, and held against other runs, inside `with`."""

    def __init__(self, path: str | Path, settings_fingerprint: str, what: str, settings: str, change_hint: str):
        self.path, self.fingerprint, self.change_hint = Path(path), settings_fingerprint, change_hint
        self.what, self.settings = what, settings  # how refusals name the document and its settings
        self.doc: dict = {"results": {}}
        self.lock = FileLock(self.path.with_name(f".{self.path.name}.lock"))

    def __enter__(self) -> "CellDocument":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.lock.acquire(timeout=0)
        except Timeout:
            print(f"{PROG}: another run is writing {self.path}; waiting for it to end (its cells are then reused)",
                  flush=True)
            self.lock.acquire()
        try:
            self._read()
        except BaseException:
            self.lock.release()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()

    def _read(self) -> None:
        """The document as the last run left it, refused when made with other settings."""
        if not self.path.exists():
            return
        try:
            self.doc = read_json(self.path)
        except (OSError, ValueError) as err:
            raise ConfigError(f"{self.path} exists but is not {self.what} JSON ({type(err).__name__}); "
                              f"{self.change_hint}") from err
        if self.doc.get("fingerprint") != self.fingerprint:
            raise ConfigError(f"{self.path} holds {self.what} with other settings ({self.settings}); "
                              f"{self.change_hint} or delete it")
        self.doc.setdefault("results", {})

    def save(self, **fields) -> None:
        """Update the document's top-level fields (`fingerprint` among them, where the caller wants it
        in the key order) and rewrite it atomically."""
        self.doc.update(fields)
        write_json_atomic(self.path, self.doc)
