"""`lightning_bench downstream`: every KV-cache method on generative downstream tasks, one mechanism.

    lightning_bench downstream --config configs/downstream/quick_test.yaml
    lightning_bench downstream --model.pretrained PATH --tasks cnn_dailymail xsum --methods dense h2o cab_v4 \
        --ratios 0.5 0.7 0.9 --max_samples 100 [--protocols query_aware query_agnostic interval]

Per cell (task, method, sparsity or token budget, protocol, seed) every example is prefilled, its cache
compressed by the method to the budget, and the answer generated on the pruned cache
(sparsity/task_decode.py); only the importance function differs between methods. The prefill does
not depend on the method, so each example is prefilled once per task, protocol and seed and every cell
of that group continues a copy of it (same tokens as separate runs, tested). The prompts, stops,
chat template and scores are those of `lightning_bench test --task` (setup.py, scoring.py); the
group's decoding is decode.py. The grid runs on core/runner.py: one checksummed file per cell in
`{results_dir}/{name}/cells/` (a finished cell is reused, a damaged one recomputed, one made under other
settings refused), progress per group in `partial/`. `{name}_results.json` and `{name}_summary.txt`
are rebuilt from the cell files at the end (report.py), so a resumed run writes what an uninterrupted
one would. docs/downstream.md has the protocol.
"""

from __future__ import annotations

import copy
import functools
import re
import shlex
import time
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from lightning_bench.errors import PROG
from lightning_bench.tasks import get_task
from lightning_bench.experiments.core.config import check_name, parse_command
from lightning_bench.experiments.core.runner import Work, device_of, run_grid, sayer
from lightning_bench.experiments.core.store import CellStore
from lightning_bench.experiments.downstream.config import DownstreamConfig
from lightning_bench.experiments.downstream.decode import run_group
from lightning_bench.experiments.downstream.report import log_wandb, write_report
from lightning_bench.experiments.downstream.setup import TaskPrompts, model_record, network, prepare
from lightning_bench.profiling.memory import CallPeakMemory
from lightning_bench.results.io import check_output
from lightning_bench.results.meta import run_meta

COMMAND = "downstream"
CELL_FILE = re.compile(r"^[A-Za-z0-9_.-]+__[a-z0-9_]+_[sb][0-9.e+-]+_[a-z_]+_seed-?\d+\.json$")
REFUSAL = ("was made under other settings (model, data, lengths, sampling, chat template, interval, method "
           "parameters, metering or device); use another --name")


def _protocol(config: dict, prompts: TaskPrompts, method: str, method_params: dict) -> dict:
    """What must be equal for a cell file to be reused. The task's prompt version is named once its template
    has changed (`<task>@2` on), so cells written under version 1 keep the fingerprint they were made with and
    a changed template never reuses them."""
    from lightning_bench.sparsity.task_decode import PROTOCOL_VERSION

    out = {"model": config["model"], "data": prompts.source, "max_length": config["max_length"],
           "max_new_tokens": prompts.max_new_tokens, "sampling": {k: v for k, v in prompts.sampling.items() if k != "seed"},
           "chat_template": prompts.chat_template, "examples": len(prompts.samples),
           "interval": config["interval"], "method_params": method_params, "device": config["device_type"],
           "kv_protocol_version": PROTOCOL_VERSION}  # version 1 cells (first token from the dense prefill) are refused
    if config["rounding"] != "ceil":  # cells made before --rounding existed keep their fingerprint
        out["rounding"] = config["rounding"]
    if config.get("attention_error"):  # metered cells are not the unmetered ones (cells made before keep theirs)
        out["attention_error"] = True
    if config.get("meter_every", 1) != 1:  # figures over other steps (cells made before meter every step)
        out["meter_every"] = config["meter_every"]
    version = get_task(prompts.task).template_version
    if not version.endswith("@1"):
        out["prompt_version"] = version
    return out


def group_name(cell) -> str:
    """The file-safe name of the cells sharing a prefill (task, protocol, seed), e.g. xsum__query_aware_seed1234."""
    return f"{cell.task.replace('/', '-')}__{cell.protocol}_seed{cell.seed}"


def main(argv: list[str], wandb_extras: Optional[Callable[[Any, Path], None]] = None) -> int:
    """The grid of `argv`; with --wandb, `wandb_extras(logger, results_path)` also logs into its W&B run (cli.py
    hands in the report's figures and tables, reports/wandb_log.py)."""
    parsed = parse_command(COMMAND, DownstreamConfig, list(argv), description=DownstreamConfig.__doc__)
    cfg = parsed.config
    check_output("--results_dir", cfg.results_dir)  # the experiment folder, checked before any model loads
    folder = check_output("--name", Path(cfg.results_dir) / check_name("--name", cfg.name))
    device = device_of(cfg.accelerator)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    module, tokenizer, prompts, provenance, max_length = prepare(cfg)
    # loaded on the first group computed, so a process with nothing to compute (the driver of Ray workers) never
    # loads it; low-bit weights now: their quantization record is part of every cell's settings
    loaded = functools.cache(lambda: network(cfg, module, tokenizer, device))
    quantization = loaded()[1] if cfg.bits in (8, 4) else None
    config = {"command": COMMAND, **parsed.resolved, "tasks": cfg.tasks, "max_length": max_length,
              "model": model_record(cfg, quantization),
              "device": str(device), "device_type": device.type, "threads": torch.get_num_threads(), "batch_size": 1}
    meta_extra = {"command": shlex.join([PROG, COMMAND, *argv]), "data": provenance}

    @functools.cache
    def tuned(method: str, task: str):
        """--tuned_configs: the method's parameters or the stack `tune` cached for the task (None: not asked)."""
        if cfg.tuned_configs is None or method == "dense":
            return None
        from lightning_bench.experiments.tuning.space import targets
        from lightning_bench.results.tuned_configs import lookup

        # the cached best over --method_params and the stack's own values (the declared defaults without one)
        target = next(t for t in targets(cfg.methods, cfg.attention_sparsity, cfg.method_params) if t.name == method)
        entry = lookup(cfg.tuned_configs, cfg.model.pretrained, method, task)
        return target.build(entry["best"] if entry is not None else {})

    def params(cell) -> dict:
        if cell.method in cfg.attention_sparsity:  # the stack, so that another stack never reuses the cell
            from lightning_bench.sparsity.masking import MaskerStack

            stack = tuned(cell.method, cell.task) or MaskerStack.parse(cfg.attention_sparsity[cell.method])
            return {"attention_sparsity": stack.describe()}
        out = dict(tuned(cell.method, cell.task) or cfg.method_params.get(cell.method, {}))
        if cell.method == "random":
            out.setdefault("seed", cell.seed)
        return out

    grid = cfg.cells()
    say = sayer(COMMAND, grid)
    store = CellStore(folder / "cells", CELL_FILE, REFUSAL, folder / "partial")
    memory = CallPeakMemory(device)

    def compute(works: list[Work]) -> list[dict]:
        """One group's cells from one prefill per example; its progress saved after each example."""
        net = loaded()[0]  # before the seed: loading a model may draw random numbers
        start, cells = time.perf_counter(), [work.cell for work in works]
        torch.manual_seed(cells[0].seed)
        progress = store.progress(works[0].group, {work.key: work.settings for work in works})
        decoding = copy.copy(cfg)  # the group's task's tuned stacks, where --tuned_configs gives them
        decoding.attention_sparsity = {name: tuned(name, cells[0].task) or spec
                                       for name, spec in cfg.attention_sparsity.items()}
        made = run_group(net, cells, decoding, prompts[cells[0].task], tokenizer, params, memory, progress)
        records = [{**result, "meta": run_meta(seed=cell.seed, extra=meta_extra)} for cell, result in zip(cells, made)]
        for cell, record in zip(cells, records):
            m = record["metrics"].get(record["primary_metric"])
            say(cell, f"{record['primary_metric']} {m if m is None else round(m, 2)}  kept "
                      f"{record['cache']['kept_fraction_of_compressed']:.2f} of the compressed tokens")
        print(f"{PROG} {COMMAND}: {len(cells)} cells of {works[0].group} in {time.perf_counter() - start:.1f} s "
              "(one prefill per example)", flush=True)
        return records

    works = [Work(cell, _protocol(config, prompts[cell.task], cell.method, params(cell)), group_name(cell))
             for cell in grid]
    records = run_grid(works, store, compute, say, executor=cfg.executor_for(functools.partial(main, argv)),
                       shard=cfg.shard_slice)
    if records is None:  # cells other shards still owe, or a Ray worker building its grid
        return 0
    meta = run_meta(seed=cfg.seeds, extra=meta_extra)
    results_path, summary_path = write_report(folder, cfg.name, config, meta, grid, records)
    print(f"{PROG} {COMMAND}: wrote {results_path} and {summary_path}")
    # the report covers this command's grid only: say so when the folder also holds cells of earlier runs
    # (other tasks, methods or levels), kept on disk but left out of the file just rewritten
    if others := sorted(set(store.keys()) - {cell.key for cell in grid}):
        print(f"{PROG} {COMMAND}: {len(others)} cell file(s) of earlier runs in {store.folder} are kept but not in "
              f"this report (e.g. {others[0]}): rerun with their tasks, methods and levels too to report them "
              "together", flush=True)
    print(summary_path.read_text())
    if cfg.wandb:
        log_wandb(cfg, cfg.name, config, grid, records, results_path, wandb_extras)
    return 0
