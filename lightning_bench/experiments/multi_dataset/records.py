"""One multi_dataset cell: a fit and a test through the trainer's public entry (`trainer_cli.run_cli`, which
takes its argument list and leaves sys.argv alone), and the runner's store over the records they write."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Optional

from filelock import FileLock

from lightning_bench.errors import PROG, ConfigError
from lightning_bench.experiments.multi_dataset.config import COMMAND, Cell, DatasetSpec
from lightning_bench.results.naming import RUN_ID


class RecordStore:
    """The runner's store over the records the trainer writes in each cell's folder
    `{root}/seed{seed}/{dataset}/`: a cell is done when its folder holds a test record (the layout every
    earlier run left). `write` hands the finished cell to `on_write` (the summary)."""

    def __init__(self, root: Path, on_write):
        self.root, self.on_write = root, on_write

    def folder(self, cell: Cell) -> Path:
        return self.root / f"seed{cell.seed}" / cell.data.name

    def path(self, cell: Cell) -> Path:
        return _latest_record(self.folder(cell), True) or self.folder(cell)

    def read(self, cell: Cell, settings: dict) -> Optional[dict]:
        test = _latest_record(self.folder(cell), True)
        return None if test is None else {"fit": _latest_record(self.folder(cell), False), "test": test}

    def write(self, cell: Cell, settings: dict, record: dict) -> None:
        self.on_write(cell, record)

    def lock(self, name: str) -> FileLock:
        (self.root / ".locks").mkdir(parents=True, exist_ok=True)
        return FileLock(self.root / ".locks" / f"{name}.lock")

    def clear_progress(self, group: str) -> None:
        pass  # a cell is one fit and one test: Lightning's checkpoints resume inside it


def _latest_record(cell: Path, test: bool) -> Optional[Path]:
    """The cell's latest fit or test record: the file its bare name points at (results/naming.py: each run
    writes `{stem}_{run_id}.json` and `{stem}.json` names the latest); a pointer whose file is gone is none."""
    pointers = [p for p in sorted(cell.glob("*.json")) if not RUN_ID.search(p.name) and p.exists()
                and p.stem.endswith("_test") == test and not p.stem.endswith("_validate")]
    if not pointers:
        return None
    return cell / os.readlink(pointers[0]) if pointers[0].is_symlink() else pointers[0]


def _last_checkpoint(cell: Path) -> Optional[Path]:
    """The newest `last.ckpt` (checkpoints/<configuration>/<run id>/ since runs have ids; one level less before)."""
    found = sorted(cell.glob("checkpoints/**/last*.ckpt"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _run(argv: list[str]):
    """One fit or test, in-process; its ResultsRecorder says which record it wrote."""
    from lightning_bench.results.recorder import ResultsRecorder
    from lightning_bench.trainer_cli import finish_loggers, run_cli

    print(f"{PROG} {COMMAND}: {PROG} {shlex.join(argv)}", flush=True)
    cli = run_cli(argv)
    finish_loggers(cli.trainer)
    return cli, next(c for c in cli.trainer.callbacks if isinstance(c, ResultsRecorder))


def run_cell(base: list[str], data: DatasetSpec, seed: int, cell: Path) -> tuple[Optional[Path], Path]:
    """Fit (unless a finished fit is there) and test one cell; (fit record, test record)."""
    common = [*base, "--seed_everything", str(seed), "--results_dir", str(cell),
              "--trainer.default_root_dir", str(cell)]
    fit_record, checkpoint = _latest_record(cell, False), _last_checkpoint(cell)
    if fit_record is None or checkpoint is None:
        cli, recorder = _run(["fit", *common])
        fit_record = recorder.written.get("fit")
        checkpoint = cli.trainer.checkpoint_callback.last_model_path if cli.trainer.checkpoint_callback else None
        if fit_record is None or not checkpoint:
            raise ConfigError(f"{data.name} seed {seed}: the fit wrote no record or no last checkpoint "
                              "(was it interrupted, or checkpointing disabled?)")
    else:
        print(f"{PROG} {COMMAND}: {data.name} seed {seed}: fit already done ({fit_record}); testing it")
    _, recorder = _run(["test", *common, "--ckpt_path", str(checkpoint)])
    test_record = recorder.written.get("test")
    if test_record is None:
        raise ConfigError(f"{data.name} seed {seed}: the test run wrote no record (does {data.source!r} "
                          "have a test split?)")
    return Path(fit_record), Path(test_record)
