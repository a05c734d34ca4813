"""GLUE and SuperGLUE task metrics and benchmark scores, as pure functions of predictions and labels.

Metrics per task follow the GLUE paper (Wang et al., 2019, ICLR; Table 4 and Sec. 3.4) and the
SuperGLUE paper (Wang et al., 2019, NeurIPS; Table 1 and Sec. 3.3):
  GLUE: CoLA Matthews corr.; MRPC/QQP accuracy + F1 of class 1; STS-B Pearson + Spearman; MNLI
  accuracy on matched + mismatched; SST-2, QNLI, RTE, WNLI accuracy.
  SuperGLUE: CB accuracy + unweighted mean of the per-class F1 over its 3 classes; MultiRC exact match
  per question + F1 over all answer options (F1a); ReCoRD max-over-gold token EM + F1 (SQuAD
  normalization); BoolQ, COPA, RTE, WiC, WSC accuracy.
Inputs are plain lists; every metric is a float in [0, 1] (correlations in [-1, 1]), not percent.
"""

from __future__ import annotations

import math
import numbers
from collections import defaultdict
from typing import Hashable, Mapping, Sequence

import torch
from scipy import stats
from torchmetrics.functional.classification import (
    binary_confusion_matrix,
    binary_f1_score,
    multiclass_accuracy,
    multiclass_f1_score,
)

from lightning_bench.errors import ConfigError, unknown_name
from lightning_bench.evaluation.squad_metrics import exact_match_score, f1_score

GLUE_METRICS: dict[str, tuple[str, ...]] = {
    "cola": ("mcc",),
    "sst2": ("accuracy",),
    "mrpc": ("accuracy", "f1"),
    "qqp": ("accuracy", "f1"),
    "stsb": ("pearson", "spearman"),
    "mnli": ("accuracy_matched", "accuracy_mismatched"),
    "qnli": ("accuracy",),
    "rte": ("accuracy",),
    "wnli": ("accuracy",),
}

SUPERGLUE_METRICS: dict[str, tuple[str, ...]] = {
    "boolq": ("accuracy",),
    "cb": ("accuracy", "f1_macro"),
    "copa": ("accuracy",),
    "multirc": ("exact_match", "f1a"),
    "record": ("exact_match", "f1"),
    "rte": ("accuracy",),
    "wic": ("accuracy",),
    "wsc": ("accuracy",),
}

# MNLI and CB are 3-way (CB: 0 entailment, 1 contradiction, 2 neutral); every other classification
# task is binary. Accuracy and macro F1 only need predictions and labels to share one coding.
_NUM_CLASSES = {"mnli": 3, "cb": 3}
_MNLI_SUBSETS = ("matched", "mismatched")


def _check_lengths(predictions: Sequence, references: Sequence, *others: tuple[str, Sequence | None]) -> None:
    if len(predictions) == 0:
        raise ConfigError("no examples: predictions and references are empty")
    if len(predictions) != len(references):
        raise ConfigError(f"length mismatch: {len(predictions)} predictions vs {len(references)} references")
    for name, values in others:
        if values is not None and len(values) != len(references):
            raise ConfigError(f"length mismatch: {len(values)} {name} vs {len(references)} references")


def _labels(values: Sequence, num_classes: int, what: str) -> torch.Tensor:
    """Integer class ids as a tensor; anything else is a clear error rather than a torchmetrics one."""
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not 0 <= v < num_classes:
            raise ConfigError(f"{what} must be integer labels in 0..{num_classes - 1}, got {v!r}")
    return torch.tensor([int(v) for v in values], dtype=torch.long)


def _accuracy(preds: torch.Tensor, target: torch.Tensor, num_classes: int) -> float:
    return float(multiclass_accuracy(preds, target, num_classes=num_classes, average="micro"))


def _matthews(preds: torch.Tensor, target: torch.Tensor) -> float:
    """Binary MCC = (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)), 0 when undefined.

    Written out on torchmetrics' confusion matrix because torchmetrics' own MCC returns limit values
    (e.g. -0.41 or 1.0) when a row or column of the table is empty, i.e. for constant predictions;
    the GLUE scorers use sklearn.metrics.matthews_corrcoef, which returns 0 there (the GLUE paper's
    majority-class CoLA baselines score 0.0). Integer counts keep it in float64.
    """
    (tn, fp), (fn, tp) = binary_confusion_matrix(preds, target).tolist()
    denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    return 0.0 if denominator == 0 else (tp * tn - fp * fn) / math.sqrt(denominator)


def _correlations(predictions: Sequence[float], references: Sequence[float]) -> dict[str, float]:
    """Pearson and Spearman (scipy). Constant input has no correlation: scipy warns and gives nan."""
    if len(predictions) < 2:
        raise ConfigError("stsb needs at least 2 examples to compute a correlation")
    x = [float(v) for v in predictions]
    y = [float(v) for v in references]
    return {"pearson": float(stats.pearsonr(x, y)[0]), "spearman": float(stats.spearmanr(x, y)[0])}


def glue_task_metrics(task: str, predictions: Sequence, references: Sequence,
                      subsets: Sequence[str] | None = None) -> dict[str, float | None]:
    """The official metrics of one GLUE task (keys: `GLUE_METRICS[task]`).

    Classification tasks take integer labels (binary tasks 0/1, MNLI 0..2); MRPC/QQP F1 is the F1 of
    class 1 (paraphrase / duplicate). STS-B takes float scores; a constant prediction gives nan
    correlations (undefined), with scipy's warning. MNLI takes `subsets`, "matched" or "mismatched" per
    example, and reports accuracy on each; a subset with no examples gives None.
    """
    if task not in GLUE_METRICS:
        raise unknown_name("GLUE task", task, GLUE_METRICS)
    _check_lengths(predictions, references, ("subsets", subsets))
    if (subsets is None) == (task == "mnli"):
        raise ConfigError("subsets (matched/mismatched per example) are required for mnli and only for mnli")
    if task == "stsb":
        return _correlations(predictions, references)

    num_classes = _NUM_CLASSES.get(task, 2)
    preds = _labels(predictions, num_classes, f"{task} predictions")
    target = _labels(references, num_classes, f"{task} references")
    if task == "cola":
        return {"mcc": _matthews(preds, target)}
    if task == "mnli":
        unknown = set(subsets) - set(_MNLI_SUBSETS)
        if unknown:
            raise ConfigError(f"unknown mnli subset(s) {sorted(map(str, unknown))}; valid: matched, mismatched")
        out: dict[str, float | None] = {}
        for subset in _MNLI_SUBSETS:
            mask = torch.tensor([s == subset for s in subsets], dtype=torch.bool)
            out[f"accuracy_{subset}"] = _accuracy(preds[mask], target[mask], 3) if mask.any() else None
        return out
    out = {"accuracy": _accuracy(preds, target, num_classes)}
    if task in ("mrpc", "qqp"):
        out["f1"] = float(binary_f1_score(preds, target))
    return out


def _multirc(predictions: Sequence[int], references: Sequence[int], groups: Sequence[Hashable]) -> dict[str, float]:
    preds = _labels(predictions, 2, "multirc predictions")
    target = _labels(references, 2, "multirc references")
    # Per-question exact match has no library equivalent: group the options by question id, and a
    # question counts only if every one of its options is right.
    all_right: dict[Hashable, bool] = defaultdict(lambda: True)
    for p, r, g in zip(predictions, references, groups):
        all_right[g] = all_right[g] and p == r
    return {"exact_match": sum(all_right.values()) / len(all_right),
            "f1a": float(binary_f1_score(preds, target))}


def _record(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, float]:
    em = f1 = 0.0
    for i, (prediction, golds) in enumerate(zip(predictions, references)):
        if isinstance(golds, str) or not golds:
            raise ConfigError(f"record references[{i}] must be a non-empty list of gold answer strings")
        em += max(exact_match_score(prediction, g) for g in golds)
        f1 += max(f1_score(prediction, g) for g in golds)
    return {"exact_match": em / len(predictions), "f1": f1 / len(predictions)}


def superglue_task_metrics(task: str, predictions: Sequence, references: Sequence,
                           groups: Sequence[Hashable] | None = None) -> dict[str, float]:
    """The official metrics of one SuperGLUE task (keys: `SUPERGLUE_METRICS[task]`).

    CB: 3-class integer labels (0 entailment, 1 contradiction, 2 neutral); f1_macro is the unweighted
    mean of the F1 of each of the 3 classes, a class with no gold and no predicted example counting
    F1 = 0 (as sklearn's f1_score(labels=range(3), average="macro") used by T5 / lm-eval).
    MultiRC: one 0/1 prediction and label per answer option, `groups` = the question id of each
    option. ReCoRD: predicted answer strings and, per query, the list of gold answer strings.
    Everything else: binary accuracy.
    """
    if task not in SUPERGLUE_METRICS:
        raise unknown_name("SuperGLUE task", task, SUPERGLUE_METRICS)
    _check_lengths(predictions, references, ("groups", groups))
    if (groups is None) == (task == "multirc"):
        raise ConfigError("groups (question id per answer option) are required for multirc and only for multirc")
    if task == "multirc":
        return _multirc(predictions, references, groups)
    if task == "record":
        return _record(predictions, references)
    num_classes = _NUM_CLASSES.get(task, 2)
    preds = _labels(predictions, num_classes, f"{task} predictions")
    target = _labels(references, num_classes, f"{task} references")
    out = {"accuracy": _accuracy(preds, target, num_classes)}
    if task == "cb":
        # average="none" then a plain mean: torchmetrics' "macro" drops classes absent from both
        # predictions and labels, the SuperGLUE definition averages over all three.
        per_class = multiclass_f1_score(preds, target, num_classes=3, average="none")
        out["f1_macro"] = float(per_class.double().mean())
    return out


def task_score(metrics: Mapping[str, float | None]) -> float:
    """A task's benchmark score: the unweighted mean of its metric values, None values ignored.

    This is the GLUE/SuperGLUE rule for multi-metric tasks: MRPC/QQP (acc + F1)/2, STS-B
    (Pearson + Spearman)/2, MNLI (matched + mismatched)/2, CB (acc + F1)/2, MultiRC (EM + F1a)/2,
    ReCoRD (EM + F1)/2; single-metric tasks score their metric. A nan metric gives a nan score.
    """
    values = [float(v) for v in metrics.values() if v is not None]
    if not values:
        raise ConfigError("task_score needs at least one metric value that is not None")
    return sum(values) / len(values)


def benchmark_average(task_scores: Mapping[str, float | None]) -> float | None:
    """Unweighted macro-average of the task scores present (None values skipped); None if there are none.

    The official leaderboard score is this average over *all* tasks of the benchmark, each task
    weighted equally whatever its size:
      - GLUE: the 9 tasks CoLA, SST-2, MRPC, QQP, STS-B, MNLI, QNLI, RTE, WNLI, with MNLI one task
        scoring (matched + mismatched)/2; the diagnostic set (AX) is not part of the score.
      - SuperGLUE: the 8 tasks BoolQ, CB, COPA, MultiRC, ReCoRD, RTE, WiC, WSC; the diagnostics AX-b
        and AX-g are reported beside it but not averaged in.
    An average over a subset of tasks (or over dev sets) is a different number and is not comparable
    to a leaderboard GLUE/SuperGLUE score; report which tasks went in.
    """
    # Sources: GLUE paper Sec. 3.4 ("a macro-average of those scores ... For tasks with multiple metrics
    # (e.g., accuracy and F1), we use an unweighted average of the metrics as the score for the task"),
    # checked against its Table 4: e.g. the 66.4 row = mean of the 9 task scores with MNLI
    # (72.9 + 73.4)/2 as one task. SuperGLUE paper Sec. 3.3 ("weighing each task equally, and for tasks
    # with multiple metrics, first averaging those metrics to get a task score").
    values = [float(v) for v in task_scores.values() if v is not None]
    if not values:
        return None
    return sum(values) / len(values)

