"""The one runner of every experiment command: a grid of cells, one `CellStore`, and an executor that
computes the cells the store does not hold.

The unit handed out is a `Work`: a cell and the settings its result depends on (what its record carries
as `protocol`, and what a rerun compares). The store is the only state shared between processes and a
cell's result depends on its Work alone, so whichever process computes it, the record is the same. Cells
computed together (one prefill shared by a group, one lock) form a group, named by `Work.group`.

An executor takes the pending groups and a `compute(works) -> records` function and leaves every cell
in the store; `run_serial` is the one there is. Another (`--shard i/N`, Ray workers) only has to hand the
same groups to `compute` in other processes: the locks keep two processes off one group.
"""

from __future__ import annotations

from contextlib import closing
from dataclasses import dataclass
from typing import Any, Callable, Optional

from lightning_bench.errors import PROG
from lightning_bench.experiments.core.store import CellStore, claim

Compute = Callable[[list["Work"]], list[dict]]  # the records of a group's cells, in its order
Say = Callable[[Any, str], None]  # (cell, or a group's name; text): one log line


@dataclass(frozen=True)
class Work:
    cell: Any  # a frozen dataclass with a file-safe `key`
    settings: dict  # everything the cell's result depends on besides its coordinates
    group: str  # the cells computed together share it (and its lock)

    @property
    def key(self) -> str:
        return self.cell.key


def sayer(command: str, grid: list) -> Say:
    """One log line per event: `lightning_bench COMMAND: [i/n] CELL: text`, or `GROUP: text` for a group."""
    position = {cell: i for i, cell in enumerate(grid, 1)}

    def say(cell, text: str) -> None:
        where = cell if isinstance(cell, str) else f"[{position[cell]}/{len(grid)}] {getattr(cell, 'label', cell.key)}"
        print(f"{PROG} {command}: {where}: {text}", flush=True)

    return say


def _finished(works: list[Work], store: CellStore, check, say: Say, text: str) -> dict[str, dict]:
    """{key: record} of the cells a run finished, then each said (`text` formatted with its path); one made
    under other settings (or refused by `check`) is an error."""
    out = {}
    for work in works:
        if (record := store.read(work.cell, work.settings)) is not None:
            out[work.key] = record
            if check:
                check(work, record)
    for work in works:
        if work.key in out:
            say(work.cell, text.format(store.path(work.cell)))
    return out


def run_group(group: list[Work], compute: Compute, store: CellStore, say: Say,
              check: Optional[Callable[[Work, dict], None]] = None) -> dict[str, dict]:
    """One group, with its lock held: cells another run finished meanwhile are read, the rest computed
    and written (atomically, checksummed); the group's progress file goes once its cells are written."""
    records = _finished(group, store, check, say, "done by another run ({})")
    todo = [work for work in group if work.key not in records]
    if todo:
        for work, record in zip(todo, compute(todo)):
            store.write(work.cell, work.settings, record)
            records[work.key] = store.read(work.cell, work.settings)
        store.clear_progress(todo[0].group)
    return records


def run_serial(groups: list[list[Work]], compute: Compute, store: CellStore, say: Say,
               check: Optional[Callable[[Work, dict], None]] = None) -> dict[str, dict]:
    """The executor of one process: every group in order, those another run holds after the rest."""
    records: dict[str, dict] = {}
    claimed = claim(groups, lambda group: store.lock(group[0].group), lambda group, text: say(group[0].group, text))
    with closing(claimed):  # an error releases the lock held
        for group in claimed:
            records.update(run_group(group, compute, store, say, check))
    return records


def run_grid(works: list[Work], store: CellStore, compute: Compute, say: Say,
             check: Optional[Callable[[Work, dict], None]] = None, executor=run_serial) -> dict[str, dict]:
    """{cell key: record} of every cell of the grid, in grid order. Before anything runs, every finished
    cell is read: one made under other settings is refused (`check` may refuse more), a damaged one set
    aside; the cells left, by group, go to the executor."""
    finished = _finished(works, store, check, say, "skipped (done before: {})")
    groups: dict[str, list[Work]] = {}  # by group, groups in the order of their first cell
    for work in works:
        if work.key not in finished:
            groups.setdefault(work.group, []).append(work)
    pending = list(groups.values())
    made = executor(pending, compute, store, say, check) if pending else {}
    return {work.key: finished.get(work.key) or made[work.key] for work in works}


def device_of(accelerator: str):
    """The torch device of `--accelerator` (auto: cuda where there is one), checked before any model loads."""
    import torch

    from lightning_bench.errors import ConfigError

    if accelerator == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(accelerator)
    except RuntimeError as err:
        raise ConfigError(f"--accelerator {accelerator!r} is not a device (cpu, cuda, cuda:N, auto)") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--accelerator cuda: no CUDA device here; use --accelerator cpu")
    return device
