"""The tuned-config cache: one JSON per (model, config, scope) in one folder, the scope a task (per-task mode)
or `global`, the search's trials table beside it as CSV:

    {DIR}/{model}__{config}__{scope}.json         status (done | failed), best parameters, objective, search
                                                  settings, tuning rows, evaluated rows excluded
    {DIR}/{model}__{config}__{scope}.trials.csv    every trial: its parameters, objective, figures, status
    {DIR}/ray/{model}__{config}__{scope}/          Ray Tune's experiment (what `Tuner.restore` resumes)

`lookup` reads a task's entry, else the global one; a missing or failed one falls back to the declared defaults
with one logged line. `lightning_bench tune show [DIR] [--file F]` lists the entries or prints one."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Optional

from lightning_bench.errors import PROG, ConfigError
from lightning_bench.results.io import read_json, write_json_atomic, write_text_atomic

GLOBAL = "global"
log = logging.getLogger(__name__)


def model_slug(pretrained: str) -> str:
    """A model's name as a file name: its folder's name, or a hub id with / as --."""
    path = Path(str(pretrained))
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", path.name if path.exists() else str(pretrained).replace("/", "--"))


def entry_path(folder, model: str, config: str, scope: str) -> Path:
    return Path(folder) / f"{model_slug(model)}__{config}__{scope.replace('/', '-')}.json"


def write_entry(path: Path, entry: dict, trials=None) -> Path:
    """The entry, and its trials table (a pandas DataFrame) beside it."""
    if trials is not None:
        write_text_atomic(path.with_suffix(".trials.csv"), trials.to_csv(index=False))
    return write_json_atomic(path, entry)


def done(path: Path) -> Optional[dict]:
    """The entry at `path` if its search finished, else None (missing, failed, or unreadable)."""
    try:
        entry = read_json(path)
    except (OSError, ValueError):
        return None
    return entry if entry.get("status") == "done" else None


def lookup(folder, model: str, config: str, task: str) -> Optional[dict]:
    """The tuned parameters of `config` for `task` (its own entry, else the global one), or None with one
    logged line: the caller then runs the declared defaults."""
    for scope in (task, GLOBAL):
        entry = done(entry_path(folder, model, config, scope))
        if entry is not None:
            return entry
    log.warning("%s: no tuned %s for %s in %s; using its declared defaults", PROG, config, task, folder)
    print(f"{PROG}: no tuned {config} for {task} in {folder}; using its declared defaults", flush=True)
    return None


def show(argv: list[str]) -> int:
    """`lightning_bench tune show [DIR] [--file NAME]`: a line per cached entry, or one entry's JSON."""
    import argparse

    parser = argparse.ArgumentParser(prog=f"{PROG} tune show", description=show.__doc__)
    parser.add_argument("folder", nargs="?", default="benchmark_results/tuned", help="the --tuned_configs folder")
    parser.add_argument("--file", help="print this entry (a name from the list) whole")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        raise ConfigError(f"tune show: {folder} is not a folder of tuned configs")
    if args.file:
        path = folder / (args.file if args.file.endswith(".json") else f"{args.file}.json")
        if not path.is_file():
            raise ConfigError(f"tune show: no entry {path.name} in {folder}")
        print(json.dumps(read_json(path), indent=1))
        return 0
    entries = sorted(p for p in folder.glob("*__*__*.json"))
    if not entries:
        print(f"{PROG} tune show: no tuned configs in {folder}")
    for path in entries:
        entry = read_json(path)
        best = " ".join(f"{k}={v}" for k, v in entry.get("best", {}).items()) or "-"
        objective = entry.get("objective")
        print(f"{path.stem}  {entry.get('status')}  {entry.get('objective_name')} "
              f"{'-' if objective is None else f'{objective:.4g}'}  {best}")
    return 0
