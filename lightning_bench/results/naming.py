"""Run ids and file names: every run writes its own files, and a configuration's bare name points at its
latest run, so no run ever replaces another's record or checkpoints.

    benchmark_results/transformer_ptb_seq128_bits32_20261126-102440-a3f9.json   this run's record
    benchmark_results/transformer_ptb_seq128_bits32.json -> ..._20261126-102440-a3f9.json   the latest
    checkpoints/transformer_ptb_seq128_bits32_seed1234/20261126-102440-a3f9/last.ckpt

A run id is the UTC start time and 4 random hex digits: ids sort by start time, and two runs started in
the same second still differ. The pointer is a symbolic link replaced atomically (a reader sees the old
or the new target, never none); where links cannot be made, it is an atomic copy.
"""

from __future__ import annotations

import filecmp
import os
import re
import secrets
import shutil
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

RUN_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{4}")


RUN_ID_ENV = "LB_RUN_ID"


def launched_run_id() -> Optional[str]:
    """The run id of the process that started this one, in a process Lightning's DDP launcher started
    (LOCAL_RANK > 0 and the id in the environment); None otherwise (a new run: a new id)."""
    if int(os.environ.get("LOCAL_RANK", "0") or 0) > 0:
        return os.environ.get(RUN_ID_ENV)
    return None


def new_run_id() -> str:
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def run_path(folder: str | Path, stem: str, run_id: str, suffix: str = ".json") -> Path:
    """`{folder}/{stem}_{run_id}{suffix}`: the file of one run."""
    return Path(folder) / f"{stem}_{run_id}{suffix}"


def point_latest(target: Path, pointer: Path) -> Path:
    """Make `pointer` name `target` (relative link, atomically replaced). Returns the pointer. A plain file
    at the pointer's name that is no copy of a run's file is a record written before run ids: it is kept,
    renamed as a run of its own (its modification time as the id), never replaced."""
    pointer = Path(pointer)
    if pointer.is_file() and not pointer.is_symlink() and not _copy_of_a_run(pointer):
        stamp = datetime.fromtimestamp(pointer.stat().st_mtime, timezone.utc)
        os.replace(pointer, pointer.with_name(f"{pointer.stem}_{stamp:%Y%m%d-%H%M%S}-0000{pointer.suffix}"))
    fd, tmp = tempfile.mkstemp(dir=pointer.parent, prefix=f".{pointer.name}.", suffix=".link")
    os.close(fd)
    os.unlink(tmp)
    try:
        os.symlink(os.path.relpath(target, pointer.parent), tmp)
    except OSError:  # no symbolic links here (some Windows setups, some network file systems): a copy
        shutil.copyfile(target, tmp)
    os.replace(tmp, pointer)
    return pointer


def _copy_of_a_run(pointer: Path) -> bool:
    """Whether `pointer` (a plain file) is the copy this module makes where links fail."""
    runs = pointer.parent.glob(f"{pointer.stem}_*{pointer.suffix}")
    return any(RUN_ID.fullmatch(p.name[len(pointer.stem) + 1:-len(pointer.suffix) or None])
               and filecmp.cmp(p, pointer, shallow=False) for p in runs)


def latest_run_folder(parent: str | Path) -> Path | None:
    """The folder under `parent` whose `last*.ckpt` was written last: a run folder (`{run_id}/`), or `parent`
    itself when it holds the checkpoints of a run from before run ids. None when there is no checkpoint."""
    parent = Path(parent)
    folders = [p for p in parent.glob("*") if p.is_dir() and RUN_ID.fullmatch(p.name)] + [parent]
    written = {p: max((c.stat().st_mtime for c in p.glob("last*.ckpt")), default=None) for p in folders}
    written = {p: t for p, t in written.items() if t is not None}
    return max(written, key=written.get, default=None)
