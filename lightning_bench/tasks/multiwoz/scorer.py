"""Scores of MultiWOZ dialogue state tracking: joint goal and slot accuracy per turn (metrics.py)."""

from __future__ import annotations

from lightning_bench.tasks.metrics.bootstrap import figures


def score(task, rows, preds, pairs):
    from lightning_bench.tasks.multiwoz.metrics import dst_per_turn, parse_belief_state

    predicted = [parse_belief_state(p) for p in preds]
    per = dst_per_turn(predicted, [row["belief_state"] for row in rows])
    for p, s in zip(predicted, per):
        s["parsed"] = p
    return figures(per, ("joint_goal_accuracy", "slot_accuracy")), per


SCORERS = {"dst": score}
