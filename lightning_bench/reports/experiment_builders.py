"""Figures and tables of the experiment records that are neither sweeps nor grids:

  multi_dataset  per summary (`{model}_multi_dataset.json`): a table dataset -> mean test ppl, sample std over
                 seeds ("n=1" where one seed gives none), n, each seed's value, parameters; a figure of the means
                 with the std as error bars and each seed as a point. Several summaries: also one table and one
                 figure across models (model x dataset), the BK / Mamba / Transformer comparison
  generation     per `aggregated_results.json`: perplexity vs sparsity per method (dense dashed), one figure per
                 context length, the arms a test of `significance_tests.json` finds different from dense marked;
                 perplexity vs mean peak KV MiB per context length; the rows with each one's test against
                 dense; every test
  test --task    per record (`{stem}_downstream_{run_id}.json`; a merged view only for the runs with no file of
                 their own): task -> headline metric, value, n, run; a bar figure when it holds several tasks
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from lightning_bench.reports import records
from lightning_bench.reports.figures import Figure, Series, Table, warnings_of
from lightning_bench.reports.provenance import file_safe, provenance
from lightning_bench.results.naming import RUN_ID

ALPHA = 0.05  # significance_tests.json holds p-values and no threshold: the conventional one, named on the figure
ONE_SEED = "one seed: no spread"


def _blank(value):
    return "" if value is None else value


def _joined(lines) -> str:
    lines = list(dict.fromkeys(line for line in lines if line))
    return " | ".join(lines[:3]) + (f" | ... ({len(lines) - 3} more)" if len(lines) > 3 else "")


# ---- multi_dataset (experiments/multi_dataset.py `summarize`) ----------------------------------------
def _spread(record: dict, dataset: str) -> tuple:
    """(mean, sample std or None, n seeds) of one dataset, as the summary computed them."""
    seeds = record["per_seed"].get(dataset) or {}
    return record["perplexities"][dataset], (record.get("std_over_seeds") or {}).get(dataset), len(seeds)


def _seed_warning(points: list[tuple[str, int]]) -> str:
    """points: (what, n seeds) of each mean drawn."""
    single = [what for what, n in points if n == 1]
    if single and len(single) == len(points):
        return ONE_SEED
    return f"one seed (no spread): {', '.join(single)}" if single else ""


def _md_provenance(record: dict) -> str:
    config = record.get("config") or {}
    done = "" if record.get("complete", True) else f", {record.get('cells_done')}/{record.get('cells_total')} cells"
    seeds = sorted({int(s) for v in record["per_seed"].values() for s in v})
    return provenance(record.get("meta"), model=record["model_name"], data=", ".join(record["perplexities"]),
                      protocol="test token perplexity (each test record's metrics.ppl)"
                               + (f", preset {config['preset']}" if config.get("preset") else ""),
                      n=f"seeds {' '.join(map(str, seeds))}{done}")


def _mean_series(label: str, record: dict, datasets: list[str]) -> Series:
    spreads = [_spread(record, d) for d in datasets]
    return Series(label, list(datasets), [m for m, _, _ in spreads],
                  low=[m - s if s is not None else None for m, s, _ in spreads],
                  high=[m + s if s is not None else None for m, s, _ in spreads])


def multi_dataset_items(record: dict, path: Path) -> list:
    model, prov = record["model_name"], _md_provenance(record)
    params = record.get("parameters") or {}
    params_text = ", ".join(f"{k} {v:,}" for k, v in params.items()) if isinstance(params, dict) else str(params)
    rows = []
    for dataset in record["perplexities"]:
        mean, std, n = _spread(record, dataset)
        seeds = record["per_seed"].get(dataset) or {}
        rows.append([dataset, _blank(mean), "n=1" if std is None and n == 1 else _blank(std), n,
                     "; ".join(f"seed {s}: {v}" for s, v in seeds.items()), params_text])
    name = file_safe(f"multi_dataset_{model}")
    table = Table(name, f"{model}: test perplexity per dataset (mean over seeds)",
                  ["dataset", "mean test ppl", "sample std over seeds", "n seeds", "per seed", "parameters"],
                  rows, prov, str(path))
    datasets = [d for d, mean in record["perplexities"].items() if mean is not None]
    if not datasets:
        return [table]
    means = _mean_series("mean over seeds (error bar: sample std)", record, datasets)
    seeds = [(d, v) for d in datasets for v in (record["per_seed"].get(d) or {}).values()]
    series = [means, Series("each seed", [d for d, _ in seeds], [v for _, v in seeds], points=True, marker="x")]
    # one dataset is one mean, however many seeds are drawn beside it: said as such, not as "one point"
    single = ("one dataset: one mean" if len(seeds) > 1 else warnings_of([means])) if len(datasets) == 1 else ""
    warning = "; ".join(w for w in (single, _seed_warning([(d, _spread(record, d)[2]) for d in datasets])) if w)
    return [table, Figure(name, f"{model}: test perplexity per dataset", "dataset", "test perplexity", series, prov,
                          str(path), warning, scatter=True)]


def models_items(summaries: list[tuple[dict, Path]]) -> list:
    """One table and one figure across the models of several summaries (a model given twice: by folder too)."""
    names = [r["model_name"] for r, _ in summaries]
    labels = [f"{n} ({p.parent.name})" if names.count(n) > 1 else n for n, (_, p) in zip(names, summaries)]
    rows, series, points = [], [], []
    for label, (record, _) in zip(labels, summaries):
        for dataset in record["perplexities"]:
            mean, std, n = _spread(record, dataset)
            rows.append([label, dataset, _blank(mean), "n=1" if std is None and n == 1 else _blank(std), n])
        datasets = [d for d, mean in record["perplexities"].items() if mean is not None]
        if datasets:
            series.append(_mean_series(label, record, datasets))
            points += [(f"{label} {d}", _spread(record, d)[2]) for d in datasets]
    prov = _joined(_md_provenance(r) for r, _ in summaries)
    source = os.path.commonpath([str(p.resolve().parent) for _, p in summaries])
    table = Table("multi_dataset_models", "test perplexity per model and dataset (mean over seeds)",
                  ["model", "dataset", "mean test ppl", "sample std over seeds", "n seeds"], rows, prov, source)
    if not series:
        return [table]
    warning = "; ".join(w for w in (warnings_of(series), _seed_warning(points)) if w)
    return [table, Figure("multi_dataset_models", "test perplexity per model and dataset (error bar: sample std "
                          "over seeds)", "dataset", "test perplexity", series, prov, source, warning, scatter=True)]


# ---- generation (experiments/generation/report.py `write_summaries`) ----------------------------------
def _mean(row: dict, metric: str):
    return ((row.get("metrics") or {}).get(metric) or {}).get("mean")


def _against_dense(significance: Optional[dict]) -> dict:
    """(method, sparsity, context length) -> its paired test against dense at that context length."""
    found = {}
    for test in (significance or {}).get("tests") or []:
        for arm, other in (("a", "b"), ("b", "a")):
            if test[other] == "dense" and test[arm] != "dense":
                found[(test[arm], test[f"{arm}_sparsity"], test["context_length"])] = test
    return found


def _significant(test: Optional[dict]) -> bool:
    return test is not None and test.get("p") is not None and test["p"] < ALPHA


def _test_label(significance: dict) -> str:
    name = str(significance.get("test") or "paired test").split(",")[0]
    correction = significance.get("correction")
    return f"p < {ALPHA:g} ({name}, {'uncorrected' if correction is None else correction})"


def _gen_provenance(record: dict, context, rows: list[dict], protocol: str = "") -> str:
    config, meta = record.get("config") or {}, record.get("meta") or {}
    data = (meta.get("data") or {}).get("name") or str(config.get("data", "")).partition("=")[0]
    windows = sorted({r.get("n_samples") for r in rows} - {None})
    seeds = sorted({s for r in rows for s in r.get("seeds") or []})
    where = f"teacher_forced {context}+{config.get('continuation_length')}" if context is not None else ""
    return provenance(meta, model=records._model_name(config.get("model")), data=data, data_block=meta.get("data"),
                      protocol="; ".join(p for p in (where, protocol) if p),
                      n=(f"{'-'.join(map(str, [windows[0], windows[-1]] if len(windows) > 1 else windows))} windows "
                         f"per point, seeds {' '.join(map(str, seeds))}") if windows else "")


def _by_method(rows: list[dict], x) -> dict:
    found: dict[str, list] = {}
    for row in rows:
        found.setdefault(row["method"], []).append((x(row), row["ppl_of_mean_nll"]))
    return {method: sorted(points) for method, points in found.items()}


def _ppl_vs_sparsity(record, significance, context, rows, prefix, path) -> Figure:
    points, levels = _by_method(rows, lambda r: r["sparsity"]), sorted({r["sparsity"] for r in rows})
    series = [Series(m, [p[0] for p in pts], [p[1] for p in pts]) for m, pts in points.items() if m != "dense"]
    if "dense" in points:  # dense runs at sparsity 0 only: drawn across the levels as the reference
        ppl = points["dense"][0][1]
        series.append(Series("dense", [levels[0], levels[-1]], [ppl, ppl], dashed=True))
    warning = warnings_of(series)
    tests = _against_dense(significance)
    marked = sorted((r["sparsity"], r["ppl_of_mean_nll"]) for r in rows
                    if _significant(tests.get((r["method"], r["sparsity"], context))))
    if marked:
        series.append(Series(_test_label(significance), [p[0] for p in marked], [p[1] for p in marked],
                             points=True, marker="*"))
    return Figure(file_safe(f"{prefix}_ppl_vs_sparsity_C{context}"), f"generation: perplexity vs sparsity, C={context}",
                  "sparsity (fraction of the KV cache evicted)", "perplexity (exp of the mean NLL)", series,
                  _gen_provenance(record, context, rows), str(path), warning)


def _ppl_vs_memory(record, context, rows, prefix, path) -> list[Figure]:
    """Perplexity vs the mean peak KV cache (MiB) of each arm, else vs its mean peak memory."""
    kv = all(_mean(r, "kv_bytes_peak") is not None for r in rows)
    metric, scale = ("kv_bytes_peak", 2**20) if kv else ("peak_memory_mb", 1)
    measured = [r for r in rows if _mean(r, metric) is not None]
    if not measured:
        return []
    xlabel = "mean peak KV cache (MiB)" if kv else f"mean peak memory MB ({record.get('memory_kind') or 'as measured'})"
    series = [Series(m, [p[0] for p in pts], [p[1] for p in pts])
              for m, pts in _by_method(measured, lambda r: _mean(r, metric) / scale).items()]
    return [Figure(file_safe(f"{prefix}_ppl_vs_memory_C{context}"), f"generation: perplexity vs memory, C={context}",
                   xlabel, "perplexity (exp of the mean NLL)", series, _gen_provenance(record, context, measured),
                   str(path), warnings_of(series), scatter=True)]


GEN_COLUMNS = ["method", "sparsity", "context", "ppl (of mean NLL)", "NLL mean", "NLL std", "n windows", "seeds",
               "decode tok/s", "KV MiB", "peak memory MB", "p vs dense", "NLL diff vs dense", f"p < {ALPHA:g}"]
TEST_COLUMNS = ["context", "sparsity", "a", "a sparsity", "b", "b sparsity", "n", "t", "p",
                "mean NLL difference (a - b)", f"p < {ALPHA:g}"]


def _gen_row(row: dict, test: Optional[dict]) -> list:
    nll, kv = (row.get("metrics") or {}).get("nll") or {}, _mean(row, "kv_bytes_peak")
    test = test or {}
    return [row["method"], row["sparsity"], row["context_length"], row["ppl_of_mean_nll"], _blank(nll.get("mean")),
            _blank(nll.get("std")), _blank(row.get("n_samples")), " ".join(map(str, row.get("seeds") or [])),
            _blank(_mean(row, "decode_tokens_per_s")), "" if kv is None else kv / 2**20,
            _blank(_mean(row, "peak_memory_mb")), _blank(test.get("p")), _blank(test.get("mean_difference")),
            _significant(test) if test else ""]


def generation_items(record: dict, significance: Optional[dict], path: Path,
                     significance_path: Optional[Path] = None) -> list:
    rows, prefix = list(record["results"].values()), file_safe(f"generation_{Path(path).parent.name}")
    contexts = sorted({r["context_length"] for r in rows})
    items = []
    for context in contexts:
        here = [r for r in rows if r["context_length"] == context]
        items += [_ppl_vs_sparsity(record, significance, context, here, prefix, path),
                  *_ppl_vs_memory(record, context, here, prefix, path)]
    tests = _against_dense(significance)
    items.append(Table(f"{prefix}_aggregated", "generation: every (method, sparsity, context) over seeds, with its "
                       "paired test against dense", GEN_COLUMNS,
                       [_gen_row(r, tests.get((r["method"], r["sparsity"], r["context_length"]))) for r in rows],
                       _gen_provenance(record, None, rows), str(path)))
    if significance and significance.get("tests"):
        items.append(Table(f"{prefix}_significance", f"generation: every paired test ({_test_label(significance)})",
                           TEST_COLUMNS, [[t["context_length"], t["sparsity"], t["a"], t["a_sparsity"], t["b"],
                                           t["b_sparsity"], t.get("n"), _blank(t.get("t")), _blank(t.get("p")),
                                           _blank(t.get("mean_difference")), _significant(t)]
                                          for t in significance["tests"]],
                           _gen_provenance(significance, None, rows, str(significance.get("test") or "")),
                           str(significance_path or path)))
    return items


# ---- test --task (results/downstream.py `DownstreamRecorder`) ----------------------------------------
TASK_COLUMNS = ["task", "metric", "value", "n", "run", "protocol", "sparsity", "bits", "date"]


def _counts(entry: dict) -> list:
    """n of each score `records._task_scores` reads from this entry, in its order."""
    if "tasks" in entry:
        return [task.get("num_samples") for task in entry["tasks"].values()]
    if "subject_counts" in entry:  # MMLU: every question of the subjects scored
        return [sum(c.get("total", 0) for c in entry["subject_counts"].values())]
    return [entry.get("dataset_size")]


def _scores(record: dict, path: Path):
    """(task, metric, value, n, run id) of each score; in a merged view only those whose run has no file of its
    own beside it (that file is reported instead: records.task_rows' rule)."""
    merged_view, stem = not RUN_ID.search(path.name), path.stem.removesuffix("_before_run_ids")
    for benchmark, entry in record.items():
        if benchmark in ("model", "runs", "note") or not isinstance(entry, dict):
            continue
        for (task, metric, value, runs), n in zip(records._task_scores(benchmark, entry), _counts(entry)):
            if not (merged_view and any((path.parent / f"{stem}_{r}.json").exists() for r in runs)):
                yield task, metric, value, n, min(runs, default="")


def _run_columns(run: dict) -> list:
    protocol, sparsity = run.get("protocol") or {}, run.get("sparsity") or {}
    shots = protocol.get("num_fewshot")
    return [f"{protocol.get('name', '')}{f' {shots}-shot' if shots else ''}",
            records._sparsity(sparsity.get("method"), sparsity.get("ratio"), sparsity.get("budget_tokens")),
            _blank((run.get("config") or {}).get("bits")),
            ((run.get("meta") or {}).get("created_utc") or "")[:19].replace("T", " ")]


def task_items(record: dict, path: Path) -> list:
    model, name = record.get("model", ""), file_safe(f"task_{Path(path).stem}")
    if record.get("status") == "diverged":  # a fine-tuning that stopped: no scores, the table says so
        return [Table(name, f"{model}: fine-tuning diverged", TASK_COLUMNS,
                      [[task, "", "diverged", "", "", "finetune", "", "", ""] for task in record.get("tasks") or []],
                      provenance(record.get("meta"), model=model, data=", ".join(record.get("tasks") or [])),
                      str(path))]
    scores, runs = list(_scores(record, Path(path))), record.get("runs") or {}
    if not scores:
        return []
    prov = _joined(provenance((runs.get(r) or {}).get("meta"), model=model,
                              data=", ".join(s[0] for s in scores if s[4] == r),
                              data_block=((runs.get(r) or {}).get("meta") or {}).get("data"),
                              protocol=_run_columns(runs.get(r) or {})[0],
                              n=", ".join(f"{s[0]} {s[3]}" for s in scores if s[4] == r and s[3] is not None))
                   for r in dict.fromkeys(s[4] for s in scores))
    table = Table(name, f"{model}: headline score per task", TASK_COLUMNS,
                  [[task, metric, _blank(value), _blank(n), run, *_run_columns(runs.get(run) or {})]
                   for task, metric, value, n, run in scores], prov, str(path))
    numbers = [s for s in scores if isinstance(s[2], (int, float)) and not isinstance(s[2], bool)]
    if len(numbers) < 2:
        return [table]
    by_metric: dict[str, list] = {}
    for task, metric, value, _, _ in numbers:
        by_metric.setdefault(metric, []).append((task, value))
    series = [Series(metric, [p[0] for p in pts], [p[1] for p in pts]) for metric, pts in by_metric.items()]
    values = [s[2] for s in numbers]
    mixed = "scales differ (fractions in [0, 1] beside percentages: see the record's note)" \
        if min(values) <= 1 < max(values) else ""
    return [table, Figure(f"{name}_scores", f"{model}: headline score per task", "task", "headline score",
                          series, prov, str(path), mixed, bars=True)]
