"""Scores of bring-your-own long-context rows (tasks/long_context_rows/definitions.py): whether the
answer appears in the prediction (RULER's string_match_all: the fraction of the gold answers contained,
case-insensitive) and SQuAD's token F1 (max over the answers), both x100, per sample and as means with
bootstrap 95% CIs."""

from __future__ import annotations

from lightning_bench.tasks.metrics import squad as squad_metrics
from lightning_bench.tasks.metrics.bootstrap import figures


def _score(task, rows, preds, pairs):
    per = []
    for pred, row in zip(preds, rows):
        answers = list(row["answers"])
        per.append({"string_match": 100.0 * sum(a.lower() in pred.lower() for a in answers) / len(answers),
                    "f1": 100.0 * max(squad_metrics.f1_score(pred, a) for a in answers)})
    return figures(per, ("string_match", "f1")), per


SCORERS = {"long_context_rows": _score}
