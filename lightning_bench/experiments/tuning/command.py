"""`lightning_bench tune`: the parameters of KV eviction methods and masker stacks searched on Ray Tune, one
best config for every task (--mode global) or one per task (--mode per_task), cached for
`lightning_bench downstream --tuned_configs DIR` (docs/tuning.md).

    lightning_bench tune --config configs/tune/quick_test.yaml [--mode per_task] [--ray.address HOST:PORT]
    lightning_bench tune show [DIR] [--file NAME]

The options are `downstream`'s (the model, tasks, methods and stacks, ratios, protocols, --max_samples
evaluation rows, which tuning never sees) plus the search's. Each search runs in {tuned_configs}/ray/ and
resumes from there when killed; a finished one is written to the cache and not run again."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional

from jsonargparse.typing import NonNegativeFloat, PositiveFloat, PositiveInt

from lightning_bench.errors import PROG, ConfigError
from lightning_bench.experiments.core.config import Fraction, parse_command
from lightning_bench.experiments.downstream.config import DownstreamConfig
from lightning_bench.results import tuned_configs as cache
from lightning_bench.experiments.tuning.objective import OBJECTIVES

COMMAND = "tune"


@dataclass
class TuneConfig(DownstreamConfig):
    """Search the parameters of every method (but dense) and masker stack of a downstream grid on Ray Tune, on
    tuning rows disjoint from the evaluated ones; cache the best config per task or for all tasks."""

    tuned_configs: str = "benchmark_results/tuned"
    """the cache folder the best configs are written to (and Ray Tune's experiments, in ray/)"""
    mode: Literal["global", "per_task"] = "global"
    """global: one config for every task, scored on all of them; per_task: one search and entry per task"""
    objective: Literal["combined_score", "benchmark_score", "attention_error"] = "combined_score"
    """minimised: attention_error + penalty * (1 - task score), 1 - task score, or attention_error"""
    penalty: NonNegativeFloat = 1.0
    """weight of (1 - task score) in combined_score"""
    density_target: Optional[Fraction] = None
    """a stack's parts' declared densities must sum within it, and measured density above it is penalised"""
    density_penalty: NonNegativeFloat = 10.0
    """objective added per unit of measured density above --density_target"""
    search: Literal["random", "grid", "tpe"] = "random"
    """random sampling, a grid (--grid_points per range, every choice), or Optuna's TPE (optuna installed)"""
    num_samples: PositiveInt = 10
    """trials per search, the declared defaults first (grid: the whole grid once)"""
    grid_points: PositiveInt = 3
    """values per range in --search grid"""
    search_seed: int = 0
    """seed of the random and TPE samplers"""
    max_concurrent_trials: Optional[PositiveInt] = None
    """trials at once (None: as many as the cluster's resources fit, --ray.num_cpus_per_worker / num_gpus each)"""
    timeout_per_trial: Optional[PositiveFloat] = None
    """seconds: a trial is stopped at its first report after them (and then not a candidate for best)"""
    tune_samples: PositiveInt = 8
    """tuning rows per task: the ones right after the --max_samples evaluation rows"""
    grace_samples: PositiveInt = 2
    """rows of ASHA's first rung; each later rung doubles them up to --tune_samples"""
    asha: bool = True
    """stop poor trials early (ASHA, reduction factor 2) at the rungs"""
    space: dict[str, dict[str, Any]] = field(default_factory=dict)
    """{config: {parameter: {low, high} | {choices}}}: narrower ranges than the declared ones"""

    def __post_init__(self):
        super().__post_init__()
        from lightning_bench.experiments.core.ray_executor import check_ray
        from lightning_bench.experiments.tuning.space import searched, targets

        check_ray(self.ray, needed_by="tune", extra="tune")
        if self.max_samples is None:
            raise ConfigError("--max_samples is the evaluation rows tuning must leave out: give a number")
        if self.search == "tpe":
            try:
                import optuna  # noqa: F401
            except ImportError as err:
                raise ConfigError("--search tpe needs optuna: pip install 'lightning_bench[tune]'") from err
        configs = targets(self.methods, self.attention_sparsity, self.method_params)
        unknown = sorted(set(self.space) - {t.name for t in configs})
        if unknown:
            raise ConfigError(f"--space names {', '.join(unknown)}, not a config of this grid; valid: "
                              f"{', '.join(t.name for t in configs)}")
        for target in configs:
            searched(target, self.space.get(target.name))  # a bad range or parameter: one line now
        assert OBJECTIVES  # the Literal above lists the same names


def _absolute(cfg: TuneConfig) -> TuneConfig:
    """Paths as absolute ones: Ray workers run in folders of their own."""
    local = lambda p: str(Path(p).resolve()) if p is not None and Path(p).exists() else p
    model = dataclasses.replace(cfg.model, pretrained=local(cfg.model.pretrained))
    return dataclasses.replace(cfg, model=model, data_dir=local(cfg.data_dir),
                               paths={k: local(v) for k, v in cfg.paths.items()} if cfg.paths else cfg.paths)


def _entry(cfg, target, scope_tasks, grid, rows_ids) -> tuple[dict, Any]:
    from lightning_bench.experiments.tuning.search import best

    row, table = best(grid, cfg.tune_samples)
    base = {"model": cfg.model.pretrained, "config": target.name, "tasks": scope_tasks, "objective_name": cfg.objective,
            "search": {k: getattr(cfg, k) for k in ("search", "num_samples", "penalty", "density_target", "tune_samples",
                                                     "grace_samples", "asha", "ratios", "protocols", "seeds")},
            "tuning_rows": rows_ids, "evaluation_rows": cfg.max_samples, "trials": len(table)}
    if row is None:
        errors = [str(e).splitlines()[0] for e in grid.errors]
        return {**base, "status": "failed", "errors": errors}, table
    plain = lambda v: v.item() if hasattr(v, "item") else v  # numpy scalars of the pandas table as Python's
    params = {k.removeprefix("config/"): plain(v) for k, v in row.items() if k.startswith("config/")}
    figures = {k: plain(row.get(k)) for k in ("benchmark_score", "attention_error", "density")}
    return {**base, "status": "done", "best": {**target.fixed, **params}, "objective": float(row["objective"]),
            "figures": figures}, table


def main(argv: list[str]) -> int:
    if argv[:1] == ["show"]:
        return cache.show(argv[1:])
    parsed = parse_command(COMMAND, TuneConfig, list(argv), description=TuneConfig.__doc__)
    cfg = _absolute(parsed.config)
    from lightning_bench.experiments.tuning.search import run_search, tuning_prompts
    from lightning_bench.experiments.tuning.space import searched, targets

    _, _, prompts = tuning_prompts(cfg)  # rows and lengths checked before any trial starts
    rows = {task: [s.request.row.get("id") for s in p.samples[:cfg.tune_samples]] for task, p in prompts.items()}
    scopes = {cache.GLOBAL: cfg.tasks} if cfg.mode == "global" else {task: [task] for task in cfg.tasks}
    folder = Path(cfg.tuned_configs)
    failed = []
    import ray

    ray.init(address=cfg.ray.address, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    for target in targets(cfg.methods, cfg.attention_sparsity, cfg.method_params):
        if not searched(target, cfg.space.get(target.name)):
            print(f"{PROG} {COMMAND}: {target.name} has no parameter to search; skipped")
            continue
        for scope, tasks in scopes.items():
            path = cache.entry_path(folder, cfg.model.pretrained, target.name, scope)
            if cache.done(path) is not None:
                print(f"{PROG} {COMMAND}: {path} is tuned already; delete it to search again")
                continue
            grid = run_search(cfg, target, tasks, folder.resolve() / "ray" / path.stem)
            entry, table = _entry(cfg, target, tasks, grid, {t: rows[t] for t in tasks})
            cache.write_entry(path, entry, table)
            print(f"{PROG} {COMMAND}: {target.name} / {scope}: {entry['status']} "
                  f"{entry.get('best', entry.get('errors'))} -> {path}")
            if entry["status"] == "failed":
                failed.append(f"{target.name} / {scope}")
    if failed:
        raise ConfigError(f"tune: the searches of {', '.join(failed)} failed (no trial finished); see their "
                          "entries and Ray Tune's folders")
    return 0
