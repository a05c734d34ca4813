"""Scores of the summarization tasks: ROUGE-1/2/L/Lsum per summary (metrics.py), as means with bootstrap 95%
CIs."""

from __future__ import annotations

from lightning_bench.tasks.metrics.bootstrap import figures


def score(task, rows, preds, pairs):
    from lightning_bench.tasks.metrics.rouge import rouge_per_sample

    per = rouge_per_sample(preds, [row[task.answer_field] for row in rows])
    return figures(per, ("rouge1", "rouge2", "rougeL", "rougeLsum")), per


SCORERS = {"rouge": score}
