"""On-disk cache of tokenized splits, keyed by everything that determines the token ids."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

import torch

CACHE_FORMAT = 1  # bump when what is stored changes


def cache_key(**parts) -> str:
    blob = json.dumps({"format": CACHE_FORMAT, **parts}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def cached(folder: Path, key: str, compute: Callable[[], object]) -> tuple[object, bool]:
    """(value, was_cached). The file is written atomically so a crash never leaves half a cache."""
    path = Path(folder) / f"{key}.pt"
    if path.exists():
        return torch.load(path, weights_only=True), True
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        torch.save(value, tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return value, False
