"""One search on Ray Tune: a Tuner over the declared space (space.py), each trial computing its cells with the
downstream machinery on the tuning rows (objective.py), ASHA stopping poor trials early over growing row counts,
and `Tuner.restore` resuming a killed search (finished trials are not run again).

A trial runs in a Ray actor; the actor is reused for the next trial (`reuse_actors`), so the model, tokenizer
and prompts loaded into `_LOADED` on its first trial serve every later one (`model_loads` in each report counts
the loads of its process)."""

from __future__ import annotations

import dataclasses
import os
import types
from pathlib import Path

from lightning_bench.experiments.tuning.objective import INVALID, Pooled, objective
from lightning_bench.experiments.tuning.space import defaults, searched, targets, tune_space, violation

_LOADED: dict = {}  # per worker process: {settings: (net, tokenizer, {task: tuning prompts})}


def row_steps(first: int, total: int) -> list[int]:
    """Rows evaluated after each report: doubling from `first` up to `total` (ASHA's rungs)."""
    steps, n = [], max(1, min(first, total))
    while n < total:
        steps.append(n)
        n *= 2
    return steps + [total]


def tuning_prompts(cfg):
    """(module, tokenizer, {task: TaskPrompts of the tuning rows}): the rows after the --max_samples evaluated by
    `downstream`, so tuning never sees an evaluation row."""
    from lightning_bench.errors import ConfigError
    from lightning_bench.experiments.downstream.setup import prepare

    wide = dataclasses.replace(cfg, max_samples=cfg.max_samples + cfg.tune_samples)
    module, tokenizer, prompts, _, _ = prepare(wide)
    out = {}
    for task, p in prompts.items():
        rows = p.samples[cfg.max_samples:]
        if len(rows) < cfg.tune_samples:
            raise ConfigError(f"{task} has {len(p.samples)} rows: too few for {cfg.max_samples} evaluation rows "
                              f"(--max_samples) and {cfg.tune_samples} tuning rows (--tune_samples) after them")
        out[task] = dataclasses.replace(p, samples=rows)
    return module, tokenizer, out


def _load(cfg):
    import torch

    from lightning_bench.experiments.core.runner import device_of
    from lightning_bench.experiments.downstream.setup import network

    key = repr(cfg)
    if key not in _LOADED:
        module, tokenizer, prompts = tuning_prompts(cfg)
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        _LOADED[key] = (network(cfg, module, tokenizer, device_of(cfg.accelerator))[0], tokenizer, prompts)
        _LOADED["loads"] = _LOADED.get("loads", 0) + 1
    return _LOADED[key]


def trial(point: dict, cfg, name: str, tasks: list[str]) -> None:
    """A Ray Tune function trainable: the config `point` on `tasks`' tuning rows, reported after each rung."""
    import torch
    from ray import tune

    from lightning_bench.experiments.downstream.config import Cell
    from lightning_bench.experiments.downstream.decode import run_group
    from lightning_bench.profiling.memory import CallPeakMemory

    target = next(t for t in targets(cfg.methods, cfg.attention_sparsity, cfg.method_params) if t.name == name)
    why = violation(target, point, cfg.density_target)
    if why is not None:  # refused before anything loads: reported once, never best
        tune.report({"objective": INVALID, "valid": False, "why": why, "rows": 0})
        return
    net, tokenizer, prompts = _load(cfg)
    levels = [("sparsity", 0.0)] if target.stack is not None else [("sparsity", float(r)) for r in cfg.ratios]
    pooled, start = Pooled(), 0
    for stop in row_steps(cfg.grace_samples, cfg.tune_samples):
        for task in tasks:
            rows = dataclasses.replace(prompts[task], samples=prompts[task].samples[start:stop])
            for protocol in cfg.protocols:
                for seed in cfg.seeds:
                    cells = [Cell(task, name, kind, level, protocol, int(seed)) for kind, level in levels]
                    # a fresh stack per group: its meter starts empty; the eviction method's parameters else
                    decoding = types.SimpleNamespace(
                        attention_sparsity={name: target.build(point)} if target.stack is not None else {},
                        interval=cfg.interval, batch_examples=cfg.batch_examples, max_batch_rows=cfg.max_batch_rows,
                        rounding=cfg.rounding, attention_error=True, meter_every=1)  # the objective: every step
                    torch.manual_seed(int(seed))
                    for record in run_group(net, cells, decoding, rows, tokenizer, lambda cell: target.build(point),
                                            CallPeakMemory(next(net.parameters()).device)):
                        pooled.add(record)
        start = stop
        figures = pooled.figures()
        tune.report({"objective": objective(figures, cfg.objective, cfg.penalty, cfg.density_target,
                                            cfg.density_penalty), "valid": True, "rows": stop, **figures,
                     "pid": os.getpid(), "model_loads": _LOADED["loads"]})


def _search_alg(cfg, first: dict):
    """The declared defaults are evaluated first by every algorithm."""
    if cfg.search == "tpe":
        from ray.tune.search.optuna import OptunaSearch

        return OptunaSearch(metric="objective", mode="min", points_to_evaluate=[first], seed=cfg.search_seed)
    from ray.tune.search import BasicVariantGenerator

    return BasicVariantGenerator(points_to_evaluate=[first], random_state=cfg.search_seed)


def run_search(cfg, target, tasks: list[str], path: Path):
    """The ResultGrid of one search, resumed from `path` (Ray Tune's experiment folder) where a killed one left
    it; the space of `target` is not empty (the caller skips parameter-free configs)."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    space = searched(target, cfg.space.get(target.name))
    trainable = tune.with_resources(tune.with_parameters(trial, cfg=cfg, name=target.name, tasks=tasks),
                                    {"cpu": cfg.ray.num_cpus_per_worker, "gpu": cfg.ray.num_gpus_per_worker})
    if tune.Tuner.can_restore(str(path)):
        print(f"lightning_bench tune: resuming the search in {path}", flush=True)
        return tune.Tuner.restore(str(path), trainable, resume_unfinished=True, restart_errored=True).fit()
    rungs = len(row_steps(cfg.grace_samples, cfg.tune_samples))
    scheduler = ASHAScheduler(time_attr="training_iteration", max_t=rungs, grace_period=1, reduction_factor=2) \
        if cfg.asha and rungs > 1 else None
    tuner = tune.Tuner(
        trainable, param_space=tune_space(space, cfg.search, cfg.grid_points),
        tune_config=tune.TuneConfig(metric="objective", mode="min", search_alg=_search_alg(cfg, defaults(space)),
                                    scheduler=scheduler, num_samples=1 if cfg.search == "grid" else cfg.num_samples,
                                    max_concurrent_trials=cfg.max_concurrent_trials, reuse_actors=True),
        run_config=tune.RunConfig(name=path.name, storage_path=str(path.parent.resolve()), verbose=0,
                                  stop={"time_total_s": cfg.timeout_per_trial} if cfg.timeout_per_trial else None,
                                  failure_config=tune.FailureConfig(max_failures=0)))
    return tuner.fit()


def best(grid, rows: int):
    """(the best trial's row of the trials table, the table) among the valid trials that evaluated every tuning
    row (an early-stopped or timed-out trial saw fewer), or (None, table)."""
    table = grid.get_dataframe()
    if "rows" not in table:
        return None, table
    finished = table[(table["valid"] == True) & (table["rows"] >= rows)]  # noqa: E712 - a pandas mask
    if finished.empty:
        return None, table
    return finished.loc[finished["objective"].idxmin()], table
