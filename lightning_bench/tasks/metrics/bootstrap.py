"""Mean and percentile-bootstrap confidence interval of per-sample scores, for every generative metric.

One figure per sample (a ROUGE F1, an exact match, a dialogue turn's joint accuracy) is what the caller
passes; the interval is over resamples of those samples, so it says how much the mean would move on
another draw of the same number of test items (the usual question when two methods differ by a point).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy import stats

from lightning_bench.errors import ConfigError


def mean_ci(values: Sequence[float], *, seed: int = 0, n_resamples: int = 1000,
            confidence: float = 0.95) -> dict:
    """{"mean", "ci_low", "ci_high", "n", "method"}: the mean and its percentile bootstrap interval
    (scipy.stats.bootstrap, resampling samples with replacement, generator seeded with `seed`).

    Fewer than 2 values: ci_low/ci_high are None (one sample has no spread to resample); no values:
    mean is None too. The percentile method, not scipy's default BCa: BCa needs a jackknife over all n
    samples (slow for thousands) and fails on constant data (all-zero exact matches), which is common here.
    """
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be between 0 and 1 (exclusive), got {confidence}")
    if n_resamples < 1:
        raise ConfigError(f"n_resamples must be at least 1, got {n_resamples}")
    data = np.asarray(values, dtype=float)
    if data.ndim != 1:
        raise ConfigError(f"values must be a flat list of per-sample numbers, got shape {data.shape}")
    if not np.isfinite(data).all():
        raise ConfigError(f"values contain NaN or infinity (first at index {int(np.flatnonzero(~np.isfinite(data))[0])}):"
                          " score every sample with a finite number")
    n = len(data)
    method = f"percentile bootstrap, {n_resamples} resamples, seed {seed}, unit: sample"
    if n < 2:
        mean = float(data[0]) if n else None
        return {"mean": mean, "ci_low": None, "ci_high": None, "n": n,
                "method": f"no interval (n={n} < 2)"}
    result = stats.bootstrap((data,), np.mean, n_resamples=n_resamples, confidence_level=confidence,
                             method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    interval = result.confidence_interval
    return {"mean": float(data.mean()), "ci_low": float(interval.low), "ci_high": float(interval.high), "n": n,
            "method": method}


def figures(per_sample: list[dict], keys, seed: int = 0) -> dict:
    """{key: mean, key_ci95: [low, high]} over the samples, plus how the intervals were made."""
    out, method = {}, None
    for key in keys:
        summary = mean_ci([s[key] for s in per_sample], seed=seed)
        out[key] = summary["mean"]
        out[f"{key}_ci95"] = (None if summary["ci_low"] is None else [summary["ci_low"], summary["ci_high"]])
        method = summary["method"]
    out["ci95_method"] = method
    return out
