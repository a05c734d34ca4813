"""The sweep's results file: ONE JSON (the layout the earlier benchmark published)

    {"results": {dataset: {method: {"context_length_sweep": {L: cell}, "sparsity_sweep": {s: cell}}}},
     "config", "grid", "fingerprint", "dataset_specs", "cells_done", "cells_total", "complete", "meta"}

kept in a `core.store.CellDocument`: rewritten atomically after every cell, held by one run at a time
(a second run into the same --output waits, then skips the cells the first made), refused when made
with other settings (fingerprint), a changed dataset spec, other method parameters or changed data text.
"""

from __future__ import annotations

import copy
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional

from lightning_bench.errors import ConfigError
from lightning_bench.experiments.core.store import CellDocument
from lightning_bench.experiments.sweep.config import SWEEPS, Cell

CHANGE_HINT = "use another --output"


@contextmanager
def open_results(output: Path, settings_fingerprint: str, specs: dict) -> Iterator[CellDocument]:
    """The results file (new or resumed), held against other runs inside `with`. `specs` = the datasets
    as written in the config."""
    with CellDocument(output, settings_fingerprint, "a sweep", "model, streaming, seed or batch size",
                      CHANGE_HINT) as store:
        before = store.doc.get("dataset_specs", {})
        for name, spec in specs.items():
            if name in store.doc["results"] and before.get(name) is not None and before[name] != spec:
                raise ConfigError(f"dataset {name!r} in {output} was {json.dumps(before[name])}, now "
                                  f"{json.dumps(spec)}; rename it or {CHANGE_HINT}")
        yield store


def finished(doc: dict, cell: Cell) -> Optional[dict]:
    found = doc["results"].get(cell.dataset, {}).get(cell.method, {}).get(cell.sweep, {}).get(cell.key)
    return found if isinstance(found, dict) and "perplexity" in found else None


def refuse_other_params(doc: dict, cell: Cell, params: dict, output: Path) -> None:
    found = finished(doc, cell)
    if found is not None and found.get("method_params") != params:
        raise ConfigError(f"{output} measured {cell.method} with parameters {found.get('method_params')}, "
                          f"the config now gives {params}; {CHANGE_HINT}")


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


def put(doc: dict, cell: Cell, figures: dict) -> None:
    method = doc["results"].setdefault(cell.dataset, {}).setdefault(cell.method, {})
    for sweep in SWEEPS:
        method.setdefault(sweep, {})
    method[cell.sweep][cell.key] = figures


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
