"""Code metrics: CodeXGLUE code-to-text smoothed BLEU-4, CodeXGLUE line completion (exact match, edit
similarity), CodeBLEU (the `codebleu` package) and the unbiased pass@k of the Codex paper.

Smoothed BLEU-4 and the line-completion figures are re-implemented from CodeXGLUE's evaluators (their
scripts are not packaged; sacrebleu/nltk smooth differently), and tests/test_generative_metrics.py checks
them against the evaluators' own output on their sample files.
"""

from __future__ import annotations

import math
import re
import sys
from collections import Counter
from typing import Sequence, Union

import numpy as np

from lightning_bench.errors import ConfigError, unknown_name
from lightning_bench.tasks.metrics.bootstrap import mean_ci

References = Sequence[Union[str, Sequence[str]]]  # one reference per sample, or several

# --- CodeXGLUE code-to-text: Code-Text/code-to-text/evaluator/bleu.py -------------------------------------
# Each text is stripped and lower-cased, split into runs of word characters and single other characters
# ("splitPuncts"), then NIST mteval tokenised (the MOSES bleu.py it adapts). Of NIST's steps only the
# punctuation rules can change anything after splitPuncts (it leaves no newline and no "&amp;"-style entity
# in one piece); of those, only "_" (a word character for splitPuncts) gets split off.
_SPLIT_PUNCTS = re.compile(r"\w+|[^\s\w]")
_NIST_PUNCTUATION = [(re.compile(p), r) for p, r in (
    (r"([\{-\~\[-\` -\&\(-\+\:-\@\/])", r" \1 "),  # ASCII punctuation (not "'", "-", ".", ",")
    (r"([^0-9])([\.,])", r"\1 \2 "),  # period and comma unless after a digit
    (r"([\.,])([^0-9])", r" \1 \2"),  # ... unless before a digit
    (r"([0-9])(-)", r"\1 \2 "))]  # dash after a digit
_TINY = sys.float_info.min  # the evaluator adds it inside every log so that log(0) stays finite


def codexglue_bleu_tokens(text: str) -> list[str]:
    """A prediction or reference as CodeXGLUE's code-to-text evaluator tokenises it."""
    text = " %s " % " ".join(_SPLIT_PUNCTS.findall(text.strip().lower()))
    for pattern, replacement in _NIST_PUNCTUATION:
        text = pattern.sub(replacement, text)
    return text.split()


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def _sentence_bleu(prediction: str, references: list[str]) -> float:
    """One sample's smoothed BLEU-4 (0..1): the evaluator's score_cooked for a single segment.

    Precisions of orders 2-4 get +1 on numerator and denominator (Lin & Och 2004 add-one; unigrams are
    not smoothed); clipping counts use the max count over the references; reference length is the
    shortest reference; brevity penalty exp(min(0, 1 - (ref_len + 1) / (hyp_len + 1))).
    """
    hyp = codexglue_bleu_tokens(prediction)
    refs = [codexglue_bleu_tokens(r) for r in references]
    log_precision = 0.0
    for n in range(1, 5):
        max_ref = Counter()
        for ref in refs:
            max_ref |= _ngrams(ref, n)
        correct = sum(min(count, max_ref[g]) for g, count in _ngrams(hyp, n).items())
        guess = max(len(hyp) - n + 1, 0)
        add = 1 if n > 1 else 0
        log_precision += math.log(correct + add + _TINY) - math.log(guess + add + _TINY)
    ref_len = min(len(r) for r in refs)
    brevity = min(0.0, 1 - (ref_len + 1) / (len(hyp) + 1))
    return math.exp(log_precision / 4 + brevity)


def _reference_lists(predictions: Sequence[str], references: References, what: str) -> list[list[str]]:
    if len(predictions) != len(references):
        raise ConfigError(f"{len(predictions)} predictions but {len(references)} {what}: give one per prediction")
    out = [[r] if isinstance(r, str) else list(r) for r in references]
    empty = next((i for i, r in enumerate(out) if not r), None)
    if empty is not None:
        raise ConfigError(f"{what}[{empty}] is an empty list: give at least one reference string per sample")
    return out


def smoothed_bleu4(predictions: Sequence[str], references: References) -> tuple[float, list[float]]:
    """(corpus figure, per-sample figures), x100, as CodeXGLUE code-to-text reports BLEU-4: the corpus
    figure is the MEAN of the per-sample smoothed BLEU-4 (bleuFromMaps), not a corpus-level BLEU.
    references[i]: the reference string, or a list of them (the evaluator's repeated ids)."""
    refs = _reference_lists(predictions, references, "references")
    if not refs:
        raise ConfigError("no samples to score: pass at least one prediction and reference")
    per = [100.0 * _sentence_bleu(p, r) for p, r in zip(predictions, refs)]
    return sum(per) / len(per), per


# --- CodeXGLUE line completion: Code-Code/CodeCompletion-line/evaluator/evaluator.py -----------------------
_LITERAL = re.compile(r"<(STR|NUM|CHAR)_LIT:(.*?)>", re.S)


def line_completion_post_process(code: str) -> str:
    """The evaluator's `post_process`: bare literal placeholders become "0" (numbers) or "" (strings,
    characters); `<STR_LIT:abc>` becomes `abc`. Done as the evaluator does it: find every match first, then
    replace each matched text everywhere, one after another."""
    code = code.replace("<NUM_LIT>", "0").replace("<STR_LIT>", "").replace("<CHAR_LIT>", "")
    for kind, literal in _LITERAL.findall(code):
        code = code.replace(f"<{kind}_LIT:{literal}>", literal)
    return code


def fuzz_ratio(a: str, b: str) -> int:
    """fuzzywuzzy's `fuzz.ratio` with python-Levenshtein (CodeXGLUE's edit similarity), via rapidfuzz:
    100 for equal strings, 0 if one is empty, else round(100 * (len_a + len_b - indel distance) /
    (len_a + len_b)) with Python's round (half to even), as fuzzywuzzy's `intr` does. Without
    python-Levenshtein, fuzzywuzzy falls back to difflib and gives other numbers; the evaluator's README
    installs it."""
    from rapidfuzz.distance import Indel  # optional dependency: only the code tasks need it

    if a == b:
        return 100
    if not a or not b:
        return 0
    total = len(a) + len(b)
    return int(round(100 * ((total - Indel.distance(a, b)) / total)))


def line_completion_per_sample(predictions: Sequence[str], answers: Sequence[str]) -> list[dict]:
    """[{"exact_match": 100 or 0, "edit_similarity": 0..100}] per sample. answers: the evaluator's "gt"
    strings. The prediction is stripped (the evaluator reads it as a line), the answer is not."""
    if len(predictions) != len(answers):
        raise ConfigError(f"{len(predictions)} predictions but {len(answers)} answers: give one per prediction")
    out = []
    for prediction, answer in zip(predictions, answers):
        pred, gold = line_completion_post_process(prediction.strip()), line_completion_post_process(answer)
        out.append({"exact_match": 100.0 * (pred.split() == gold.split()), "edit_similarity": float(fuzz_ratio(pred, gold))})
    return out


def line_completion_metrics(predictions: Sequence[str], answers: Sequence[str], seed: int = 0) -> dict:
    """{"exact_match", "edit_similarity"}: mean_ci dicts; the means are the evaluator's "EM" and "Edit sim"
    (it prints them rounded to 2 decimals)."""
    per = line_completion_per_sample(predictions, answers)
    if not per:
        raise ConfigError("no samples to score: pass at least one prediction and answer")
    return {key: mean_ci([s[key] for s in per], seed=seed) for key in ("exact_match", "edit_similarity")}


# --- CodeBLEU: the `codebleu` package (k4black/codebleu, refactored from CodeXGLUE's CodeBLEU) ------------
CODEBLEU_LANGUAGES = ("c", "c_sharp", "cpp", "go", "java", "javascript", "php", "python", "ruby")
_GRAMMAR_PACKAGES = {lang: f"tree-sitter-{lang.replace('_', '-')}" for lang in CODEBLEU_LANGUAGES}


def codebleu(predictions: Sequence[str], references: References, lang: str,
             weights: tuple[float, float, float, float] = (0.25, 0.25, 0.25, 0.25)) -> dict:
    """Corpus CodeBLEU, x100: {"codebleu", "ngram_match_score", "weighted_ngram_match_score",
    "syntax_match_score", "dataflow_match_score"}. weights: of those four components (CodeXGLUE's default).
    The grammars come from the tree-sitter-<lang> wheels (no download at run time); codebleu 0.7 needs
    tree-sitter 0.22 and grammar wheels built for it (see the versions pinned in setup.cfg)."""
    if lang not in CODEBLEU_LANGUAGES:
        raise unknown_name("CodeBLEU language", lang, CODEBLEU_LANGUAGES)
    refs = _reference_lists(predictions, references, "references")
    if not refs:
        raise ConfigError("no samples to score: pass at least one prediction and reference")
    try:
        from codebleu import calc_codebleu
        scores = calc_codebleu(refs, list(predictions), lang=lang, weights=weights)
    except (ImportError, TypeError, ValueError) as err:  # TypeError/ValueError: a grammar wheel of the wrong ABI
        raise ConfigError(f"CodeBLEU for {lang} is not usable here ({type(err).__name__}: {err}); install "
                          f"codebleu==0.7.0 tree-sitter==0.22.3 and a {_GRAMMAR_PACKAGES[lang]} wheel built for it") from err
    return {key: 100.0 * value for key, value in scores.items()}


# --- pass@k: Chen et al. 2021 (Codex), the unbiased estimator of openai/human-eval -----------------------
def pass_at_k(n: int, c: int, k: int) -> float:
    """P(at least one of k samples drawn without replacement from n, c of them correct, is correct)
    = 1 - C(n-c, k) / C(n, k), as the product 1 - prod_{i=n-c+1..n} (1 - k/i) (no huge binomials)."""
    if not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in (n, c, k)):
        raise ConfigError(f"pass_at_k needs integers n, c, k; got n={n!r}, c={c!r}, k={k!r}")
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ConfigError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k_metrics(per_problem: Sequence[tuple[int, int]], ks: Sequence[int] = (1, 10, 100),
                      seed: int = 0) -> dict:
    """{"pass@k": mean_ci dict over problems, x100, ...} for (samples n, correct c) per problem, plus
    "skipped_ks": {"pass@k": why} for each k that some problem has fewer than k samples for (human-eval
    reports a k only when every problem has n >= k, since the estimator needs k <= n)."""
    if not per_problem:
        raise ConfigError("no problems to score: pass at least one (n, c) pair")
    min_n = min(n for n, _ in per_problem)
    out, skipped = {}, {}
    for k in ks:
        if k > min_n:
            skipped[f"pass@{k}"] = f"needs >= {k} samples per problem; the fewest here is {min_n}"
            continue
        out[f"pass@{k}"] = mean_ci([100.0 * pass_at_k(n, c, k) for n, c in per_problem], seed=seed)
    return {**out, "skipped_ks": skipped}
