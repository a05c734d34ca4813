"""The generation benchmark's summaries, recomputed from every cell file of the experiment folder:
aggregated_results.json (statistics per (method, sparsity, C) over every sample of every seed) and
significance_tests.json (paired t-tests on the per-sample NLL), and the table the command prints.
The unit of observation is the window: each is drawn once across seeds (data.sample_starts), and a
folder whose cells share a window between seeds is refused rather than counted twice."""

from __future__ import annotations

import itertools
import math

from lightning_bench.errors import PROG, ConfigError
from lightning_bench.experiments.core.aggregate import STD_KIND, describe, paired_ttest
from lightning_bench.experiments.generation.config import Cell
from lightning_bench.results.io import write_json_atomic

# per-sample metrics, aggregated over seeds and samples
METRICS = ("nll", "ppl", "decode_tokens_per_s", "tokens_per_s", "seconds", "prefill_seconds", "peak_memory_mb",
           "peak_memory_increase_mb", "avg_cache_length", "final_cache_length", "kv_bytes_peak", "kv_bytes_mean",
           "dense_kv_bytes_peak", "kv_fraction")


def cell_of(record: dict) -> Cell:
    return Cell(record["method"], record["sparsity"], record["context_length"], record["seed"])


def _group_order(item) -> tuple:
    """Per context length: dense first, then by sparsity and method."""
    cell = item[1][0]
    return cell["context_length"], cell["method"] != "dense", cell["sparsity"], cell["method"]


def _groups(records: list[dict]) -> dict[str, list[dict]]:
    """{method_s{sparsity}_ctx{C}: its cells over seeds}, refusing a window seen under two seeds: a
    duplicate would count as two independent samples (pooled std, t-test n)."""
    groups: dict[str, list[dict]] = {}
    for record in records:
        groups.setdefault(cell_of(record).group, []).append(record)
    for group, members in groups.items():
        seen: dict[int, int] = {}
        for record in members:
            for sample in record["samples"]:
                if seen.setdefault(sample["start"], record["seed"]) != record["seed"]:
                    raise ConfigError(f"{group}: the window at token {sample['start']} is a sample of seeds "
                                      f"{seen[sample['start']]} and {record['seed']} (cells drawn per seed, before "
                                      "windows were drawn once across seeds); use another --experiment_name")
    return groups


def aggregate(records: list[dict]) -> dict:
    groups = _groups(records)
    out = {}
    for group, members in sorted(groups.items(), key=_group_order):
        first = members[0]
        samples = [s for record in members for s in record["samples"]]
        metrics = {m: describe([s[m] for s in samples]) for m in METRICS}
        out[group] = {"method": first["method"], "sparsity": first["sparsity"],
                      "context_length": first["context_length"],
                      "seeds": sorted(record["seed"] for record in members), "n_samples": len(samples),
                      "cells": sorted(cell_of(record).key + ".json" for record in members),
                      "ppl_of_mean_nll": math.exp(metrics["nll"]["mean"]),
                      "metrics": metrics}
    return out


def _per_sample_nll(records: list[dict], method: str, sparsity: float) -> dict:
    """{window start: per-sample NLL} of one arm: the pairing and unit of the t-tests."""
    return {s["start"]: s["nll"] for r in records
            if (r["method"], r["sparsity"]) == (method, sparsity) for s in r["samples"]}


def significance(records: list[dict]) -> list[dict]:
    """At each (sparsity, C): every two of the methods at that sparsity and dense (at 0.0)."""
    _groups(records)
    tests = []
    for ctx in sorted({r["context_length"] for r in records}):
        here = [r for r in records if r["context_length"] == ctx]
        has_dense = any(r["method"] == "dense" for r in here)
        for s in sorted({r["sparsity"] for r in here if r["method"] != "dense"}):
            who = sorted({r["method"] for r in here if r["method"] != "dense" and r["sparsity"] == s})
            arms = [(m, s) for m in who] + ([("dense", 0.0)] if has_dense else [])
            for (a, sa), (b, sb) in itertools.combinations(arms, 2):
                test = paired_ttest(_per_sample_nll(here, a, sa), _per_sample_nll(here, b, sb))
                tests.append({"sparsity": s, "context_length": ctx, "a": a, "a_sparsity": sa, "b": b,
                              "b_sparsity": sb, "unit": f"window (distinct across seeds; {test['n']} windows)",
                              **test})
    return tests


def print_table(aggregated: dict) -> None:
    print(f"  {'method':<14}{'sparsity':>9}{'ctx':>7}{'ppl':>10}{'nll':>16}{'decode tok/s':>14}{'cache':>8}"
          f"{'kv MiB':>9}")
    for row in aggregated.values():
        m = row["metrics"]
        std = m["nll"]["std"]
        print(f"  {row['method']:<14}{row['sparsity']:>9}{row['context_length']:>7}{row['ppl_of_mean_nll']:>10.3f}"
              f"{m['nll']['mean']:>9.4f} +- {std if std is not None else float('nan'):.3f}"
              f"{m['decode_tokens_per_s']['mean'] or float('nan'):>14.1f}{m['avg_cache_length']['mean']:>8.0f}"
              f"{m['kv_bytes_peak']['mean'] / 2**20:>9.2f}")


def write_summaries(store, config: dict, data: dict, memory_kind: str, meta: dict) -> None:
    """aggregated_results.json and significance_tests.json from every cell file of the folder, and the table;
    a folder holding cells of another model or data is refused rather than pooled."""
    records = store.records()
    for record in records:
        protocol = record.get("protocol", {})
        if protocol.get("data_sha256") != data["sha256"] or protocol.get("model") != config["model"]:
            raise ConfigError(f"{store.folder} holds cells of another model or data ({record['method']} "
                              f"s{record['sparsity']} ctx{record['context_length']} seed{record['seed']}); "
                              "use another --name")
    aggregated = aggregate(records)
    write_json_atomic(store.folder / "aggregated_results.json",
                      {"results": aggregated,
                       "statistics": "mean, std, min, max over every sample (a distinct window) of every seed",
                       "std_kind": STD_KIND, "memory_kind": memory_kind, "config": config, "meta": meta})
    write_json_atomic(store.folder / "significance_tests.json",
                      {"test": "scipy.stats.ttest_rel, two-sided, paired by window (its start offset)",
                       "unit": "window of C + N tokens, drawn once across all seeds (n = windows per test)",
                       "metric": "per-sample mean NLL of the continuation (nats/token)",
                       "mean_difference": "mean(a - b): negative = a is better", "correction": None,
                       "tests": significance(records), "config": config, "meta": meta})
    print(f"{PROG} generation: wrote {store.folder}/aggregated_results.json and significance_tests.json")
    print_table(aggregated)
