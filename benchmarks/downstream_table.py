"""Markdown tables of a `lightning_bench downstream` results file, as docs/long_context.md shows them.

    python benchmarks/downstream_table.py RESULTS_JSON [--protocols query_aware query_agnostic]
    python benchmarks/downstream_table.py RESULTS_DIR/NAME/cells   # a grid still running: its finished cells
    python benchmarks/downstream_table.py ... --ci   # each score with its 95% CI: "97.5 [92.5, 100.0]"
    python benchmarks/downstream_table.py ... --compact   # one row per (task, protocol), "0.5 / 0.9" per method
    python benchmarks/downstream_table.py ... --attention # a row per cell: score, density or kept, attention error

One table per protocol: a row per task (its headline metric, percent), a column per method and
compression level (dense once), a last row with the mean over the tasks every column has; then the
compute each (task, protocol) group took, from its cells' own timing: the shared dense prefill once
(the smallest prefill_seconds of the group's cells made by one run: every cell's counts that prefill whole plus
its own compression; a group whose cells came from several runs, e.g. dense first, counts each run's prefill),
each cell's compression (its prefill_seconds minus its run's prefill) and every cell's decoding.
`--ci` prints each cell's own 95% bootstrap CI beside its score (the cell's `<metric>_ci95`); the driver's
`{name}_summary.txt` has the paired differences against dense and h2o with theirs.
"""

import argparse
import json
from datetime import datetime
from collections import defaultdict
from pathlib import Path


RUN_GAP_S = 300  # cells of one group run are written together; another run's were written long before


def column(cell: dict) -> str:
    return "dense" if cell["method"] == "dense" else f"{cell['method']} {cell['level']:g}"


def headline(cell: dict) -> float:
    """The cell's headline figure: its primary metric, else (an older record) its first numeric figure."""
    metrics = cell["metrics"]
    if cell["primary_metric"] in metrics:
        return metrics[cell["primary_metric"]]
    return next(v for v in metrics.values() if isinstance(v, (int, float)))


def score_text(cell: dict, ci: bool) -> str:
    bounds = cell["metrics"].get(f"{cell['primary_metric']}_ci95") if ci else None
    return f"{headline(cell):.1f}" + (f" [{bounds[0]:.1f}, {bounds[1]:.1f}]" if bounds else "")


def tables(cells: list[dict], protocol: str, ci: bool = False) -> list[str]:
    mine = [c for c in cells if c["compression_protocol"] == protocol]
    if not mine:
        return []
    columns = list(dict.fromkeys(column(c) for c in mine))
    scores: dict[str, dict[str, float]] = defaultdict(dict)
    shown: dict[str, dict[str, str]] = defaultdict(dict)
    metric: dict[str, str] = {}
    groups: dict[str, list[dict]] = defaultdict(list)
    for c in mine:
        scores[c["task"]][column(c)] = headline(c)
        shown[c["task"]][column(c)] = score_text(c, ci)
        metric[c["task"]] = c["metrics"].get("metric", c["primary_metric"])
        groups[c["task"]].append(c)
    out = [f"**{protocol}**", "", "| task (n) | " + " | ".join(columns) + " |",
           "|---" * (len(columns) + 1) + "|"]
    for task, row in scores.items():
        n = groups[task][0]["num_examples"]
        out.append(f"| {task} ({n}) | " + " | ".join(shown[task].get(k, "—") for k in columns) + " |")
    complete = [t for t, row in scores.items() if all(k in row for k in columns)]
    if len(complete) > 1:
        out.append(f"| mean of {len(complete)} tasks | " + " | ".join(
            f"{sum(scores[t][k] for t in complete) / len(complete):.1f}" for k in columns) + " |")
    out += ["", "| task | cells | shared prefill s | compressions s | decoding s | total s |", "|---|---|---|---|---|---|"]
    for task, group in groups.items():
        runs = by_run(group)
        prefill = sum(min(c["timing"]["prefill_seconds"] for c in run) for run in runs)
        compress = sum(c["timing"]["prefill_seconds"] - min(d["timing"]["prefill_seconds"] for d in run)
                       for run in runs for c in run)
        decode = sum(c["timing"]["decode_seconds"] for c in group)
        out.append(f"| {task} | {len(group)}{f' ({len(runs)} runs)' if len(runs) > 1 else ''} | {prefill:.0f} | "
                   f"{compress:.0f} | {decode:.0f} | {prefill + compress + decode:.0f} |")
    return out + [""]


def compact(cells: list[dict], protocols: list[str]) -> list[str]:
    """One row per (task, protocol) with at least one method cell, a column per method with its levels as "a / b",
    and per protocol a mean row over the rows that have dense and every column of that protocol."""
    shown = [c for c in cells if c["compression_protocol"] in protocols]
    methods = list(dict.fromkeys(c["method"] for c in shown if c["method"] != "dense"))
    levels = {m: sorted({c["level"] for c in shown if c["method"] == m}) for m in methods}
    rows: dict[tuple, dict] = defaultdict(dict)
    for c in shown:
        rows[(c["task"], c["compression_protocol"])][(c["method"], c["level"])] = headline(c)
    head = ["task, protocol", "dense"] + [f"{m} {' / '.join(f'{v:g}' for v in levels[m])}" for m in methods]
    out = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for protocol in protocols:
        mine = [(task, row) for (task, p), row in rows.items() if p == protocol and any(m != "dense" for m, _ in row)]
        for task, row in mine:
            dense = next((v for (m, _), v in row.items() if m == "dense"), None)
            cols = [" / ".join(f"{row[(m, v)]:.1f}" if (m, v) in row else "—" for v in levels[m]) for m in methods]
            out.append(f"| {task.split('/')[-1]}, {protocol} | {'—' if dense is None else f'{dense:.1f}'} | "
                       + " | ".join(cols) + " |")
        keys = {k for _, row in mine for k in row if k[0] != "dense"}  # this protocol's columns
        full = [row for _, row in mine if keys <= row.keys() and any(m == "dense" for m, _ in row)]
        if len(full) > 1:
            dense = sum(next(v for (m, _), v in row.items() if m == "dense") for row in full) / len(full)
            cols = [" / ".join(f"{sum(row[(m, v)] for row in full) / len(full):.1f}" if (m, v) in keys else "—"
                               for v in levels[m]) for m in methods]
            out.append(f"| **mean of {len(full)} tasks, {protocol}** | {dense:.1f} | " + " | ".join(cols) + " |")
    return out


def attention_rows(cells: list[dict]) -> list[str]:
    """A row per cell, for grids metered with --attention_error (masker stacks beside eviction): the score with its
    CI, the density of a stack (kept entries / causal entries) or the kept fraction of an eviction cell, and the
    attention-output error against dense attention on the same inputs (means over layers)."""
    out = ["| task, protocol | method | score [95% CI] | density / kept | attention error | decode s |",
           "|---|---|---|---|---|---|"]
    for c in cells:
        attention = c.get("attention") or {}
        stack = "density" in attention and c["method"] != "dense" and c["budget_kind"] == "sparsity" and not c["level"]
        share = attention.get("density") if stack else c["cache"].get("kept_fraction_of_compressed")
        error = attention.get("attention_error")
        name = c["method"] if stack else column(c)
        out.append(f"| {c['task'].split('/')[-1]}, {c['compression_protocol']} | {name} | {score_text(c, True)} | "
                   f"{'—' if share is None else f'{share:.3f}'} | {'—' if error is None else f'{error:.3f}'} | "
                   f"{c['timing']['decode_seconds']:.0f} |")
    return out


def by_run(group: list[dict]) -> list[list[dict]]:
    """The group's cells split by the run that computed them: a run writes its cells within seconds of each other
    at the group's end, so cells written more than RUN_GAP_S apart came from different runs (e.g. dense in an
    earlier run). Each run had its own shared prefill: taking one minimum over every run's cells booked the
    difference between the runs' prefills as compression."""
    group = sorted(group, key=lambda c: c.get("meta", {}).get("created_utc", ""))
    runs, last = [], None
    for cell in group:
        created = cell.get("meta", {}).get("created_utc")
        at = datetime.fromisoformat(created).timestamp() if created else None
        if not runs or at is None or last is None or at - last > RUN_GAP_S:
            runs.append([])
        runs[-1].append(cell)
        last = at
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--protocols", nargs="+", default=["query_aware", "query_agnostic", "interval"])
    parser.add_argument("--ci", action="store_true", help="each score with its cell's 95%% CI")
    parser.add_argument("--compact", action="store_true", help="one table: a row per (task, protocol)")
    parser.add_argument("--attention", action="store_true", help="a row per cell with density and attention error")
    parser.add_argument("--methods", nargs="+",
                        default=["dense", "streaming_llm", "snapkv", "tova", "knorm", "h2o", "observed_attention"],
                        help="column order for a cells folder (a results file keeps its grid's order)")
    args = parser.parse_args()
    if Path(args.results).is_dir():  # the cell files of a grid not finished yet (each a whole cell record)
        cells = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(Path(args.results).glob("*.json"))]
        order = {m: i for i, m in enumerate(args.methods)}  # columns as the presets list the methods
        listed = max((c.get("meta", {}).get("data", {}).get("tasks", []) for c in cells), key=len, default=[])
        rank = {t: i for i, t in enumerate(listed)}  # rows as the longest run's task list (the grid's order)
        cells.sort(key=lambda c: (rank.get(c["task"], len(rank)), c["task"], order.get(c["method"], len(order)),
                                  c["method"], c["level"]))
        print(f"{Path(args.results).parent.name} (finished cells only): {len(cells)} cells")
    else:
        record = json.load(open(args.results, encoding="utf-8"))
        cells = list(record["cells"].values())
        print(f"{record['name']}: {len(cells)} cells; model {record['config']['model']['pretrained']}")
    if args.attention:
        print("\n".join(attention_rows([c for c in cells if c["compression_protocol"] in args.protocols])))
        return
    if args.compact:
        print("\n".join(compact(cells, args.protocols)))
        return
    for protocol in args.protocols:
        print("\n".join(tables(cells, protocol, args.ci)))


if __name__ == "__main__":
    main()
