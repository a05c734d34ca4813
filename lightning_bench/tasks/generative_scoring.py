"""Scoring of the generative tasks: each definition names its scoring family (`TaskDefinition.scorer`), which
its benchmark folder's scorer.py implements and its Suite registers; this module applies it to the (request,
prediction) pairs of a task: the task's figures (mean and bootstrap 95% CI per metric, unit: one sample) and
each sample's own scores. SQuAD's families are official_metrics.py's (scored by question id)."""

from __future__ import annotations

from lightning_bench.tasks.definition import TaskDefinition
from lightning_bench.tasks.registry import SCORERS


def is_generative(task: TaskDefinition) -> bool:
    return task.output_type == "generate_until" and task.scorer in SCORERS


def score_generative(task: TaskDefinition, pairs: list[tuple]) -> tuple[dict, list[dict]]:
    """(the task's figures, per-sample scores in pair order) for (request, prediction) pairs."""
    rows = [req.row for req, _ in pairs]
    preds = [p["prediction"] for _, p in pairs]
    return SCORERS[task.scorer](task, rows, preds, pairs)


def task_means_entry(tasks: dict[str, dict], average: bool = True) -> dict:
    """A benchmark of several generative tasks ({task: {"metrics", "num_samples"}}): each task's figures
    and, with `average`, for every metric all of them report as a number, the unweighted mean over tasks
    (CodeXGLUE's overall figure is the mean over its languages)."""
    if not average:
        return {"tasks": tasks}
    numeric = [{k for k, v in t["metrics"].items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
               for t in tasks.values()]
    shared = set.intersection(*numeric) if numeric else set()
    means = {k: sum(float(t["metrics"][k]) for t in tasks.values()) / len(tasks) for k in sorted(shared)}
    return {**means, "average_over": sorted(tasks), "tasks": tasks}
