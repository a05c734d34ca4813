"""ROUGE as the `rouge` PyPI package (pltrdy/rouge 1.0.1, `Rouge().get_scores(hyp, ref)`) computes it,
re-implemented from its definition, not copied. LongBench (ROUGE-L F) and LooGLE (ROUGE-1/2/L recall)
score with that package, which is NOT Google's rouge-score:

- text -> "sentences": split on every "." (no other boundary), empty pieces dropped, whitespace collapsed
  in each piece (a piece of blanks stays, as the empty sentence "");
- sentence -> words: split on single spaces; case and punctuation kept ("Paris," is not "paris");
- ROUGE-N: the words of all sentences run together (n-grams cross the "." boundaries); the DISTINCT n-grams
  of each side (the package keeps them in sets, `exclusive=True`): overlap = |hyp n-grams & ref n-grams|,
  P = overlap / |hyp n-grams|, R = overlap / |ref n-grams| (either 0 where its side has no n-gram);
- ROUGE-L (summary level): for each reference sentence and each prediction sentence, one LCS is
  reconstructed (walking back from the end: a match is taken, else a step that drops a reference word only
  when that keeps a strictly longer LCS, else a prediction word); its distinct words join one union over
  all pairs; R = |union| / distinct reference words, P = |union| / distinct prediction words;
- F = 2PR / (P + R + 1e-8) for every variant;
- no sentence on a side (an empty text, or dots only) makes the package raise ValueError; `scores` returns
  None there and each benchmark says what its script did with it.

One difference: the package rebuilds the LCS recursively, so a (reference sentence, prediction sentence)
pair of about 1000 words or more raises RecursionError under Python's default limit; here such pairs are
scored normally.
"""

from __future__ import annotations

def sentences(text: str) -> list[str]:
    """The package's sentences of `text` (module docstring)."""
    return [" ".join(piece.split()) for piece in text.split(".") if piece]


def _words(sents: list[str]) -> list[str]:
    return [word for sentence in sents for word in sentence.split(" ")]


def _distinct_ngrams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def _f_p_r(overlap: int, hyp_count: int, ref_count: int) -> dict:
    precision = overlap / hyp_count if hyp_count else 0.0
    recall = overlap / ref_count if ref_count else 0.0
    # the package's own expression, term for term, so figures agree to the last bit
    return {"f": 2.0 * ((precision * recall) / (precision + recall + 1e-8)), "p": precision, "r": recall}


def rouge_n(hyp: list[str], ref: list[str], n: int) -> dict:
    """{"f", "p", "r"} of ROUGE-N between two lists of sentences (0..1)."""
    hyp_grams, ref_grams = _distinct_ngrams(_words(hyp), n), _distinct_ngrams(_words(ref), n)
    return _f_p_r(len(hyp_grams & ref_grams), len(hyp_grams), len(ref_grams))


def _lcs_words(ref: list[str], hyp: list[str]) -> set[str]:
    """The distinct words of the one LCS of `ref` and `hyp` that the package reconstructs (module docstring)."""
    n, m = len(ref), len(hyp)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(1, n + 1):
        row, above, word = table[i], table[i - 1], ref[i - 1]
        for j in range(1, m + 1):
            row[j] = above[j - 1] + 1 if word == hyp[j - 1] else max(above[j], row[j - 1])
    words, i, j = set(), n, m
    while i > 0 and j > 0:  # iterative, so long sentences do not hit the recursion limit
        if ref[i - 1] == hyp[j - 1]:
            words.add(ref[i - 1])
            i, j = i - 1, j - 1
        elif table[i - 1][j] > table[i][j - 1]:
            i -= 1
        else:
            j -= 1
    return words


def rouge_l(hyp: list[str], ref: list[str]) -> dict:
    """{"f", "p", "r"} of the package's summary-level ROUGE-L between two lists of sentences (0..1)."""
    hyp_words = [s.split(" ") for s in hyp]
    ref_words = [s.split(" ") for s in ref]
    union: set[str] = set()
    for r in ref_words:
        for h in hyp_words:
            union |= _lcs_words(r, h)
    return _f_p_r(len(union), len(set(_words(hyp))), len(set(_words(ref))))


def scores(prediction: str, reference: str) -> dict | None:
    """{"rouge-1", "rouge-2", "rouge-l": {"f", "p", "r"}} as `Rouge().get_scores(prediction, reference)[0]`;
    None where the package raises (no sentence on a side)."""
    hyp, ref = sentences(prediction), sentences(reference)
    if not hyp or not ref:
        return None
    return {"rouge-1": rouge_n(hyp, ref, 1), "rouge-2": rouge_n(hyp, ref, 2), "rouge-l": rouge_l(hyp, ref)}


def rouge_l_f(prediction: str, reference: str) -> float:
    """ROUGE-L F (0..1); 0.0 where the package raises, as LongBench's bare `except` scores it."""
    hyp, ref = sentences(prediction), sentences(reference)
    return rouge_l(hyp, ref)["f"] if hyp and ref else 0.0
