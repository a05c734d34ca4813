"""LongBench v1 / LongBench-E / LongBench v2 and ZeroSCROLLS: definitions, readers of the original file
formats (tiny hand-made fixtures in tests/fixtures/long_context/), prompts, and every official metric on
worked examples computed by hand (the arithmetic is in the comments). No model runs."""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from lightning_bench.tasks import get_task, load_rows
from lightning_bench.tasks.definition import check_definition
from lightning_bench.tasks.registry import READERS
from lightning_bench.tasks.registry import BENCHMARKS, TASKS
from lightning_bench.tasks.prompts import build_request
from lightning_bench.errors import ConfigError, MissingData
from lightning_bench.tasks.generative_scoring import score_generative, task_means_entry
from lightning_bench.tasks.longbench import scorer as lb
from lightning_bench.tasks.zeroscrolls import scorer as zs

DATA = str(Path(__file__).parent / "fixtures" / "long_context")


def _score(task: str, rows: list[dict], preds: list[str]):
    pairs = [(SimpleNamespace(row=r), {"prediction": p}) for r, p in zip(rows, preds)]
    return score_generative(get_task(task), pairs)


def _write(tmp_path, name: str, rows) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return str(path)


# ---- definitions ---------------------------------------------------------------------------------------

def test_definitions_are_complete_and_grouped():
    ours = [t for t in TASKS.values() if t.benchmark in ("longbench", "longbench_e", "longbench_v2", "zeroscrolls")]
    assert [p for t in ours for p in check_definition(t)] == []
    assert len(BENCHMARKS["longbench"].tasks) == 21 and len(BENCHMARKS["longbench_e"].tasks) == 13
    assert len(BENCHMARKS["zeroscrolls"].tasks) == 10 and BENCHMARKS["longbench_v2"].tasks == ("longbench_v2",)
    assert {BENCHMARKS[b].aggregation for b in ("longbench", "longbench_e", "zeroscrolls")} == {"task_means"}
    assert set(lb.DATASET_METRIC) == {TASKS[t].short_name for t in BENCHMARKS["longbench"].tasks}
    assert {TASKS[t].short_name for t in BENCHMARKS["longbench_e"].tasks} <= set(lb.DATASET_METRIC)
    assert set(zs.TASK_METRIC) == {TASKS[t].short_name for t in BENCHMARKS["zeroscrolls"].tasks}
    # dataset2maxlen.json, pred.py's no-chat list, the hub configs
    qasper_e, trec, gov = get_task("longbench_e/qasper"), get_task("longbench/trec"), get_task("longbench/gov_report")
    limits = (qasper_e.generation.max_new_tokens, trec.generation.max_new_tokens, gov.generation.max_new_tokens)
    assert limits == (128, 64, 512)
    assert (qasper_e.source.hub_id, qasper_e.source.hub_config) == ("THUDM/LongBench", "qasper_e")
    assert not trec.generation.chat and gov.generation.chat and get_task("longbench/lcc").generation.keep_whitespace
    assert get_task("zeroscrolls/quality").generation.max_new_tokens == 10
    assert get_task("zeroscrolls/quality").splits.eval == "validation"
    with pytest.raises(ConfigError, match="narrativeqa"):  # the registry lists the valid tasks
        get_task("longbench/narrative")


# ---- LongBench v1 metrics ------------------------------------------------------------------------------

def test_qa_f1_english_and_max_over_answers():
    # "the" dropped: {albatross, ship} vs {albatross}: P = 1/2, R = 1, F1 = 2/3
    assert lb.qa_f1_score("The Albatross ship", "The Albatross") == pytest.approx(2 / 3)
    # vs "Mara": P = 1/3, R = 1 -> 0.5; vs "the lighthouse keeper Mara": P = R = 1/3 -> 1/3; max = 0.5
    golds = ["Mara", "the lighthouse keeper Mara"]
    assert lb.sample_score("narrativeqa", "Mara rowed out", golds) == pytest.approx(0.5)
    assert lb.qa_f1_score("", "") == 0.0  # nothing shared: 0, as the official f1


def test_qa_f1_zh_with_jieba():
    # jieba: 北京|是|中国|的|首都 vs 首都|是|北京: 3 shared, P = 3/5, R = 3/3, F1 = 2 x 0.6 x 1 / 1.6 = 0.75
    assert lb.jieba_words("北京是中国的首都") == ["北京", "是", "中国", "的", "首都"]
    assert lb.qa_f1_zh_score("北京是中国的首都", "首都是北京") == pytest.approx(0.75)
    # "。" is a word of its own that normalises to "" and is dropped: the same 0.75
    assert lb.qa_f1_zh_score("中国的首都是北京。", "首都是北京") == pytest.approx(0.75)


def test_rouge_is_the_rouge_package_formula_not_rouge_score():
    # sentences split on ".": hyp [the cat sat on the mat] [it was happy], ref [the cat lay on the mat]
    # distinct words: ref {the, cat, lay, on, mat} m = 5, hyp {the, cat, sat, on, mat, it, was, happy} n = 8;
    # union of LCS words {the, cat, on, mat} = 4: R = 4/5, P = 4/8, F = 2 x 0.4 / 1.3 = 0.6154
    # (rouge-score's ROUGE-L would count tokens: LCS 5 of 9 and 6 -> F = 0.6667)
    score = lb.rouge_score("the cat sat on the mat. it was happy", "the cat lay on the mat.")
    assert score == pytest.approx(8 / 13, abs=1e-7)
    assert lb.rouge_score("Paris,", "Paris") == 0.0  # words split on spaces only: "Paris," is not "Paris"
    assert lb.rouge_score("", "a reference") == 0.0 and lb.rouge_score("...", "x") == 0.0  # the package raises: 0
    # Chinese: 会议 讨论 了 预算 问题 vs 会议 主要 讨论 了 明年 的 预算: LCS 会议 讨论 了 预算 = 4,
    # R = 4/7, P = 4/5, F = (32/35) / (48/35) = 2/3
    assert lb.rouge_zh_score("会议讨论了预算问题", "会议主要讨论了明年的预算") == pytest.approx(2 / 3, abs=1e-7)


def test_classification_keeps_the_official_loop():
    classes = ["Distance", "Individual", "City", "Other location", "Date"]
    assert lb.classification_score("City", "City", classes) == 1.0
    assert lb.classification_score("Other location or City", "City", classes) == 0.5  # two classes named: 1/2
    assert lb.classification_score("a big town", "City", classes) == 0.0  # no class named: 0 (no difflib fallback)
    # matches [Other, location, Other location]: "Other" (part of the gold) is removed, which skips "location",
    # so two remain and the gold scores 1/2 (removing both would give 1)
    assert lb.classification_score("Other location", "Other location", ["Other", "location", "Other location"]) == 0.5


def test_retrieval_count_and_code_similarity():
    assert lb.retrieval_score("Paragraph 12", "Paragraph 12") == 1.0
    assert lb.retrieval_score("Paragraph 12 or Paragraph 3", "Paragraph 12") == 0.5  # numbers [12, 3]: 1 of 2
    assert lb.retrieval_score("I don't know", "Paragraph 12") == 0.0
    assert lb.retrieval_zh_score("答案是段落3", "段落3") == 1.0
    assert lb.count_score("There are 7 unique paragraphs out of 10", 7) == 0.5  # numbers [7, 10]
    # the first line without "#" is kept: identical to the gold -> 1.0
    assert lb.code_sim_score("\n# compute the area\n    return w * h\nprint(1)", "    return w * h") == 1.0
    # "return w*h" (10) vs "    return w * h" (16): LCS 10, indel 6, 1 - 6/26 = 0.769 -> round(76.9) = 77
    assert lb.code_sim_score("return w*h", "    return w * h") == 0.77
    # "bcb" vs "cab": indel LCS "cb" -> 4/6 = 67; difflib's greedy blocks find one "b" -> 2/6 = 33
    assert (lb.fuzz_ratio("bcb", "cab"), lb.fuzz_ratio("bcb", "cab", "difflib")) == (67, 33)


def test_first_line_post_processing_of_the_few_shot_tasks():
    assert lb.sample_score("triviaqa", "\nParis\nQuestion: capital of Italy?\nAnswer: Rome", ["Paris"]) == 1.0
    # not a few-shot task: the whole text counts, F1 of {paris, question, capital, of, italy, answer, rome} = 0.25
    assert lb.sample_score("hotpotqa", "\nParis\nQuestion: capital of Italy?\nAnswer: Rome", ["Paris"]) == 0.25


def test_longbench_e_scorer_reports_length_buckets():
    rows = load_rows("longbench_e/qasper", "eval", data_dir=DATA)
    assert [r["length"] for r in rows] == [1200, 5000, 9000]
    # WikiText-103 == WikiText-103 -> 100; "12 layers" vs "12": P = 1/2, R = 1 -> 66.67; "no" vs "yes" -> 0
    figures, per = _score("longbench_e/qasper", rows, ["WikiText-103", "12 layers", "no"])
    assert [s["score"] for s in per] == pytest.approx([100, 200 / 3, 0])
    assert figures["score"] == pytest.approx((100 + 200 / 3) / 3) and figures["metric"] == "qa_f1"
    assert (figures["score_0-4k"], figures["score_4-8k"], figures["score_8k+"]) == pytest.approx((100, 200 / 3, 0))
    assert figures["bucket_samples"] == {"0-4k": 1, "4-8k": 1, "8k+": 1} and per[2]["bucket"] == "8k+"
    # the benchmark's means per bucket, as eval.py --e averages over tasks
    assert task_means_entry({"qasper": {"metrics": figures, "num_samples": 3}})["score_4-8k"] == pytest.approx(200 / 3)


# ---- LongBench v2 --------------------------------------------------------------------------------------

def test_v2_answer_extraction_as_the_official_parser():
    assert lb.extract_choice("The correct answer is (B)") == "B"
    assert lb.extract_choice("**The correct answer is C**") == "C"  # asterisks dropped, bare letter accepted
    assert lb.extract_choice("the correct answer is (A)") is None  # case-sensitive
    assert lb.extract_choice("The correct answer is (E)") is None and lb.extract_choice("I think (D)") is None
    # the parenthesised form is searched first over the whole response
    assert lb.extract_choice("The correct answer is A. Wait: The correct answer is (C)") == "C"


def test_v2_reader_prompt_and_scorer():
    rows = load_rows("longbench_v2", "eval", data_dir=DATA)
    assert [r["id"] for r in rows] == ["v2-001", "v2-002", "v2-003"] and rows[0]["answers"] == ["B"]
    assert rows[0]["context"].startswith("Mara") and rows[0]["context"].endswith("ashore.")  # stripped
    req = build_request("longbench_v2", rows[0])
    assert req.document == rows[0]["context"] and req.answers == ("B",)
    assert req.context.startswith("Please read the following text and answer the question below.\n\n<text>\nMara")
    assert ("</text>\n\nWhat is the correct answer to this question: Who keeps the lighthouse?\nChoices:\n(A) Tom\n"
            "(B) Mara") in req.context and req.context.endswith('"The correct answer is (insert answer here)".')
    # right, wrong, no letter: accuracy 1/3; easy (1 row) 100, hard (2 rows) 0; 2 of 3 parsed
    figures, per = _score("longbench_v2", rows, ["The correct answer is (B)", "The correct answer is (A)", "unsure"])
    assert figures["accuracy"] == pytest.approx(100 / 3) and figures["extracted"] == pytest.approx(200 / 3)
    assert (figures["accuracy_easy"], figures["accuracy_hard"]) == (100.0, 0.0)
    assert (figures["accuracy_short"], figures["accuracy_medium"], figures["accuracy_long"]) == (100.0, 0.0, 0.0)
    assert figures["accuracy_easy_short"] == 100.0 and figures["accuracy_easy_long"] is None
    assert figures["group_samples"]["hard"] == 2 and per[2]["choice"] is None


def test_v2_reader_errors(tmp_path):
    row = {
        "_id": "x", "domain": "d", "sub_domain": "s", "difficulty": "easy", "length": "short", "question": "q",
        "choice_A": "a", "choice_B": "b", "choice_C": "c", "choice_D": "d", "answer": "E", "context": "ctx"}
    path = tmp_path / "data.json"
    path.write_text(json.dumps([row]))
    with pytest.raises(ConfigError, match=r"row 0: answer 'E' is not one of A, B, C, D"):
        load_rows("longbench_v2", "eval", paths=str(path))
    del row["context"]
    path.write_text(json.dumps([row]))
    with pytest.raises(ConfigError, match=r"row 0 has no context; expected LongBench v2's data.json"):
        load_rows("longbench_v2", "eval", paths=str(path))


# ---- LongBench readers and prompts ---------------------------------------------------------------------

def test_longbench_reader_rows_and_prompts():
    rows = load_rows("longbench/narrativeqa", "eval", data_dir=DATA)
    assert [r["id"] for r in rows] == ["nqa-0001", "nqa-0002"]
    assert rows[0]["answers"] == ["Mara", "the lighthouse keeper Mara"] and rows[0]["language"] == "en"
    req = build_request("longbench/narrativeqa", rows[0])
    assert req.document == rows[0]["context"] and req.stop == () and req.answers == tuple(rows[0]["answers"])
    assert req.context.startswith("You are given a story, which can be either a novel or a movie script, and a "
                                  "question. Answer the question as concisely as you can")
    assert req.context.endswith("\n\nQuestion: Who rescued the crew of the Albatross?\n\nAnswer:")
    trec = load_rows("longbench/trec", "eval", data_dir=DATA)[0]
    assert trec["all_classes"] == ["Distance", "Individual", "City", "Other location", "Date"]
    prompt = build_request("longbench/trec", trec).context
    assert prompt.endswith("Type: Individual\nQuestion: What is the capital of Peru ?\nType:")
    lcc = load_rows("longbench/lcc", "eval", data_dir=DATA)[0]  # braces in the code stay as they are
    assert build_request("longbench/lcc", lcc).context == ("Please complete the code given below. \n" + lcc["context"]
                                                            + "Next line of code:\n")
    zh = load_rows("longbench/multifieldqa_zh", "eval", data_dir=DATA)[0]
    assert build_request("longbench/multifieldqa_zh", zh).context.endswith("问题：中国的首都是哪里？\n回答：")
    figures, _ = _score("longbench/multifieldqa_zh", [zh], ["北京"])
    assert figures["score"] == 100.0 and figures["metric"] == "qa_f1_zh"
    # the hub's rows (THUDM/LongBench) have the same fields and give the same rows
    raw = [json.loads(line) for line in open(f"{DATA}/longbench/data/narrativeqa.jsonl", encoding="utf-8")]
    assert READERS["longbench"].from_hub(get_task("longbench/narrativeqa"), "test", raw) == rows


def test_longbench_reader_errors(tmp_path):
    task = get_task("longbench/qasper")
    missing = tmp_path / "qasper.jsonl"
    with pytest.raises(MissingData, match=rf"{missing} not found; expected LongBench's data/<task>.jsonl"):
        READERS["longbench"].read(task, [missing])
    with pytest.raises(MissingData, match=rf"{missing} not found"):
        load_rows("longbench/qasper", "eval", paths=str(missing))
    with pytest.raises(ConfigError, match=r"belongs to LongBench dataset 'narrativeqa', not 'qasper'"):
        load_rows("longbench/qasper", "eval", paths=f"{DATA}/longbench/data/narrativeqa.jsonl")
    broken = _write(tmp_path, "b.jsonl", [{"input": "q", "context": "c", "_id": "1"}])
    with pytest.raises(ConfigError, match=r"b.jsonl row 0 has no answers; expected LongBench's data/<task>") as err:
        load_rows("longbench/qasper", "eval", paths=broken)
    assert "\n" not in str(err.value)  # one line
    bad_json = tmp_path / "c.jsonl"
    bad_json.write_text('{"input": "q"\n')
    with pytest.raises(ConfigError, match=r"c.jsonl line 1 is not a JSON object"):
        load_rows("longbench/qasper", "eval", paths=str(bad_json))
    no_length = _write(tmp_path, "d.jsonl", [{"input": "q", "context": "c", "answers": ["a"], "_id": "1"}])
    with pytest.raises(ConfigError, match=r"no integer length, which LongBench-E's length buckets need"):
        load_rows("longbench_e/qasper", "eval", paths=no_length)
    no_classes = _write(tmp_path, "e.jsonl", [{"input": "q", "context": "c", "answers": ["City"], "_id": "1",
                                               "all_classes": None}])
    with pytest.raises(ConfigError, match=r"has no all_classes, which trec is scored against"):
        load_rows("longbench/trec", "eval", paths=no_classes)


# ---- ZeroSCROLLS ---------------------------------------------------------------------------------------

def test_zeroscrolls_reader_splits_the_input_and_merges_references():
    rows = load_rows("zeroscrolls/qasper", "eval", data_dir=DATA)
    assert [r["id"] for r in rows] == ["q1", "q2"] and rows[0]["outputs"] == ["12 layers", "twelve"]
    row = rows[0]
    assert row["document"] == "We evaluate on the Penn Treebank. Our model uses 12 layers and a café-style attention."
    assert row["prefix"].endswith("\n\nArticle:\n") and row["query"] == "Question:\nHow many layers does the model use?"
    assert row["response_header"] == "\n\nAnswer:" and row["truncation_seperator"].startswith("... [The rest")
    assert row["input"][row["document_start_index"]:row["document_end_index"]] == row["document"]
    assert row["prefix"] + row["document"] + "\n\n" + row["query"] + row["response_header"] == row["input"]
    req = build_request("zeroscrolls/qasper", row)
    assert req.context == row["input"] and req.document == row["document"] and req.answers == ("12 layers", "twelve")
    gov = load_rows("zeroscrolls/gov_report", "eval", data_dir=DATA)[0]  # no query
    assert gov["query"] == "" and gov["response_header"] == "\n\nSummary:"
    raw = [json.loads(line) for line in open(f"{DATA}/zeroscrolls/qasper/validation.jsonl", encoding="utf-8")]
    assert READERS["zeroscrolls"].from_hub(get_task("zeroscrolls/qasper"), "validation", raw) == rows


def test_zeroscrolls_reader_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"test.jsonl row 0 \(the test split hides its outputs; read the validation "
                                          r"split\) has no reference output"):
        load_rows("zeroscrolls/qasper", "test", data_dir=DATA)
    missing = tmp_path / "validation.jsonl"
    with pytest.raises(MissingData, match=rf"{missing} not found; expected ZeroSCROLLS' <task>/<split>.jsonl"):
        READERS["zeroscrolls"].read(get_task("zeroscrolls/musique"), [missing])
    row = json.loads(open(f"{DATA}/zeroscrolls/quality/validation.jsonl", encoding="utf-8").readline())
    with pytest.raises(ConfigError, match=r"row 0: reference 'Mara' names no option letter A-D"):
        load_rows("zeroscrolls/quality", "eval", paths=_write(tmp_path, "q.jsonl", [{**row, "output": "Mara"}]))
    with pytest.raises(ConfigError, match=r"row 0: the index fields .* do not cut its"):
        load_rows("zeroscrolls/quality", "eval",
                  paths=_write(tmp_path, "i.jsonl", [{**row, "document_end_index": len(row["input"]) + 5}]))
    with pytest.raises(ConfigError, match=r"row 0 has no query_end_index; expected ZeroSCROLLS'"):
        load_rows("zeroscrolls/quality", "eval", paths=_write(tmp_path, "k.jsonl", [
            {k: v for k, v in row.items() if k != "query_end_index"}]))
    with pytest.raises(ConfigError, match=r"is not an order of the summary IDs 1..n"):
        load_rows("zeroscrolls/book_sum_sort", "eval", paths=_write(tmp_path, "s.jsonl", [{**row, "output": "1, 3"}]))


def test_zeroscrolls_f1_accuracy_similarity_and_concordance():
    # vs "12 layers": {twelve, layers} vs {12, layers}: P = R = 1/2 -> 0.5; vs "twelve": P = 1/2, R = 1 -> 2/3
    rows = [{"outputs": ["12 layers", "twelve"]}]
    figures, per = _score("zeroscrolls/qasper", rows, ["twelve layers"])
    assert per == [{"f1": pytest.approx(200 / 3), "score": pytest.approx(200 / 3)}]
    assert figures["score"] == pytest.approx(200 / 3)
    assert zs.f1_score("Café", "cafe") == 1.0  # transliterated to ASCII after normalising
    assert zs.f1_score("Dumbledore’s", "Dumbledore's") == 0.0  # ’ survives punctuation removal, becomes '
    assert zs.accuracy_score("B", "(B) Mara") == 1.0 and zs.accuracy_score("The answer is (B).", "(B) Mara") == 1.0
    assert zs.accuracy_score("A. I think B", "(B) Mara") == 0.0  # the first standalone A-D counts
    # 0.5 ** (|40 - 50| / 10) = 0.5; 0.5 ** (5 / 10) = 0.7071; no percentage -> 0
    assert zs.exp_similarity_score("50%", "40%") == 0.5 and zs.exp_similarity_score("The share is 40.0%", "40%") == 1.0
    assert zs.exp_similarity_score("35%", "40%") == pytest.approx(math.sqrt(0.5))
    assert zs.exp_similarity_score("forty", "40%") == 0
    # gold order 3, 1, 2; predicted 1, 3, 2: pairs (3,1) swapped, (3,2) and (1,2) kept -> 2/3
    assert zs.concordance_index_score("Order: 1, 3, 2", "3, 1, 2") == pytest.approx(2 / 3)
    assert zs.concordance_index_score("3 1 2", "3, 1, 2") == 1.0
    assert zs.concordance_index_score("1, 2", "3, 1, 2") == 0.0  # not a permutation of the gold IDs


def test_zeroscrolls_rouge_geometric_mean():
    # rouge-score, stemmed: "the cat sat" vs "the cat sat on the mat": ROUGE-1 P = 3/3, R = 3/6 -> 2/3;
    # ROUGE-2 bigrams 2 of 2 vs 2 of 5 -> P = 1, R = 2/5 -> 4/7; ROUGE-L LCS 3 -> 2/3.
    # The second reference shares nothing: the max per type keeps the first. Score = (2/3 x 4/7 x 2/3)^(1/3) x 100
    rows = [{"outputs": ["the cat sat on the mat", "a dog barked"]}]
    figures, per = _score("zeroscrolls/squality", rows, ["the cat sat"])
    expected = 100 * (2 / 3 * 4 / 7 * 2 / 3) ** (1 / 3)
    assert per[0] == pytest.approx({"rouge1": 200 / 3, "rouge2": 400 / 7, "rougeL": 200 / 3, "score": expected})
    assert figures["score"] == pytest.approx(100 * (2 / 3 * 4 / 7 * 2 / 3) ** (1 / 3))
    assert figures["score_ci95"] is None and figures["metric"] == "rouge_geometric_mean"
    gov = load_rows("zeroscrolls/gov_report", "eval", data_dir=DATA) * 2  # two samples: a bootstrap interval
    figures, _ = _score("zeroscrolls/gov_report", gov, [gov[0]["outputs"][0], "nothing related"])
    # sample 1: 100 on all three; sample 2: 0 -> means 50, 50, 50 -> geometric mean 50
    assert figures["score"] == pytest.approx(50.0) and len(figures["score_ci95"]) == 2


def test_downstream_pairs_each_suite_by_its_per_example_score():
    """`lightning_bench downstream` compares methods example by example on the headline figure: LongBench's
    score, LongBench v2's accuracy, ZeroSCROLLS's score (a ROUGE task: the example's own geometric mean)."""
    from lightning_bench.experiments.downstream.scoring import per_example, primary_metric

    rows = load_rows("longbench_e/qasper", "eval", data_dir=DATA)
    _, per = _score("longbench_e/qasper", rows, ["WikiText-103", "12 layers", "no"])
    assert primary_metric("longbench_e/qasper") == "score"
    assert per_example("longbench_e/qasper", per) == pytest.approx([100, 200 / 3, 0])
    rows = load_rows("longbench_v2", "eval", data_dir=DATA)
    _, per = _score("longbench_v2", rows, ["The correct answer is (B)", "The correct answer is (A)", "unsure"])
    assert per_example("longbench_v2", per) == [100.0, 0.0, 0.0]
    _, per = _score("zeroscrolls/squality", [{"outputs": ["the cat sat on the mat"]}] * 2, ["the cat sat", "dog"])
    assert per_example("zeroscrolls/squality", per) == pytest.approx([100 * (2 / 3 * 4 / 7 * 2 / 3) ** (1 / 3), 0])
