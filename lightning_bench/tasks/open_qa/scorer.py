"""Scores of the open-QA tasks: exact match and token F1 against the gold aliases, normalised as each
benchmark's official script does (metrics.py)."""

from __future__ import annotations

from lightning_bench.tasks.metrics.bootstrap import figures

STYLES = {"open_qa_nq": "nq_open", "open_qa_triviaqa": "triviaqa"}  # scoring family -> answer normalisation


def score(task, rows, preds, pairs):
    from lightning_bench.tasks.metrics.open_qa import open_qa_per_sample

    style = STYLES[task.scorer]
    per = open_qa_per_sample(preds, [list(row["answers"]) for row in rows], style)
    return {**figures(per, ("exact_match", "f1")), "normalization": style}, per


SCORERS = {name: score for name in STYLES}
