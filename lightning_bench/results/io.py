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
