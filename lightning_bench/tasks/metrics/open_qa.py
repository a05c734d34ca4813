"""Open-domain QA scoring (NQ-open, TriviaQA, SQuAD-style answers): exact match and token F1, each the max
over the gold answers, with the answer normalisation of each benchmark's own evaluation script.

Styles (re-implemented from the definitions in the official scripts; none ships as a pip package):
- "squad": SQuAD v1.1 `evaluate-v1.1.py`: lower-case, delete ASCII punctuation, drop a/an/the, collapse
  whitespace (`squad_metrics.normalize_answer`, shared, not duplicated).
- "triviaqa": TriviaQA's `evaluation/triviaqa_evaluation.py` (mandarjoshi90/triviaqa): "_" becomes a space,
  lower-case, ASCII punctuation and the quote marks ‘ ’ ´ are REPLACED BY A SPACE (not deleted: "jay-z"
  -> "jay z"), drop a/an/the, collapse whitespace.
- "nq_open": ORQA's scorer (Lee et al. 2019, who defined NQ-open; google-research/language,
  `language/orqa/utils/eval_utils.py`, where the nq_open README's conversion script also lives): Unicode
  NFD decomposition, then the SQuAD steps, so a precomposed "é" equals "e" + combining accent.

Token F1 follows SQuAD v1.1 and TriviaQA: the bag-of-tokens overlap, and 0 when there is no common token,
including when both sides normalise to nothing (squad_metrics.f1_score uses the v2.0 rule, 1 for two empty
answers; open QA has no unanswerable questions). NQ-open's scorer reports exact match only; its F1 here is
the same token F1 over the NQ-open normalisation.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from typing import Sequence

from lightning_bench.errors import ConfigError, unknown_name
from lightning_bench.tasks.metrics import squad as squad_metrics
from lightning_bench.tasks.metrics.bootstrap import mean_ci

STYLES = ("squad", "triviaqa", "nq_open")

_TRIVIAQA_PUNCTUATION = frozenset(string.punctuation + "\u2018\u2019\u00b4`")  # ‘ ’ ´ beside ASCII
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def _triviaqa(text: str) -> str:
    text = text.replace("_", " ").lower()
    text = "".join(" " if ch in _TRIVIAQA_PUNCTUATION else ch for ch in text)
    return " ".join(_ARTICLES.sub(" ", text).split())


_NORMALIZERS = {
    "squad": squad_metrics.normalize_answer,
    "triviaqa": _triviaqa,
    "nq_open": lambda text: squad_metrics.normalize_answer(unicodedata.normalize("NFD", text)),
}


def normalize_answer(text: str, style: str) -> str:
    """`text` as the `style` benchmark's scorer compares it (see the module docstring)."""
    if style not in _NORMALIZERS:
        raise unknown_name("answer normalisation style", style, STYLES)
    return _NORMALIZERS[style](text)


def _check_golds(golds: Sequence[str]) -> None:
    if isinstance(golds, str):
        raise ConfigError(f"gold answers must be a list of strings, got the single string {golds!r}: wrap it in a list")
    if not golds:
        raise ConfigError("empty list of gold answers: every open-QA question needs at least one")


def exact_match(prediction: str, golds: Sequence[str], style: str) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0."""
    _check_golds(golds)
    pred = normalize_answer(prediction, style)
    return float(any(pred == normalize_answer(g, style) for g in golds))


def bag_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    """Bag-of-tokens F1; 0.0 when no token is shared (two empty lists included)."""
    same = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def token_f1(prediction: str, golds: Sequence[str], style: str) -> float:
    """Token-overlap F1 (0..1) of the normalised answers, the max over the gold answers."""
    _check_golds(golds)
    pred = normalize_answer(prediction, style).split()
    return max(bag_f1(pred, normalize_answer(g, style).split()) for g in golds)


def open_qa_per_sample(predictions: Sequence[str], references: Sequence[Sequence[str]], style: str) -> list[dict]:
    """[{"exact_match", "f1"}] per question, x100; references[i] is question i's list of gold answers."""
    if len(predictions) != len(references):
        raise ConfigError(f"{len(predictions)} predictions but {len(references)} reference lists: "
                          "give one list of gold answers per prediction")
    return [{"exact_match": 100.0 * exact_match(p, golds, style), "f1": 100.0 * token_f1(p, golds, style)}
            for p, golds in zip(predictions, references)]


def open_qa_metrics(predictions: Sequence[str], references: Sequence[Sequence[str]], style: str,
                    seed: int = 0) -> dict:
    """{"exact_match", "f1"}: each a mean_ci dict (mean, ci_low, ci_high, n, method), x100."""
    per = open_qa_per_sample(predictions, references, style)
    if not per:
        raise ConfigError("no questions to score: pass at least one prediction and its gold answers")
    return {key: mean_ci([s[key] for s in per], seed=seed) for key in ("exact_match", "f1")}
