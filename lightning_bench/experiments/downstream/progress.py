"""Example-level progress of one downstream group (task, protocol, seed): a run stopped in the middle of a
group resumes at its next example, not at its first.

A cell file is written only when its group ends (the paired comparisons need every example), and a group
of a long-context preset is hours of compute (20 prefills of 8k tokens, 11 cells decoding each). So after
each example the group's rows so far go atomically to `{results_dir}/{name}/partial/<group>.json`, with the
fingerprint of its cells' settings (the `protocol` each cell file will carry). A run that finds the file
with the same fingerprint continues after its last example; a file made under other settings, or
unreadable, is set aside with one line and its examples computed again. The file goes once the group's
cells are written. Greedy decoding, and sampling seeded per (cell seed, example, draw), make the resumed
cells equal to an uninterrupted run's, timings aside (tests/test_downstream_driver.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Optional

from lightning_bench.errors import PROG
from lightning_bench.experiments.core.store import fingerprint
from lightning_bench.results.io import read_json, write_json_atomic


def group_name(cell) -> str:
    """The file-safe name of a cell's group (task, protocol, seed), e.g. xsum__query_aware_seed1234."""
    return f"{cell.task.replace('/', '-')}__{cell.protocol}_seed{cell.seed}"


class GroupProgress:
    def __init__(self, folder: str | Path, cells: list, protocol_of: Callable):
        self.path = Path(folder) / f"{group_name(cells[0])}.json"
        self.fingerprint = fingerprint({cell.key: protocol_of(cell) for cell in cells})

    def load(self) -> Optional[dict]:
        """{"examples": n done, "cells": {key: {"rows", "predictions", "method"}}} or None."""
        if not self.path.exists():
            return None
        try:
            saved = read_json(self.path)
        except (OSError, ValueError):
            saved = None
        if isinstance(saved, dict) and saved.get("fingerprint") == self.fingerprint:
            return saved
        aside = self.path.with_name(self.path.name + ".stale")
        self.path.replace(aside)
        print(f"{PROG}: {self.path} was left by a run under other settings (or is damaged): moved to {aside.name}; "
              "its examples are computed again", file=sys.stderr)
        return None

    def save(self, examples: int, cells: dict) -> None:
        write_json_atomic(self.path, {"fingerprint": self.fingerprint, "examples": examples, "cells": cells})

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)
