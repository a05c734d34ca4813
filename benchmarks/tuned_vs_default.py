"""Tuned against default configs on the same held-out rows: a markdown table from two `downstream` runs.

    python benchmarks/tuned_vs_default.py DEFAULT_CELLS TUNED_CELLS [--tuned_configs DIR]

DEFAULT_CELLS and TUNED_CELLS are the `cells` folders of two runs of one grid, the second with
`--tuned_configs` (benchmarks/tune_smollm2.sh makes both). A row per (task, config): the headline score of
each, their paired difference with its bootstrap 95% CI over the same examples (the library's
`paired_difference`, so the CI is the one the downstream summary prints), the attention error and density
of each (pooled over the rows, against full attention at the same step), the tuned parameters, and the
search's best objective and trial count from the tuning cache entry where DIR is given; then, with DIR, a row per
search from its trials table: trials (valid ones, ones that ran every tuning row), the defaults' objective and
score on the tuning rows beside the best's, and the trials' summed wall time.
"""

import argparse
import json
from pathlib import Path

from lightning_bench.experiments.downstream.scoring import paired_difference


def cells(folder: Path) -> dict:
    out = {}
    for path in sorted(folder.glob("*.json")):
        cell = json.loads(path.read_text())
        out[(cell["task"], cell["method"], cell["compression_protocol"], cell["level"])] = cell
    return out


def scores(cell: dict) -> dict[str, float]:
    return {s["id"]: v for s, v in zip(cell["samples"], cell["primary_per_example"])}


def entry(tuned_dir, task: str, config: str):
    if tuned_dir is None:
        return None
    found = sorted(Path(tuned_dir).glob(f"*__{config}__{task.replace('/', '-')}.json"))
    return json.loads(found[0].read_text()) if found else None


def attention(cell: dict) -> str:
    a = cell.get("attention")
    return f"{a['attention_error']:.4f} / {a['density']:.3f}" if a else "—"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("default", type=Path)
    parser.add_argument("tuned", type=Path)
    parser.add_argument("--tuned_configs", default=None)
    args = parser.parse_args()
    default, tuned = cells(args.default), cells(args.tuned)
    print("| task | config | default | tuned | tuned − default [95% CI] | n | attention error / density: default | "
          "tuned | tuned parameters | search: best objective, trials |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(default.keys() & tuned.keys()):
        d, t = default[key], tuned[key]
        ds, ts = scores(d), scores(t)
        ids = sorted(ds.keys() & ts.keys(), key=lambda i: (len(i), i))
        if len(ids) != len(ds) or len(ids) != len(ts):
            raise SystemExit(f"{key}: the runs scored different examples ({len(ds)} and {len(ts)}, {len(ids)} shared)")
        diff = paired_difference([ts[i] for i in ids], [ds[i] for i in ids])
        ci = "—" if diff["ci95"] is None else f"[{diff['ci95'][0]:+.1f}, {diff['ci95'][1]:+.1f}]"
        params = {k: v for k, v in t["method_params"].items() if d["method_params"].get(k) != v
                  and k not in ("tuned_from",)}
        found = entry(args.tuned_configs, key[0], key[1])
        search = f"{found['objective']:.4f}, {found['trials']}" \
            if found else "—"
        mean = lambda s: sum(s.values()) / len(s)  # noqa: E731
        label = f"{key[1]} {key[3]:g}" if key[3] else key[1]  # a stack's level is 0: its density is its own
        print(f"| {key[0]} | {label} | {mean(ds):.1f} | {mean(ts):.1f} | {diff['mean_difference']:+.1f} "
              f"{ci} | {diff['n']} | {attention(d)} | {attention(t)} | "
              f"{', '.join(f'{k}={v:.4g}' if isinstance(v, float) else f'{k}={v}' for k, v in params.items()) or 'the defaults'}"
              f" | {search} |")
    if args.tuned_configs:
        searches(args.tuned_configs)


def searches(tuned_dir) -> None:
    import pandas

    print("\n| config | task | trials (valid, all rows) | default: objective, score | best: objective, score | "
          "trials' wall s |")
    print("|---|---|---|---|---|---|")
    for path in sorted(Path(tuned_dir).glob("*__*__*.json")):
        found = json.loads(path.read_text())
        trials = pandas.read_csv(path.with_suffix(".trials.csv"))
        valid = trials[trials["valid"] == True]  # noqa: E712 - a pandas mask
        full = valid[valid["rows"] >= found["search"]["tune_samples"]]
        first = trials.iloc[0]  # the declared defaults: every search evaluates them first
        best = full.loc[full["objective"].idxmin()] if len(full) else None
        pair = lambda row: "—" if row is None else f"{row['objective']:.4f}, {100 * row['benchmark_score']:.1f}"  # noqa: E731
        print(f"| {found['config']} | {', '.join(found['tasks'])} | {len(trials)} ({len(valid)}, {len(full)}) | "
              f"{pair(first)} | {pair(best)} | {trials['time_total_s'].sum():.0f} |")


if __name__ == "__main__":
    main()
