"""The sweep's results file: ONE JSON (the layout the earlier benchmark published)

    {"results": {dataset: {method: {"context_length_sweep": {L: cell}, "sparsity_sweep": {s: cell}}}},
     "config", "grid", "fingerprint", "dataset_specs", "cells_done", "cells_total", "complete", "meta"}

kept in a `CellDocument`, the document layout of the runner's store (core/store.py): rewritten atomically
after every cell, refused when made with other settings. Several runs may write it at once (shards of one
grid): each write merges the cells other runs wrote first, under the document's lock, and each group of
cells has its own lock, as in a `CellStore`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Callable, Optional

from filelock import FileLock

from lightning_bench.errors import ConfigError
from lightning_bench.results.io import read_json, write_json_atomic
from lightning_bench.experiments.sweep.config import SWEEPS, Cell

CHANGE_HINT = "use another --name or --output"
# what a computed cell's record carries to the process writing the document besides its figures: its
# dataset's provenance and protocol, which the document keeps once per dataset, in `meta`
MEASURED = "measured"


class CellDocument:
    """Every cell in ONE JSON document with a `fingerprint` of the settings all cells depend on, read inside
    `with`. It is the runner's store: a cell deleted from the document is computed again, one measured with
    other method parameters refused, and the same (length, ratio) measured in the other sweep copied in
    (`read`). `on_write(cell, measured)` rewrites the document after each cell (`save`). Writes from other
    runs are merged: each write re-reads the document under its lock first. `specs`: the datasets as the
    config writes them; one changed under its name is refused."""

    def __init__(self, path: str | Path, settings_fingerprint: str, specs: dict):
        self.file, self.fingerprint, self.specs = Path(path), settings_fingerprint, specs
        self.doc: dict = {"results": {}}
        self.file_lock = FileLock(self.file.with_name(f".{self.file.name}.lock"))  # held while one run writes
        self.seen = None  # (inode, mtime, size) of the file as last read or written
        self.on_write: Callable[[Cell, Optional[dict]], None] = lambda cell, measured: None

    def __enter__(self) -> "CellDocument":
        self.file.parent.mkdir(parents=True, exist_ok=True)
        self._refresh()
        return self

    def __exit__(self, *exc) -> None:
        pass

    def _refresh(self) -> None:
        """The document as the last run wrote it (read again only when another write replaced the file),
        refused when made with other settings or datasets."""
        try:
            stat = self.file.stat()
        except FileNotFoundError:
            return
        if (stat.st_ino, stat.st_mtime_ns, stat.st_size) == self.seen:
            return
        try:
            doc = read_json(self.file)
        except (OSError, ValueError) as err:
            raise ConfigError(f"{self.file} exists but is not a sweep JSON ({type(err).__name__}); "
                              f"{CHANGE_HINT}") from err
        if doc.get("fingerprint") != self.fingerprint:
            raise ConfigError(f"{self.file} holds a sweep with other settings (model, streaming, seed or batch "
                              f"size); {CHANGE_HINT} or delete it")
        doc.setdefault("results", {})
        before = doc.get("dataset_specs", {})
        for name, spec in self.specs.items():
            if name in doc["results"] and before.get(name) is not None and before[name] != spec:
                raise ConfigError(f"dataset {name!r} in {self.file} was {json.dumps(before[name])}, now "
                                  f"{json.dumps(spec)}; rename it or {CHANGE_HINT}")
        self.doc.clear()
        self.doc.update(doc)  # in place: callers hold the dict
        self.seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)

    def save(self, **fields) -> None:
        """Update the document's top-level fields (`fingerprint` among them, where the caller wants it
        in the key order) and rewrite it atomically (`on_write` calls it, under the document's lock)."""
        self.doc.update(fields)
        stat = write_json_atomic(self.file, self.doc).stat()
        self.seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)

    # the runner's store
    def path(self, cell: Cell) -> Path:
        return self.file

    def read(self, cell: Cell, settings: dict) -> Optional[dict]:
        self._refresh()
        found = finished(self.doc, cell)
        if found is not None and found.get("method_params") != settings["method_params"]:
            raise ConfigError(f"{self.file} measured {cell.method} with parameters {found.get('method_params')}, "
                              f"the config now gives {settings['method_params']}; {CHANGE_HINT}")
        if found is None and (same := twin(self.doc, cell, settings["method_params"])) is not None:
            self.write(cell, settings, same[1])  # measured once: in the other sweep (of an earlier, smaller grid)
            found = finished(self.doc, cell)
        return found

    def write(self, cell: Cell, settings: dict, figures: dict) -> None:
        with self.file_lock:  # other runs may write the document too: theirs first
            self._refresh()
            figures = dict(figures)
            measured = figures.pop(MEASURED, None)
            method = self.doc["results"].setdefault(cell.dataset, {}).setdefault(cell.method, {})
            for sweep in SWEEPS:
                method.setdefault(sweep, {})
            method[cell.sweep][cell.point] = figures
            self.on_write(cell, measured)

    def lock(self, name: str) -> FileLock:
        """The lock of group `name`, beside the document (`.{file}.locks/`)."""
        folder = self.file.with_name(f".{self.file.name}.locks")
        folder.mkdir(parents=True, exist_ok=True)
        return FileLock(folder / f"{name}.lock")

    def clear_progress(self, group: str) -> None:
        pass  # a sweep cell is one evaluation: nothing to resume inside it


def in_grid_order(results: dict, grid: list[Cell]) -> dict:
    """The document's cells in the order a serial run of `grid` places them (cells of earlier grids after),
    whatever order the runs that wrote them took: one grid gives one file, however many processes ran it."""
    rank: dict = {}
    for cell in grid:
        for key in (cell.dataset, (cell.dataset, cell.method), (cell.dataset, cell.method, cell.sweep, cell.point)):
            rank.setdefault(key, len(rank))

    def ordered(mapping: dict, key) -> dict:
        return dict(sorted(mapping.items(), key=lambda item: (rank.get(key(item[0]), len(rank)), str(item[0]))))

    return {d: {m: {s: ordered(sweeps[s], lambda p: (d, m, s, p))
                    for s in sorted(sweeps, key=lambda s: (SWEEPS.index(s) if s in SWEEPS else len(SWEEPS), s))}
                for m, sweeps in ordered(methods, lambda m: (d, m)).items()}
            for d, methods in ordered(results, lambda d: d).items()}


def finished(doc: dict, cell: Cell) -> Optional[dict]:
    found = doc["results"].get(cell.dataset, {}).get(cell.method, {}).get(cell.sweep, {}).get(cell.point)
    return found if isinstance(found, dict) and "perplexity" in found else None


def twin(doc: dict, cell: Cell, params: dict) -> Optional[tuple[str, dict]]:
    """The same (context length, sparsity, parameters) already measured in the other sweep of this
    dataset and method: a cell on both axes is measured once."""
    sweeps = doc["results"].get(cell.dataset, {}).get(cell.method, {})
    for sweep in SWEEPS:
        if sweep == cell.sweep:
            continue
        for key, found in sweeps.get(sweep, {}).items():
            if (isinstance(found, dict) and found.get("context_length") == cell.context_length
                    and found.get("sparsity") == (cell.sparsity if cell.method != "dense" else 0.0)
                    and found.get("method_params") == params):
                return f"{sweep}/{key}", copy.deepcopy(found)
    return None


def refuse_changed_text(doc: dict, dataset: str, provenance: dict, output: Path) -> None:
    """The same dataset name over another text (sha256 of the evaluated split) would mix two corpora."""
    before = doc.get("meta", {}).get("data", {}).get(dataset)
    if not before:
        return

    def shas(p):
        return {s: (v.get("evaluated_sha256") or v.get("sha256")) for s, v in p.get("splits", {}).items()}

    old, new = shas(before), shas(provenance)
    for split, sha in new.items():
        if split in old and old[split] != sha:
            raise ConfigError(f"dataset {dataset!r}: its {split} text changed since {output} was written "
                              f"(sha256 {old[split][:12]}... -> {sha[:12]}...); {CHANGE_HINT}")
