"""LooGLE's ROUGE is the `rouge` package's (pltrdy/rouge, as LooGLE's automatic_metrics.py imports it), not
rouge-score's: worked examples whose figures are derived by hand in the comments from that package's
definition (tasks/longbench/rouge_package.py), several where rouge-score gives another number; and
the offline hub error, which must say which local file and format would do instead."""

from types import SimpleNamespace

import datasets
import pytest

from lightning_bench.tasks import get_task, load_rows
from lightning_bench.errors import MissingData
from lightning_bench.tasks.generative_scoring import score_generative
from lightning_bench.tasks.longbench import rouge_package
from lightning_bench.tasks.loogle.scorer import rouge_recall


# ---- ROUGE recall by hand ------------------------------------------------------------------------------
@pytest.mark.parametrize("reference,prediction,expected", [
    # distinct n-grams: the reference's unigrams are {the, cat, sat, on, mat} (5: "the" counts once), all in the
    # prediction -> R1 = 5/5; bigrams {the cat, cat sat, sat on, on the, the mat}, 3 matched -> R2 = 3/5; the
    # LCS "the cat sat on mat" holds all 5 distinct words -> RL = 5/5.
    # (rouge-score counts "the" twice: R1 = RL = 5/6.)
    ("the cat sat on the mat", "the cat sat on a mat", (100.0, 60.0, 100.0)),
    # case kept, sentences split on ".": reference words The cat sat | The cat ran, distinct {The, cat, sat, ran}
    # (4); the prediction's {the, cat} shares only "cat" -> R1 = 1/4. Bigrams run across the "." : {The cat,
    # cat sat, sat The, cat ran}; "the cat" is none of them -> R2 = 0. LCS per reference sentence: "cat" in both,
    # union {cat} -> RL = 1/4. (rouge-score lower-cases and counts repeats: R1 = RL = 2/6, R2 = 1/5.)
    ("The cat sat. The cat ran", "the cat", (25.0, 0.0, 25.0)),
    # words split on spaces only: "Paris," is not "Paris" -> nothing shared (rouge-score: R1 = RL = 1/2)
    ("Paris, France", "Paris", (0.0, 0.0, 0.0)),
    # reference words a b | c d: bigrams {a b, b c, c d} cross the sentence end, so the prediction's "b c"
    # matches one -> R2 = 1/3; R1 = {b, c} of 4 = 1/2; LCS: "a b" vs "b c" -> b, "c d" vs "b c" -> c,
    # union {b, c} -> RL = 2/4
    ("a b. c d", "b c", (50.0, 100 / 3, 50.0)),
    # the LCS tie-break: "a b" vs "b a" has two LCSs of one word; walking back from the end, the package drops
    # a reference word only when that keeps a strictly longer LCS, so it drops prediction words and finds "b".
    # The second prediction sentence "a" adds {a}: union {a, b} -> RL = 2/2 (rouge-score, one sentence: 1/2).
    # R1: {a, b} both matched -> 1; R2: reference {a b} vs prediction {b a, a a} -> 0
    ("a b", "b a. a", (100.0, 0.0, 100.0)),
    # no sentence left in the prediction (dots only): the package raises ValueError; scored 0
    ("x y", "...", (0.0, 0.0, 0.0)),
])
def test_rouge_recall_is_the_rouge_package_by_hand(reference, prediction, expected):
    got = rouge_recall(reference, prediction)
    assert (got["rouge1"], got["rouge2"], got["rougeL"]) == pytest.approx(expected)


def test_precision_and_f_by_hand():
    # "the cat" vs "The cat sat. The cat ran": 1 shared unigram of the prediction's 2 and the reference's 4:
    # P = 1/2, R = 1/4, F = 2PR / (P + R + 1e-8) = (1/4) / (3/4) = 1/3 (to 1e-8)
    scores = rouge_package.scores("the cat", "The cat sat. The cat ran")
    assert scores["rouge-1"] == pytest.approx({"f": 1 / 3, "p": 0.5, "r": 0.25})
    assert rouge_package.scores("...", "x") is None and rouge_package.scores("x", "..") is None  # the package raises
    # a piece of blanks between two dots is the sentence "", whose one word "" is a distinct word: the
    # prediction's words are a, "", b -> P1 = 2/3 against the reference "a b"
    assert rouge_package.scores("a. . b", "a b")["rouge-1"]["p"] == pytest.approx(2 / 3)


def _score(rows: list[dict], preds: list[str]):
    task = get_task("loogle/shortdep_qa")
    return score_generative(task, [(SimpleNamespace(row=r), {"prediction": p}) for r, p in zip(rows, preds)])


def test_task_figures_are_mean_package_recall_and_score_is_rouge_l():
    rows = [{"answers": ["The cat sat. The cat ran"]}, {"answers": ["the cat sat on the mat"]},
            {"answers": ["the cat sat on the mat"]}]
    figures, per = _score(rows, ["the cat", "the cat sat on a mat", ""])
    # per question (above): RL 25, 100; the empty prediction is "None", which shares nothing: 0.
    # LooGLE's get_semantic_matching: the plain mean over questions -> RL (25 + 100 + 0) / 3, R2 (0 + 60 + 0) / 3
    assert [p["score"] for p in per] == pytest.approx([25.0, 100.0, 0.0])
    assert figures["score"] == pytest.approx(125 / 3) and figures["rougeL"] == pytest.approx(125 / 3)
    assert figures["rouge2"] == pytest.approx(20.0) and figures["score_is"] == "rougeL (recall)"
    assert "`rouge` package" in figures["rouge"]


# ---- offline hub: the error names the local file and its format ----------------------------------------
@pytest.mark.parametrize("task,split,error,path,fmt", [
    ("loogle/shortdep_qa", "eval", OSError, "DIR/loogle/shortdep_qa.jsonl",
     "LooGLE-testdata/<task>.jsonl (input, title, qa_pairs, output; one document a line)"),
    ("longbench/qasper", "eval", RuntimeError, "DIR/longbench/data/qasper.jsonl",
     "JSON lines of {input, context, answers, length, dataset, language, all_classes, _id}"),
    ("zeroscrolls/qasper", "eval", RuntimeError, "DIR/zeroscrolls/qasper/validation.jsonl",
     "ZeroSCROLLS' <task>/<split>.jsonl"),
    ("infinitebench/longbook_qa_eng", "eval", OSError, "DIR/infinitebench/longbook_qa_eng.jsonl",
     "InfiniteBench's <task>.jsonl (id, context, input, answer, options)"),
    ("ruler/vt", "8192", OSError, "DIR/ruler/8192/vt.jsonl", "RULER's <length>/<task>.jsonl"),
    ("long_context_rows", "eval", OSError, "DIR/long_context/rows.jsonl",
     "JSON lines of {context, question, answer_prefix, answer, max_new_tokens}"),
])
def test_offline_hub_error_names_the_local_file_and_format(monkeypatch, task, split, error, path, fmt):
    def unreachable(*args, **kwargs):  # as `datasets` fails offline (OSError) or on a script dataset (RuntimeError)
        raise error("Couldn't reach 'the hub' on the Hub (LocalEntryNotFoundError)\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(MissingData) as info:
        load_rows(task, split)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{task}: cannot load ")
    assert f"--data.data_dir DIR reads {path}, expected: " in message and fmt in message
    assert message.endswith("or name the files with --data.paths")
