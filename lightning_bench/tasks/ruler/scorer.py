"""RULER's scores (Hsieh et al., 2024; scripts/eval/synthetic/constants.py), implemented from its definitions.

A prediction is post-processed as RULER's evaluate.py does (stripped; control characters \\x00-\\x1f turned
into newlines; stripped again), then compared with the gold strings (`outputs`), case-insensitively:

    string_match_all  (niah, vt, cwe, fwe)  100 x the fraction of the gold strings contained in the prediction
    string_match_part (qa_1, qa_2)          100 x [any gold string is contained in the prediction]

RULER's task score is the mean over samples (x100). Figures: `string_match` (mean and bootstrap 95% CI),
`metric` (which of the two), `null_predictions` (empty predictions, as RULER's "Nulls" column) and
`by_depth` (mean per needle depth where the rows record one).
"""

from __future__ import annotations

import re

from lightning_bench.tasks.metrics.bootstrap import figures

CONTROL = re.compile(r"[\x00-\x1f]")


def postprocess(prediction: str) -> str:
    return CONTROL.sub("\n", prediction.strip()).strip()


def string_match_all(prediction: str, references) -> float:
    refs = list(references)
    return 100.0 * sum(r.lower() in prediction.lower() for r in refs) / len(refs)


def string_match_part(prediction: str, references) -> float:
    return 100.0 * max(float(r.lower() in prediction.lower()) for r in references)


def metric_of(task) -> str:
    """string_match_part for the QA tasks, string_match_all for the others (RULER's choice per family)."""
    return "string_match_part" if task.short_name.startswith("qa") else "string_match_all"


def _score(task, rows, preds, pairs):
    name = metric_of(task)
    match = string_match_part if name == "string_match_part" else string_match_all
    per = []
    for row, pred in zip(rows, preds):
        text = postprocess(pred or "")
        per.append({"string_match": match(text, row["outputs"]), "null": not text})
    out = {**figures(per, ("string_match",)), "metric": name, "null_predictions": sum(s["null"] for s in per)}
    depths: dict[str, list[float]] = {}
    for row, s in zip(rows, per):
        if row.get("depth") is not None:
            depths.setdefault(f"{float(row['depth']):g}", []).append(s["string_match"])
    if depths:
        out["by_depth"] = {d: sum(v) / len(v) for d, v in sorted(depths.items(), key=lambda kv: float(kv[0]))}
    return out, per


SCORERS = {"ruler": _score}
