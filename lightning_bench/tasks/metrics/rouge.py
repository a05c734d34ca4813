"""ROUGE for summarization (CNN/DailyMail, XSum, Multi-News): F1 of ROUGE-1/2/L/Lsum, x100, per sample.

Computed by Google's `rouge-score` package (the re-implementation of ROUGE-1.5.5 that the summarization
papers and Hugging Face's scripts use), with its own tokenizer: lower-case, every run of characters other
than a-z/0-9 is a separator, Porter stemming of tokens longer than 3 characters when use_stemmer.

Sentences for ROUGE-Lsum (the summary-level LCS of CNN/DM's official setup): rouge-score splits both texts
on "\\n" and nothing else (its split_summaries=False; empty lines are dropped). So:
- references are scored as given: the CNN/DM highlights joined by "\\n" give one sentence per highlight;
- a text with no newline is ONE sentence, and then rougeLsum equals rougeL for that pair;
- predictions are NOT re-split into sentences here. Hugging Face's scripts first run nltk's punkt sentence
  splitter over predictions, but punkt's model is a download (not available offline) and a home-made
  splitter would give figures that match no published setup. A model that writes one sentence per line
  gets the full Lsum treatment; a caller wanting punkt can put the newlines in before calling.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from lightning_bench.errors import ConfigError
from lightning_bench.tasks.metrics.bootstrap import mean_ci

ROUGE_TYPES = ("rouge1", "rouge2", "rougeL", "rougeLsum")


@lru_cache(maxsize=2)
def _scorer(use_stemmer: bool):
    from rouge_score import rouge_scorer  # optional dependency: only the summarization tasks need it

    return rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=use_stemmer, split_summaries=False)


def _check_pairs(predictions: Sequence[str], references: Sequence[str]) -> None:
    if len(predictions) != len(references):
        raise ConfigError(f"{len(predictions)} predictions but {len(references)} references: "
                          "give exactly one reference summary per prediction")
    for name, texts in (("predictions", predictions), ("references", references)):
        bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
        if bad is not None:
            raise ConfigError(f"{name}[{bad}] is a {type(texts[bad]).__name__}, not a string: "
                              "pass one summary string per sample (sentences separated by newlines)")


def rouge_per_sample(predictions: Sequence[str], references: Sequence[str], *,
                     use_stemmer: bool = True) -> list[dict]:
    """[{"rouge1", "rouge2", "rougeL", "rougeLsum"}] per sample: the F-measure x100 of each ROUGE type."""
    _check_pairs(predictions, references)
    scorer = _scorer(use_stemmer)
    out = []
    for prediction, reference in zip(predictions, references):
        scores = scorer.score(reference, prediction)  # rouge-score takes (target, prediction)
        out.append({t: 100.0 * scores[t].fmeasure for t in ROUGE_TYPES})
    return out


def rouge_metrics(predictions: Sequence[str], references: Sequence[str], seed: int = 0, *,
                  use_stemmer: bool = True) -> dict:
    """{rouge type: mean_ci dict (mean, ci_low, ci_high, n, method)} over the samples, x100."""
    per = rouge_per_sample(predictions, references, use_stemmer=use_stemmer)
    if not per:
        raise ConfigError("no samples to score: pass at least one prediction and reference")
    return {t: mean_ci([s[t] for s in per], seed=seed) for t in ROUGE_TYPES}
