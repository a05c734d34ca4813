"""`lightning_bench multi_dataset`: train and test one fit preset on several datasets and seeds
(docs/comparison.md has the command, the layout and the summary's statistics).

    lightning_bench multi_dataset --config configs/compare/bk_small.yaml --datasets ptb mine=data/mine \
        --seeds 1 2 3 [--results_dir benchmark_results] [-- extra fit/test args ...]

Each (dataset, seed) cell runs `fit` with `--seed_everything SEED`, then `test` from that fit's `last.ckpt`,
in-process (`trainer_cli.run_cli`), in its own folder `{results_dir}/multi_dataset/{model}/seed{seed}/{dataset}/`
(per dataset too: two local folders may share a name). The grid runs on core/runner.py with the trainer's
records as the store (`RecordStore`): a cell with a test record is skipped, one with a fit record only is
tested from its checkpoint, a lock per cell keeps two runs off it; so a killed run restarts where it stopped
and `--seeds` / `--datasets` can grow later. The summary `{results_dir}/{model}_multi_dataset.json` is
rewritten atomically after every cell; a results folder holding this model's sweep made with another preset
or other extra arguments is refused (its cells would be silently reused).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import json
import os
import shlex
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import yaml
from filelock import FileLock

from lightning_bench.errors import PROG, ConfigError
from lightning_bench.experiments.core.aggregate import STD_KIND, sample_std
from lightning_bench.experiments.core.config import Seed, check_unique, parse_command
from lightning_bench.experiments.core.execution import Execution
from lightning_bench.experiments.core.runner import Work, run_grid, sayer
from lightning_bench.results.io import check_output, read_json, write_json_atomic
from lightning_bench.results.meta import run_meta
from lightning_bench.results.naming import RUN_ID

COMMAND = "multi_dataset"
# set per cell by this command: an extra argument that set them would silently break the sweep's layout
RESERVED = ("--seed_everything", "--results_dir", "--trainer.default_root_dir", "--ckpt_path", "--data",
            "--data.source", "--data.name", "--data.path", "--data.train_path", "--data.val_path", "--data.test_path")


@dataclass(frozen=True)
class DatasetSpec:
    name: str  # how the summary and the cell folder call it
    source: str  # a data alias, or the local folder
    cli_args: tuple[str, ...]  # what selects it on the fit/test command line


def parse_dataset(spec: str) -> DatasetSpec:
    from lightning_bench.data.sources import named_corpus

    name, source, data = named_corpus(spec)
    args = ("--data", data["source"], *(("--data.path", source, "--data.name", name) if "path" in data else ()))
    return DatasetSpec(name, source, args)


@dataclass(frozen=True)
class Cell:
    data: DatasetSpec
    seed: int

    @property
    def key(self) -> str:
        return f"{self.data.name}_seed{self.seed}"

    @property
    def label(self) -> str:
        return f"{self.data.name} seed {self.seed}"


@dataclass
class MultiDatasetConfig(Execution):
    """Train and test one fit preset on several datasets x seeds; write one summary JSON."""

    preset: Optional[str] = None
    """the fit config every cell starts from (e.g. configs/compare/bk_small.yaml)"""
    datasets: list[str] = field(default_factory=list)
    """data aliases (ptb, wikitext2, ...) or NAME=DIR for a local text folder"""
    seeds: list[Seed] = field(default_factory=lambda: [1, 2, 3])
    """seed_everything of each run (default: the comparison recipe's 1 2 3)"""
    results_dir: str = "benchmark_results"
    """where the cells' folders and the summary are written"""
    fit_args: list[str] = field(default_factory=list)
    """arguments for every fit and test run (on the command line: everything after `--`)"""

    def __post_init__(self):
        super().__post_init__()
        if not self.datasets:
            raise ConfigError(f"{COMMAND} needs --datasets NAME [NAME ...] (data aliases, or NAME=DIR for a "
                              "local text folder)")
        self.data = [parse_dataset(spec) for spec in self.datasets]
        check_unique("--datasets", [d.name for d in self.data], "dataset")
        if not self.seeds:
            raise ConfigError("--seeds is empty; give at least one seed (e.g. --seeds 1 2 3)")
        check_unique("--seeds", self.seeds, "seed")
        for arg in self.fit_args:
            if arg.split("=", 1)[0] in RESERVED:
                raise ConfigError(f"{arg.split('=', 1)[0]} is set per cell by {COMMAND} (--datasets, --seeds, "
                                  "--results_dir); leave it out of the arguments after `--`")
        if self.preset is None:
            raise ConfigError(f"{COMMAND} needs the fit preset: --config FIT.yaml")
        if not Path(self.preset).is_file():
            raise ConfigError(f"config {self.preset!r} does not exist")


def preset_as_config(argv: list[str]) -> list[str]:
    """`--config FIT.yaml` names the fit preset (the command's documented form) unless the file is a
    multi_dataset config (only MultiDatasetConfig's keys): then jsonargparse reads it as usual."""
    fields = {f.name for f in dataclasses.fields(MultiDatasetConfig)}
    out = list(argv)
    for i, arg in enumerate(out[:-1]):
        if arg == "--config":
            try:
                loaded = yaml.safe_load(Path(out[i + 1]).read_text())
            except (OSError, yaml.YAMLError):
                loaded = None
            if not (isinstance(loaded, dict) and loaded and set(loaded) <= fields):
                out[i] = "--preset"
    return out


def model_name_of(cfg: MultiDatasetConfig) -> str:
    """The `--model` alias the runs will report (their records' `model_name`), known before any run: the
    fit CLI's own parse of the first cell's command line (aliases, the command line over the file)."""
    from lightning_bench.trainer_cli import parsed_config

    model = parsed_config(["fit", "--config", cfg.preset, *cfg.data[0].cli_args, *cfg.fit_args]).model
    module, _, name = model.class_path.rpartition(".")
    return getattr(getattr(importlib.import_module(module), name), "alias", name)


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


def summarize(model: str, cfg: MultiDatasetConfig, cells: dict, config: dict, command: str) -> dict:
    """The summary from the cells done so far: cells[(dataset name, seed)] = (fit record, test record)."""
    per_seed, records, parameters = {}, {}, None
    for data in cfg.data:
        per_seed[data.name], records[data.name] = {}, {}
        for seed in cfg.seeds:
            if (data.name, seed) not in cells:
                continue
            fit, test = cells[(data.name, seed)]
            per_seed[data.name][str(seed)] = read_json(test)["metrics"]["ppl"]
            records[data.name][str(seed)] = [str(fit) if fit else None, str(test)]
            if parameters is None and fit is not None:
                parameters = read_json(fit).get("parameters")
    # statistics.mean (exact), as the published summaries were computed
    means = {name: statistics.mean(v.values()) if v else None for name, v in per_seed.items()}
    done, total = len(cells), len(cfg.data) * len(cfg.seeds)
    complete = done == total
    dataset_means = list(means.values())
    return {
        "model_name": model,
        "datasets": [d.name for d in cfg.data],
        "dataset_sources": {d.name: d.source for d in cfg.data},
        "seeds": cfg.seeds,
        "metric": "test token perplexity (each test record's metrics.ppl, under the data's evaluation protocol)",
        "perplexities": means,
        "per_seed": per_seed,
        "std_over_seeds": {name: sample_std(list(v.values())) for name, v in per_seed.items()},
        "mean_perplexity": statistics.mean(dataset_means) if complete else None,
        "std_perplexity": sample_std(dataset_means) if complete else None,
        "std_kind": STD_KIND,
        "complete": complete,
        "cells_done": done,
        "cells_total": total,
        "records": records,
        "parameters": parameters,
        "config": config,
        "meta": run_meta(seed=cfg.seeds, extra={"command": command}),
    }


def _check_same_sweep(summary_path: Path, config: dict, datasets: list[DatasetSpec]) -> None:
    if not summary_path.exists():
        return
    old = read_json(summary_path)
    before = old.get("config") or {}
    # the preset by content (the same file may be named by another relative path)
    if (before.get("preset_sha256"), before.get("extra_args")) != (config["preset_sha256"], config["extra_args"]):
        raise ConfigError(f"{summary_path} is a sweep with another preset or extra arguments "
                          f"({before.get('preset')} {shlex.join(before.get('extra_args') or [])}); "
                          "use another --results_dir")
    for data in datasets:
        previous = old.get("dataset_sources", {}).get(data.name)
        if previous is not None and previous != data.source:
            raise ConfigError(f"dataset {data.name!r} was {previous!r} in {summary_path}, now {data.source!r}; "
                              "rename it or use another --results_dir")


def main(argv: list[str]) -> int:
    own, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (list(argv), None)
    fit_args = [] if extra is None else ["--fit_args", json.dumps(extra)]  # `--` replaces the config's fit_args
    cfg = parse_command(COMMAND, MultiDatasetConfig, [*preset_as_config(own), *fit_args],
                        description=MultiDatasetConfig.__doc__).config
    check_output("--results_dir", cfg.results_dir)  # before the first fit, not after it
    extra = cfg.fit_args
    model = model_name_of(cfg)
    config = {"preset": cfg.preset, "preset_sha256": hashlib.sha256(Path(cfg.preset).read_bytes()).hexdigest(),
              "extra_args": extra}
    results = Path(cfg.results_dir)
    summary_path = results / f"{model}_multi_dataset.json"
    _check_same_sweep(summary_path, config, cfg.data)
    command = shlex.join([PROG, COMMAND, *argv])
    grid = [Cell(data, seed) for data in cfg.data for seed in cfg.seeds]
    say = sayer(COMMAND, grid)

    def summary() -> dict:
        """From every cell done so far (by this run or an earlier one): rewritten after every cell."""
        done = {cell: store.read(cell, {}) for cell in grid}
        cells = {(c.data.name, c.seed): (r["fit"], r["test"]) for c, r in done.items() if r is not None}
        written = summarize(model, cfg, cells, config, command)
        write_json_atomic(summary_path, written)
        return written

    store = RecordStore(results / COMMAND / model, lambda cell, record: summary())

    def compute(works: list[Work]) -> list[dict]:
        cell = works[0].cell
        say(cell, f"running in {store.folder(cell)}")
        fit, test = run_cell(["--config", cfg.preset, *cell.data.cli_args, *extra], cell.data, cell.seed,
                             store.folder(cell))
        return [{"fit": fit, "test": test}]

    if run_grid([Work(cell, {}, cell.key) for cell in grid], store, compute, say,
                executor=cfg.executor_for(functools.partial(main, argv)), shard=cfg.shard_slice) is None:
        return 0  # cells other shards still owe, or a Ray worker building its grid
    written = summary()
    print(f"{PROG} {COMMAND}: wrote {summary_path}")
    for name, mean in written["perplexities"].items():
        std = written["std_over_seeds"][name]
        print(f"  {name:<16} test ppl {mean:10.2f}" + (f" +- {std:.2f}" if std is not None else ""))
    print(f"  {'mean':<16} test ppl {written['mean_perplexity']:10.2f}"
          + (f" +- {written['std_perplexity']:.2f} (sample std across datasets)"
             if written["std_perplexity"] is not None else ""))
    return 0
