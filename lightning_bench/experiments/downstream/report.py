"""`{name}_results.json` and `{name}_summary.txt` of a downstream grid, rebuilt from the cell records
(so a resumed run writes what an uninterrupted one would), and the optional W&B run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from lightning_bench.experiments.core.grid import DENSE
from lightning_bench.experiments.downstream.scoring import PAIRED_METHOD, paired_difference
from lightning_bench.results.io import SAMPLES_FILE, write_json_atomic, write_text_atomic

REFERENCES = (DENSE, "h2o")  # every cell is compared with these on the same examples


def _reference(cell, grid_by_coords: dict, method: str):
    """The cell of `method` on the same task, protocol and seed (dense: its one level; others: the same budget)."""
    if method == DENSE:
        return grid_by_coords.get((cell.task, DENSE, "sparsity", 0.0, cell.protocol, cell.seed))
    return grid_by_coords.get((cell.task, method, cell.budget_kind, cell.level, cell.protocol, cell.seed))


def comparisons(grid, records: dict) -> dict:
    """{cell key: {"vs_dense": paired difference, "retention": score/dense, "vs_h2o": ...}} on the primary metric."""
    by_coords = {(c.task, c.method, c.budget_kind, c.level, c.protocol, c.seed): c for c in grid}
    out = {}
    for cell in grid:
        mine, entry = records[cell.key], {}
        for method in REFERENCES:
            ref = _reference(cell, by_coords, method)
            if ref is None or ref.key == cell.key:
                continue
            theirs = records[ref.key]
            entry[f"vs_{method}"] = {"reference": ref.key, **paired_difference(mine["primary_per_example"],
                                                                               theirs["primary_per_example"])}
            if method == DENSE:
                base = theirs["metrics"].get(mine["primary_metric"])
                score = mine["metrics"].get(mine["primary_metric"])
                entry["retention"] = score / base if base else None
        out[cell.key] = entry
    return out


def _table(grid, records: dict, compared: dict) -> str:
    lines = []
    header = (f"{'task':<34} {'protocol':<15} {'method':<14} {'budget':<7} {'metric':<20} {'score':>7} "
              f"{'/dense':>7} {'diff vs dense [95% CI] n':>33} {'diff vs h2o [95% CI] n':>33} {'kept':>5} "
              f"{'KV MiB':>7} {'dec tok/s':>9}")
    lines += [header, "-" * len(header)]
    for cell in grid:
        r, c = records[cell.key], compared[cell.key]
        score = r["metrics"].get(r["primary_metric"])

        def diff(key):  # the n beside the interval: how many paired examples it rests on
            d = c.get(key)
            if d is None:
                return "—"
            ci = d["ci95"]
            return f"{d['mean_difference']:+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "") + f" n={d['n']}"

        retention = c.get("retention")
        tps = r["timing"]["decode_tokens_per_s"]
        lines.append(f"{cell.task:<34} {cell.protocol:<15} {cell.method:<14} {cell.budget:<7} "
                     f"{r['primary_metric']:<20} {score if score is None else f'{score:.2f}':>7} "
                     f"{'—' if retention is None else f'{retention:.3f}':>7} {diff('vs_dense'):>33} "
                     f"{diff('vs_h2o'):>33} {r['cache']['kept_fraction_of_compressed']:>5.2f} "
                     f"{r['cache']['kv_bytes_peak_mean'] / 2**20:>7.2f} {'—' if tps is None else f'{tps:.1f}':>9}")
    return "\n".join(lines)


def method_parameters(grid, records: dict) -> str:
    """One line naming every method's parameters as run (snapkv's window / kernel / pooling differ from
    kvpress's 64 / 5 / avg, so a table states them); a method run with other parameters on some tasks (configs
    tuned per task) names each set with its tasks."""
    from lightning_bench.sparsity.methods import METHODS

    shown: dict[str, dict[str, list]] = {}
    for cell in grid:
        described = records[cell.key].get("method_params") or {}
        if "maskers" in described:  # a masker stack: what it is
            text = f"{cell.method}[{described.get('slug')}]"
        else:
            params = [f"{p}={described[p]}" for p in METHODS[cell.method].param_specs() if p in described]
            if not params:
                continue
            text = f"{cell.method}({', '.join(params)})"
        tasks = shown.setdefault(cell.method, {}).setdefault(text, [])
        if cell.task not in tasks:
            tasks.append(cell.task)
    parts = [text if len(sets) == 1 else f"{text} on {', '.join(tasks)}"
             for sets in shown.values() for text, tasks in sets.items()]
    return f"method parameters: {'; '.join(parts)}\n" if parts else ""


def _attention(grid, records: dict) -> str:
    """Each metered cell's density and attention error against full attention (pooled over its rows)."""
    lines = [f"  {cell.key}: density {a['density']:.3f}, attention error {a['attention_error']:.4f}"
             for cell in grid for a in [records[cell.key].get("attention")] if a and a["density"] is not None]
    return "attention (kept / visible entries; ||o - o_full||_F / ||o_full||_F):\n" + "\n".join(lines) + "\n" \
        if lines else ""


def _weak_tasks(grid, records: dict, floor: float = 20.0) -> str:
    """The tasks whose dense score is at most `floor`: there a method's difference from dense measures
    noise, not what the cache kept (flagged, not hidden)."""
    scores = {c: records[c.key]["metrics"].get(records[c.key]["primary_metric"]) for c in grid if c.method == DENSE}
    weak = sorted({f"{c.task} ({c.protocol}) dense {score:.1f}" for c, score in scores.items()
                   if score is not None and score <= floor})
    return f"dense at most {floor:g} (read their rows as noise): {'; '.join(weak)}\n" if weak else ""


def write_report(folder: Path, name: str, config: dict, meta: dict, grid, records: dict) -> tuple[Path, Path]:
    """`folder/cells/` holds the cell files (CellStore). The per-example rows stay in them (`samples_file` names
    each, `cell_samples` reads it): in the results too, they doubled what a grid's folder weighs."""
    compared = comparisons(grid, records)
    results = {"name": name, "config": config, "meta": meta,
               "statistics": {"paired_differences": PAIRED_METHOD,
                              "figures": "each task's metrics with percentile-bootstrap 95% CIs over its examples",
                              "retention": "cell score / dense score on the same task, protocol and seed"},
               "cells": {cell.key: {**{k: v for k, v in records[cell.key].items() if k != "samples"},
                                    SAMPLES_FILE: f"cells/{cell.key}.json", "comparisons": compared[cell.key]}
                         for cell in grid}}
    results_path = write_json_atomic(folder / f"{name}_results.json", results)
    text = (f"{name}: {config['model']['pretrained']}, {len(grid)} cells; score = each task's primary metric "
            f"(percent); kept = fraction of the compressed tokens kept by the first compression; diffs are paired "
            f"over the same examples (unit: one example; n = the examples paired)\n"
            f"{method_parameters(grid, records)}{_attention(grid, records)}{_weak_tasks(grid, records)}\n"
            f"{_table(grid, records, compared)}\n")
    summary_path = write_text_atomic(folder / f"{name}_summary.txt", text)
    return results_path, summary_path


def log_wandb(cfg, name: str, config: dict, grid, records: dict, results_path: Optional[Path] = None,
              extras: Optional[Callable[[Any, Path], None]] = None) -> None:
    """One W&B run per driver call: a table of the cells, each cell's figures as summary values, and what
    `extras(logger, results_path)` logs before the run ends (the CLI's: the report's figures and tables of the
    grid, reports/wandb_log.py; this layer does not import reports)."""
    from lightning_bench.logging_setup import wandb_logger

    logger = wandb_logger(project="lightning_bench", save_dir=cfg.wandb_dir, name=f"downstream-{name}", group=name,
                          job_type="downstream")
    logger.log_hyperparams(config)
    columns = ["task", "protocol", "method", "budget", "metric", "score", "kept_fraction", "kv_bytes_peak_mean",
               "decode_tokens_per_s"]
    rows, flat = [], {}
    for cell in grid:
        r = records[cell.key]
        score = r["metrics"].get(r["primary_metric"])
        rows.append([cell.task, cell.protocol, cell.method, cell.budget, r["primary_metric"], score,
                     r["cache"]["kept_fraction_of_compressed"], r["cache"]["kv_bytes_peak_mean"],
                     r["timing"]["decode_tokens_per_s"]])
        flat.update({f"downstream/{cell.key}/{k}": v for k, v in r["metrics"].items()
                     if isinstance(v, (int, float)) and not isinstance(v, bool)})
    logger.log_table("downstream/cells", columns=columns, data=rows)
    logger.log_metrics(flat)
    try:
        if extras is not None:
            extras(logger, results_path)
    finally:  # the run is closed (and what was logged kept) even when the extras fail
        logger.experiment.finish()
