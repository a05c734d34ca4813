"""GLUE and SuperGLUE metrics and benchmark scores, as pure functions of predictions and labels.

Each function is one metric; which task reports which metric is the task's definition
(tasks/glue/definitions.py, tasks/superglue/definitions.py), applied by tasks/official_metrics.py.

Metrics per task follow the GLUE paper (Wang et al., 2019, ICLR; Table 4 and Sec. 3.4) and the
SuperGLUE paper (Wang et al., 2019, NeurIPS; Table 1 and Sec. 3.3):
  GLUE: CoLA Matthews corr.; MRPC/QQP accuracy + F1 of class 1; STS-B Pearson + Spearman; MNLI
  accuracy on matched + mismatched; SST-2, QNLI, RTE, WNLI accuracy.
  SuperGLUE: CB accuracy + unweighted mean of the per-class F1 over its 3 classes; MultiRC exact match
  per question + F1 over all answer options (F1a); ReCoRD max-over-gold token EM + F1 (SQuAD
  normalization); BoolQ, COPA, RTE, WiC, WSC accuracy; diagnostics AX-b Matthews corr., AX-g accuracy
  + gender parity (fraction of pronoun-swapped pairs predicted alike).
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

from lightning_bench.errors import ConfigError
from lightning_bench.tasks.metrics.squad import exact_match_score, f1_score

def check_lengths(predictions: Sequence, references: Sequence, *others: tuple[str, Sequence | None]) -> None:
    if len(predictions) == 0:
        raise ConfigError("no examples: predictions and references are empty")
    if len(predictions) != len(references):
        raise ConfigError(f"length mismatch: {len(predictions)} predictions vs {len(references)} references")
    for name, values in others:
        if values is not None and len(values) != len(references):
            raise ConfigError(f"length mismatch: {len(values)} {name} vs {len(references)} references")


def class_labels(values: Sequence, num_classes: int, what: str) -> torch.Tensor:
    """Integer class ids as a tensor; anything else is a clear error rather than a torchmetrics one."""
    for v in values:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or not 0 <= v < num_classes:
            raise ConfigError(f"{what} must be integer labels in 0..{num_classes - 1}, got {v!r}")
    return torch.tensor([int(v) for v in values], dtype=torch.long)


def accuracy(preds: torch.Tensor, target: torch.Tensor, num_classes: int) -> float:
    return float(multiclass_accuracy(preds, target, num_classes=num_classes, average="micro"))


def matthews(preds: torch.Tensor, target: torch.Tensor) -> float:
    """Binary MCC = (tp*tn - fp*fn) / sqrt((tp+fp)(tp+fn)(tn+fp)(tn+fn)), 0 when undefined.

    Written out on torchmetrics' confusion matrix because torchmetrics' own MCC returns limit values
    (e.g. -0.41 or 1.0) when a row or column of the table is empty, i.e. for constant predictions;
    the GLUE scorers use sklearn.metrics.matthews_corrcoef, which returns 0 there (the GLUE paper's
    majority-class CoLA baselines score 0.0). Integer counts keep it in float64.
    """
    (tn, fp), (fn, tp) = binary_confusion_matrix(preds, target).tolist()
    denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    return 0.0 if denominator == 0 else (tp * tn - fp * fn) / math.sqrt(denominator)


def correlations(predictions: Sequence[float], references: Sequence[float]) -> dict[str, float]:
    """Pearson and Spearman (scipy). Constant input has no correlation: scipy warns and gives nan."""
    if len(predictions) < 2:
        raise ConfigError("stsb needs at least 2 examples to compute a correlation")
    x = [float(v) for v in predictions]
    y = [float(v) for v in references]
    return {"pearson": float(stats.pearsonr(x, y)[0]), "spearman": float(stats.spearmanr(x, y)[0])}


def binary_f1(preds: torch.Tensor, target: torch.Tensor) -> float:
    """F1 of class 1 (MRPC paraphrase, QQP duplicate; MultiRC's F1a over all answer options)."""
    return float(binary_f1_score(preds, target))


def macro_f1(preds: torch.Tensor, target: torch.Tensor, num_classes: int) -> float:
    """Unweighted mean of the per-class F1 over all `num_classes` classes (CB), a class with no gold and no
    predicted example counting F1 = 0 (as sklearn's f1_score(labels=range(n), average="macro") used by
    T5 / lm-eval). average="none" then a plain mean: torchmetrics' "macro" drops such classes."""
    per_class = multiclass_f1_score(preds, target, num_classes=num_classes, average="none")
    return float(per_class.double().mean())


def accuracy_by_subset(preds: torch.Tensor, target: torch.Tensor, num_classes: int, subsets: Sequence[str],
                       subset: str) -> float | None:
    """Accuracy over the examples of one subset (MNLI matched / mismatched); None when it has none."""
    mask = torch.tensor([s == subset for s in subsets], dtype=torch.bool)
    return accuracy(preds[mask], target[mask], num_classes) if mask.any() else None


def gender_parity(predictions: Sequence, pair_ids: Sequence[int]) -> float | None:
    """AX-g (SuperGLUE Sec. 3.2): the fraction of Winogender pairs whose two examples get the same prediction.

    A pair is the examples with idx 2k and 2k+1 (they differ only in the pronoun's gender), the pairing
    lm-evaluation-harness uses; an example whose partner is absent (a --data.max_samples cut) is left
    out. None when no pair is complete.
    """
    by_id = dict(zip(pair_ids, predictions))
    same = [by_id[i] == by_id[i + 1] for i in by_id if i % 2 == 0 and i + 1 in by_id]
    return sum(same) / len(same) if same else None


def question_exact_match(predictions: Sequence[int], references: Sequence[int], groups: Sequence[Hashable]) -> float:
    """MultiRC's EM: the fraction of questions (`groups`: the question id of each answer option) whose
    options are all right. No library has it: group the options by question id."""
    all_right: dict[Hashable, bool] = defaultdict(lambda: True)
    for p, r, g in zip(predictions, references, groups):
        all_right[g] = all_right[g] and p == r
    return sum(all_right.values()) / len(all_right)


def record_metrics(predictions: Sequence[str], references: Sequence[Sequence[str]]) -> dict[str, float]:
    em = f1 = 0.0
    for i, (prediction, golds) in enumerate(zip(predictions, references)):
        if isinstance(golds, str) or not golds:
            raise ConfigError(f"record references[{i}] must be a non-empty list of gold answer strings")
        em += max(exact_match_score(prediction, g) for g in golds)
        f1 += max(f1_score(prediction, g) for g in golds)
    return {"exact_match": em / len(predictions), "f1": f1 / len(predictions)}


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

