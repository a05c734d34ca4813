"""Generative-task metrics (tasks/metrics/{bootstrap,rouge,open_qa}.py, tasks/{multiwoz,code}/metrics.py) against the
official scorers: figures marked "official" were produced by running the benchmark's own script outside
the project (the command is given beside each), never by this code."""

import json
import math
import zipfile

import pytest

from lightning_bench.errors import ConfigError
from lightning_bench.tasks.metrics.bootstrap import mean_ci
from lightning_bench.tasks.code.metrics import (codebleu, fuzz_ratio, line_completion_metrics,
                                                     line_completion_per_sample, line_completion_post_process,
                                                     pass_at_k, pass_at_k_metrics, smoothed_bleu4)
from lightning_bench.tasks.multiwoz.metrics import (MULTIWOZ21_SLOTS, canonical_slot, dst_metrics, dst_per_turn,
                                                    joint_goal_accuracy, normalize_value, parse_belief_state,
                                                    slot_accuracy)
from lightning_bench.tasks.metrics.open_qa import (exact_match, normalize_answer, open_qa_metrics,
                                                        open_qa_per_sample, token_f1)
from lightning_bench.tasks.metrics.rouge import ROUGE_TYPES, rouge_metrics, rouge_per_sample

# ----------------------------------------------------------------------------------------------- bootstrap


def test_mean_ci_matches_the_normal_approximation_and_is_seeded():
    values = [0.0] * 60 + [1.0] * 40  # mean 0.4, standard error sqrt(0.24 / 100) = 0.049
    ci = mean_ci(values, seed=3)
    assert ci["mean"] == pytest.approx(0.4) and ci["n"] == 100
    assert ci["ci_low"] == pytest.approx(0.4 - 1.96 * 0.049, abs=0.02)
    assert ci["ci_high"] == pytest.approx(0.4 + 1.96 * 0.049, abs=0.02)
    assert ci["method"] == "percentile bootstrap, 1000 resamples, seed 3, unit: sample"
    assert mean_ci(values, seed=3) == ci and mean_ci(values, seed=4) != ci
    narrow = mean_ci(values, seed=3, confidence=0.5)
    assert ci["ci_low"] < narrow["ci_low"] < narrow["ci_high"] < ci["ci_high"]


def test_mean_ci_degenerate_inputs():
    assert mean_ci([7.0, 7.0, 7.0])[("ci_low")] == 7.0  # constant data: BCa would fail, percentile does not
    one = mean_ci([5.0])
    assert (one["mean"], one["ci_low"], one["ci_high"], one["n"]) == (5.0, None, None, 1)
    assert mean_ci([])["mean"] is None
    with pytest.raises(ConfigError, match="NaN"):
        mean_ci([1.0, float("nan")])
    with pytest.raises(ConfigError, match="confidence"):
        mean_ci([1.0, 2.0], confidence=95)


# ----------------------------------------------------------------------------------------------- ROUGE


def test_rouge_hand_worked():
    # unigrams: 5 of 6 shared (the x2, cat, on, mat) -> P = R = 5/6; bigrams: the cat, on the, the mat of 5
    # -> 3/5; LCS "the cat on the mat" = 5 -> 5/6. No newline: Lsum is L.
    [s] = rouge_per_sample(["the cat sat on the mat"], ["the cat lay on the mat"], use_stemmer=False)
    assert s == pytest.approx({"rouge1": 500 / 6, "rouge2": 60.0, "rougeL": 500 / 6, "rougeLsum": 500 / 6})


def test_rouge_lsum_splits_on_newlines_only():
    # two sentences in swapped order: one LCS over the token stream finds 3 of 6 tokens (rougeL 50), the
    # summary-level LCS matches each reference sentence with its own prediction sentence (100)
    [s] = rouge_per_sample(["d e f\na b c"], ["a b c\nd e f"])
    assert (s["rougeL"], s["rougeLsum"]) == (pytest.approx(50.0), pytest.approx(100.0))
    # "." is not a sentence boundary: without newlines Lsum is one LCS over the whole text, as rougeL
    [flat] = rouge_per_sample(["d e f. a b c."], ["a b c. d e f."])
    assert flat["rougeLsum"] == pytest.approx(flat["rougeL"]) and flat["rougeL"] == pytest.approx(50.0)
    # a newline-split reference is matched sentence by sentence against the whole prediction (union LCS)
    [one_line] = rouge_per_sample(["d e f. a b c."], ["a b c.\nd e f."])
    assert (one_line["rougeL"], one_line["rougeLsum"]) == (pytest.approx(50.0), pytest.approx(100.0))


def test_rouge_stemming_switch():
    assert rouge_per_sample(["running"], ["runs"])[0]["rouge1"] == pytest.approx(100.0)  # both stem to "run"
    assert rouge_per_sample(["running"], ["runs"], use_stemmer=False)[0]["rouge1"] == 0.0


def _cnn_lead3_and_highlights(story: str) -> tuple[str, str]:
    article, *highlights = story.split("@highlight")
    paragraphs = [line.strip() for line in article.splitlines() if line.strip()]
    return "\n".join(paragraphs[:3]), "\n".join(h.strip() for h in highlights)


@pytest.mark.shared_data
def test_rouge_equals_rouge_score_on_cnn_dm_and_xsum(shared_data):
    from rouge_score import rouge_scorer

    pairs = [_cnn_lead3_and_highlights(p.read_text()) for p in sorted((shared_data / "cnn_dailymail/cnn_stories").glob("*.story"))]
    assert len(pairs) == 20 and all(pred.count("\n") == 2 for pred, _ in pairs)
    # multi-sentence references (Lsum splits them); one story (5e22bbfc...) has its three highlights in a
    # single @highlight block, separated by double spaces, as the original CNN files do now and then
    assert sum("\n" in ref for _, ref in pairs) == 19
    xsum = [json.loads(line) for line in (shared_data / "xsum/transformers_fixture_sample.json").read_text().splitlines()]
    pairs += [(row["document"].split("\n")[0], row["summary"]) for row in xsum]  # lead-1 vs the one-line summary
    preds, refs = zip(*pairs)
    direct = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
    expected = [{t: 100 * v.fmeasure for t, v in direct.score(ref, pred).items()} for pred, ref in pairs]
    assert rouge_per_sample(preds, refs) == expected
    summary = rouge_metrics(preds, refs, seed=0)
    for t in ROUGE_TYPES:
        assert summary[t]["mean"] == pytest.approx(sum(e[t] for e in expected) / len(expected))
        assert summary[t]["ci_low"] < summary[t]["mean"] < summary[t]["ci_high"] and summary[t]["n"] == 30
    # newline-separated CNN/DM sentences make Lsum differ from L on these stories
    assert any(abs(e["rougeLsum"] - e["rougeL"]) > 1 for e in expected[:20])


def test_rouge_bad_input():
    with pytest.raises(ConfigError, match="2 predictions but 1 references"):
        rouge_per_sample(["a", "b"], ["a"])
    with pytest.raises(ConfigError, match=r"references\[0\] is a list"):
        rouge_per_sample(["a"], [["a"]])


# ----------------------------------------------------------------------------------------------- open QA

# Expected normalisations from the official functions, run from /tmp on these strings:
#   triviaqa: mandarjoshi90/triviaqa evaluation/triviaqa_evaluation.py `normalize_answer` (commit 2f98ab3e)
#   nq_open:  google-research/language language/orqa/utils/eval_utils.py `normalize_answer` (commit a70c67e4)
#   python3 -c "import triviaqa_evaluation as t, eval_utils as o; print(t.normalize_answer(s), o.normalize_answer(s))"
# squad is SQuAD v1.1's rule (no NFD), which tests/test_task_metrics.py checks.
NORMALIZED = [  # text, triviaqa, nq_open, squad
    ("New_York", "new york", "newyork", "newyork"),
    ("Jay-Z", "jay z", "jayz", "jayz"),
    ("Rock \u2019n\u2019 Roll", "rock n roll", "rock \u2019n\u2019 roll", "rock \u2019n\u2019 roll"),
    ("Caf\u00e9", "caf\u00e9", "cafe\u0301", "caf\u00e9"),
    ("\u00b4Twas `the` night", "twas night", "\u00b4twas night", "\u00b4twas night"),
    ("A.B.C.", "b c", "abc", "abc"),
    ("Theatre of the Absurd", "theatre of absurd", "theatre of absurd", "theatre of absurd"),
]


@pytest.mark.parametrize("text, triviaqa, nq_open, squad", NORMALIZED)
def test_normalize_answer_matches_the_official_scripts(text, triviaqa, nq_open, squad):
    assert normalize_answer(text, "triviaqa") == triviaqa
    assert normalize_answer(text, "nq_open") == nq_open
    assert normalize_answer(text, "squad") == squad


def test_exact_match_differs_by_style():
    assert [exact_match("new_york", ["New York"], s) for s in ("squad", "triviaqa", "nq_open")] == [0.0, 1.0, 0.0]
    # a precomposed é vs e + combining accent: equal only after NQ-open's NFD
    assert [exact_match("Caf\u00e9", ["Cafe\u0301"], s) for s in ("squad", "triviaqa", "nq_open")] == [0.0, 0.0, 1.0]
    assert exact_match("The Beatles!", ["Wings", "beatles"], "squad") == 1.0  # any gold answer


def test_token_f1_max_over_golds_and_no_common_token():
    # "eiffel tower in paris" (4 tokens) vs "eiffel tower": P 2/4, R 1 -> 2/3; vs "paris": P 1/4, R 1 -> 0.4
    # (official triviaqa_evaluation.metric_max_over_ground_truths(f1_score, ...) gives 0.6666666666666666)
    assert token_f1("the eiffel tower in paris", ["Paris", "Eiffel Tower"], "triviaqa") == pytest.approx(2 / 3)
    # both sides normalise to nothing: EM 1 but F1 0, as SQuAD v1.1 and TriviaQA score it
    assert (exact_match("the", ["a"], "squad"), token_f1("the", ["a"], "squad")) == (1.0, 0.0)


def test_open_qa_aggregates_in_percent():
    per = open_qa_per_sample(["Jay-Z", "paris france"], [["jay z"], ["Paris"]], "triviaqa")
    assert per == [{"exact_match": 100.0, "f1": 100.0}, {"exact_match": 0.0, "f1": pytest.approx(200 / 3)}]
    m = open_qa_metrics(["Jay-Z", "paris france"], [["jay z"], ["Paris"]], "triviaqa")
    assert m["exact_match"]["mean"] == 50.0 and m["f1"]["mean"] == pytest.approx(250 / 3)


def test_open_qa_bad_input():
    with pytest.raises(ConfigError, match="unknown answer normalisation style 'trivia'; valid: nq_open, squad, triviaqa"):
        normalize_answer("x", "trivia")
    with pytest.raises(ConfigError, match="single string"):
        exact_match("x", "x", "squad")
    with pytest.raises(ConfigError, match="at least one"):
        token_f1("x", [], "squad")
    with pytest.raises(ConfigError, match="1 predictions but 2 reference lists"):
        open_qa_per_sample(["x"], [["x"], ["y"]], "squad")


# ----------------------------------------------------------------------------------------------- MultiWOZ DST


@pytest.mark.shared_data
def test_slot_list_is_every_filled_slot_of_the_five_domains(shared_data):
    with zipfile.ZipFile(shared_data / "multiwoz/convlab2_multiwoz21/test.json.zip") as z:
        dialogues = json.loads(z.read("test.json"))
    filled = set()
    for dialogue in dialogues.values():
        for turn in dialogue["log"][1::2]:  # system turns carry the state
            for domain, state in turn["metadata"].items():
                for part in ("semi", "book"):
                    for slot, value in state.get(part, {}).items():
                        if isinstance(value, str) and value not in ("", "not mentioned"):
                            filled.add(canonical_slot(f"{domain}-{'book ' if part == 'book' else ''}{slot}"))
    five = {s for s in filled if s.split("-")[0] in ("hotel", "train", "attraction", "restaurant", "taxi")}
    assert five == set(MULTIWOZ21_SLOTS) and len(MULTIWOZ21_SLOTS) == 30
    assert filled - five == set()  # the test split fills no slot of the other domains (hospital, police)


def test_normalize_value_follows_trade():
    assert normalize_value("Guest House") == normalize_value("guesthouse") == "guest house"
    assert {normalize_value(v) for v in ("don't care", "Dont Care", "do not care", "any")} == {"dontcare"}
    assert normalize_value("center") == "centre" and normalize_value("not mentioned") == "none"
    assert normalize_value("no", "hotel-area") == "north" and normalize_value("no", "hotel-book day") == "none"
    assert normalize_value("n", "hotel-area") == "north"  # general typo "n" -> "no", then the area rule
    assert normalize_value("bed and breakfast", "hotel-type") == "none"
    assert normalize_value("4", "hotel-type") == "hotel" and normalize_value("4", "hotel-stars") == "4"
    assert normalize_value("free", "hotel-internet") == "yes" and normalize_value("free", "hotel-parking") == "free"
    assert normalize_value("cambridge", "restaurant-area") == "none"
    assert normalize_value("cambridge", "train-departure") == "cambridge"
    assert normalize_value("5:15 pm", "train-leaveat") == "5:15 pm"  # TRADE does not normalise times


def test_parse_belief_state_is_tolerant():
    text = "Hotel-PriceRange = cheap;hotel-book_people=2,\n train-arriveBy=17:15; none; chatter\nhotel-parking=not mentioned."
    assert parse_belief_state(text) == {"hotel-pricerange": "cheap", "hotel-book people": "2",
                                        "train-arriveby": "17:15"}
    assert parse_belief_state("none") == {} and parse_belief_state("taxi-leaveat=10:15.") == {"taxi-leaveat": "10:15"}
    assert parse_belief_state("hotel-area=north; hotel-area=south") == {"hotel-area": "south"}  # last one wins
    assert canonical_slot("hotel-bookpeople") == "hotel-book people"  # MultiWOZ 2.2 spelling


def test_dst_hand_worked_turns():
    golds = [
        {"hotel-area": "centre", "hotel-type": "guesthouse", "hospital-department": "paediatrics"},
        {"hotel-area": "centre", "hotel-type": "guesthouse", "hotel-book people": "2"},
        {"hotel-area": "centre", "hotel-type": "guesthouse", "hotel-book people": "2", "hotel-book day": "friday"},
        {"restaurant-food": "indian"},
        {"restaurant-food": "indian", "restaurant-pricerange": "cheap"},
    ]
    preds = [
        "hotel-area=center; hotel-type=guest house",  # right after normalisation; hospital is not scored
        "hotel-area=centre; hotel-type=guesthouse; hotel-book people=3",  # a wrong value: 1 missed
        "hotel-area=centre; hotel-type=guesthouse; hotel-book people=2",  # a missing slot: 1 missed
        "restaurant-food=indian; restaurant-area=centre",  # an extra slot: 1 wrong prediction
        "restaurant-food=italian; restaurant-area=north",  # wrong food, no price, extra area: 2 + 1
    ]
    per = dst_per_turn(preds, golds)
    assert [t["joint_goal_accuracy"] for t in per] == [100.0, 0.0, 0.0, 0.0, 0.0]
    assert [t["slot_accuracy"] for t in per] == pytest.approx([100 * x / 30 for x in (30, 29, 29, 29, 27)])
    assert joint_goal_accuracy(preds, golds) == pytest.approx(20.0)
    assert slot_accuracy(preds, golds) == pytest.approx(100 * 144 / 150)
    m = dst_metrics(preds, golds)
    assert m["joint_goal_accuracy"]["mean"] == pytest.approx(20.0) and m["slot_accuracy"]["n"] == 5
    # a MultiWOZ 2.2 gold value lists accepted spellings; a smaller slot list changes the denominator
    assert dst_per_turn(["hotel-name=acorn house"], [{"hotel-name": ["acorn guest house", "acorn house"]}])[0][
        "joint_goal_accuracy"] == 100.0
    assert slot_accuracy(["hotel-area=east"], [{"hotel-area": "west"}], slots=["hotel-area", "hotel-name"]) == 50.0


def test_dst_bad_input():
    with pytest.raises(ConfigError, match="2 predicted states but 1 gold states"):
        dst_per_turn(["", ""], [{}])
    with pytest.raises(ConfigError, match="one value string per predicted slot"):
        dst_per_turn([{"hotel-area": ["east", "west"]}], [{}])
    with pytest.raises(ConfigError, match="no dialogue turns"):
        joint_goal_accuracy([], [])


# ----------------------------------------------------------------------------------------------- code

# CodeXGLUE code-to-text evaluator (Code-Text/code-to-text/evaluator/bleu.py), run from /tmp as
#   python3 bleu.py reference.txt < predictions.txt     (prints the corpus figure)
# and bleu.bleu([splitPuncts(ref.strip().lower())], splitPuncts(pred.strip().lower()))[0] * 100 per line.
# The file was read from Microsoft's identical copy microsoft/CodeBERT
# UniXcoder/downstream-tasks/code-summarization/bleu.py (commit a3200fbc), the CodeXGLUE path not being
# reachable; reference.txt is shared/data/codexglue/code_to_text/evaluator_reference.sample.txt.
CODE_TO_TEXT_PREDICTIONS = [
    "Outputs the deferred summary information saved via",  # the reference itself
    "Inspect the file referenced in kubectl stderr so developers understand what is going on",
    "Make sure to never_prune the EJSON-keys secret!",  # case, "_" and punctuation
    "",  # empty: scores exp(-reference length)
    "create bff file using mkinstallp",
]
OFFICIAL_SENTENCE_BLEU = [100.0, 28.89701739405898, 66.77883590688911, 7.582560427911906e-08, 28.871566309219897]
OFFICIAL_CORPUS_BLEU = 44.90948393719872


@pytest.mark.shared_data
def test_smoothed_bleu4_equals_codexglue_evaluator(shared_data):
    lines = (shared_data / "codexglue/code_to_text/evaluator_reference.sample.txt").read_text().splitlines()
    references = [line.split("\t", 1)[1] for line in lines]
    corpus, per = smoothed_bleu4(CODE_TO_TEXT_PREDICTIONS, references)
    assert per == pytest.approx(OFFICIAL_SENTENCE_BLEU, rel=1e-12)
    assert corpus == pytest.approx(OFFICIAL_CORPUS_BLEU, rel=1e-12)


def test_smoothed_bleu4_several_references():
    # official, the same script: multi_ref.txt holds ids 0 and 1 twice each (two references), printed 80.12643052392727
    corpus, per = smoothed_bleu4(
        ["prints the deferred summary information", "never prune the ejson keys secret"],
        [["Outputs the deferred summary information saved via", "prints the summary information that was deferred"],
         ["make sure to never prune the ejson keys secret", "never prune ejson_keys"]])
    assert corpus == pytest.approx(80.12643052392727, rel=1e-12) and per[1] == 100.0
    with pytest.raises(ConfigError, match="1 predictions but 2 references"):
        smoothed_bleu4(["a"], ["a", "b"])


# CodeXGLUE Code-Code/CodeCompletion-line/evaluator/evaluator.py (commit 0401a76a), run from /tmp in venvs
# with fuzzywuzzy 0.18.0 + python-Levenshtein 0.27.5 and with fuzzywuzzy 0.18.0 + python-Levenshtein
# 0.12.2 (same output):  python evaluator.py -a answers.json -p line_predictions.txt
#   -> "Edit sim: 95.0, EM: 40.0"; fuzz.ratio per line: 100, 89, 100, 95, 91.
# answers.json is shared/data/codexglue/code_completion_line/evaluator_answers.sample.json.
LINE_PREDICTIONS = ["owner , final Point location )", "> models", "= 0 ;",
                    "CallHierarchyMessages . SearchScopeActionGroup_workspace_text ) ;", "Ex1 > in2 ;"]


@pytest.mark.shared_data
def test_line_completion_equals_codexglue_evaluator(shared_data):
    path = shared_data / "codexglue/code_completion_line/evaluator_answers.sample.json"
    answers = [json.loads(line)["gt"] for line in path.read_text().splitlines()]
    per = line_completion_per_sample(LINE_PREDICTIONS, answers)
    assert [s["edit_similarity"] for s in per] == [100, 89, 100, 95, 91]
    assert [s["exact_match"] for s in per] == [100.0, 0.0, 100.0, 0.0, 0.0]  # "= <NUM_LIT:0> ;" is "= 0 ;"
    m = line_completion_metrics(LINE_PREDICTIONS, answers)
    assert (round(m["edit_similarity"]["mean"], 2), round(m["exact_match"]["mean"], 2)) == (95.0, 40.0)


def test_fuzz_ratio_rounds_half_to_even_like_fuzzywuzzy():
    # fuzzywuzzy 0.18 fuzz.ratio (python-Levenshtein 0.12.2 and 0.27.5 alike): 12, 38, 100, 0. Exact halves
    # (12.5, 37.5) round to even; plain rapidfuzz.fuzz.ratio would give 12.5 and 37.5. Over 21,923
    # random pairs (466 of them exact halves) fuzz_ratio equalled fuzzywuzzy's value every time.
    assert [fuzz_ratio("abcdefgh", "aijklmno"), fuzz_ratio("abcdefgh", "abcijklm")] == [12, 38]
    assert [fuzz_ratio("", ""), fuzz_ratio("", "a")] == [100, 0]


def test_line_completion_literals():
    assert line_completion_post_process('x = <STR_LIT:hi> + <NUM_LIT> + "<STR_LIT>" + <CHAR_LIT:c>') == 'x = hi + 0 + "" + c'


def test_codebleu_package_offline():
    # k4black/codebleu README example (0.5537 for these two lines); its components x100
    m = codebleu(["def add ( a , b ) :\n return a + b"], ["def sum ( first , second ) :\n return second + first"], "python")
    assert m["codebleu"] == pytest.approx(55.37, abs=0.01) and m["syntax_match_score"] == 100.0
    java = "public int add(int a, int b) { return a + b; }"
    assert codebleu([java], [java], "java")["codebleu"] == pytest.approx(100.0)
    assert codebleu([java], ["public int add(int a, int b) { return a - b; }"], "java")["codebleu"] < 100.0
    with pytest.raises(ConfigError, match="unknown CodeBLEU language 'rust'; valid: c, c_sharp"):
        codebleu([java], [java], "rust")


@pytest.mark.parametrize("n", [1, 2, 5, 10, 20, 200])
def test_pass_at_k_equals_the_closed_form(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            exact = 1 - math.comb(n - c, k) / math.comb(n, k)  # math.comb(a, b) = 0 when b > a
            assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)
    assert pass_at_k(n, 0, 1) == 0.0 and pass_at_k(n, n, n) == 1.0


def test_pass_at_k_named_cases_and_bad_input():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 = c / n
    assert pass_at_k(10, 3, 8) == 1.0  # n - c = 7 < k: every 8-subset holds a correct sample
    assert pass_at_k(200, 1, 100) == pytest.approx(0.5)
    for n, c, k in ((5, 6, 1), (5, 2, 6), (5, 2, 0), (5.0, 2, 1)):
        with pytest.raises(ConfigError, match="pass_at_k needs"):
            pass_at_k(n, c, k)


def test_pass_at_k_metrics_skips_k_above_the_fewest_samples():
    m = pass_at_k_metrics([(10, 3), (20, 0)], ks=(1, 10, 100))
    assert m["pass@1"]["mean"] == pytest.approx(15.0)  # (30% + 0%) / 2 problems
    assert m["pass@10"]["mean"] == pytest.approx(50.0)  # 100% (n - c = 7 < 10) and 0%
    assert "pass@100" not in m and m["skipped_ks"] == {"pass@100": "needs >= 100 samples per problem; the fewest here is 10"}
