"""`lightning_bench multi_dataset`: train and test one preset on several datasets and seeds.

    lightning_bench multi_dataset --config configs/compare/bk_small.yaml --datasets ptb mine=data/mine \
        --seeds 1 2 3 [--results_dir benchmark_results] [-- extra fit/test args ...]

Each (dataset, seed) cell runs `fit` with `--seed_everything SEED`, then `test` from that fit's
`last.ckpt`, both in-process through `run_cli`, and keeps everything in its own folder
`{results_dir}/multi_dataset/{model}/seed{seed}/{dataset}/` (records, logs, checkpoints). The folder
is per dataset as well as per seed because two local folders may share a folder name, and a text
corpus's records are named after its folder.

The summary `{results_dir}/{model}_multi_dataset.json` is rewritten (atomically) after every cell.
Its numbers are the test records' token perplexities (`metrics.ppl`): per seed, their mean and sample
standard deviation over seeds per dataset, then the mean and sample standard deviation of the
per-dataset means across datasets (ddof=1; null where there are fewer than two values). The
across-dataset figures are null until every cell is done (`complete`).

Resuming: a cell whose folder already holds a test record is skipped; a cell whose fit record exists
but whose test record does not is tested from its checkpoint without training again. So a killed
sweep restarts where it stopped, and `--seeds` / `--datasets` can be extended later. A results folder
that holds a sweep of the same model made with another preset file or other extra arguments is refused
(its cells would be silently reused).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import re
import shlex
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import yaml

from lightning_bench.data import DATA_ALIASES
from lightning_bench.errors import ConfigError, unknown_name
from lightning_bench.models import MODEL_ALIASES
from lightning_bench.results.io import read_json, write_json_atomic
from lightning_bench.results.meta import run_meta

COMMAND = "multi_dataset"
# set per cell by this command: an extra argument that set them would silently break the sweep's layout
RESERVED = ("--seed_everything", "--results_dir", "--trainer.default_root_dir", "--ckpt_path", "--data",
            "--data.source", "--data.name", "--data.path", "--data.train_path", "--data.val_path", "--data.test_path")
STD_KIND = "sample standard deviation (ddof=1); null with fewer than two values"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class DatasetSpec:
    name: str  # how the summary and the cell folder call it
    source: str  # a data alias, or the local folder
    cli_args: tuple[str, ...]  # what selects it on the fit/test command line


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one `lightning_bench: error:` line (cli.main), not argparse's usage block
        raise ConfigError(f"{COMMAND}: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"lightning_bench {COMMAND}",
                description="Train and test one preset on several datasets x seeds; write one summary JSON.",
                epilog="Arguments after `--` go to every fit and test run (e.g. --trainer.max_steps 100).")
    p.add_argument("--config", required=True, help="the fit config (preset) every cell starts from")
    p.add_argument("--datasets", nargs="+", default=None, metavar="DATASET",
                   help="data aliases (ptb, wikitext2, ...) or NAME=DIR for a local text folder")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3],
                   help="seed_everything of each run (default: 1 2 3, the comparison recipe's seeds)")
    p.add_argument("--results_dir", default="benchmark_results")
    return p


def parse_dataset(spec: str) -> DatasetSpec:
    if "=" in spec:
        name, folder = spec.split("=", 1)
        if not _NAME.match(name):
            raise ConfigError(f"dataset name {name!r} in {spec!r} must be letters, digits, '_', '-' or '.'")
        if not Path(folder).is_dir():
            raise ConfigError(f"dataset {name!r}: folder {folder!r} does not exist")
        return DatasetSpec(name, folder, ("--data", "text", "--data.path", folder, "--data.name", name))
    if spec == "text":
        raise ConfigError("a local text folder is given as NAME=DIR (e.g. mine=data/mine), not `text`")
    if spec not in DATA_ALIASES:
        raise unknown_name("dataset", spec, [*(a for a in DATA_ALIASES if a != "text"), "NAME=DIR"])
    return DatasetSpec(spec, spec, ("--data", spec))


def model_name_of(preset: dict, extra: list[str]) -> str:
    """The `--model` alias the runs will report (their records' `model_name`), known before any run."""
    model = preset.get("model")
    spec = model.get("class_path") if isinstance(model, dict) else model
    for i, arg in enumerate(extra):  # the command line wins over the file, as in LightningCLI
        if arg == "--model" and i + 1 < len(extra):
            spec = extra[i + 1]
        elif arg.startswith("--model="):
            spec = arg.split("=", 1)[1]
    spec = MODEL_ALIASES.get(spec, spec) if spec else MODEL_ALIASES["transformer"]
    module, _, name = spec.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module or "lightning_bench.models"), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"cannot find model class {spec!r}") from err
    return getattr(cls, "alias", name)


def _split_extra(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def _test_record(cell: Path) -> Optional[Path]:
    found = sorted(cell.glob("*_test.json"))
    return found[0] if found else None


def _fit_record(cell: Path) -> Optional[Path]:
    found = sorted(p for p in cell.glob("*.json") if not p.stem.endswith(("_test", "_validate")))
    return found[0] if found else None


def _last_checkpoint(cell: Path) -> Optional[Path]:
    found = sorted(cell.glob("checkpoints/*/last*.ckpt"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _recorder(cli):
    from lightning_bench.results.recorder import ResultsRecorder

    return next(c for c in cli.trainer.callbacks if isinstance(c, ResultsRecorder))


def _run(argv: list[str]):
    from lightning_bench.errors import PROG
    from lightning_bench.trainer_cli import finish_loggers, run_cli

    print(f"{PROG} {COMMAND}: {PROG} {shlex.join(argv)}", flush=True)
    cli = run_cli(argv)
    finish_loggers(cli.trainer)
    return cli


def run_cell(base: list[str], data: DatasetSpec, seed: int, cell: Path) -> tuple[Optional[Path], Path]:
    """Fit (unless a finished fit is there) and test one cell; (fit record, test record)."""
    common = [*base, "--seed_everything", str(seed), "--results_dir", str(cell),
              "--trainer.default_root_dir", str(cell)]
    fit_record, checkpoint = _fit_record(cell), _last_checkpoint(cell)
    if fit_record is None or checkpoint is None:
        cli = _run(["fit", *common])
        fit_record = _recorder(cli).written.get("fit")
        checkpoint = cli.trainer.checkpoint_callback.last_model_path if cli.trainer.checkpoint_callback else None
        if fit_record is None or not checkpoint:
            raise ConfigError(f"{data.name} seed {seed}: the fit wrote no record or no last checkpoint "
                              "(was it interrupted, or checkpointing disabled?)")
    else:
        print(f"lightning_bench {COMMAND}: {data.name} seed {seed}: fit already done ({fit_record}); testing it")
    cli = _run(["test", *common, "--ckpt_path", str(checkpoint)])
    test_record = _recorder(cli).written.get("test")
    if test_record is None:
        raise ConfigError(f"{data.name} seed {seed}: the test run wrote no record (does {data.source!r} "
                          "have a test split?)")
    return Path(fit_record), Path(test_record)


def _std(values: list[float]) -> Optional[float]:
    return statistics.stdev(values) if len(values) > 1 else None


def summarize(model: str, datasets: list[DatasetSpec], seeds: list[int], cells: dict, config: dict,
              command: str) -> dict:
    """The summary from the cells done so far: cells[(dataset name, seed)] = (fit record, test record)."""
    per_seed, records, parameters = {}, {}, None
    for data in datasets:
        per_seed[data.name], records[data.name] = {}, {}
        for seed in seeds:
            if (data.name, seed) not in cells:
                continue
            fit, test = cells[(data.name, seed)]
            per_seed[data.name][str(seed)] = read_json(test)["metrics"]["ppl"]
            records[data.name][str(seed)] = [str(fit) if fit else None, str(test)]
            if parameters is None and fit is not None:
                parameters = read_json(fit).get("parameters")
    means = {name: statistics.mean(v.values()) if v else None for name, v in per_seed.items()}
    done, total = len(cells), len(datasets) * len(seeds)
    complete = done == total
    dataset_means = list(means.values())
    return {
        "model_name": model,
        "datasets": [d.name for d in datasets],
        "dataset_sources": {d.name: d.source for d in datasets},
        "seeds": seeds,
        "metric": "test token perplexity (each test record's metrics.ppl, under the data's evaluation protocol)",
        "perplexities": means,
        "per_seed": per_seed,
        "std_over_seeds": {name: _std(list(v.values())) for name, v in per_seed.items()},
        "mean_perplexity": statistics.mean(dataset_means) if complete else None,
        "std_perplexity": _std(dataset_means) if complete else None,
        "std_kind": STD_KIND,
        "complete": complete,
        "cells_done": done,
        "cells_total": total,
        "records": records,
        "parameters": parameters,
        "config": config,
        "meta": run_meta(seed=seeds, extra={"command": command}),
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


def multi_dataset(argv: list[str]) -> int:
    own, extra = _split_extra(list(argv))
    args = _parser().parse_args(own)
    if not args.datasets:
        raise ConfigError(f"{COMMAND} needs --datasets NAME [NAME ...] (data aliases, or NAME=DIR for a "
                          "local text folder)")
    datasets = [parse_dataset(spec) for spec in args.datasets]
    for kind, values in (("dataset", [d.name for d in datasets]), ("seed", args.seeds)):
        if len(set(values)) != len(values):
            raise ConfigError(f"--{kind}s lists a {kind} twice: {' '.join(map(str, values))}")
    for arg in extra:
        if arg.split("=", 1)[0] in RESERVED:
            raise ConfigError(f"{arg.split('=', 1)[0]} is set per cell by {COMMAND} (--datasets, --seeds, "
                              "--results_dir); leave it out of the arguments after `--`")
    preset = Path(args.config)
    if not preset.is_file():
        raise ConfigError(f"config {args.config!r} does not exist")
    try:
        preset_yaml = yaml.safe_load(preset.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"config {args.config!r} is not valid YAML ({type(err).__name__})") from err
    model = model_name_of(preset_yaml if isinstance(preset_yaml, dict) else {}, extra)
    config = {"preset": args.config, "preset_sha256": hashlib.sha256(preset.read_bytes()).hexdigest(),
              "extra_args": extra}
    results = Path(args.results_dir)
    summary_path = results / f"{model}_multi_dataset.json"
    _check_same_sweep(summary_path, config, datasets)
    command = shlex.join(["lightning_bench", COMMAND, *argv])

    cells: dict[tuple[str, int], tuple[Optional[Path], Path]] = {}
    total, argv_before = len(datasets) * len(args.seeds), sys.argv
    try:
        for data in datasets:
            for seed in args.seeds:
                cell = results / COMMAND / model / f"seed{seed}" / data.name
                label = f"[{len(cells) + 1}/{total}] {data.name} seed {seed}"
                done = _test_record(cell)
                if done is not None:
                    print(f"lightning_bench {COMMAND}: {label}: skipped (test record exists: {done})", flush=True)
                    cells[(data.name, seed)] = (_fit_record(cell), done)
                else:
                    print(f"lightning_bench {COMMAND}: {label}: running in {cell}", flush=True)
                    base = ["--config", args.config, *data.cli_args, *extra]
                    cells[(data.name, seed)] = run_cell(base, data, seed, cell)
                summary = summarize(model, datasets, args.seeds, cells, config, command)
                write_json_atomic(summary_path, summary)
    finally:
        sys.argv = argv_before  # run_cli hands LightningCLI its arguments through sys.argv
    print(f"lightning_bench {COMMAND}: wrote {summary_path}")
    for name, mean in summary["perplexities"].items():
        std = summary["std_over_seeds"][name]
        print(f"  {name:<16} test ppl {mean:10.2f}" + (f" +- {std:.2f}" if std is not None else ""))
    print(f"  {'mean':<16} test ppl {summary['mean_perplexity']:10.2f}"
          + (f" +- {summary['std_perplexity']:.2f} (sample std across datasets)"
             if summary["std_perplexity"] is not None else ""))
    return 0
