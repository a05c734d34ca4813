"""Aggregation over cells: descriptive statistics and paired tests, as every experiment reports them.

Every std is the SAMPLE standard deviation (ddof=1, `statistics.stdev`), null with fewer than two
values; `STD_KIND` is the sentence records carry so that a reader does not have to guess.
"""

from __future__ import annotations

import math
import statistics
import warnings
from typing import Iterable, Optional

STD_KIND = "sample standard deviation (ddof=1); null with fewer than two values"


def sample_std(values: list[float]) -> Optional[float]:
    return statistics.stdev(values) if len(values) > 1 else None


def describe(values: Iterable[Optional[float]]) -> dict:
    """{mean, std, min, max, n} of the values that exist (None and NaN are left out, n counts the rest)."""
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(values), "std": sample_std(values), "min": min(values), "max": max(values),
            "n": len(values)}


def paired_ttest(a: dict, b: dict) -> dict:
    """Two-sided paired t-test (`scipy.stats.ttest_rel`) of two arms measured on the same units.

    `a` and `b` map a pairing key (e.g. a window start) to a value; only keys in both count.
    `mean_difference` = mean(a - b). t and p are null with fewer than two pairs, or (written as null
    by the JSON writer) NaN when the arms are identical."""
    keys = sorted(set(a) & set(b))
    xa, xb = [a[k] for k in keys], [b[k] for k in keys]
    t = p = None
    if len(keys) > 1:
        from scipy.stats import ttest_rel

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # identical arms: t is nan
            result = ttest_rel(xa, xb)
        t, p = float(result.statistic), float(result.pvalue)
    return {"n": len(keys), "t": t, "p": p,
            "mean_difference": statistics.fmean(x - y for x, y in zip(xa, xb)) if keys else None,
            "mean_a": statistics.fmean(xa) if keys else None,
            "mean_b": statistics.fmean(xb) if keys else None}
