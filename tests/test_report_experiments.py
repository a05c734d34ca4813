"""`lightning_bench report` over multi_dataset summaries, generation aggregates (with their significance tests)
and `test --task` records: the series, error bars, significance marks, table rows and warnings, from records in
the shapes their writers produce, and one report folder over all three kinds."""

import math
import statistics
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

from lightning_bench.experiments.core.aggregate import STD_KIND, describe, paired_ttest
from lightning_bench.experiments.multi_dataset import DatasetSpec, summarize
from lightning_bench.reports.experiment_builders import generation_items, models_items, multi_dataset_items, task_items
from lightning_bench.reports.figures import Figure, Table
from lightning_bench.reports.report import main as report_main
from lightning_bench.results.io import write_json_atomic

META = {"created_utc": "2026-11-05T10:00:00+00:00", "versions": {"lightning_bench": "0.1", "torch": "2.13.0"},
        "git": {"commit": "0123456789abcdef", "dirty": False}, "command": "lightning_bench x", "seed": 1}


def find(items, name):
    return next(i for i in items if i.name == name)


# ---- multi_dataset: the summary as `summarize` writes it from fit and test records ---------------------
def summary(root: Path, model: str, ppls: dict) -> dict:
    """ppls: {dataset: {seed: test ppl}}; the fit and test records hold what summarize reads of them."""
    cells = {}
    for dataset, seeds in ppls.items():
        for seed, ppl in seeds.items():
            fit = write_json_atomic(root / model / f"{dataset}_{seed}_fit.json",
                                    {"parameters": {"total": 3000, "embedding": 1000, "non_embedding": 2000}})
            test = write_json_atomic(root / model / f"{dataset}_{seed}_test.json", {"metrics": {"ppl": ppl}})
            cells[(dataset, seed)] = (fit, test)
    seeds = sorted({s for v in ppls.values() for s in v})
    cfg = SimpleNamespace(data=[DatasetSpec(d, d, ()) for d in ppls], seeds=seeds)
    return summarize(model, cfg, cells, {"preset": f"configs/compare/{model}_small.yaml"}, f"multi_dataset {model}")


def test_multi_dataset_table_and_figure_show_seeds_and_sample_std(tmp_path):
    record = summary(tmp_path, "transformer", {"ptb": {1: 200.0, 2: 210.0, 3: 220.0}, "wikitext2": {1: 300.0}})
    table, figure = multi_dataset_items(record, Path("transformer_multi_dataset.json"))
    assert table.rows == [["ptb", 210.0, 10.0, 3, "seed 1: 200.0; seed 2: 210.0; seed 3: 220.0",
                           "total 3,000, embedding 1,000, non_embedding 2,000"],
                          ["wikitext2", 300.0, "n=1", 1, "seed 1: 300.0", "total 3,000, embedding 1,000, "
                           "non_embedding 2,000"]]
    means, seeds = figure.series
    assert (means.x, means.y, means.low, means.high) == (["ptb", "wikitext2"], [210.0, 300.0], [200.0, None],
                                                         [220.0, None])
    assert (seeds.x, seeds.y, seeds.points) == (["ptb"] * 3 + ["wikitext2"], [200.0, 210.0, 220.0, 300.0], True)
    assert figure.warning == "one seed (no spread): wikitext2"
    _, one_dataset = multi_dataset_items(summary(tmp_path, "bk", {"ptb": {1: 247.0, 2: 248.0}}), Path("bk.json"))
    assert one_dataset.warning == "one dataset: one mean"
    assert "seeds 1 2 3" in figure.provenance and "preset configs/compare/transformer_small.yaml" in figure.provenance


def test_models_compared_and_one_seed_each_says_no_spread(tmp_path):
    ppls = {"transformer": 206.58, "bk": 247.73, "mamba": 277.55}
    summaries = [(summary(tmp_path, m, {"ptb": {1: p}}), tmp_path / f"{m}_multi_dataset.json") for m, p in ppls.items()]
    table, figure = models_items(summaries)
    assert table.rows == [[m, "ptb", p, "n=1", 1] for m, p in ppls.items()]
    assert [(s.label, s.x, s.y) for s in figure.series] == [(m, ["ptb"], [p]) for m, p in ppls.items()]
    assert figure.warning == "one seed: no spread"
    assert figure.source == str(tmp_path.resolve())


# ---- generation: aggregated_results.json and significance_tests.json as write_summaries lays them out -----
# h2o at 0.5: nearly the same shift on every window (significant); h2o at 0.9 and tova: noisy (not, p > 0.05)
NLL = {("dense", 0.0): [3.0, 3.1, 3.2, 3.3], ("h2o", 0.5): [3.05, 3.16, 3.24, 3.36],
       ("h2o", 0.9): [3.5, 3.3, 3.9, 3.4], ("tova", 0.5): [3.0, 3.2, 3.1, 3.35]}


def generation_files(folder: Path) -> tuple[dict, dict]:
    """One context (C=128), seeds 1 2 (two windows each); the rows as generation.report.aggregate builds them
    (describe over every sample), the tests as its `significance` (paired_ttest per pair at each sparsity)."""
    config = {"command": "generation", "model": {"pretrained": "/models/smollm2-135m"}, "continuation_length": 32,
              "data": "wikitext2"}
    meta = {**META, "data": {"name": "wikitext2", "sha256": "cd" * 32}}
    results = {}
    for (method, sparsity), nll in NLL.items():
        samples = [{"start": i * 200, "nll": v, "kv_bytes_peak": 2**20 * (1 - sparsity), "peak_memory_mb": 500.0,
                    "decode_tokens_per_s": 10.0} for i, v in enumerate(nll)]
        metrics = {m: describe([s[m] for s in samples]) for m in ("nll", "kv_bytes_peak", "peak_memory_mb",
                                                                  "decode_tokens_per_s")}
        results[f"{method}_s{sparsity}_ctx128"] = {
            "method": method, "sparsity": sparsity, "context_length": 128, "seeds": [1, 2], "n_samples": 4,
            "cells": [], "ppl_of_mean_nll": math.exp(metrics["nll"]["mean"]), "metrics": metrics}
    per_window = {k: dict(enumerate(v)) for k, v in NLL.items()}
    tests = []
    for s, who in ((0.5, ["h2o", "tova"]), (0.9, ["h2o"])):
        arms = [(m, s) for m in who] + [("dense", 0.0)]
        for i, (a, sa) in enumerate(arms):
            for b, sb in arms[i + 1:]:
                tests.append({"sparsity": s, "context_length": 128, "a": a, "a_sparsity": sa, "b": b, "b_sparsity": sb,
                              "unit": "window", **paired_ttest(per_window[(a, sa)], per_window[(b, sb)])})
    aggregated = {"results": results, "statistics": "mean, std, min, max", "std_kind": STD_KIND,
                  "memory_kind": "process RSS", "config": config, "meta": meta}
    significance = {"test": "scipy.stats.ttest_rel, two-sided, paired by window (its start offset)",
                    "unit": "window", "metric": "per-sample mean NLL", "mean_difference": "mean(a - b)",
                    "correction": None, "tests": tests, "config": config, "meta": meta}
    write_json_atomic(folder / "aggregated_results.json", aggregated)
    write_json_atomic(folder / "significance_tests.json", significance)
    return aggregated, significance


def test_generation_figures_mark_the_arms_significantly_different_from_dense(tmp_path):
    aggregated, significance = generation_files(tmp_path / "gen")
    items = generation_items(aggregated, significance, tmp_path / "gen" / "aggregated_results.json")
    ppl = {k: math.exp(statistics.fmean(v)) for k, v in NLL.items()}
    figure = find(items, "generation_gen_ppl_vs_sparsity_C128")
    h2o, tova, dense, marks = figure.series
    assert (h2o.x, h2o.y) == ([0.5, 0.9], [ppl[("h2o", 0.5)], ppl[("h2o", 0.9)]])
    assert (tova.x, tova.y) == ([0.5], [ppl[("tova", 0.5)]])
    assert (dense.x, dense.y, dense.dashed) == ([0.0, 0.9], [ppl[("dense", 0.0)]] * 2, True)
    dense_p = {(t["a"], t["a_sparsity"]): t["p"] for t in significance["tests"] if t["b"] == "dense"}
    assert dense_p[("h2o", 0.5)] < 0.05 < min(dense_p[("h2o", 0.9)], dense_p[("tova", 0.5)])  # as the NLLs say
    assert marks.label == "p < 0.05 (scipy.stats.ttest_rel, uncorrected)" and marks.points
    assert (marks.x, marks.y) == ([0.5], [ppl[("h2o", 0.5)]])  # h2o at 0.5 only
    memory = find(items, "generation_gen_ppl_vs_memory_C128")
    assert {s.label: s.x for s in memory.series} == {"dense": [1.0], "h2o": [0.09999999999999998, 0.5],
                                                     "tova": [0.5]}
    table = find(items, "generation_gen_aggregated")
    rows = {(r[0], r[1]): r for r in table.rows}
    assert rows[("h2o", 0.5)][11] == dense_p[("h2o", 0.5)] and rows[("h2o", 0.5)][13] is True
    assert rows[("dense", 0.0)][11:] == ["", "", ""]
    assert "sha256 cdcdcdcdcdcd" in table.provenance and "teacher_forced" not in table.provenance
    assert len(find(items, "generation_gen_significance").rows) == len(significance["tests"])


# ---- test --task: the record DownstreamRecorder writes (results/downstream.py) ---------------------------
RUN = "20261110-100000-dddd"


def task_record() -> dict:
    run = {"protocol": {"name": "prompted", "num_fewshot": 5}, "eval_time": 30.0, "model_size_mb": 1.0,
           "parameters": {"total": 10}, "meta": META, "config": {"bits": 8}}
    return {"model": "hf-tiny",
            "glue": {"sst2": 0.75, "cola": 0.5, "average": 0.625, "average_over": ["sst2", "cola"],
                     "mixed_protocols": False,
                     "tasks": {"sst2": {"metrics": {"accuracy": 0.75}, "score": 0.75, "num_samples": 8, "run": RUN},
                               "cola": {"metrics": {"mcc": 0.5}, "score": 0.5, "num_samples": 6, "run": RUN}}},
            "mmlu": {"accuracy": 0.25, "macro_accuracy": 0.25, "mixed_protocols": False,
                     "subject_counts": {"anatomy": {"correct": 2, "correct_norm": 2, "total": 8},
                                        "astronomy": {"correct": 1, "correct_norm": 1, "total": 4}},
                     "subject_runs": {"anatomy": RUN, "astronomy": RUN}},
            "runs": {RUN: run}, "note": "GLUE/SuperGLUE/MMLU scores are fractions in [0, 1]"}


def test_task_table_and_bars_hold_each_headline_score():
    table, figure = task_items(task_record(), Path(f"hf-tiny_bits8_downstream_{RUN}.json"))
    assert table.rows == [["glue/sst2", "score", 0.75, 8, RUN, "prompted 5-shot", "", 8, "2026-11-05 10:00:00"],
                          ["glue/cola", "score", 0.5, 6, RUN, "prompted 5-shot", "", 8, "2026-11-05 10:00:00"],
                          ["mmlu", "accuracy", 0.25, 12, RUN, "prompted 5-shot", "", 8, "2026-11-05 10:00:00"]]
    assert figure.bars and [(s.label, s.x, s.y) for s in figure.series] == [
        ("score", ["glue/sst2", "glue/cola"], [0.75, 0.5]), ("accuracy", ["mmlu"], [0.25])]
    assert figure.warning == "" and "protocol: prompted 5-shot" in table.provenance


def test_merged_view_reports_only_runs_without_a_file_of_their_own(tmp_path):
    write_json_atomic(tmp_path / f"hf-tiny_bits8_downstream_{RUN}.json", task_record())
    assert task_items(task_record(), tmp_path / "hf-tiny_bits8_downstream.json") == []


# ---- one report over the three kinds ---------------------------------------------------------------------
class Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.count = 0

    def handle_starttag(self, tag, attrs):
        self.count += tag == "img"


def test_report_over_all_three_kinds(tmp_path, capsys):
    results = tmp_path / "results"
    for model, ppl in (("transformer", 206.0), ("bk", 247.0)):
        write_json_atomic(results / f"{model}_multi_dataset.json",
                          summary(tmp_path / "cells", model, {"ptb": {1: ppl, 2: ppl + 4}}))
    generation_files(results / "gen")
    write_json_atomic(results / f"hf-tiny_bits8_downstream_{RUN}.json", task_record())
    out = tmp_path / "out"
    assert report_main([str(results), "-o", str(out)]) == 0
    assert "without figures" not in (out / "report.md").read_text()
    from lightning_bench.reports.report import files_of, gather
    items = [i for _, section in gather(files_of([results])).sections for i in section]
    figures = [i for i in items if isinstance(i, Figure)]
    # two summaries (table + figure each) + the comparison; generation 2 figures + 2 tables; the task table + bars
    assert len(figures) == 2 + 1 + 2 + 1 and sum(isinstance(i, Table) for i in items) == 2 + 1 + 2 + 1
    assert all((out / "figures" / f"{f.name}.png").stat().st_size > 0 for f in figures)
    assert all((out / "tables" / f"{t.name}.csv").exists() for t in items if isinstance(t, Table))
    page = Images()
    page.feed((out / "report.html").read_text())
    assert page.count == len(figures)
