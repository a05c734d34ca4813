"""Markdown tables of a `lightning_bench downstream` results file, as docs/long_context.md shows them.

    python benchmarks/downstream_table.py RESULTS_JSON [--protocols query_aware query_agnostic]
    python benchmarks/downstream_table.py RESULTS_DIR/NAME/cells   # a grid still running: its finished cells

One table per protocol: a row per task (its headline metric, percent), a column per method and
compression level (dense once), a last row with the mean over the tasks every column has; then the
compute each (task, protocol) group took, from its cells' own timing: the shared dense prefill once
(the smallest prefill_seconds of the group: every cell's counts that prefill whole plus its own
compression), each cell's compression (its prefill_seconds minus that) and every cell's decoding.
The driver's `{name}_summary.txt` has the per-cell CIs; this only lays the headline figures out.
"""

import argparse
import json
from collections import defaultdict
from pathlib import Path


def column(cell: dict) -> str:
    return "dense" if cell["method"] == "dense" else f"{cell['method']} {cell['level']:g}"


def tables(cells: list[dict], protocol: str) -> list[str]:
    mine = [c for c in cells if c["compression_protocol"] == protocol]
    if not mine:
        return []
    columns = list(dict.fromkeys(column(c) for c in mine))
    scores: dict[str, dict[str, float]] = defaultdict(dict)
    metric: dict[str, str] = {}
    groups: dict[str, list[dict]] = defaultdict(list)
    for c in mine:
        scores[c["task"]][column(c)] = c["metrics"][c["primary_metric"]] if c["primary_metric"] in c["metrics"] \
            else next(v for k, v in c["metrics"].items() if isinstance(v, (int, float)))
        metric[c["task"]] = c["metrics"].get("metric", c["primary_metric"])
        groups[c["task"]].append(c)
    out = [f"**{protocol}**", "", "| task (n) | " + " | ".join(columns) + " |",
           "|---" * (len(columns) + 1) + "|"]
    for task, row in scores.items():
        n = groups[task][0]["num_examples"]
        out.append(f"| {task} ({n}) | " + " | ".join(f"{row[k]:.1f}" if k in row else "—" for k in columns) + " |")
    complete = [t for t, row in scores.items() if all(k in row for k in columns)]
    if len(complete) > 1:
        out.append(f"| mean of {len(complete)} tasks | " + " | ".join(
            f"{sum(scores[t][k] for t in complete) / len(complete):.1f}" for k in columns) + " |")
    out += ["", "| task | cells | shared prefill s | compressions s | decoding s | total s |", "|---|---|---|---|---|---|"]
    for task, group in groups.items():
        prefill = min(c["timing"]["prefill_seconds"] for c in group)
        compress = sum(c["timing"]["prefill_seconds"] - prefill for c in group)
        decode = sum(c["timing"]["decode_seconds"] for c in group)
        out.append(f"| {task} | {len(group)} | {prefill:.0f} | {compress:.0f} | {decode:.0f} | "
                   f"{prefill + compress + decode:.0f} |")
    return out + [""]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results")
    parser.add_argument("--protocols", nargs="+", default=["query_aware", "query_agnostic", "interval"])
    parser.add_argument("--methods", nargs="+", default=["dense", "streaming_llm", "snapkv", "tova", "knorm", "h2o"],
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
    for protocol in args.protocols:
        print("\n".join(tables(cells, protocol)))


if __name__ == "__main__":
    main()
