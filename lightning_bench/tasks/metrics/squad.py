"""SQuAD answer scoring: the official v1.1 and v2.0 evaluation scripts, re-implemented as functions.

Follows `evaluate-v1.1.py` and `evaluate-v2.0.py` from the SQuAD explorer (rajpurkar.github.io/SQuAD-explorer),
read from public copies of both scripts: the same answer normalization, token F1, max over gold
answers, percent scale, no-answer threshold and best-threshold search, with the same output keys.

One deliberate difference: `f1_score` always uses the v2.0 no-answer rule (an empty prediction on an
empty gold scores 1). v1.1's F1 scores that pair 0 (it never has empty golds, so its numbers on real
SQuAD v1.1 data are unchanged); ReCoRD (see metrics/classification.py) reuses these per-pair functions.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Mapping, Sequence

from lightning_bench.errors import ConfigError

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower-case, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace (this order)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def exact_match_score(prediction: str, gold: str) -> float:
    """1.0 if the normalized strings are equal, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str) -> float:
    """Token-overlap F1 of the normalized answers (bag of tokens: repeats count up to the min count).

    If either side normalizes to no tokens, the answer is a no-answer: F1 is 1.0 when both are empty
    and 0.0 otherwise (v2.0 rule; the naive formula gives 0 for a correct no-answer).
    """
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    num_same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def _check_references(references: Mapping[str, Sequence[str]]) -> None:
    if not references:
        raise ConfigError("no references: need at least one question id with its gold answers")
    for qid, golds in references.items():
        if isinstance(golds, str):
            raise ConfigError(f"references[{qid!r}] must be a list of gold answer strings, got one string")


def squad_v1_metrics(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]) -> dict:
    """`evaluate-v1.1.py`: {"exact_match", "f1"} in percent (0-100), plus "total" questions scored.

    Each question scores the max over its gold answers. A question id missing from `predictions`
    scores 0 (the official script warns and counts it); predictions for unknown ids are ignored.
    """
    _check_references(references)
    exact = f1 = 0.0
    for qid, golds in references.items():
        if not golds:
            raise ConfigError(f"references[{qid!r}] is empty: SQuAD v1.1 has no unanswerable questions "
                             "(use squad_v2_metrics)")
        if qid not in predictions:
            continue
        prediction = predictions[qid]
        exact += max(exact_match_score(prediction, g) for g in golds)
        f1 += max(f1_score(prediction, g) for g in golds)
    total = len(references)
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total, "total": total}


def _find_best_thresh(predictions: Mapping[str, str], raw: dict[str, float], na_probs: Mapping[str, float],
                      has_ans: dict[str, bool]) -> tuple[float, float]:
    """The official `find_best_thresh`: sweep the no-answer threshold over the sorted na_probs.

    Start as if every question were answered "no answer" (score = number of NoAns questions), then
    "answer" questions one at a time in increasing na_prob order: an answerable one adds its raw score,
    an unanswerable one costs 1 if the raw prediction string is non-empty (truthiness of the string, as
    in the official script). The best running score and the na_prob where it was reached are returned.
    Ties are walked one question at a time, exactly as the official script does.
    """
    cur = best = float(sum(1 for v in has_ans.values() if not v))
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):  # stable: ties keep na_probs' order
        if qid not in raw:
            continue
        if has_ans[qid]:
            cur += raw[qid]
        elif predictions[qid]:
            cur -= 1
        if cur > best:
            best = cur
            best_thresh = na_probs[qid]
    return 100.0 * best / len(raw), best_thresh


def squad_v2_metrics(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]],
                     na_probs: Mapping[str, float] | None = None, na_prob_thresh: float = 1.0) -> dict:
    """`evaluate-v2.0.py`, percent scale, with the official keys in the official order.

    references: question id -> gold answers; an empty list marks an unanswerable question, whose only
    correct answer is the empty string (gold answers that normalize to nothing are dropped likewise).
    na_probs: the model's probability that each question has no answer (default 0.0 for every
    prediction, the official default); where na_prob > na_prob_thresh the prediction counts as "".
    Returns exact, f1, total, HasAns_* / NoAns_* (each only if that subset is non-empty), and
    best_exact(_thresh), best_f1(_thresh): the scores at the best threshold found on this data. The
    official script prints the best_* keys only when given an na_prob file; they are always here.

    Every reference id needs a prediction: the official script crashes on a missing one (it skips it,
    then fails looking it up for the HasAns/NoAns split), so a missing id is a ValueError here.
    """
    _check_references(references)
    missing = [qid for qid in references if qid not in predictions]
    if missing:
        raise ConfigError(f"{len(missing)} question id(s) have no prediction (first: {missing[:3]}); "
                         "SQuAD v2.0 needs one per question ('' for no answer)")
    if na_probs is None:
        na_probs = {qid: 0.0 for qid in predictions}
    no_prob = [qid for qid in references if qid not in na_probs]
    if no_prob:
        raise ConfigError(f"{len(no_prob)} question id(s) have no na_prob (first: {no_prob[:3]})")

    has_ans = {qid: bool(golds) for qid, golds in references.items()}
    exact_raw: dict[str, float] = {}
    f1_raw: dict[str, float] = {}
    for qid, golds in references.items():
        # Golds that normalize to nothing are dropped; a question left with none accepts only "".
        usable = [g for g in golds if normalize_answer(g)] or [""]
        prediction = predictions[qid]
        exact_raw[qid] = max(exact_match_score(prediction, g) for g in usable)
        f1_raw[qid] = max(f1_score(prediction, g) for g in usable)

    def thresholded(raw: dict[str, float]) -> dict[str, float]:
        # Predicting "no answer" is right exactly when the question is unanswerable.
        return {qid: float(not has_ans[qid]) if na_probs[qid] > na_prob_thresh else s for qid, s in raw.items()}

    exact_t, f1_t = thresholded(exact_raw), thresholded(f1_raw)

    def block(qids: list[str]) -> dict:
        n = len(qids)
        return {"exact": 100.0 * sum(exact_t[q] for q in qids) / n,
                "f1": 100.0 * sum(f1_t[q] for q in qids) / n, "total": n}

    out = block(list(references))
    for prefix, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [q for q, v in has_ans.items() if v is wanted]
        if qids:
            out.update({f"{prefix}_{k}": v for k, v in block(qids).items()})
    out["best_exact"], out["best_exact_thresh"] = _find_best_thresh(predictions, exact_raw, na_probs, has_ans)
    out["best_f1"], out["best_f1_thresh"] = _find_best_thresh(predictions, f1_raw, na_probs, has_ans)
    return out
