"""Downstream-task metrics: GLUE/SuperGLUE (tasks/metrics/classification.py), SQuAD v1.1/v2.0 (tasks/metrics/squad.py), MMLU (tasks/mmlu/metrics.py).

Hand-worked cases carry their arithmetic in comments; random cases compare with scikit-learn / scipy.
"""

import math
import random

import pytest
from scipy import stats
from sklearn import metrics as skm

from lightning_bench.tasks.metrics.classification import benchmark_average, task_score
from lightning_bench.tasks.mmlu.metrics import CATEGORY_KEY, MMLU_SUBJECTS, SUBJECT_CATEGORY, mmlu_metrics
from lightning_bench.tasks.official_metrics import (GLUE_METRICS, SUPERGLUE_METRICS, glue_task_metrics,
                                                     superglue_task_metrics)
from lightning_bench.tasks.metrics.squad import (
    exact_match_score,
    f1_score,
    normalize_answer,
    squad_v1_metrics,
    squad_v2_metrics,
)

# torchmetrics computes accuracy/F1 in float32
approx = lambda x: pytest.approx(x, abs=1e-6)  # noqa: E731


# ---------------------------------------------------------------- GLUE: hand-worked


def test_cola_mcc_hand_worked_2x2():
    refs = [1, 1, 1, 1, 0, 0, 0]
    preds = [1, 1, 1, 0, 1, 0, 0]
    # tp=3 (0,1,2), fn=1 (3), fp=1 (4), tn=2 (5,6)
    # MCC = (3*2 - 1*1) / sqrt((3+1)(3+1)(2+1)(2+1)) = 5 / sqrt(144) = 5/12
    assert glue_task_metrics("cola", preds, refs) == {"mcc": approx(5 / 12)}


def test_cola_constant_prediction_scores_zero_like_glue():
    # All-"acceptable" is the majority baseline; GLUE (sklearn) scores it MCC 0, not a limit value.
    assert glue_task_metrics("cola", [1, 1, 1, 1], [1, 0, 1, 0])["mcc"] == 0.0
    assert glue_task_metrics("cola", [0, 0, 0], [0, 0, 0])["mcc"] == 0.0


def test_mrpc_accuracy_and_positive_class_f1():
    preds = [1, 1, 0, 0, 1]
    refs = [1, 0, 0, 1, 1]
    # correct at 0, 2, 4 -> acc 3/5; tp=2 (0,4), fp=1 (1), fn=1 (3) -> F1 = 2*2 / (2*2 + 1 + 1) = 2/3
    m = glue_task_metrics("mrpc", preds, refs)
    assert m == {"accuracy": approx(0.6), "f1": approx(2 / 3)}
    assert task_score(m) == approx((0.6 + 2 / 3) / 2)
    # F1 is of class 1: flipping every label changes it (tp=1, fp=1, fn=1 -> 2/4) but not accuracy
    flipped = glue_task_metrics("qqp", [1 - p for p in preds], [1 - r for r in refs])
    assert flipped == {"accuracy": approx(0.6), "f1": approx(0.5)}


def test_stsb_pearson_spearman_hand_worked():
    # x = 1,2,3 (mean 2), y = 1,2,4 (mean 7/3): cov sum = (-1)(-4/3) + 0 + (1)(5/3) = 3,
    # sum dx^2 = 2, sum dy^2 = 42/9 -> r = 3 / sqrt(2 * 42/9) = 9 / sqrt(84); ranks identical -> rho = 1
    m = glue_task_metrics("stsb", [1.0, 2.0, 3.0], [1.0, 2.0, 4.0])
    assert m["pearson"] == pytest.approx(9 / math.sqrt(84))
    assert m["spearman"] == pytest.approx(1.0)


def test_stsb_constant_prediction_is_nan():
    with pytest.warns(stats.ConstantInputWarning):
        m = glue_task_metrics("stsb", [3.0, 3.0, 3.0], [1.0, 2.0, 4.0])
    assert math.isnan(m["pearson"]) and math.isnan(m["spearman"])


def test_mnli_accuracy_per_subset():
    preds = [0, 1, 2, 0, 1]
    refs = [0, 1, 1, 2, 1]
    subsets = ["matched", "matched", "mismatched", "mismatched", "mismatched"]
    # matched: 0/0 1/1 -> 2/2; mismatched: 2/1 0/2 1/1 -> 1/3
    m = glue_task_metrics("mnli", preds, refs, subsets=subsets)
    assert m == {"accuracy_matched": approx(1.0), "accuracy_mismatched": approx(1 / 3)}
    assert task_score(m) == approx((1 + 1 / 3) / 2)
    only_matched = glue_task_metrics("mnli", preds[:2], refs[:2], subsets=subsets[:2])
    assert only_matched == {"accuracy_matched": approx(1.0), "accuracy_mismatched": None}
    assert task_score(only_matched) == approx(1.0)  # None ignored


def test_glue_keys_match_declared_metrics():
    inputs = {"stsb": ([0.1, 0.5, 0.2], [1.0, 3.0, 2.0]), "mnli": ([0, 1, 2], [0, 2, 2])}
    for task, names in GLUE_METRICS.items():
        preds, refs = inputs.get(task, ([0, 1, 1], [0, 1, 0]))
        kwargs = {"subsets": ["matched", "mismatched", "matched"]} if task == "mnli" else {}
        assert tuple(glue_task_metrics(task, preds, refs, **kwargs)) == names


# ---------------------------------------------------------------- GLUE: against sklearn / scipy


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_glue_matches_sklearn_and_scipy_on_random_inputs(seed):
    rng = random.Random(seed)
    n = 200
    refs = [rng.randint(0, 1) for _ in range(n)]
    preds = [r if rng.random() < 0.7 else 1 - r for r in refs]
    assert glue_task_metrics("cola", preds, refs)["mcc"] == pytest.approx(skm.matthews_corrcoef(refs, preds))
    assert glue_task_metrics("sst2", preds, refs)["accuracy"] == approx(skm.accuracy_score(refs, preds))
    mrpc = glue_task_metrics("mrpc", preds, refs)
    assert mrpc["f1"] == approx(skm.f1_score(refs, preds))
    assert mrpc["accuracy"] == approx(skm.accuracy_score(refs, preds))

    refs3 = [rng.randint(0, 2) for _ in range(n)]
    preds3 = [rng.randint(0, 2) for _ in range(n)]
    subsets = [rng.choice(["matched", "mismatched"]) for _ in range(n)]
    mnli = glue_task_metrics("mnli", preds3, refs3, subsets=subsets)
    for name in ("matched", "mismatched"):
        idx = [i for i, s in enumerate(subsets) if s == name]
        expected = skm.accuracy_score([refs3[i] for i in idx], [preds3[i] for i in idx])
        assert mnli[f"accuracy_{name}"] == approx(expected)

    gold = [round(rng.uniform(0, 5), 1) for _ in range(n)]  # rounding makes ties for Spearman
    pred = [round(g + rng.gauss(0, 1.5), 1) for g in gold]
    stsb = glue_task_metrics("stsb", pred, gold)
    assert stsb["pearson"] == pytest.approx(stats.pearsonr(pred, gold)[0])
    assert stsb["spearman"] == pytest.approx(stats.spearmanr(pred, gold)[0])


# ---------------------------------------------------------------- SuperGLUE


def test_cb_macro_f1_hand_worked():
    refs = [0, 0, 1, 2]
    preds = [0, 1, 1, 1]
    # class 0: tp=1 fp=0 fn=1 -> 2/3; class 1: tp=1 fp=2 fn=0 -> 2/4; class 2: tp=0 fn=1 -> 0
    # f1_macro = (2/3 + 1/2 + 0) / 3 = 7/18; accuracy 2/4
    m = superglue_task_metrics("cb", preds, refs)
    assert m == {"accuracy": approx(0.5), "f1_macro": approx(7 / 18)}
    assert task_score(m) == approx((0.5 + 7 / 18) / 2)


def test_cb_macro_f1_averages_over_all_three_classes():
    # class 2 appears nowhere: its F1 counts 0 in the mean over 3 classes -> (1 + 1 + 0) / 3
    assert superglue_task_metrics("cb", [0, 1], [0, 1])["f1_macro"] == approx(2 / 3)


@pytest.mark.parametrize("seed", [0, 1])
def test_superglue_matches_sklearn_on_random_inputs(seed):
    rng = random.Random(seed)
    n = 150
    refs = [rng.choice([0, 0, 1, 2]) for _ in range(n)]
    preds = [r if rng.random() < 0.6 else rng.randint(0, 2) for r in refs]
    cb = superglue_task_metrics("cb", preds, refs)
    assert cb["f1_macro"] == approx(skm.f1_score(refs, preds, labels=[0, 1, 2], average="macro", zero_division=0))
    assert cb["accuracy"] == approx(skm.accuracy_score(refs, preds))

    bin_refs = [rng.randint(0, 1) for _ in range(n)]
    bin_preds = [rng.randint(0, 1) for _ in range(n)]
    for task in ("boolq", "copa", "rte", "wic", "wsc"):
        assert superglue_task_metrics(task, bin_preds, bin_refs) == {"accuracy": approx(skm.accuracy_score(bin_refs, bin_preds))}
    groups = [i // 4 for i in range(n)]
    multirc = superglue_task_metrics("multirc", bin_preds, bin_refs, groups=groups)
    assert multirc["f1a"] == approx(skm.f1_score(bin_refs, bin_preds))


def test_multirc_exact_match_per_question_vs_f1a():
    # question "a": options 1,0,1 all right; question "b": options 0,1 with the first wrong.
    groups = ["a", "b", "a", "b", "a"]  # interleaved on purpose: grouping is by id, not position
    refs = [1, 0, 0, 1, 1]
    preds = [1, 1, 0, 1, 1]
    # EM = 1 of 2 questions = 0.5; over the 5 options tp=3 fp=1 fn=0 -> F1a = 6/7 (option accuracy would be 4/5)
    m = superglue_task_metrics("multirc", preds, refs, groups=groups)
    assert m == {"exact_match": pytest.approx(0.5), "f1a": approx(6 / 7)}
    assert task_score(m) == approx((0.5 + 6 / 7) / 2)


def test_record_max_over_gold_answers():
    preds = ["Barack Obama", "the United States"]
    refs = [["Obama", "Barack Obama"], ["US", "United States of America"]]
    # q1: exact on the 2nd gold -> EM 1, F1 1.
    # q2: no exact; F1 vs "US" = 0, vs "united states of america": 2 common of 2 pred / 4 gold tokens
    #     -> P=1, R=1/2, F1 = 2/3; max = 2/3.  Means: EM 1/2, F1 (1 + 2/3)/2 = 5/6
    m = superglue_task_metrics("record", preds, refs)
    assert m == {"exact_match": pytest.approx(0.5), "f1": pytest.approx(5 / 6)}


def test_superglue_keys_match_declared_metrics():
    for task, names in SUPERGLUE_METRICS.items():
        if task == "record":
            got = superglue_task_metrics(task, ["x"], [["x"]])
        elif task == "multirc":
            got = superglue_task_metrics(task, [1, 0], [1, 1], groups=[0, 0])
        else:
            got = superglue_task_metrics(task, [0, 1], [0, 0])
        assert tuple(got) == names


# ---------------------------------------------------------------- validation, benchmark averages


@pytest.mark.parametrize("call", [
    lambda: glue_task_metrics("sst2", [], []),
    lambda: glue_task_metrics("sst2", [0, 1], [0]),
    lambda: glue_task_metrics("mnli", [0], [0]),  # subsets missing
    lambda: glue_task_metrics("sst2", [0], [0], subsets=["matched"]),
    lambda: glue_task_metrics("mnli", [0], [0], subsets=["dev"]),
    lambda: glue_task_metrics("sst2", [2], [0]),  # not a binary label
    lambda: glue_task_metrics("stsb", [1.0], [1.0]),
    lambda: superglue_task_metrics("multirc", [0, 1], [0, 1]),  # groups missing
    lambda: superglue_task_metrics("multirc", [0, 1], [0, 1], groups=[0]),
    lambda: superglue_task_metrics("record", ["a"], [[]]),
    lambda: superglue_task_metrics("cb", [], []),
])
def test_bad_input_is_a_one_line_value_error(call):
    with pytest.raises(ValueError) as info:
        call()
    assert "\n" not in str(info.value)


def test_unknown_task_lists_valid_names():
    with pytest.raises(ValueError, match="cola, mnli, mrpc"):
        glue_task_metrics("squad", [0], [0])
    with pytest.raises(ValueError, match="boolq, cb, copa"):
        superglue_task_metrics("mnli", [0], [0])


def test_glue_score_reproduces_the_glue_paper():
    # GLUE paper Table 4, row with average 66.4 (multi-task BiLSTM + ELMo, percent scale):
    # 9 tasks, each multi-metric task averaged first, MNLI m/mm as one task.
    per_task = {
        "cola": {"mcc": 35.0}, "sst2": {"accuracy": 90.2},
        "mrpc": {"accuracy": 69.0, "f1": 80.8}, "qqp": {"accuracy": 85.7, "f1": 65.6},
        "stsb": {"pearson": 64.0, "spearman": 60.2},
        "mnli": {"accuracy_matched": 72.9, "accuracy_mismatched": 73.4},
        "qnli": {"accuracy": 71.7}, "rte": {"accuracy": 50.1}, "wnli": {"accuracy": 65.1},
    }
    assert set(per_task) == set(GLUE_METRICS)
    score = benchmark_average({task: task_score(m) for task, m in per_task.items()})
    assert round(score, 1) == 66.4


def test_benchmark_average_and_task_score_edges():
    assert benchmark_average({}) is None
    assert benchmark_average({"cola": 0.2, "sst2": 0.9, "rte": None}) == pytest.approx(0.55)
    with pytest.raises(ValueError):
        task_score({"accuracy_matched": None, "accuracy_mismatched": None})


# ---------------------------------------------------------------- SQuAD


@pytest.mark.parametrize("raw, normalized", [
    ("The  Quick, brown fox!", "quick brown fox"),
    ("An apple a day", "apple day"),
    ("theater", "theater"),             # articles only as whole words
    ("U.S.A.", "usa"),                  # punctuation goes before articles are matched
    ("the-end", "theend"),
    ("  \tA\n", ""),
])
def test_normalize_answer(raw, normalized):
    assert normalize_answer(raw) == normalized


def test_exact_and_f1_worked_pairs():
    assert exact_match_score("The Denver Broncos!", "denver broncos") == 1.0
    assert exact_match_score("Denver", "Denver Broncos") == 0.0
    # "cat sat on mat" (4 tokens) vs "cat sat on red mat" (5): 4 common -> P=1, R=4/5, F1 = 1.6/1.8 = 8/9
    assert f1_score("the cat sat on the mat", "a cat sat on a red mat") == pytest.approx(8 / 9)
    # bag of tokens: "x x y" vs "x y y" share one x and one y -> P = R = 2/3
    assert f1_score("x x y", "x y y") == pytest.approx(2 / 3)
    assert f1_score("red", "blue") == 0.0
    # no-answer rule: empty vs empty is a match, empty vs anything is not
    assert f1_score("", "") == 1.0
    assert f1_score("the", "") == 1.0  # "the" normalizes to nothing
    assert f1_score("", "Paris") == 0.0 and f1_score("Paris", "") == 0.0


def test_squad_v1_max_over_golds_and_missing_prediction():
    preds = {"q1": "Denver Broncos", "q2": "in 1990", "extra": "ignored"}
    refs = {"q1": ["Broncos", "Denver Broncos"], "q2": ["1990"], "q3": ["anything"]}
    # q1: EM 1 F1 1 (2nd gold). q2: EM 0, F1: [in, 1990] vs [1990] -> P=1/2 R=1 -> 2/3. q3 missing -> 0.
    m = squad_v1_metrics(preds, refs)
    assert m == {"exact_match": pytest.approx(100 / 3), "f1": pytest.approx(100 * (1 + 2 / 3) / 3), "total": 3}


def test_squad_v2_correct_no_answer_scores_one():
    m = squad_v2_metrics({"q": ""}, {"q": []})
    assert m["exact"] == 100.0 and m["f1"] == 100.0
    assert m["NoAns_total"] == 1 and "HasAns_total" not in m
    # a non-empty answer to an unanswerable question scores 0 on both
    m = squad_v2_metrics({"q": "Paris"}, {"q": []})
    assert m["exact"] == 0.0 and m["f1"] == 0.0


V2_PREDS = {"q1": "Paris", "q2": "London", "q3": "blue truck", "q4": ""}
V2_REFS = {"q1": ["Paris", "paris, France"], "q2": [], "q3": ["the blue car"], "q4": []}
V2_NA = {"q1": 0.1, "q2": 0.6, "q3": 0.5, "q4": 0.3}
# raw scores: q1 EM 1 F1 1; q2 (unanswerable, answered) 0 0; q3 EM 0, F1 [blue, truck] vs [blue, car]
# -> 1/2; q4 (unanswerable, abstained) 1 1.


def test_squad_v2_split_counts_and_scores():
    m = squad_v2_metrics(V2_PREDS, V2_REFS, na_probs=V2_NA)
    assert list(m) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
                       "NoAns_exact", "NoAns_f1", "NoAns_total",
                       "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]
    # default threshold 1.0 changes nothing: exact (1+0+0+1)/4, f1 (1+0+.5+1)/4
    assert (m["exact"], m["f1"], m["total"]) == (pytest.approx(50.0), pytest.approx(62.5), 4)
    assert (m["HasAns_exact"], m["HasAns_f1"], m["HasAns_total"]) == (pytest.approx(50.0), pytest.approx(75.0), 2)
    assert (m["NoAns_exact"], m["NoAns_f1"], m["NoAns_total"]) == (pytest.approx(50.0), pytest.approx(50.0), 2)


def test_squad_v2_best_threshold_hand_worked():
    m = squad_v2_metrics(V2_PREDS, V2_REFS, na_probs=V2_NA)
    # Start at #NoAns = 2 (abstain everywhere), then answer in na_prob order q1 .1, q4 .3, q3 .5, q2 .6:
    #   exact: +1 (q1) = 3 @0.1 | +0 (q4, pred "") = 3 | +0 (q3 EM 0) = 3 | -1 (q2 answered) = 2
    #   f1:    +1 = 3 @0.1      | +0 = 3                | +0.5 = 3.5 @0.5   | -1 = 2.5
    # best_exact = 3/4 at 0.1, best_f1 = 3.5/4 at 0.5
    assert (m["best_exact"], m["best_exact_thresh"]) == (pytest.approx(75.0), 0.1)
    assert (m["best_f1"], m["best_f1_thresh"]) == (pytest.approx(87.5), 0.5)


def test_squad_v2_na_prob_threshold_rule():
    # thresh 0.5: only q2 (0.6 > 0.5) becomes "no answer", which is right for it -> scores 1.
    # exact (1+1+0+1)/4 = 75, f1 (1+1+.5+1)/4 = 87.5: the best_f1 above, reached at this threshold
    m = squad_v2_metrics(V2_PREDS, V2_REFS, na_probs=V2_NA, na_prob_thresh=0.5)
    assert (m["exact"], m["f1"]) == (pytest.approx(75.0), pytest.approx(87.5))
    assert m["NoAns_exact"] == pytest.approx(100.0)


def test_squad_v2_default_na_probs_and_missing_prediction():
    m = squad_v2_metrics(V2_PREDS, V2_REFS)  # na_probs all 0.0: nothing is forced to no-answer
    assert m["exact"] == pytest.approx(50.0)
    # All na_probs tie at 0, and the official sweep still walks them one by one in prediction order:
    # 2 +1 (q1) = 3 -> best | -1 (q2) = 2 | +0.5 (q3) = 2.5 | +0 (q4) = 2.5  -> best_f1 3/4 "at 0.0",
    # a prefix of tied questions no threshold can actually select (kept: it is the official number).
    assert (m["best_f1"], m["best_f1_thresh"]) == (pytest.approx(75.0), 0.0)
    with pytest.raises(ValueError, match="no prediction"):
        squad_v2_metrics({"q1": "Paris"}, V2_REFS)
    with pytest.raises(ValueError, match="no na_prob"):
        squad_v2_metrics(V2_PREDS, V2_REFS, na_probs={"q1": 0.2})


# ---------------------------------------------------------------- MMLU


def test_mmlu_micro_vs_macro_on_unequal_subjects():
    m = mmlu_metrics({
        "abstract_algebra": [True, True, True, False],  # 3/4, STEM
        "anatomy": [False],                             # 0/1, other
        "world_religions": [True, True],                # 2/2, humanities
    })
    # micro = (3 + 0 + 2) / (4 + 1 + 2) = 5/7; macro = (3/4 + 0 + 1) / 3 = 7/12
    assert m["accuracy"] == pytest.approx(5 / 7)
    assert m["macro_accuracy"] == pytest.approx(7 / 12)
    assert m["subject_scores"] == {"abstract_algebra": 0.75, "anatomy": 0.0, "world_religions": 1.0}
    assert m["category_scores"] == {"STEM": 0.75, "other": 0.0, "humanities": 1.0}
    assert (m["num_subjects_evaluated"], m["num_questions"]) == (3, 7)


def test_mmlu_category_is_micro_over_its_questions():
    # both STEM: (1 + 9) / (1 + 10) = 10/11, not the subject mean (1 + 0.9) / 2
    m = mmlu_metrics({"astronomy": [True], "virology": [False], "machine_learning": [True] * 9 + [False]})
    assert m["category_scores"]["STEM"] == pytest.approx(10 / 11)


def test_mmlu_all_57_subjects_mapped_with_reference_category_counts():
    assert len(MMLU_SUBJECTS) == 57 == len(set(MMLU_SUBJECTS))
    assert set(SUBJECT_CATEGORY) == set(MMLU_SUBJECTS)
    counts = {}
    for category in SUBJECT_CATEGORY.values():
        counts[category] = counts.get(category, 0) + 1
    # subjects per category in hendrycks/test categories.py
    assert counts == {"STEM": 18, "humanities": 13, "social sciences": 12, "other (business, health, misc.)": 14}
    full = mmlu_metrics({s: [True] for s in MMLU_SUBJECTS})
    assert set(full["category_scores"]) == set(CATEGORY_KEY.values()) == {"STEM", "humanities", "social_sciences", "other"}
    assert SUBJECT_CATEGORY["anatomy"] == "other (business, health, misc.)"
    assert SUBJECT_CATEGORY["high_school_statistics"] == "STEM"


@pytest.mark.shared_data
def test_mmlu_subjects_match_the_data_files(shared_data):
    test_dir = shared_data / "mmlu" / "test"
    if not test_dir.is_dir():
        pytest.skip(f"no MMLU test split at {test_dir}")
    assert {p.name.removesuffix("_test.csv") for p in test_dir.glob("*_test.csv")} == set(MMLU_SUBJECTS)


def test_mmlu_bad_input():
    with pytest.raises(ValueError, match="MMLU_SUBJECTS.*did you mean|did you mean.*MMLU_SUBJECTS"):
        mmlu_metrics({"high_school_math": [True]})
    with pytest.raises(ValueError, match="no MMLU subjects"):
        mmlu_metrics({})
    with pytest.raises(ValueError, match="no questions"):
        mmlu_metrics({"anatomy": []})


# ---------------------------------------------------------------- SuperGLUE diagnostics (AX-b, AX-g)


def test_axb_matthews_correlation_hand_worked():
    # gold 0 = entailment, 1 = not_entailment; confusion with class 1 positive:
    # tp = 2 (idx 1, 4), tn = 2 (idx 0, 3), fp = 1 (idx 2), fn = 1 (idx 5)
    # MCC = (2*2 - 1*1) / sqrt(3 * 3 * 3 * 3) = 3 / 9 = 1/3
    refs = [0, 1, 0, 0, 1, 1]
    preds = [0, 1, 1, 0, 1, 0]
    m = superglue_task_metrics("axb", preds, refs)
    assert m == {"mcc": pytest.approx(1 / 3)} and m["mcc"] == pytest.approx(skm.matthews_corrcoef(refs, preds))


def test_axg_accuracy_and_gender_parity_hand_worked():
    # pairs (0,1) (2,3) (4,5): predictions agree in pairs 1 and 3, differ in pair 2 -> parity 2/3;
    # accuracy 3 of 6 right (idx 0, 1, 2)
    refs = [1, 1, 0, 0, 1, 1]
    preds = [1, 1, 0, 1, 0, 0]
    assert superglue_task_metrics("axg", preds, refs) == {"accuracy": approx(3 / 6), "gender_parity": approx(2 / 3)}
    # pairs are found by idx, not by position; an example without its partner is left out
    shuffled = superglue_task_metrics("axg", [0, 1, 1, 1], [0, 1, 1, 1], ids=[5, 2, 3, 4])
    assert shuffled["gender_parity"] == approx(1 / 2)  # pair (2,3) agrees, pair (4,5) does not
    assert superglue_task_metrics("axg", [1], [1], ids=[7])["gender_parity"] is None


def test_diagnostics_are_scored_beside_the_superglue_average_not_in_it():
    from lightning_bench.tasks.benchmark_scores import aggregate

    rte = {"accuracy": 0.75, "acc": 0.75, "acc_norm": 0.5}
    axb = {"mcc": 0.2, "acc": 0.6, "acc_norm": 0.6}
    entry = aggregate({"superglue/rte": rte, "superglue/axb": axb}, {"superglue/rte": 4, "superglue/axb": 5})["superglue"]
    assert entry["axb"] == approx(0.2) and entry["rte"] == approx(0.75)
    assert entry["average"] == approx(0.75) and entry["average_over"] == ["rte"]
    only = aggregate({"superglue/axg": {"accuracy": 0.5, "gender_parity": 1.0, "acc": 0.5, "acc_norm": 0.5}},
                     {"superglue/axg": 2})["superglue"]
    assert only["axg"] == approx(0.75) and only["average"] is None and only["average_over"] == []


# ---------------------------------------------------------------- acc / acc_norm of prompted choices

def test_acc_norm_counts_the_choice_without_its_separator_like_the_harness():
    """lm-evaluation-harness: pred_norm = argmax(lls / completion_len), completion_len = len of each
    doc_to_choice string; the target_delimiter (" ") is joined on when the request is built, not counted."""
    from lightning_bench.tasks.datamodules.prompted import Request
    from lightning_bench.tasks.prompts import MultipleChoice
    from lightning_bench.tasks.benchmark_scores import choice_prediction, score_prompted

    boolq = MultipleChoice("passage\nQuestion: q?\nAnswer:", (" no", " yes"), 1)
    # " no" -2.0, " yes" -2.9: acc picks no; per character of "no" / "yes": -2.0/2 = -1.0 < -2.9/3 = -0.967,
    # so acc_norm picks yes (counting the space, -2.0/3 = -0.667 > -2.9/4 = -0.725 would pick no)
    pred = choice_prediction(boolq, {"loglik": {0: -2.0, 1: -2.9}})
    assert (pred["prediction"], pred["prediction_norm"]) == (0, 1)

    # ReCoRD's bullets are joined with nothing (the harness's target_delimiter ""): every character counts.
    # "  - ab" (6) -3.0 and "  - abcdef" (10) -5.1: -0.5 > -0.51 picks 0 (dropping a space: -0.6 < -0.567, 1)
    record = MultipleChoice("passage\n\n", ("  - ab", "  - abcdef"), (0,))
    assert choice_prediction(record, {"loglik": {0: -3.0, 1: -5.1}}, separator="")["prediction_norm"] == 0

    # through the scorer: BoolQ's acc and acc_norm over two examples, the second right under both
    second = MultipleChoice("passage\nQuestion: q?\nAnswer:", (" no", " yes"), 0)
    requests = [Request("superglue/boolq", {"id": i, "label": r.gold}, r) for i, r in enumerate((boolq, second))]
    outputs = [{"kind": "loglikelihood", "request_id": [0, 0, 1, 1], "choice_index": [0, 1, 0, 1],
                "loglik": [-2.0, -2.9, -0.5, -3.0], "greedy": [False] * 4}]
    results, samples = score_prompted(requests, outputs)
    metrics = results["superglue"]["tasks"]["boolq"]["metrics"]
    assert (metrics["acc"], metrics["acc_norm"]) == (0.5, 1.0)
    assert [s["prediction_norm"] for s in samples] == [1, 0]
