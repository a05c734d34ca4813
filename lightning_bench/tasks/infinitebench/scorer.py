"""InfiniteBench scores: the per-task rules of OpenBMB/InfiniteBench's src/compute_scores.py, re-implemented,
each x100 and reported as `score` (per sample, and as the mean with its bootstrap 95% CI), so that the
benchmark's task_means average and `lightning_bench downstream` compare one figure across tasks.

The gold is what the evaluation scripts pass on (the reader's `answers`: tasks/infinitebench/
reader.py); the rules, as compute_scores.py applies them to a prediction:
- passkey, number_string: the first run of digits in the prediction equals the answer (a string compare).
- kv_retrieval: after \\n : " ' . , ? ! { } become spaces, the answer is one of the whitespace-split words
  (anywhere in the prediction, not only the first).
- longbook_qa_eng (En.QA): token F1 after SQuAD's normalisation (lower-case, punctuation and a/an/the
  dropped), the max over the gold answers; 0 without a common token.
- longbook_choice_eng (En.MC): gold = [option text, letter]. A prediction starting with A-D counts that
  letter; one equal to a gold string counts (the script's `if pred in label`, src/compute_scores.py at
  OpenBMB/InfiniteBench 88b3daa, line 254: not a deviation); else after "answer is:", "answer:", "answer is" or "option is"
  (the first found, quotes and punctuation spaced out) it must start with the letter or the option text;
  else the first word that is a substring of "ABCD" decides (the script's own test, kept).
- longdialogue_qa_eng (En.Dia): the first gold name is one of the prediction's words, upper-cased (the
  gold is compared as written; the benchmark writes names in capitals).
- math_find (Math.Find): the first number (r"\\d+\\.\\d+|\\d+") equals the answer, as an int when the
  answer is one (a decimal then does not count; the script would fail on it) and as a float otherwise.
- math_calc (Math.Calc): the runs of digits in the prediction, in order, as numbers (a minus sign is not
  read, so a negative gold value never matches, as in the script); the score is the length of the prefix
  that equals the gold list, over the gold list's length ([1, 4, 8] against "1, 4, 9" = 2/3). The script's
  GPT-4 shift (its first number dropped) is not applied: no model here is prompted as its GPT-4 run was.
- code_run (Code.Run): \\n . ` ' " : become spaces; the last word, read as an integer (else 0), equals the
  answer. The script compares it with the answer list itself ([4] == 4, never true); its value is compared.
- code_debug (Code.Debug): gold = [function name, letter]. "B." or "B:" at the start counts; else after the
  first of "answer is:", "is:", "answer:", "correct option is:" (quotes, `-`, `*` and the word Option
  spaced out) the text must start with the letter or the function name.
- longbook_sum_eng (En.Sum): ROUGE-Lsum F1 (Hugging Face `evaluate`'s rouge, which runs Google's
  rouge-score without stemming; sentences split on newlines only), the max over the references.

Rows made by `lightning_bench infinitebench_generate` record their depth (percent) and target length: the
figures then add `by_depth` and `by_length` (mean score per value, as RULER's by_depth).
"""

from __future__ import annotations

import re
from typing import Callable

from lightning_bench.tasks.metrics.bootstrap import figures
from lightning_bench.tasks.metrics.open_qa import token_f1
from lightning_bench.tasks.metrics.rouge import rouge_per_sample

_KV_SEPARATORS = ("\n", ":", '"', "'", ".", ",", "?", "!", "{", "}")
_MC_SEPARATORS = ("\n", '"', "'", ".", ",", "?", "!", "{", "}")
_MC_PREFIXES = ("answer is:", "answer:", "answer is", "option is")
_DEBUG_SEPARATORS = ("\n", "`", "'", '"', "-", "*", "Option", "option")
_DEBUG_PREFIXES = ("answer is:", "is:", "answer:", "correct option is:")
_FIRST_NUMBER = re.compile(r"\d+\.\d+|\d+")
_CODE_RUN_SEPARATORS = ("\n", ".", "`", "'", '"', ":")


def _spaced(text: str, separators) -> str:
    for c in separators:
        text = text.replace(c, " ")
    return text


def _single_spaces(text: str) -> str:
    while "  " in text:
        text = text.replace("  ", " ")
    return text


def first_int(prediction: str) -> str:
    """The first run of digits ("" if none), as compute_scores.py's first_int_match."""
    return next((item for item in re.split("[^0-9]", prediction) if item), "")


def passkey(pred: str, gold: list[str]) -> float:
    return float(first_int(pred) == gold[0])


def kv_retrieval(pred: str, gold: list[str]) -> float:
    return float(gold[0] in _spaced(pred, _KV_SEPARATORS).split())


def longbook_qa(pred: str, gold: list[str]) -> float:
    return token_f1(pred, gold, "squad")


def _after_prefix(pred: str, prefixes) -> str | None:
    """The text after the first of `prefixes` found in `pred` (and the space after it), as the official
    choice parsers read it: "" when the prediction ends with the prefix, None when none is found."""
    for prefix in prefixes:
        idx = pred.find(prefix)
        if idx != -1:
            return pred[idx + len(prefix) + 1:]
    return None


def longbook_choice(pred: str, gold: list[str]) -> float:
    pred = pred.strip()
    if pred == "":
        return 0.0
    if pred[0] in "ABCD":
        return float(pred[0] in gold)
    if pred in gold:
        return 1.0
    pred = _single_spaces(_spaced(pred, _MC_SEPARATORS))
    after = _after_prefix(pred, _MC_PREFIXES)
    if after is not None:
        return float(any(after.startswith(s) for s in gold))
    for word in pred.split():
        if word in "ABCD":  # a substring test, as the script's
            return float(word in gold)
    return 0.0


def longdialogue(pred: str, gold: list[str]) -> float:
    words = [w.upper() for w in _spaced(pred.strip(), _KV_SEPARATORS).split()]
    return float(gold[0] in words)


def gold_number(text: str) -> int | float:
    """math_find's answer as the benchmark file holds it: an int ("3") or a float ("2.5")."""
    return int(text) if re.fullmatch(r"-?\d+", text.strip()) else float(text)


def math_find(pred: str, gold: list[str]) -> float:
    label = gold_number(gold[0])
    found = _FIRST_NUMBER.search(pred)
    if found is None:
        return 0.0
    number = found.group(0)
    if isinstance(label, int):
        return float("." not in number and int(number) == label)
    return float(float(number) == label)


def _digits(number: str) -> str:
    """A run of digits as the number it reads as ("007" -> "7"), kept a string: a model can print more digits
    than int() converts."""
    return number.lstrip("0") or "0"


def math_calc(pred: str, gold: list[str]) -> float:
    values = [_digits(run) for run in re.split("[^0-9]", pred) if run]
    matched = 0
    for got, want in zip(values, gold):
        if got != str(int(want)):
            break
        matched += 1
    return matched / len(gold)


def code_run(pred: str, gold: list[str]) -> float:
    words = _spaced(pred.strip(), _CODE_RUN_SEPARATORS).split()
    if not words:
        return 0.0
    try:
        value = int(words[-1])  # the script's reading: Python's int() of the last word
    except ValueError:
        return 0.0
    return float(value == int(gold[0]))


def code_debug(pred: str, gold: list[str]) -> float:
    fn_name, letter = gold[0], gold[1]
    pred = pred.strip()
    if pred[:2] in (f"{letter}.", f"{letter}:"):
        return 1.0
    after = _after_prefix(_single_spaces(_spaced(pred, _DEBUG_SEPARATORS)), _DEBUG_PREFIXES)
    return 0.0 if after is None else float(after.startswith(letter) or after.startswith(fn_name))


def longbook_sum(pred: str, gold: list[str]) -> float:
    return max(s["rougeLsum"] for s in rouge_per_sample([pred] * len(gold), list(gold), use_stemmer=False)) / 100


# task (short name) -> (rule, what `score` is)
RULES: dict[str, tuple[Callable[[str, list[str]], float], str]] = {
    "passkey": (passkey, "accuracy: first integer == answer"),
    "number_string": (passkey, "accuracy: first integer == answer"),
    "kv_retrieval": (kv_retrieval, "accuracy: the answer is one of the words"),
    "longbook_qa_eng": (longbook_qa, "QA token F1 (SQuAD normalisation), max over answers"),
    "longbook_choice_eng": (longbook_choice, "accuracy: choice letter or option text"),
    "longdialogue_qa_eng": (longdialogue, "accuracy: the name is one of the words"),
    "math_find": (math_find, "accuracy: first number == answer"),
    "math_calc": (math_calc, "share of the gold values matched from the start, in order"),
    "code_run": (code_run, "accuracy: last word as an integer == answer"),
    "code_debug": (code_debug, "accuracy: choice letter or function name"),
    "longbook_sum_eng": (longbook_sum, "ROUGE-Lsum F1 (rouge-score, no stemming)"),
}


def score_one(task_short: str, prediction: str, answers: list[str]) -> float:
    """compute_scores.py's score of one prediction for task `task_short`, x100."""
    rule, _ = RULES[task_short]
    return 100.0 * rule(prediction, list(answers))


def _means_by(rows, per, field: str, key: Callable[[float], str]) -> dict[str, float]:
    """Mean score per value of the rows' `field` (skipping rows without it), in numeric order."""
    groups: dict[str, list[float]] = {}
    for row, s in zip(rows, per):
        if row.get(field) is not None:
            groups.setdefault(key(float(row[field])), []).append(s["score"])
    return {k: sum(v) / len(v) for k, v in sorted(groups.items(), key=lambda kv: float(kv[0]))}


def _score(task, rows, preds, pairs):
    per = [{"score": score_one(task.short_name, pred, row["answers"])} for pred, row in zip(preds, rows)]
    out = {**figures(per, ("score",)), "score_is": RULES[task.short_name][1],
           "scorer": "InfiniteBench src/compute_scores.py (re-implemented), x100"}
    # depths as RULER's keys ("10", "33.3333"); lengths whole ("1048576", where :g would write 1.04858e+06)
    for name, field, key in (("by_depth", "depth", "{:g}".format), ("by_length", "target_length", "{:.0f}".format)):
        means = _means_by(rows, per, field, key)
        if means:
            out[name] = means
    return out, per


SCORERS = {"infinitebench": _score}
