"""The sweep's results file: ONE JSON (the layout the earlier benchmark published)

    {"results": {dataset: {method: {"context_length_sweep": {L: cell}, "sparsity_sweep": {s: cell}}}},
     "config", "grid", "fingerprint", "dataset_specs", "cells_done", "cells_total", "complete", "meta"}

kept in a `CellDocument`, the document layout of the runner's store (core/store.py): rewritten
atomically after every cell, held by one run at a time, refused when made with other settings.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Callable, Optional

from filelock import FileLock, Timeout

from lightning_bench.errors import PROG, ConfigError
from lightning_bench.results.io import read_json, write_json_atomic
from lightning_bench.experiments.sweep.config import SWEEPS, Cell

CHANGE_HINT = "use another --name or --output"


class CellDocument:
    """Every cell in ONE JSON document with a `fingerprint` of the settings all cells depend on, read and held
    against other runs inside `with` (rewritten whole, so one run at a time; a second waits, then finds the
    first's cells done). Inside, it is the runner's store: a cell deleted from the document is computed
    again, one measured with other method parameters refused, and `on_write` rewrites the document after
    each cell. `specs`: the datasets as the config writes them; one changed under its name is refused."""

    def __init__(self, path: str | Path, settings_fingerprint: str, specs: dict):
        self.file, self.fingerprint, self.specs = Path(path), settings_fingerprint, specs
        self.doc: dict = {"results": {}}
        self.file_lock = FileLock(self.file.with_name(f".{self.file.name}.lock"))
        self.on_write: Callable[[], None] = lambda: None

    def __enter__(self) -> "CellDocument":
        self.file.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.file_lock.acquire(timeout=0)
        except Timeout:
            print(f"{PROG}: another run is writing {self.file}; waiting for it to end (its cells are then reused)",
                  flush=True)
            self.file_lock.acquire()
        try:
            self._read()
        except BaseException:
            self.file_lock.release()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.file_lock.release()

    def _read(self) -> None:
        """The document as the last run left it, refused when made with other settings or datasets."""
        if not self.file.exists():
            return
        try:
            self.doc = read_json(self.file)
        except (OSError, ValueError) as err:
            raise ConfigError(f"{self.file} exists but is not a sweep JSON ({type(err).__name__}); "
                              f"{CHANGE_HINT}") from err
        if self.doc.get("fingerprint") != self.fingerprint:
            raise ConfigError(f"{self.file} holds a sweep with other settings (model, streaming, seed or batch "
                              f"size); {CHANGE_HINT} or delete it")
        self.doc.setdefault("results", {})
        before = self.doc.get("dataset_specs", {})
        for name, spec in self.specs.items():
            if name in self.doc["results"] and before.get(name) is not None and before[name] != spec:
                raise ConfigError(f"dataset {name!r} in {self.file} was {json.dumps(before[name])}, now "
                                  f"{json.dumps(spec)}; rename it or {CHANGE_HINT}")

    def save(self, **fields) -> None:
        """Update the document's top-level fields (`fingerprint` among them, where the caller wants it
        in the key order) and rewrite it atomically."""
        self.doc.update(fields)
        write_json_atomic(self.file, self.doc)

    # the runner's store
    def path(self, cell: Cell) -> Path:
        return self.file

    def read(self, cell: Cell, settings: dict) -> Optional[dict]:
        found = finished(self.doc, cell)
        if found is not None and found.get("method_params") != settings["method_params"]:
            raise ConfigError(f"{self.file} measured {cell.method} with parameters {found.get('method_params')}, "
                              f"the config now gives {settings['method_params']}; {CHANGE_HINT}")
        return found

    def write(self, cell: Cell, settings: dict, figures: dict) -> None:
        method = self.doc["results"].setdefault(cell.dataset, {}).setdefault(cell.method, {})
        for sweep in SWEEPS:
            method.setdefault(sweep, {})
        method[cell.sweep][cell.point] = figures
        self.on_write()

    def lock(self, name: str) -> FileLock:
        return self.file_lock  # held by this run already (FileLock counts re-entries): never waits

    def clear_progress(self, group: str) -> None:
        pass  # a sweep cell is one evaluation: nothing to resume inside it


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
