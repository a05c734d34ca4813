"""One line under each figure and table saying how its numbers were obtained, read from the record's
`meta` (results/meta.py: command, git, versions, created_utc) and its data and protocol fields."""

from __future__ import annotations

import re
from typing import Optional

VERSIONS = ("lightning_bench", "torch", "transformers", "lightning")  # the ones a number most depends on


def data_hashes(block) -> list[str]:
    """Every `sha256` under a data block (splits of a DataModule, files of a downstream task), shortened:
    enough to tell two data sets apart on a page; the record keeps the whole hash."""
    found = []
    if isinstance(block, dict):
        for key, value in block.items():
            if key == "sha256" and isinstance(value, str):
                found.append(value[:12])
            elif key != "evaluated_sha256":
                found += data_hashes(value)
    elif isinstance(block, list):
        for value in block:
            found += data_hashes(value)
    return list(dict.fromkeys(found))


def provenance(meta: Optional[dict], *, model: str = "", data: str = "", data_block=None, protocol: str = "",
               n: str = "") -> str:
    meta = meta or {}
    git, versions = meta.get("git") or {}, meta.get("versions") or {}
    hashes = data_hashes(data_block)
    parts = [f"command: {meta['command']}" if meta.get("command") else "",
             f"model: {model}" if model else "",
             f"data: {data}" + (f" (sha256 {', '.join(hashes)})" if hashes else "") if data or hashes else "",
             f"protocol: {protocol}" if protocol else "",
             f"n: {n}" if n else "",
             ", ".join(f"{k} {versions[k]}" for k in VERSIONS if versions.get(k)),
             f"git {git['commit'][:10]}{'+dirty' if git.get('dirty') else ''}" if git.get("commit") else "",
             (meta.get("created_utc") or "")[:19].replace("T", " ")]
    return "; ".join(p for p in parts if p)


def file_safe(name: str) -> str:
    """A figure or table name usable as a file name on any system."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_.") or "figure"
