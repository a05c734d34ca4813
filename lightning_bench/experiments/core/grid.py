"""Grids of cells. A cell is a frozen dataclass of its coordinates with a `key` (a stable, file-safe
name: what a store files it under) and a `label` (what the log says). Each driver defines its own
cell class; the rules every KV-eviction grid shares live here."""

from __future__ import annotations

DENSE = "dense"


def sparsity_levels_for(method: str, levels) -> list[float]:
    """`dense` never evicts, so it runs once, at sparsity 0: its other levels would repeat it."""
    return [0.0] if method == DENSE else [float(s) for s in levels]


def sparsity_key(sparsity: float) -> str:
    """How a sparsity is spelled in keys and file names: `0.0`, `0.5`, `0.9` (str of the float)."""
    return str(float(sparsity))

