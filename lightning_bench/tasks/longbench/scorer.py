"""LongBench scorers (issue 16): SCORERS maps a scoring family (a definition's `scorer`) to
scorer(task, rows, predictions, pairs) -> (figures, per-sample scores), as tasks/generative_scoring.py.

Re-implemented from the official scripts (THUDM/LongBench: `LongBench/metrics.py`, `LongBench/eval.py`;
LongBench v2: `pred.py`, `result.py`), not copied. Each function below says which official one it stands
for and where it deliberately differs.

LongBench v1 / LongBench-E (family "longbench"): one metric per task (DATASET_METRIC); a prediction is
scored against every gold answer and keeps the max; trec, triviaqa, samsum and lsht first keep only the
first line of the prediction (after leading newlines); scores are x100 per sample. LongBench-E tasks also
report the mean per length bucket (the row's `length`: words for English, characters for Chinese;
0-4k is < 4000, 4-8k is < 8000, 8k+ the rest), as `eval.py --e` does.

- qa_f1 (English): SQuAD normalisation (lower, drop ASCII punctuation, drop a/an/the, collapse spaces),
  bag-of-tokens F1; 0 when nothing overlaps (two empty answers score 0 too, as the official f1).
- qa_f1_zh: jieba word segmentation (precise mode, jieba's own dictionary), each word lower-cased with ASCII
  and Chinese punctuation and all whitespace removed, empty words dropped, then the same F1.
- rouge (English): ROUGE-L F of the `rouge` package (pltrdy/rouge 1.0.1, `Rouge().get_scores(...,
  avg=True)["rouge-l"]["f"]`), which is NOT rouge-score's ROUGE-L: texts are split into "sentences" on
  every ".", words on single spaces (case kept, punctuation kept: "Paris," and "Paris" differ), and its
  summary-level LCS counts the distinct words of the union of the LCSs of every (reference sentence,
  prediction sentence) pair over the distinct words of each side, F = 2PR / (P + R + 1e-8). Any error of
  the package (an empty prediction or reference: no sentence left) scores 0, as the official bare
  `except` does. `rouge_package.rouge_l_f` re-implements that formula, tie-breaks of the LCS reconstruction
  included (checked against the package on random texts when this was written). One difference: the
  package reconstructs the LCS recursively, so a (reference sentence, prediction sentence) pair of about
  1000 words or more raises RecursionError under Python's default limit, which the official `except`
  turns into a score of 0; here such pairs are scored normally (it can matter for vcsum/dureader, whose
  Chinese texts have no "." and so are one "sentence" each).
- rouge_zh: jieba words joined by spaces on both sides, then the rouge above.
- classification (trec, lsht): the classes named in the prediction (substring match), minus those that are
  part of the gold class name without being it; 1/len(matches) when the gold class is among them, else 0.
  The official removal loop deletes from the list it iterates over, so the match right after a removed one
  is never checked; that is kept. Its difflib fallback for "no class named" is dead code (it tests
  `list != 0`), so a prediction naming no class scores 0, as here.
- retrieval / retrieval_zh (passage_retrieval_en/zh): the paragraph number of the gold ("Paragraph 12",
  "段落12"); the fraction of the numbers in the prediction that equal it (0 when it has none).
- count (passage_count): the fraction of the numbers in the prediction that equal the gold count.
- code_sim (lcc, repobench-p): the first line of the prediction (leading newlines dropped) that holds no
  "`", "#" or "//" ("" if none), scored by fuzzywuzzy's `fuzz.ratio` against the gold line / 100.
  fuzzywuzzy rounds 100 x a similarity ratio to an integer; with python-Levenshtein installed that ratio
  is the normalised indel similarity, which rapidfuzz's `fuzz.ratio` computes (used here), without it
  difflib's SequenceMatcher ratio, which can be lower (LongBench pins neither; `matcher="difflib"` gives
  that variant).

LongBench v2 (family "longbench_v2"): the answer letter is parsed from the response as the official
`extract_answer` does (asterisks removed, then the first "The correct answer is (X)", else the first
"The correct answer is X", X in A-D; no letter: wrong). Accuracy x100 overall, per difficulty (easy,
hard), per length (short, medium, long) and per difficulty x length cell, plus the share of responses a
letter was parsed from. (The official result.py of 2024-12 counted "medium" under a second `== "short"`
test, so its Medium column was always empty and Long held medium + long; here each length is its own.)
"""

from __future__ import annotations

import difflib
import re
import string
from collections import Counter
from functools import lru_cache
from typing import Callable, Optional, Sequence

from lightning_bench.errors import ConfigError
from lightning_bench.tasks.metrics.open_qa import bag_f1
from lightning_bench.tasks.metrics.bootstrap import figures
from lightning_bench.tasks.longbench.rouge_package import rouge_l_f

# ---- per-task setup (LongBench/eval.py) ----------------------------------------------------------------

DATASET_METRIC = {
    "narrativeqa": "qa_f1", "qasper": "qa_f1", "multifieldqa_en": "qa_f1", "multifieldqa_zh": "qa_f1_zh",
    "hotpotqa": "qa_f1", "2wikimqa": "qa_f1", "musique": "qa_f1", "dureader": "rouge_zh",
    "gov_report": "rouge", "qmsum": "rouge", "multi_news": "rouge", "vcsum": "rouge_zh",
    "trec": "classification", "triviaqa": "qa_f1", "samsum": "rouge", "lsht": "classification",
    "passage_count": "count", "passage_retrieval_en": "retrieval", "passage_retrieval_zh": "retrieval_zh",
    "lcc": "code_sim", "repobench-p": "code_sim",
}
FIRST_LINE_TASKS = ("trec", "triviaqa", "samsum", "lsht")  # few-shot tasks: the model may go on with more shots
LENGTH_BUCKETS = ("0-4k", "4-8k", "8k+")

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ASCII_PUNCTUATION = frozenset(string.punctuation)
_ZH_PUNCTUATION = frozenset(string.punctuation + "！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃》"
                            "「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏.")
_NUMBER = re.compile(r"\d+")


def normalize_answer(text: str) -> str:
    """English answer normalisation: lower-case, drop ASCII punctuation, drop a/an/the, collapse whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _ASCII_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def normalize_zh_answer(text: str) -> str:
    """Chinese answer normalisation: lower-case, drop ASCII and the official list of Chinese punctuation
    (which has "》" but not "《"), drop all whitespace."""
    return "".join(ch for ch in text.lower() if ch not in _ZH_PUNCTUATION and not ch.isspace())


token_f1 = bag_f1  # the official qa_f1_score's f1 over token lists (SQuAD's bag-of-tokens F1)


@lru_cache(maxsize=1)
def _jieba():
    try:
        import jieba
    except ImportError:  # a one-line error instead of a traceback: the Chinese tasks need it
        raise ConfigError("the Chinese LongBench tasks are scored on jieba's word segmentation, as the official "
                          "scorer does: pip install jieba") from None
    import logging

    jieba.setLogLevel(logging.WARNING)  # no "Building prefix dict..." lines on every run
    return jieba


def jieba_words(text: str) -> list[str]:
    """jieba's words of `text` (precise mode, HMM on: `jieba.cut(text, cut_all=False)`)."""
    return list(_jieba().cut(text, cut_all=False))


def qa_f1_score(prediction: str, gold: str) -> float:
    return token_f1(normalize_answer(prediction).split(), normalize_answer(gold).split())


def qa_f1_zh_score(prediction: str, gold: str) -> float:
    def words(text):
        return [w for w in (normalize_zh_answer(t) for t in jieba_words(text)) if w]

    return token_f1(words(prediction), words(gold))


# ---- ROUGE-L as the `rouge` package computes it (rouge_package.py) -------------------------------------

def rouge_score(prediction: str, gold: str) -> float:
    return rouge_l_f(prediction, gold)


def rouge_zh_score(prediction: str, gold: str) -> float:
    return rouge_l_f(" ".join(jieba_words(prediction)), " ".join(jieba_words(gold)))


# ---- classification, retrieval, counting, code ---------------------------------------------------------

def classification_score(prediction: str, gold: str, all_classes: Sequence[str]) -> float:
    """1/len(matches) when the gold class is among the classes the prediction names, else 0 (module docstring)."""
    matches = [c for c in all_classes if c in prediction]
    i = 0
    while i < len(matches):  # the official loop removes from the list it walks: the next item is skipped
        term = matches[i]
        if term in gold and term != gold:
            matches.remove(term)
        i += 1
    return 1.0 / len(matches) if gold in matches else 0.0


def _share_equal(prediction: str, target: str) -> float:
    numbers = _NUMBER.findall(prediction)
    return sum(n == target for n in numbers) / len(numbers) if numbers else 0.0


def count_score(prediction: str, gold: str) -> float:
    return _share_equal(prediction, str(gold))


def _paragraph_number(gold: str, pattern: str) -> str:
    found = re.findall(pattern, gold)
    if not found:
        raise ConfigError(f"LongBench retrieval gold {gold!r} names no paragraph (expected {pattern!r})")
    return found[0]


def retrieval_score(prediction: str, gold: str) -> float:
    return _share_equal(prediction, _paragraph_number(gold, r"Paragraph (\d+)"))


def retrieval_zh_score(prediction: str, gold: str) -> float:
    return _share_equal(prediction, _paragraph_number(gold, r"段落(\d+)"))


def first_code_line(prediction: str) -> str:
    """The first line (leading newlines dropped) without "`", "#" or "//"; "" when every line has one."""
    for line in prediction.lstrip("\n").split("\n"):
        if "`" not in line and "#" not in line and "//" not in line:
            return line
    return ""


def fuzz_ratio(a: str, b: str, matcher: str = "levenshtein") -> int:
    """fuzzywuzzy's `fuzz.ratio`: 100 for equal strings, 0 when one is empty, else round(100 x ratio) with
    the indel similarity ("levenshtein", fuzzywuzzy + python-Levenshtein) or difflib's ratio ("difflib")."""
    if a == b:
        return 100
    if not a or not b:
        return 0
    if matcher == "levenshtein":
        from rapidfuzz import fuzz

        return int(round(fuzz.ratio(a, b)))
    if matcher == "difflib":
        return int(round(100 * difflib.SequenceMatcher(None, a, b).ratio()))
    raise ConfigError(f"unknown fuzz.ratio matcher {matcher!r}; valid: difflib, levenshtein")


def code_sim_score(prediction: str, gold: str, matcher: str = "levenshtein") -> float:
    return fuzz_ratio(first_code_line(prediction), gold, matcher) / 100


METRICS: dict[str, Callable[..., float]] = {
    "qa_f1": qa_f1_score, "qa_f1_zh": qa_f1_zh_score, "rouge": rouge_score, "rouge_zh": rouge_zh_score,
    "classification": classification_score, "retrieval": retrieval_score, "retrieval_zh": retrieval_zh_score,
    "count": count_score, "code_sim": code_sim_score,
}


def dataset_of(task) -> str:
    """The LongBench dataset a definition scores ("longbench_e/qasper" -> "qasper")."""
    name = task.short_name
    if name not in DATASET_METRIC:
        raise ConfigError(f"{task.name}: no LongBench metric for {name!r}; known: {', '.join(DATASET_METRIC)}")
    return name


def sample_score(dataset: str, prediction: str, answers: Sequence[str],
                 all_classes: Optional[Sequence[str]] = None) -> float:
    """One prediction's LongBench score in [0, 1]: the task's metric, max over the gold answers (0 if none
    scores above 0), after the first-line post-processing of the few-shot tasks."""
    if isinstance(answers, str):
        raise ConfigError(f"LongBench answers must be a list of strings, got the string {answers!r}")
    if dataset in FIRST_LINE_TASKS:
        prediction = prediction.lstrip("\n").split("\n")[0]
    metric = DATASET_METRIC[dataset]
    fn = METRICS[metric]
    best = 0.0
    for gold in answers:
        if metric == "classification":
            if not all_classes:
                raise ConfigError(f"LongBench {dataset}: the row has no all_classes, which classification needs")
            value = fn(prediction, gold, all_classes)
        else:
            value = fn(prediction, gold)
        best = max(best, value)
    return float(best)


def length_bucket(length) -> str:
    """LongBench-E's length interval of a row: "0-4k" (< 4000), "4-8k" (< 8000) or "8k+"."""
    return "0-4k" if length < 4000 else "4-8k" if length < 8000 else "8k+"


def _longbench(task, rows, preds, pairs):
    dataset = dataset_of(task)
    per = [{"score": 100.0 * sample_score(dataset, pred, list(row["answers"]), row.get("all_classes"))}
           for pred, row in zip(preds, rows)]
    out = {**figures(per, ("score",)), "metric": DATASET_METRIC[dataset]}
    if task.benchmark == "longbench_e":
        counts = {}
        for sample, row in zip(per, rows):
            if row.get("length") is None:
                raise ConfigError(f"{task.name}: row {row.get('id')!r} has no length, which LongBench-E buckets need")
            sample["length"], sample["bucket"] = row["length"], length_bucket(row["length"])
        for bucket in LENGTH_BUCKETS:
            members = [s for s in per if s["bucket"] == bucket]
            counts[bucket] = len(members)
            part = figures(members, ("score",))
            out[f"score_{bucket}"], out[f"score_{bucket}_ci95"] = part["score"], part["score_ci95"]
        out["bucket_samples"] = counts
    return out, per


# ---- LongBench v2 --------------------------------------------------------------------------------------

_ANSWER_PAREN = re.compile(r"The correct answer is \(([A-D])\)")
_ANSWER_BARE = re.compile(r"The correct answer is ([A-D])")
DIFFICULTIES = ("easy", "hard")
LENGTHS = ("short", "medium", "long")


def extract_choice(response: str) -> Optional[str]:
    """The letter LongBench v2's `extract_answer` parses from a response, or None."""
    response = response.replace("*", "")
    found = _ANSWER_PAREN.search(response) or _ANSWER_BARE.search(response)
    return found.group(1) if found else None


def _longbench_v2(task, rows, preds, pairs):
    per = []
    for pred, row in zip(preds, rows):
        choice = extract_choice(pred.strip())
        per.append({"accuracy": 100.0 * (choice == row["answer"]), "extracted": 100.0 * (choice is not None),
                    "choice": choice, "difficulty": row["difficulty"], "length": row["length"]})
    out = figures(per, ("accuracy", "extracted"))
    groups = {d: (lambda s, d=d: s["difficulty"] == d) for d in DIFFICULTIES}
    groups.update({n: (lambda s, n=n: s["length"] == n) for n in LENGTHS})
    groups.update({f"{d}_{n}": (lambda s, d=d, n=n: s["difficulty"] == d and s["length"] == n)
                   for d in DIFFICULTIES for n in LENGTHS})
    counts = {}
    for name, member in groups.items():
        members = [s for s in per if member(s)]
        counts[name] = len(members)
        part = figures(members, ("accuracy",))
        out[f"accuracy_{name}"], out[f"accuracy_{name}_ci95"] = part["accuracy"], part["accuracy_ci95"]
    out["group_samples"] = counts
    return out, per


SCORERS = {"longbench": _longbench, "longbench_v2": _longbench_v2}
