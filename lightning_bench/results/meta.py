"""`meta`: how a number was obtained (versions, code revision, seed, data, tokenizer, protocol)."""

from __future__ import annotations

import contextlib
import functools
import platform
import subprocess
import sys
from contextvars import ContextVar
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import lightning_bench

# the arguments of the command being run in this process, when it is not the process's own sys.argv (an
# experiment runs fit and test in-process, one command per cell: each cell's records name its command)
_COMMAND: ContextVar = ContextVar("command", default=None)
PACKAGES = ("torch", "lightning", "transformers", "datasets", "torchmetrics", "jsonargparse", "bitsandbytes")


def package_versions() -> dict:
    versions = {"lightning_bench": lightning_bench.__version__, "python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_revision() -> dict:
    """The library's own revision (and whether the tree had uncommitted changes), read once per process:
    a run that lasts hours keeps the code it loaded, whatever is committed while it runs. `measurements/`
    (the tracked cell files of long grids, rewritten while they run) does not make the tree dirty."""
    return dict(_read_git_revision())


@functools.cache
def _read_git_revision() -> dict:
    root = Path(lightning_bench.__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        if rev.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":(exclude)measurements"], cwd=root, capture_output=True, text=True, timeout=10)
        return {"commit": rev.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


@contextlib.contextmanager
def recorded_command(argv: list[str]):
    """Within it, records name `lightning_bench ARGV` as their command."""
    token = _COMMAND.set(list(argv))
    try:
        yield
    finally:
        _COMMAND.reset(token)


def command_argv() -> list[str]:
    """The arguments of the command being run, as typed (without the program name)."""
    argv = _COMMAND.get()
    return list(sys.argv[1:] if argv is None else argv)


def command_line() -> str:
    """The command whose results are being recorded, words joined by spaces."""
    return " ".join(["lightning_bench", *command_argv()])


def run_meta(*, seed, datamodule=None, protocol=None, precision_note=None, extra=None) -> dict:
    meta = {
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "versions": package_versions(),
        "git": git_revision(),
        "seed": seed,
        "command": command_line(),
        "platform": platform.platform(),
    }
    if datamodule is not None and hasattr(datamodule, "provenance"):
        meta["data"] = datamodule.provenance()
    if protocol is not None:
        meta["evaluation_protocol"] = protocol
    if precision_note:
        meta["precision"] = precision_note
    meta.update(extra or {})
    return meta


def processes(trainer) -> dict:
    """How many processes ran the stage and under which Lightning strategy (a DDP run's figures are the
    one-process figures: data/sharding.py, models/keyed_sum.py)."""
    return {"world_size": trainer.world_size, "num_nodes": trainer.num_nodes,
            "strategy": type(trainer.strategy).__name__}
