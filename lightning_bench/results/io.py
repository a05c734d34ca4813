"""Atomic JSON writing: a reader (or a crash) never sees half a result file."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path


def jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/Inf; null says "not measured / undefined"
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # torch / numpy scalars
        return jsonable(value.item())
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def write_json_atomic(path: str | Path, record: dict) -> Path:
    return write_text_atomic(path, json.dumps(jsonable(record), indent=2))


def write_text_atomic(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes the file private; results and data files are for everyone to read
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_json(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


def check_output(option: str, path: str | Path, kind: str = "folder") -> Path:
    """Fail now, in one line naming `option`, if nothing can be written at `path` (kind: "folder" for a
    directory the command fills, "file" for one file it writes). Checked before any expensive work, so a
    bad location never costs a training run. The check writes a probe file and removes it (and any folder
    it had to create): permissions alone cannot tell a read-only mount, /proc or a name too long."""
    from lightning_bench.errors import ConfigError

    path = Path(path)
    folder = path if kind == "folder" else path.parent
    created = []
    try:  # (even a look at a path can fail: a name too long for the file system raises)
        if kind == "file" and path.is_dir():
            raise ConfigError(f"{option} {path}: is a folder; name a file to write")
        if folder.exists() and not folder.is_dir():
            raise ConfigError(f"{option} {path}: {folder} is a file, not a folder; choose another {option}")
        for parent in reversed([folder, *folder.parents]):
            if not parent.exists():
                parent.mkdir()
                created.append(parent)
            elif not parent.is_dir():
                raise NotADirectoryError(f"{parent} is a file")
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".lightning_bench-probe-")
        os.close(fd)
        os.unlink(probe)
        # the files written beside it (`.{name}.lock`, `.{name}.XXXXXXXX.tmp`) need 15 more bytes of name
        if kind == "file" and len(path.name.encode()) + 15 > os.pathconf(folder, "PC_NAME_MAX"):
            raise OSError(36, "File name too long")
    except OSError as err:
        reason = err.strerror or str(err)
        raise ConfigError(f"{option} {path}: cannot write there ({reason}); choose another {option}") from None
    finally:
        for made in reversed(created):
            try:
                made.rmdir()
            except OSError:
                pass
    return path


SAMPLES_FILE = "samples_file"  # a grid's results cell: the file holding its per-example rows, relative to it


def cell_samples(cell: dict, results_path: str | Path) -> list:
    """A cell's per-example rows: inline in a cell file (and in results files written before they were left
    out of them), else in the cell file that `samples_file` names beside `results_path`."""
    if "samples" in cell:
        return cell["samples"]
    return read_json(Path(results_path).parent / cell[SAMPLES_FILE])["samples"]
