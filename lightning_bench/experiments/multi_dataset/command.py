"""The multi_dataset wiring over core/runner.py, and its summary (the package docstring has the protocol)."""

from __future__ import annotations

import hashlib
import json
import shlex
import statistics
from pathlib import Path

from lightning_bench.errors import PROG, ConfigError
from lightning_bench.experiments.core.aggregate import STD_KIND, sample_std
from lightning_bench.experiments.core.config import parse_command
from lightning_bench.experiments.core.runner import Work, run_grid, sayer
from lightning_bench.experiments.multi_dataset.config import (COMMAND, Cell, DatasetSpec, MultiDatasetConfig,
                                                               model_name_of, preset_as_config)
from lightning_bench.experiments.multi_dataset.records import RecordStore, run_cell
from lightning_bench.results.io import check_output, read_json, write_json_atomic
from lightning_bench.results.meta import run_meta


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
    model = model_name_of(cfg.preset_yaml if isinstance(cfg.preset_yaml, dict) else {}, extra)
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

    run_grid([Work(cell, {}, cell.key) for cell in grid], store, compute, say)
    written = summary()
    print(f"{PROG} {COMMAND}: wrote {summary_path}")
    for name, mean in written["perplexities"].items():
        std = written["std_over_seeds"][name]
        print(f"  {name:<16} test ppl {mean:10.2f}" + (f" +- {std:.2f}" if std is not None else ""))
    print(f"  {'mean':<16} test ppl {written['mean_perplexity']:10.2f}"
          + (f" +- {written['std_perplexity']:.2f} (sample std across datasets)"
             if written["std_perplexity"] is not None else ""))
    return 0
