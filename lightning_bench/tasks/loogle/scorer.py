"""LooGLE scores: the automatic metrics of bigai-nlco/LooGLE's Evaluation/automatic_metrics.py that run
offline, re-implemented, x100.

QA and summarization (`automatic_sim`), per question, then the mean over questions (with a bootstrap 95% CI):
- bleu1, bleu4: nltk's sentence_bleu as LooGLE calls it: both texts with newlines made spaces and split
  on whitespace, one reference, weights (1,0,0,0) and (0,0,0,1) (so "BLEU-4" is the 4-gram precision alone,
  not the geometric mean of 1..4), no smoothing: brevity penalty x clipped n-gram precision, 0 when no
  unigram matches (nltk's early exit) or no 4-gram matches (nltk returns 2.2e-308 there). Implemented here
  (nltk is no dependency); tests check it against nltk where nltk is installed.
- rouge1, rouge2, rougeL: RECALL, as LooGLE's get_rouge_score reports by default (metric="r"), of the `rouge`
  package (pltrdy/rouge 1.0.1: `from rouge import Rouge`; LooGLE's requirements.txt names rouge-score, which
  provides no `rouge` module), re-implemented in rouge_package.py: sentences split on ".", words on spaces,
  case and punctuation kept, DISTINCT n-grams, summary-level ROUGE-L. Not Google's rouge-score (which
  lower-cases, drops punctuation and counts repeated n-grams), whose figures differ from these by tens of
  points on single answers. Checked equal to the package on LooGLE's shared sample and random texts when
  this was written; a sentence pair of ~1000 words, where the package hits Python's recursion limit, is
  scored here (rouge_package.py).
- an empty prediction is scored as "None", as LooGLE's automatic_eval.py does. A prediction (or gold) with
  no sentence left (dots only: "...") makes the package raise, which stops LooGLE's script (no `except`);
  here its three ROUGE figures are 0.
- omitted: METEOR (nltk's single_meteor_score needs the wordnet data, which cannot be downloaded here),
  BERTScore (a downloaded roberta-large) and the GPT-4 judge (the OpenAI API); the figures list them
  under `omitted`.
- score: ROUGE-L recall, the figure `lightning_bench downstream` compares and the benchmark averages.

Cloze (`automatic_match`): the prediction must parse as a Python/JSON dict literal (LooGLE `eval`s it; here
`ast.literal_eval`, the same literals without running code), else it matches nothing. Over the masks
{"<mask-n>": entity} of a question: exact = the predicted entity equals the gold string, partial = they share a
whitespace-split word. LooGLE's figure is micro: matched masks / all masks over the task (exact_match,
partial_match, x100); the CI resamples questions with their masks. Per question: the fractions x100 and the
counts. score = exact_match.
"""

from __future__ import annotations

import ast
import math
from collections import Counter

import numpy as np

from lightning_bench.tasks.metrics.bootstrap import figures
from lightning_bench.tasks.longbench import rouge_package

OMITTED = ["meteor", "bertscore", "gpt4_score"]
OMITTED_WHY = ("omitted offline: METEOR needs nltk's wordnet data (not downloadable here), BERTScore a "
               "downloaded roberta-large, the GPT-4 judge the OpenAI API")
ROUGE_NOTE = ("ROUGE-1/2/L recall (LooGLE's metric='r') of the `rouge` package (pltrdy/rouge 1.0.1), "
              "as LooGLE's get_rouge_score")
ROUGE_KEYS = {"rouge1": "rouge-1", "rouge2": "rouge-2", "rougeL": "rouge-l"}  # ours: the package's


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def sentence_bleu_one_order(reference: list[str], hypothesis: list[str], n: int) -> float:
    """nltk's sentence_bleu([reference], hypothesis, weights=one-hot at order n), without smoothing (0..1)."""
    if not hypothesis or sum((_ngrams(hypothesis, 1) & _ngrams(reference, 1)).values()) == 0:
        return 0.0
    hyp, ref = _ngrams(hypothesis, n), _ngrams(reference, n)
    matched = sum(min(count, ref[gram]) for gram, count in hyp.items())
    if matched == 0:
        return 0.0
    precision = matched / max(1, sum(hyp.values()))
    c, r = len(hypothesis), len(reference)
    brevity = 1.0 if c > r else math.exp(1 - r / c)
    return brevity * precision


def bleu(reference: str, hypothesis: str) -> dict:
    """{"bleu1", "bleu4"} x100, tokenized as LooGLE's get_bleu_score."""
    ref, hyp = reference.replace("\n", " ").split(), hypothesis.replace("\n", " ").split()
    return {"bleu1": 100.0 * sentence_bleu_one_order(ref, hyp, 1),
            "bleu4": 100.0 * sentence_bleu_one_order(ref, hyp, 4)}


def rouge_recall(reference: str, hypothesis: str) -> dict:
    """{"rouge1", "rouge2", "rougeL"}: the `rouge` package's recall x100 (0 where the package raises)."""
    scores = rouge_package.scores(hypothesis, reference)
    return {ours: 100.0 * scores[theirs]["r"] if scores else 0.0 for ours, theirs in ROUGE_KEYS.items()}


def similarity(reference: str, prediction: str) -> dict:
    hypothesis = prediction if prediction != "" else "None"
    out = {**bleu(reference, hypothesis), **rouge_recall(reference, hypothesis)}
    out["score"] = out["rougeL"]
    return out


def parse_cloze(prediction: str):
    """The predicted {mask: entity} dict, or None where the prediction is no dict literal."""
    try:
        value = ast.literal_eval(prediction.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def cloze_counts(masks: dict[str, str], prediction: str) -> dict:
    """{"masks", "exact_matched", "partial_matched", "parsed"} for one question."""
    guess = parse_cloze(prediction)
    exact = partial = 0
    for key, gold in masks.items():
        if guess is None or key not in guess:
            continue
        value = guess[key]
        exact += int(value == gold)
        # LooGLE splits the predicted entity too; a non-string (a number) would crash its script: no match here
        partial += int(isinstance(value, str) and bool(set(gold.split()) & set(value.split())))
    return {"masks": len(masks), "exact_matched": exact, "partial_matched": partial, "parsed": guess is not None}


def _ratio_ci(matched: np.ndarray, totals: np.ndarray, seed: int = 0, n_resamples: int = 1000):
    if len(totals) < 2:
        return None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(totals), size=(n_resamples, len(totals)))
    ratios = 100.0 * matched[idx].sum(axis=1) / totals[idx].sum(axis=1)
    return [float(np.percentile(ratios, 2.5)), float(np.percentile(ratios, 97.5))]


def _cloze(rows, preds) -> tuple[dict, list[dict]]:
    per = []
    for pred, row in zip(preds, rows):
        counts = cloze_counts(row["masks"], pred)
        per.append({"exact_match": 100.0 * counts["exact_matched"] / counts["masks"],
                    "partial_match": 100.0 * counts["partial_matched"] / counts["masks"], **counts})
    totals = np.array([s["masks"] for s in per], dtype=float)
    out: dict = {}
    for key, count in (("exact_match", "exact_matched"), ("partial_match", "partial_matched")):
        matched = np.array([s[count] for s in per], dtype=float)
        out[key] = float(100.0 * matched.sum() / totals.sum()) if len(per) else None
        out[f"{key}_ci95"] = _ratio_ci(matched, totals) if len(per) else None
    out["score"], out["score_ci95"] = out["exact_match"], out["exact_match_ci95"]
    out["ci95_method"] = ("percentile bootstrap, 1000 resamples, seed 0, unit: question (matched masks / masks)"
                          if len(per) >= 2 else f"no interval (n={len(per)} < 2)")
    out["aggregation"] = "micro: matched masks / all masks (LooGLE's get_match_score)"
    out["unparsed"] = sum(not s["parsed"] for s in per)
    return out, per


def _score(task, rows, preds, pairs):
    if task.short_name == "shortdep_cloze":
        return _cloze(rows, preds)
    per = [similarity(row["answers"][0], pred) for pred, row in zip(preds, rows)]
    keys = ("bleu1", "bleu4", "rouge1", "rouge2", "rougeL", "score")
    return {**figures(per, keys), "rouge": ROUGE_NOTE, "score_is": "rougeL (recall)", "omitted": list(OMITTED),
            "omitted_why": OMITTED_WHY}, per


SCORERS = {"loogle": _score}
