"""A task's official metrics, as its definition lists them (`TaskDefinition.metrics`).

The metric functions are pure (metrics/classification.py, metrics/squad.py); this module applies the ones a
task names to its predictions. Classification tasks (label names in their source) take class indices;
STS-B takes float scores (Pearson, Spearman); ReCoRD takes answer strings and lists of gold strings;
SQuAD takes answer strings keyed by question id (the official scripts' figures, percent).
"""

from __future__ import annotations

from typing import Hashable, Mapping, Optional, Sequence

from lightning_bench.tasks import TASKS, TaskDefinition
from lightning_bench.errors import ConfigError, unknown_name
from lightning_bench.tasks.metrics.classification import (accuracy, accuracy_by_subset, binary_f1, check_lengths,
                                                     class_labels, correlations, gender_parity, macro_f1, matthews,
                                                     question_exact_match, record_metrics)

SUBSETS = {"accuracy_matched": "matched", "accuracy_mismatched": "mismatched"}  # MNLI's two dev sets
# metric name -> value from (predictions, targets as tensors, the task's inputs)
LABEL_METRICS = {
    "accuracy": lambda p, t, x: accuracy(p, t, x["num_classes"]),
    "mcc": lambda p, t, x: matthews(p, t),
    "f1": lambda p, t, x: binary_f1(p, t),
    "f1a": lambda p, t, x: binary_f1(p, t),  # MultiRC: F1 over all answer options
    "f1_macro": lambda p, t, x: macro_f1(p, t, x["num_classes"]),
    "exact_match": lambda p, t, x: question_exact_match(x["predictions"], x["references"], x["groups"]),
    "gender_parity": lambda p, t, x: gender_parity(x["predictions"], x["ids"]),
    **{name: (lambda p, t, x, subset=subset: accuracy_by_subset(p, t, x["num_classes"], x["subsets"], subset))
       for name, subset in SUBSETS.items()},
}
SCORE_METRICS = ("pearson", "spearman")  # STS-B: float predictions
ANSWER_METRICS = ("exact_match", "f1")  # ReCoRD: the best over the gold answer strings
KNOWN_METRICS = {*LABEL_METRICS, *SCORE_METRICS, *ANSWER_METRICS}  # what a multiple-choice definition may list


def needs_subsets(task: TaskDefinition) -> bool:
    return any(m in SUBSETS for m in task.metrics)


def needs_groups(task: TaskDefinition) -> bool:
    return task.num_classes is not None and "exact_match" in task.metrics


def compute_metrics(task: TaskDefinition, predictions: Sequence, references: Sequence,
                    groups: Optional[Sequence[Hashable]] = None, subsets: Optional[Sequence[str]] = None,
                    ids: Optional[Sequence[int]] = None, no_answer_probs: Optional[Mapping[str, float]] = None) -> dict:
    """{metric: value} in the order the definition lists them (a metric a subset lacks is None).

    `groups`: the question id of each MultiRC answer option (required there, only there); `subsets`:
    "matched"/"mismatched" per MNLI example (likewise); `ids`: AX-g's example idx (pairs are 2k, 2k+1;
    default: the positions); `no_answer_probs`: SQuAD v2's P(no answer) per question id.
    """
    check_lengths(predictions, references, ("subsets", subsets), ("groups", groups), ("ids", ids))
    if (subsets is None) == needs_subsets(task):
        raise ConfigError(f"subsets (matched/mismatched per example) are required for {task.name} and only for "
                          "tasks scored per subset (mnli)")
    if (groups is None) == needs_groups(task):
        raise ConfigError(f"groups (question id per answer option) are required for {task.name} and only for "
                          "tasks scored per question (multirc)")
    if task.output_type == "generate_until":
        from lightning_bench.tasks.metrics.squad import squad_v1_metrics, squad_v2_metrics

        name = task.scorer  # squad_v1 / squad_v2: the official scripts' whole figure sets
        return squad_v1_metrics(predictions, references) if name == "squad_v1" else squad_v2_metrics(
            predictions, references, na_probs=no_answer_probs)
    if task.choice_values is not None:
        values = correlations(predictions, references)
    elif task.num_classes is None:
        values = record_metrics(predictions, references)
    else:
        if subsets is not None and set(subsets) - set(SUBSETS.values()):
            unknown = sorted(map(str, set(subsets) - set(SUBSETS.values())))
            raise ConfigError(f"unknown {task.short_name} subset(s) {unknown}; valid: matched, mismatched")
        n = task.num_classes
        preds = class_labels(predictions, n, f"{task.short_name} predictions")
        target = class_labels(references, n, f"{task.short_name} references")
        inputs = {"num_classes": n, "predictions": predictions, "references": references, "groups": groups,
                  "subsets": subsets, "ids": list(ids) if ids is not None else list(range(len(predictions)))}
        values = {name: LABEL_METRICS[name](preds, target, inputs) for name in task.metrics}
    return {name: values[name] for name in task.metrics}


def _member(benchmark: str, kind: str, short: str) -> TaskDefinition:
    task = TASKS.get(f"{benchmark}/{short}")
    if task is None:
        raise unknown_name(kind, short, benchmark_metrics(benchmark))
    return task


def benchmark_metrics(benchmark: str) -> dict[str, tuple[str, ...]]:
    """{task: its metric names} of one benchmark (diagnostics included), from the definitions."""
    return {t.short_name: t.metrics for t in TASKS.values() if t.benchmark == benchmark}


def glue_task_metrics(task: str, predictions: Sequence, references: Sequence,
                      subsets: Optional[Sequence[str]] = None) -> dict:
    """The official metrics of one GLUE task by its short name (`GLUE_METRICS[task]`)."""
    return compute_metrics(_member("glue", "GLUE task", task), predictions, references, subsets=subsets)


def superglue_task_metrics(task: str, predictions: Sequence, references: Sequence,
                           groups: Optional[Sequence[Hashable]] = None, ids: Optional[Sequence[int]] = None) -> dict:
    """The official metrics of one SuperGLUE task or diagnostic by its short name (`SUPERGLUE_METRICS[task]`)."""
    return compute_metrics(_member("superglue", "SuperGLUE task", task), predictions, references, groups=groups,
                           ids=ids)


GLUE_METRICS = benchmark_metrics("glue")
SUPERGLUE_METRICS = benchmark_metrics("superglue")
