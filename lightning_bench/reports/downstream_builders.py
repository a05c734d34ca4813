"""Figures and tables of a downstream / long-context grid (`lightning_bench downstream`: the cells of
`{name}_results.json`, or the cell files of a grid still running), per task:

  score vs sparsity   one series per (method, compression protocol), error bars from the cell's own
                      bootstrap CI (`metrics[{primary}_ci95]`), the dense score as a dashed line
  Pareto              score vs mean peak KV MiB (`cache.kv_bytes_peak_mean`), one point per cell
  RULER heatmap       (tasks `ruler/...`) per method: rows sparsity level, columns needle depth, value the
                      mean per-example score there
  RULER by length     (`length_items`, over cells of several grids: one grid runs one length) per method:
                      rows sparsity level, columns the context length, value the cell's score
and one table of every cell. Cells given in budget tokens are in the table only (no sparsity axis).
"""

from __future__ import annotations

from collections import defaultdict

from lightning_bench.reports.figures import Figure, Series, Table, warnings_of
from lightning_bench.reports.provenance import file_safe, provenance
from lightning_bench.reports.records import _model_name as model_name
from lightning_bench.results.io import SAMPLES_FILE, cell_samples

CELL_COLUMNS = ["task", "protocol", "method", "level", "score", "n", "kept fraction", "KV MiB", "decode tok/s"]


class Cell(dict):
    """A cell as written, plus where it was read (`_source`) and the grid's meta when it has none."""


def _score(cell):
    return cell["metrics"].get(cell["primary_metric"])


def _cells_provenance(cells: list[Cell], task: str) -> str:
    first = cells[0]
    protocol = first.get("protocol") or {}
    counts = sorted({c.get("num_examples") for c in cells} - {None})
    return provenance(first.get("meta") or first.get("_meta"), model=model_name(protocol.get("model") or {}),
                      data=task, data_block=[(c.get("protocol") or {}).get("data") for c in cells],
                      protocol=", ".join(sorted({c["compression_protocol"] for c in cells})),
                      n=("-".join(map(str, [counts[0], counts[-1]] if len(counts) > 1 else counts))
                         + " examples per cell") if counts else "")


def _label(cell) -> str:
    return f"{cell['method']} ({cell['compression_protocol']})"


def _score_vs_sparsity(task: str, cells: list[Cell], prefix: str) -> list[Figure]:
    by_level = [c for c in cells if c.get("budget_kind", "sparsity") == "sparsity"]
    if not any(c["method"] != "dense" for c in by_level):  # dense alone has no sparsity axis: the table says it
        return []
    levels = sorted({c["level"] for c in by_level})
    groups = defaultdict(list)
    for cell in sorted(by_level, key=lambda c: c["level"]):
        if cell["method"] != "dense":
            groups[_label(cell)].append(cell)
    series, ci_counts = [], []
    for label, group in groups.items():
        bounds = [c["metrics"].get(f"{c['primary_metric']}_ci95") for c in group]
        has_ci = all(isinstance(b, list) and len(b) == 2 for b in bounds)
        ci_counts += [c.get("num_examples") for c in group] if has_ci else []
        series.append(Series(label, [c["level"] for c in group], [_score(c) for c in group],
                             low=[b[0] for b in bounds] if has_ci else None,
                             high=[b[1] for b in bounds] if has_ci else None))
    dense = {c["compression_protocol"]: _score(c) for c in by_level if c["method"] == "dense"}
    if len(set(dense.values())) == 1:  # dense does not compress: the protocols agree, one line says it
        dense = {"": next(iter(dense.values()))}
    for protocol, score in dense.items():
        series.append(Series(f"dense ({protocol})" if protocol else "dense", [levels[0], levels[-1]],
                             [score, score], dashed=True))
    known = [n for n in ci_counts if n is not None]
    metric = cells[0]["primary_metric"]
    return [Figure(file_safe(f"{prefix}_{task}_score_vs_sparsity"), f"{task}: {metric} vs sparsity",
                   "sparsity (fraction of the prompt's KV cache evicted)", metric, series,
                   _cells_provenance(cells, task), cells[0]["_source"],
                   warnings_of(series, min(known) if known else None))]


def _pareto(task: str, cells: list[Cell], prefix: str) -> list[Figure]:
    """Every cell as a point (mean peak KV MiB, score), and the front: the cells no other cell beats on
    both (as little memory, a higher score), drawn dashed."""
    points = [(c["cache"]["kv_bytes_peak_mean"] / 2**20, _score(c), c) for c in cells
              if (c.get("cache") or {}).get("kv_bytes_peak_mean") is not None and _score(c) is not None]
    if not points:
        return []
    groups = defaultdict(list)
    for kv, score, cell in sorted(points, key=lambda p: p[0]):
        groups[_label(cell)].append((kv, score))
    series = [Series(label, [p[0] for p in pts], [p[1] for p in pts]) for label, pts in groups.items()]
    front, best = [], float("-inf")
    for kv, score, _ in sorted(points, key=lambda p: (p[0], -p[1])):
        if score > best:
            front.append((kv, score))
            best = score
    if len(front) > 1:
        series.append(Series("Pareto front", [p[0] for p in front], [p[1] for p in front], dashed=True))
    metric = cells[0]["primary_metric"]
    return [Figure(file_safe(f"{prefix}_{task}_pareto_kv"), f"{task}: {metric} vs KV cache memory",
                   "mean peak KV cache (MiB)", metric, series, _cells_provenance(cells, task), cells[0]["_source"],
                   warnings_of(series), scatter=True)]


def _per_example(cell) -> list[tuple[float, float]]:
    """(needle depth, score) of each example: the samples' `depth` with `primary_per_example`, else each
    sample's own `scores`. Cells written before samples had a depth give `metrics.by_depth`: one mean per
    depth, each counted as one example, as does a results cell whose cell file is gone."""
    try:
        samples = cell_samples(cell, cell["_source"]) if SAMPLES_FILE in cell else cell.get("samples")
    except (OSError, ValueError, KeyError):
        samples = None
    samples = samples if isinstance(samples, list) else []
    scores = cell.get("primary_per_example")
    if samples and all(isinstance(s, dict) and s.get("depth") is not None for s in samples):
        if not (isinstance(scores, list) and len(scores) == len(samples)):
            scores = [(s.get("scores") or {}).get(cell["primary_metric"]) for s in samples]
        return [(float(s["depth"]), v) for s, v in zip(samples, scores) if v is not None]
    return [(float(d), v) for d, v in (cell["metrics"].get("by_depth") or {}).items() if v is not None]


def _depth_label(depth: float) -> str:
    return f"{depth:g}"


def _heatmaps(task: str, cells: list[Cell], prefix: str) -> list[Figure]:
    dense = [c for c in cells if c["method"] == "dense"]
    figures = []
    methods = list(dict.fromkeys(c["method"] for c in cells if c["method"] != "dense")) or ["dense"] * bool(dense)
    for method in methods:  # dense is each method's first row; its own heatmap only when it is alone
        rows: dict[str, list] = {"dense": [p for c in dense for p in _per_example(c)]} if dense else {}
        for cell in sorted((c for c in cells if c["method"] == method != "dense"), key=lambda c: (c["level"], c["compression_protocol"])):
            rows.setdefault(f"{cell['level']:g} {cell['compression_protocol']}", []).extend(_per_example(cell))
        depths = sorted({d for pts in rows.values() for d, _ in pts})
        if not depths:
            continue
        values = []
        for pts in rows.values():
            at = defaultdict(list)
            for depth, score in pts:
                at[depth].append(score)
            values.append([sum(at[d]) / len(at[d]) if at[d] else None for d in depths])
        heatmap = {"rows": list(rows), "cols": [_depth_label(d) for d in depths], "values": values}
        figures.append(Figure(file_safe(f"{prefix}_{task}_{method}_depth_heatmap"),
                              f"{task}, {method}: mean {cells[0]['primary_metric']} by needle depth",
                              "needle depth (% of the context)", "sparsity level, protocol", [],
                              _cells_provenance(cells, task), cells[0]["_source"], heatmap=heatmap))
    return figures


def context_length(cell) -> int | None:
    """The context length a cell's examples were built for: a RULER set's split is its length (`generate_ruler
    --lengths`), else the grid's `max_length`."""
    protocol = cell.get("protocol") or {}
    split = str((protocol.get("data") or {}).get("split") or "")
    return int(split) if split.isdigit() else protocol.get("max_length")


def length_items(cells: list[Cell], prefix: str) -> list[Figure]:
    """RULER score by context length, from cells of any number of grids (one grid runs one length): for every
    (model, `ruler/...` task) with cells at two or more lengths, a heatmap per method: rows the sparsity level
    and protocol (dense first), columns the lengths, values the cell's score (its primary metric). Two cells
    at one place (two grids of one model and length) keep the first read, and the figure says so."""
    groups = defaultdict(list)
    for cell in cells:
        if cell["task"].startswith("ruler/") and context_length(cell) and cell.get("budget_kind", "sparsity") == "sparsity":
            groups[model_name((cell.get("protocol") or {}).get("model") or {}), cell["task"]].append(cell)
    figures = []
    for (model, task), group in groups.items():
        lengths = sorted({context_length(c) for c in group})
        if len(lengths) < 2:
            continue
        for method in dict.fromkeys(c["method"] for c in group if c["method"] != "dense"):
            rows: dict[str, dict] = {}
            clashes = 0
            chosen = sorted((c for c in group if c["method"] in ("dense", method)),
                            key=lambda c: (c["method"] != "dense", c["level"], c["compression_protocol"]))
            for cell in chosen:
                row = "dense" if cell["method"] == "dense" else f"{cell['level']:g} {cell['compression_protocol']}"
                at = rows.setdefault(row, {})
                clashes += context_length(cell) in at
                at.setdefault(context_length(cell), _score(cell))
            heatmap = {"rows": list(rows), "cols": [str(n) for n in lengths],
                       "values": [[row.get(n) for n in lengths] for row in rows.values()]}
            figures.append(Figure(file_safe(f"{prefix}_{model}_{task}_{method}_length_heatmap"),
                                  f"{task}, {method} ({model}): {group[0]['primary_metric']} by context length",
                                  "context length (tokens)", "sparsity level, protocol", [],
                                  _cells_provenance(group, task), ", ".join(sorted({c["_source"] for c in group})),
                                  f"{clashes} cells measured twice: the first read is shown" if clashes else "",
                                  heatmap=heatmap))
    return figures


def _cell_row(cell) -> list:
    cache, timing = cell.get("cache") or {}, cell.get("timing") or {}
    kv = cache.get("kv_bytes_peak_mean")
    level = f"b{int(cell['level'])}" if cell.get("budget_kind") == "budget_tokens" else cell["level"]
    blank = lambda v: "" if v is None else v  # noqa: E731 - an absent figure is an empty cell, not "None"
    return [cell["task"], cell["compression_protocol"], cell["method"], level, blank(_score(cell)),
            blank(cell.get("num_examples")), blank(cache.get("kept_fraction_of_compressed")),
            "" if kv is None else kv / 2**20, blank(timing.get("decode_tokens_per_s"))]


def downstream_items(cells: list[Cell], prefix: str, source: str) -> list:
    """Every figure of the grid `prefix`, task by task, then the table of its cells."""
    by_task = defaultdict(list)
    for cell in cells:
        by_task[cell["task"]].append(cell)
    items = []
    for task, group in by_task.items():
        items += _score_vs_sparsity(task, group, prefix) + _pareto(task, group, prefix)
        if task.startswith("ruler/"):
            items += _heatmaps(task, group, prefix)
    order = sorted(cells, key=lambda c: (c["task"], c["compression_protocol"], c["method"] != "dense",
                                         c["method"], c["level"]))
    items.append(Table(file_safe(f"{prefix}_cells"), f"{prefix}: every cell", CELL_COLUMNS,
                       [_cell_row(c) for c in order],
                       _cells_provenance(cells, ", ".join(by_task) if len(by_task) <= 3 else f"{len(by_task)} tasks"),
                       source))
    return items
