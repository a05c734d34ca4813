"""The one runner of every experiment command: a grid of cells, one `CellStore`, and an executor that
computes the cells the store does not hold.

The unit handed out is a `Work`: a cell and the settings its result depends on (what its record carries
as `protocol`, and what a rerun compares). The store is the only state shared between processes and a
cell's result depends on its Work alone, so whichever process computes it, the record is the same. Cells
computed together (one prefill shared by a group, one lock) form a group, named by `Work.group`.

How a grid runs is a command's `Execution` options (execution.py; its config inherits them), none of them
part of what a cell computes (docs/experiments.md, Executors):
  run_serial       every group in order in this process, each under its lock;
  --shard i/N      only the groups k with k mod N = i (groups in grid order: the slice depends on the grid
                   alone, never on what is finished), into the shared store; `run_grid` returns the records
                   only once the store holds every cell of the grid, so the run that finds it complete
                   writes the report;
  --executor ray   `RayExecutor` (ray_executor.py): Ray actors, each running the command once up to its
                   grid (`planned`: the same works and compute; the model loads there, once) and computing
                   the groups it is sent; this process claims each group's lock and writes what comes back.
The locks keep two processes off one group, and a store write is atomic: a process killed mid-group leaves
no finished-looking cell, and the next run computes that group.
"""

from __future__ import annotations

import re
from contextlib import closing
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Optional

from lightning_bench.errors import PROG, ConfigError
from lightning_bench.experiments.core.store import CellStore, claim

Compute = Callable[[list["Work"]], list[dict]]  # the records of a group's cells, in its order
Say = Callable[[Any, str], None]  # (cell, or a group's name; text): one log line
Check = Callable[["Work", dict], None]  # refuses a finished record (raises ConfigError)


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


def _finished(works: list[Work], store: CellStore, check, say: Say, text: Optional[str]) -> dict[str, dict]:
    """{key: record} of the cells a run finished, then each said (`text` formatted with its path; None: not
    said); one made under other settings (or refused by `check`) is an error."""
    out = {}
    for work in works:
        if (record := store.read(work.cell, work.settings)) is not None:
            out[work.key] = record
            if check:
                check(work, record)
    for work in works:
        if work.key in out and text is not None:
            say(work.cell, text.format(store.path(work.cell)))
    return out


def claimed(group: list[Work], store: CellStore, say: Say, check: Optional[Check]) -> tuple[dict, list[Work]]:
    """With the group's lock held: (the records of its cells another run finished meanwhile, the works left)."""
    records = _finished(group, store, check, say, "done by another run ({})")
    return records, [work for work in group if work.key not in records]


def write_group(todo: list[Work], made: list[dict], store: CellStore) -> dict[str, dict]:
    """The records `compute` made, each written atomically (checksummed) and read back as a rerun reads it;
    the group's progress file goes once its cells are written."""
    records = {}
    for work, record in zip(todo, made, strict=True):
        store.write(work.cell, work.settings, record)
        records[work.key] = store.read(work.cell, work.settings)
    store.clear_progress(todo[0].group)
    return records


def run_group(group: list[Work], compute: Compute, store: CellStore, say: Say,
              check: Optional[Check] = None) -> dict[str, dict]:
    """One group, with its lock held: cells another run finished meanwhile are read, the rest computed."""
    records, todo = claimed(group, store, say, check)
    if todo:
        records.update(write_group(todo, compute(todo), store))
    return records


def run_serial(groups: list[list[Work]], compute: Compute, store: CellStore, say: Say,
               check: Optional[Check] = None) -> dict[str, dict]:
    """The executor of one process: every group in order, those another run holds after the rest."""
    records: dict[str, dict] = {}
    claimed_groups = claim(groups, lambda group: store.lock(group[0].group),
                           lambda group, text: say(group[0].group, text))
    with closing(claimed_groups):  # an error releases the lock held
        for group in claimed_groups:
            records.update(run_group(group, compute, store, say, check))
    return records


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
        if not match or not int(match[1]) < int(match[2]):
            raise ConfigError(f"--shard {text!r}: expected I/N with 0 <= I < N, e.g. --shard 0/2 and --shard 1/2 "
                              "for two processes")
        return cls(int(match[1]), int(match[2]))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def of(self, groups: list) -> list:
        """The groups k with k mod N = I: fixed by the grid (its group order), whatever is finished."""
        return groups[self.index::self.count]


_PLANNING: ContextVar[Optional[list]] = ContextVar("planning", default=None)


def planned(command: Callable[[], object]) -> tuple[list[Work], Compute]:
    """(works, compute) of a command's grid, by running the command up to `run_grid`, which hands them over
    and returns None (as to a shard whose grid is unfinished: the command returns without a report). So a
    Ray worker builds exactly what the driver built, from the command line alone; the model loads on the
    first group it computes."""
    handed: list = []
    token = _PLANNING.set(handed)
    try:
        command()
    finally:
        _PLANNING.reset(token)
    if not handed:
        raise ConfigError("the command ended before its grid ran; nothing for a worker to compute")
    return handed[0]


def run_grid(works: list[Work], store: CellStore, compute: Compute, say: Say, check: Optional[Check] = None,
             executor=run_serial, shard: Optional[Shard] = None) -> Optional[dict[str, dict]]:
    """{cell key: record} of every cell of the grid, in grid order; None while the store lacks some (another
    shard's), the report then left to the run that finds it complete. Before anything runs, every finished
    cell is read: one made under other settings is refused (`check` may refuse more), a damaged one set
    aside; the cells left of this shard's groups go to the executor."""
    if (handed := _PLANNING.get()) is not None:  # a worker building its grid (`planned`): nothing runs here
        handed.append((works, compute))
        return None
    finished = _finished(works, store, check, say, "skipped (done before: {})")
    groups: dict[str, list[Work]] = {}  # by group, groups in the order of their first cell
    for work in works:
        groups.setdefault(work.group, []).append(work)
    mine = shard.of(list(groups.values())) if shard else list(groups.values())
    pending = [todo for group in mine if (todo := [w for w in group if w.key not in finished])]
    records = {**finished, **(executor(pending, compute, store, say, check) if pending else {})}
    missing = [work for work in works if work.key not in records]
    records.update(_finished(missing, store, check, say, None))  # what other shards finished meanwhile
    if len(records) < len(works):
        say(f"shard {shard}", f"{len(works) - len(records)} of the grid's {len(works)} cells are still owed by "
                              "other shards; the report is written once the store holds them all: rerun any "
                              "shard (or the whole grid) after they finish")
        return None
    return {work.key: records[work.key] for work in works}


def device_of(accelerator: str):
    """The torch device of `--accelerator` (auto: cuda where there is one), checked before any model loads."""
    import torch

    if accelerator == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(accelerator)
    except RuntimeError as err:
        raise ConfigError(f"--accelerator {accelerator!r} is not a device (cpu, cuda, cuda:N, auto)") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--accelerator cuda: no CUDA device here; use --accelerator cpu")
    return device
