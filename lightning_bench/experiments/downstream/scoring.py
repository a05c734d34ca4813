"""Scores of one downstream cell, and the paired comparisons between cells.

The figures are the task's own (tasks/generative_scoring.py, the metrics `lightning_bench test
--task` writes); SQuAD's are the official per-question EM/F1 (max over the gold answers; an unanswerable
question is right when the answer is empty). Each task has one headline metric (its definition's
`headline`): what the summary table, the retention score/dense and the paired bootstrap intervals use.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from lightning_bench.tasks import get_task
from lightning_bench.tasks.metrics import squad as squad_metrics
from lightning_bench.tasks.metrics.bootstrap import figures
from lightning_bench.tasks.generative_scoring import is_generative, score_generative
from lightning_bench.tasks.benchmark_scores import generation_prediction

PAIRED_METHOD = ("paired percentile bootstrap of the mean difference (cell - reference), scipy.stats.bootstrap "
                 "paired=True, 1000 resamples, seed 0; unit of observation: one task example (the same "
                 "examples in both cells; for HumanEval one problem's pass@1 estimate, for MultiWOZ one turn)")


def primary_metric(task: str) -> str:
    """The per-example figure of `task` the summary, the retention and the paired intervals use."""
    return get_task(task).headline  # never None: the registry refuses a generation task without one


def predictions(request, texts: list[str], tokens: list[int]) -> dict:
    """The prediction fields of one example from its generated texts (several for sampled pass@k), cut at
    the task's stops exactly as `lightning_bench test` cuts them."""
    keep_whitespace = get_task(request.task).generation.keep_whitespace
    scored = {"text": texts[0], "tokens": tokens, "no_answer_prob": None, "samples": texts if len(texts) > 1 else None}
    return generation_prediction(request.request, scored, keep_whitespace)


def score_cell(task: str, pairs: list[tuple]) -> tuple[dict, list[dict]]:
    """(task figures, per-example scores, each holding the primary metric) for (Request, prediction) pairs."""
    definition = get_task(task)
    if is_generative(definition):
        return score_generative(definition, pairs)
    per = []  # SQuAD v1.1 / v2.0 (no-answer probabilities are not computed here: no best-threshold figures)
    for req, pred in pairs:
        golds = list(req.request.answers) or [""]
        per.append({"exact": 100.0 * max(squad_metrics.exact_match_score(pred["prediction"], g) for g in golds),
                    "f1": 100.0 * max(squad_metrics.f1_score(pred["prediction"], g) for g in golds)})
    return figures(per, ("exact", "f1")), per


def per_example(task: str, per_sample: list[dict]) -> list[float]:
    """The primary metric of each example (pass@1 of a HumanEval problem: passed / samples)."""
    key = primary_metric(task)
    if key == "pass@1":
        return [100.0 * s["passed"] / s["n"] for s in per_sample]
    return [float(s[key]) for s in per_sample]


def paired_difference(values: list[float], reference: list[float], seed: int = 0) -> dict:
    """Mean of (values - reference) over the same examples with its paired bootstrap 95% CI."""
    a, b = np.asarray(values, float), np.asarray(reference, float)
    if a.shape != b.shape:
        raise ValueError(f"paired scores of different lengths: {a.shape} vs {b.shape}")
    out = {"mean_difference": float((a - b).mean()), "n": int(a.size)}
    if a.size < 2 or np.all(a - b == (a - b)[0]):  # no spread to resample
        return {**out, "ci95": None if a.size < 2 else [out["mean_difference"]] * 2}
    res = stats.bootstrap((a, b), lambda x, y: np.mean(x - y), paired=True, vectorized=False, n_resamples=1000,
                          method="percentile", rng=np.random.default_rng(seed))
    return {**out, "ci95": [float(res.confidence_interval.low), float(res.confidence_interval.high)]}
