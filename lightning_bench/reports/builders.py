"""Figure and table builders: pure functions from records to `Figure`s and `Table`s (reports/figures.py).

  sweep    perplexity vs sparsity per method (the dense line dashed), one figure per (dataset, context
           length); perplexity vs context length per method, one per dataset; a method x sparsity table
  trainer  one table of the fit/validate/test records; a loss curve per fit (its CSV log's steps, else epochs)
Downstream and long-context grids: reports/downstream_builders.py.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Optional

from lightning_bench.reports.figures import Figure, Series, Table, warnings_of
from lightning_bench.reports.provenance import file_safe, provenance
from lightning_bench.reports.records import _model_name as model_name


# ---- sweep (experiments/sweep; docs/sparsity.md "The sweep") ------------------------------------------
def _sweep_provenance(record: dict, dataset: str, n: str = "") -> str:
    meta = record.get("meta") or {}
    protocol = ((meta.get("evaluation_protocol") or {}).get(dataset) or {})
    return provenance(meta, model=model_name((record.get("config") or {}).get("model")), data=dataset,
                      data_block=(meta.get("data") or {}).get(dataset),
                      protocol=" ".join(str(protocol[k]) for k in ("name", "subset") if protocol.get(k)), n=n)


def _ppl_vs_sparsity(record, dataset, methods, path) -> list[Figure]:
    by_length: dict[int, dict[str, list]] = {}  # context length -> method -> [(sparsity, ppl)]
    for method, sweeps in methods.items():
        for cell in (sweeps.get("sparsity_sweep") or {}).values():
            # a masker stack keeps the whole cache: placed at 1 - its density (the attention entries it skips)
            stack = cell.get("density") is not None
            by_length.setdefault(cell["context_length"], {}).setdefault(
                f"{method} (stack, at 1 - density)" if stack else method, []).append(
                (1.0 - cell["density"] if stack else cell["sparsity"], cell["perplexity"]))
    figures = []
    for length, points in sorted(by_length.items()):
        levels = sorted({s for pts in points.values() for s, _ in pts})
        series = [Series(method, *map(list, zip(*sorted(pts)))) for method, pts in points.items() if method != "dense"]
        if "dense" in points:  # dense runs at sparsity 0 only: drawn across the levels as the reference
            ppl = points["dense"][0][1]
            series.append(Series("dense", [levels[0], levels[-1]], [ppl, ppl], dashed=True))
        tokens = {c.get("tokens") for s in methods.values() for c in (s.get("sparsity_sweep") or {}).values()}
        figures.append(Figure(
            file_safe(f"sweep_{dataset}_ppl_vs_sparsity_L{length}"), f"{dataset}: perplexity vs sparsity, L={length}",
            "sparsity (fraction of the KV cache evicted)", "perplexity", series,
            _sweep_provenance(record, dataset, n=", ".join(f"{t} scored tokens" for t in sorted(tokens - {None}))),
            str(path), warnings_of(series)))
    return figures


def _ppl_vs_context(record, dataset, methods, path) -> list[Figure]:
    series = []
    for method, sweeps in methods.items():
        points = sorted((c["context_length"], c["perplexity"], c["sparsity"])
                        for c in (sweeps.get("context_length_sweep") or {}).values())
        if points:
            label = "dense" if method == "dense" else f"{method} @ sparsity {points[0][2]:g}"
            series.append(Series(label, [p[0] for p in points], [p[1] for p in points], dashed=method == "dense"))
    if not series:
        return []
    return [Figure(file_safe(f"sweep_{dataset}_ppl_vs_context"), f"{dataset}: perplexity vs context length",
                   "context length (tokens)", "perplexity", series, _sweep_provenance(record, dataset), str(path),
                   warnings_of(series))]


def _method_table(record, dataset, methods, path) -> Table:
    cells = {(m, c["context_length"], c["sparsity"]): c["perplexity"]
             for m, sweeps in methods.items() for c in (sweeps.get("sparsity_sweep") or {}).values()}
    columns = sorted({(length, s) for _, length, s in cells})
    rows = [[m, *(cells.get((m, length, s), "") for length, s in columns)] for m in methods]
    return Table(file_safe(f"sweep_{dataset}_methods"), f"{dataset}: perplexity by method and sparsity",
                 ["method", *(f"L={length} s={s:g}" for length, s in columns)], rows,
                 _sweep_provenance(record, dataset), str(path))


def sweep_items(record: dict, path: Path) -> list:
    items = []
    for dataset, methods in record["results"].items():
        items += _ppl_vs_sparsity(record, dataset, methods, path)
        items += _ppl_vs_context(record, dataset, methods, path)
        if any(s.get("sparsity_sweep") for s in methods.values()):
            items.append(_method_table(record, dataset, methods, path))
    return items


# ---- fit / validate / test records (results/recorder.py) ---------------------------------------------
TRAINER_COLUMNS = ["stage", "model", "data", "bits", "sparsity", "ppl", "tokens/s", "peak memory MB", "date", "file"]


def _trainer_row(record: dict, path: Path) -> list:
    sparsity, fit = record.get("sparsity") or {}, record["stage"] == "fit"
    level = sparsity.get("ratio") if sparsity.get("ratio") is not None else sparsity.get("budget_tokens")
    ppl = record.get("final_perplexity") if fit else (record.get("metrics") or {}).get("ppl")
    speed = record.get("tokens_per_sec") if fit else record.get("scored_tokens_per_sec")
    return [record["stage"], record.get("model_name", ""), record.get("dataset", ""), record.get("bits", ""),
            f"{sparsity['method']} {level}" if sparsity.get("method") else "",
            "diverged" if record.get("status") == "diverged" else ppl if ppl is not None else "",
            speed if speed is not None else "", record.get("peak_memory_mb") or "",
            ((record.get("meta") or {}).get("created_utc") or "")[:19].replace("T", " "), str(path)]


def _trainer_provenance(record: dict) -> str:
    meta = record.get("meta") or {}
    protocol = meta.get("evaluation_protocol") or {}
    return provenance(meta, model=record.get("model_name", ""), data=record.get("dataset", ""),
                      data_block=meta.get("data"),
                      protocol=" ".join(f"{k}={protocol[k]}" for k in ("name", "window", "stride") if k in protocol))


def metrics_csv(record: dict, path: Path) -> Optional[Path]:
    """The fit's CSV log (Lightning's CSVLogger: `{default_root_dir}/{name}/{run_id}/metrics.csv`): the path
    the record names (`logs.csv`, absolute), else looked up by run id under the record's folder and under the
    run's `default_root_dir` (default `logs`) from here; None when none holds it (a W&B-logged run)."""
    folder, run_id = Path(path).parent, record.get("run_id")
    named = (record.get("logs") or {}).get("csv")
    if named and Path(named).is_file():
        return Path(named)
    if not run_id:
        return None
    root = ((record.get("config") or {}).get("trainer") or {}).get("default_root_dir") or "logs"  # Lightning's default
    for base in (folder, Path(root)):
        hits = sorted(base.glob(f"*/{run_id}/metrics.csv")) if base.is_dir() else []
        if hits:
            return hits[0]
    return None


def _csv_curves(csv_path: Path) -> list[Series]:
    """Training loss at every logged step and validation loss at every validation, from the CSV log."""
    train, val = ([], []), ([], [])
    with open(csv_path, newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            for key, (xs, ys) in (("train/loss", train), ("val/loss", val)):
                if row.get(key) and row.get("step"):
                    xs.append(int(float(row["step"])) + 1)  # Lightning logs the step before it is counted
                    ys.append(float(row[key]))
    return [Series(label, xs, ys, points=label.startswith("validation") and len(xs) < 3)
            for label, (xs, ys) in (("train (logged steps)", train), ("validation", val)) if xs]


def _loss_curve(record: dict, path: Path) -> list[Figure]:
    """Training and validation cross-entropy of a fit, one axis in nats/token: per logged step from the fit's
    CSV log when it is found (`metrics_csv`), else per epoch from the record (training: the epoch's mean;
    validation: ln of each validation's perplexity)."""
    log = metrics_csv(record, path)
    series = _csv_curves(log) if log is not None else []
    xlabel = "optimizer step"
    if not series:
        xlabel = "epoch (validation: validation run)"
        if record.get("epoch_losses"):
            losses = record["epoch_losses"]
            series.append(Series("train (mean per epoch)", list(range(1, len(losses) + 1)), list(losses)))
        ppls = [p for p in record.get("epoch_perplexities") or [] if p and p > 0]
        if ppls:
            series.append(Series("validation (ln ppl)", list(range(1, len(ppls) + 1)), [math.log(p) for p in ppls]))
    if not series:
        return []
    name = file_safe(f"loss_{Path(path).stem}")
    shown = os.path.relpath(log) if log is not None and not os.path.relpath(log).startswith("..") else log
    how = _trainer_provenance(record) + (f"; curves: {shown}" if log is not None else "; curves: the record's epochs")
    return [Figure(name, f"{record.get('model_name', '')} on {record.get('dataset', '')}: loss", xlabel,
                   "cross-entropy (nats/token)", series, how, str(path), warnings_of(series))]


def trainer_items(records: list[tuple[dict, Path]]) -> list:
    """One table over every trainer record (newest first), then each fit's loss curve."""
    if not records:
        return []
    records = sorted(records, key=lambda rp: (rp[0].get("meta") or {}).get("created_utc") or "", reverse=True)
    lines = list(dict.fromkeys(_trainer_provenance(r) for r, _ in records))
    where = str(Path(records[0][1]).parent) if len(records) == 1 else "the files in the `file` column"
    table = Table("trainer_records", "fit / validate / test records", TRAINER_COLUMNS,
                  [_trainer_row(r, p) for r, p in records],
                  " | ".join(lines[:3]) + (f" | ... ({len(lines) - 3} more)" if len(lines) > 3 else ""), where)
    return [table, *(f for r, p in records if r["stage"] == "fit" for f in _loss_curve(r, p))]
