"""ZeroSCROLLS scorers (issue 16): SCORERS maps a metric family (a definition's `scorer`) to
scorer(task, rows, predictions, pairs) -> (figures, per-sample scores), as tasks/generative_scoring.py.

Re-implemented from the benchmark's definitions (Shaham et al., 2023, section 3.3) and its official metric
script (the `metrics/` of the hub dataset tau/zero_scrolls, which extends SCROLLS'), not copied. Every
task reports its official task score as "score" (x100), so the benchmark's task mean of "score" is the
ZeroSCROLLS score; a row with several references (NarrativeQA, Qasper, SQuALITY) keeps the max over them.

- ROUGE (gov_report, summ_screen_fd, qmsum, squality): rouge-score's ROUGE-1, ROUGE-2 and ROUGE-L F1 with
  Porter stemming (tasks/metrics/rouge.py), each the max over the references per sample and
  then averaged over samples; the task score is the geometric mean of the three averages
  (rouge1 x rouge2 x rougeL)^(1/3), its 95% interval a paired bootstrap of that statistic. (The official
  script also writes sentences on new lines for ROUGE-Lsum, which does not change ROUGE-L.)
- F1 (qasper, narrative_qa, musique): SQuAD normalisation (lower-case, drop ASCII punctuation, drop
  a/an/the, collapse whitespace), then transliteration to ASCII, bag-of-tokens F1 (0 when nothing overlaps).
  The official script transliterates with the `unidecode` package (GPL, so not a dependency here):
  `to_ascii` does the same for accented Latin letters (NFKD, marks dropped), the Latin letters that do not
  decompose (ß, æ, ø, ł, ...) and the usual typographic marks (curly quotes, dashes, ellipsis, ...),
  mapped as unidecode maps them; other scripts (Chinese, Cyrillic, ...) are kept as they are, where
  unidecode would romanise them. Because the transliteration comes after the punctuation is dropped, a
  curly apostrophe survives as "'" ("dumbledore’s" -> "dumbledore's", which does not match "Dumbledore's"
  -> "dumbledores"), as in the official script.
- Accuracy (quality): the first capital A-D standing alone as a word (regex `\\b[A-D]\\b`) in the
  prediction, against the same in the reference ("(B) ..."); no letter: wrong.
- Exponential similarity (space_digest): the first percentage in each text (`\\d+\\.?\\d*%`), score
  0.5 ** (|gold - predicted| / 10): halved every 10 points; no percentage in the prediction: 0.
- Concordance index (book_sum_sort): every character but digits, commas and whitespace dropped, the rest
  read as a list of integers (a part that is not one: an empty list); if the prediction is not a
  permutation of the gold IDs the score is 0, else the share of the C(n, 2) pairs of summaries that it
  puts in the gold's relative order (lifelines' `concordance_index`, no ties possible in a permutation).
"""

from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from typing import Optional, Sequence

from lightning_bench.errors import ConfigError
from lightning_bench.tasks.metrics.bootstrap import figures

TASK_METRIC = {
    "gov_report": "rouge", "summ_screen_fd": "rouge", "qmsum": "rouge", "squality": "rouge",
    "qasper": "f1", "narrative_qa": "f1", "musique": "f1", "quality": "accuracy",
    "space_digest": "exp_similarity", "book_sum_sort": "concordance_index",
}
ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
_LETTER = re.compile(r"\b[A-D]\b")
_PERCENTAGE = re.compile(r"\d+\.?\d*%")
_NOT_ID_CHARS = re.compile(r"[^0-9\s,]")

# what unidecode gives for characters NFKD does not reduce to ASCII (its tables, for these characters)
_ASCII = {
    "\u2018": "'", "\u2019": "'", "\u201a": ",", "\u201b": "'", "\u201c": '"', "\u201d": '"', "\u201e": ",,",
    "\u201f": '"', "\u2032": "'", "\u2033": "''", "\u02c8": "'", "\u00ab": "<<", "\u00bb": ">>", "\u2039": "<",
    "\u203a": ">", "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "--", "\u2015": "--",
    "\u2212": "-", "\u2022": "*", "\u00b7": "*", "\u00d7": "x", "\u00f7": "/", "\u00b0": "deg", "\u00b1": "+-",
    "\u00bd": " 1/2", "\u00bc": " 1/4", "\u00be": " 3/4", "\u00df": "ss", "\u00e6": "ae", "\u00c6": "AE",
    "\u00f8": "o", "\u00d8": "O", "\u0111": "d", "\u0110": "D", "\u0142": "l", "\u0141": "L", "\u0153": "oe",
    "\u0152": "OE", "\u00fe": "th", "\u00de": "Th", "\u00f0": "d", "\u00d0": "D", "\u0131": "i", "\u20ac": "EUR",
    "\u00a3": "PS", "\u00a5": "Y=", "\u00a9": "(c)", "\u00ae": "(r)", "\u2122": "(tm)", "\u00a7": "SS",
    "\u00b6": "P", "\u00a1": "!", "\u00bf": "?",
}


def to_ascii(text: str) -> str:
    """ASCII transliteration of Latin-script text (see the module docstring); other characters kept."""
    out = []
    for ch in text:
        if ch < "\x80":
            out.append(ch)
        elif ch in _ASCII:
            out.append(_ASCII[ch])
        else:
            ascii_part = "".join(c for c in unicodedata.normalize("NFKD", ch) if c < "\x80")
            out.append(ascii_part or ch)
    return "".join(out)


def normalize_answer(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return to_ascii(" ".join(_ARTICLES.sub(" ", text).split()))


def f1_score(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def choice_letter(text: str) -> Optional[str]:
    found = _LETTER.search(text)
    return found.group() if found else None


def accuracy_score(prediction: str, gold: str) -> float:
    letter = choice_letter(gold)
    if letter is None:
        raise ConfigError(f"QuALITY reference {gold!r} names no option letter A-D")
    return float(choice_letter(prediction) == letter)


def percentage(text: str) -> Optional[float]:
    found = _PERCENTAGE.search(text)
    return float(found.group()[:-1]) if found else None


def exp_similarity_score(prediction: str, gold: str) -> float:
    target = percentage(gold)
    if target is None:
        raise ConfigError(f"SpaceDigest reference {gold!r} holds no percentage")
    predicted = percentage(prediction)
    return 0.0 if predicted is None else 0.5 ** (abs(target - predicted) / 10)


def summary_ids(text: str) -> list[int]:
    """The summary IDs a BookSumSort answer lists ("Order: 3, 1, 2" -> [3, 1, 2]); [] if it holds none."""
    parts = _NOT_ID_CHARS.sub("", text).replace(",", " ").strip(string.punctuation).split()
    return [int(p) for p in parts]  # only digits are left in each part


def concordance_index_score(prediction: str, gold: str) -> float:
    pred, ref = summary_ids(prediction), summary_ids(gold)
    if sorted(pred) != sorted(ref):
        return 0.0  # not a permutation of the gold IDs
    if len(ref) < 2:
        return 1.0  # one summary: nothing to misplace (lifelines would raise: no admissible pairs)
    pred_pos = {summary: i for i, summary in enumerate(pred)}
    ref_pos = {summary: i for i, summary in enumerate(ref)}
    ids = list(ref_pos)
    pairs = concordant = 0
    for a in range(len(ids)):
        for b in range(a + 1, len(ids)):
            x, y = ids[a], ids[b]
            pairs += 1
            concordant += (ref_pos[x] < ref_pos[y]) == (pred_pos[x] < pred_pos[y])
    return concordant / pairs


METRICS = {"f1": f1_score, "accuracy": accuracy_score, "exp_similarity": exp_similarity_score,
           "concordance_index": concordance_index_score}


def metric_of(task) -> str:
    name = task.short_name
    if name not in TASK_METRIC:
        raise ConfigError(f"{task.name}: no ZeroSCROLLS metric for {name!r}; known: {', '.join(TASK_METRIC)}")
    return TASK_METRIC[name]


def rouge_sample(prediction: str, references: Sequence[str]) -> dict:
    """{rouge1, rouge2, rougeL}: each F1 x100, the max over the references."""
    from lightning_bench.tasks.metrics.rouge import rouge_per_sample

    scores = rouge_per_sample([prediction] * len(references), list(references))
    return {t: max(s[t] for s in scores) for t in ROUGE_TYPES}


def geometric_mean(values: Sequence[float]) -> float:
    return math.prod(values) ** (1.0 / len(values))


def _rouge_score_figures(per: list[dict], seed: int = 0) -> dict:
    """The geometric mean of the three ROUGE means, and its paired percentile bootstrap 95% interval."""
    import numpy as np
    from scipy import stats

    means = [sum(s[t] for s in per) / len(per) for t in ROUGE_TYPES]
    score = geometric_mean(means)
    if len(per) < 2:
        return {"score": score, "score_ci95": None}
    columns = tuple(np.array([s[t] for s in per]) for t in ROUGE_TYPES)

    def statistic(r1, r2, rl, axis=-1):
        return np.cbrt(r1.mean(axis=axis) * r2.mean(axis=axis) * rl.mean(axis=axis))

    result = stats.bootstrap(columns, statistic, paired=True, vectorized=True, n_resamples=1000,
                             confidence_level=0.95, method="percentile", rng=np.random.default_rng(seed))
    interval = result.confidence_interval
    return {"score": score, "score_ci95": [float(interval.low), float(interval.high)]}


def _zeroscrolls(task, rows, preds, pairs):
    metric = metric_of(task)
    if not rows:
        raise ConfigError(f"{task.name}: no samples to score")
    if metric == "rouge":
        per = [rouge_sample(pred, row["outputs"]) for pred, row in zip(preds, rows)]
        out = {**figures(per, ROUGE_TYPES), **_rouge_score_figures(per), "metric": "rouge_geometric_mean"}
        for sample in per:  # one number per example for paired comparisons; the task score stays the geometric
            sample["score"] = geometric_mean([sample[t] for t in ROUGE_TYPES])  # mean of the three averages
        return out, per
    fn = METRICS[metric]
    per = [{metric: 100.0 * max(fn(pred, ref) for ref in row["outputs"])} for pred, row in zip(preds, rows)]
    for sample in per:
        sample["score"] = sample[metric]
    out = figures(per, (metric,))
    return {**out, "score": out[metric], "score_ci95": out[f"{metric}_ci95"], "metric": metric}, per


# the headline `score` (definitions.py) is, for the ROUGE tasks, each example's own geometric mean of
# ROUGE-1/2/L, whose average is close to, not equal to, the task score above
SCORERS = {"zeroscrolls": _zeroscrolls}
