"""The generative tasks end to end through `lightning_bench test --task ...` on the shared samples: the
record's figures are recomputed here from the per-sample predictions with the reference packages
(rouge-score for ROUGE; the open-QA and DST scorers on the written predictions), documents are cut
from their middle, HumanEval's sampled completions are executed in the sandbox, sparsity composes,
and bad input is one line."""

import json
from pathlib import Path

import pytest

from lightning_bench.tasks import load_rows
from lightning_bench.tasks.multiwoz.metrics import dst_per_turn, parse_belief_state
from lightning_bench.tasks.metrics.open_qa import exact_match, token_f1
from tests.test_cli import run

pytestmark = pytest.mark.shared_data
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.logger", "false"]


def _test(tiny_hf, shared_data, tasks: str, *extra, capsys):
    return run(["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--task", tasks,
                "--data.data_dir", str(shared_data), *QUIET, *extra], capsys)


def _outputs(tmp_path: Path, stem: str) -> tuple[dict, list[dict]]:
    folder = tmp_path / "benchmark_results"
    record = json.loads((folder / f"{stem}_downstream.json").read_text())
    samples = [json.loads(line) for line in (folder / f"{stem}_downstream.samples.jsonl").read_text().splitlines()]
    return record, samples


def test_summaries_open_qa_and_code_recomputed_from_the_written_predictions(tiny_hf, shared_data, tmp_path, capsys):
    from rouge_score import rouge_scorer

    code, _, err = _test(tiny_hf, shared_data, "xsum,natural_questions,codexglue_code_to_text/python",
                         "--data.max_samples", "3", "--data.max_length", "160", "--data.max_new_tokens", "12",
                         capsys=capsys)
    assert code in (0, None), err
    record, samples = _outputs(tmp_path, "hf-" + tiny_hf.name)
    by_task = {t: [s for s in samples if s["task"] == t] for t in ("xsum", "natural_questions",
                                                                  "codexglue_code_to_text/python")}
    assert all(len(rows) == 3 for rows in by_task.values())

    xsum, rows = record["xsum"], by_task["xsum"]
    gold = load_rows("xsum", "test", data_dir=str(shared_data))[:3]
    assert [s["answers"] for s in rows] == [[r["summary"]] for r in gold]  # references whole, not truncated
    # the 160-token window cut the middle of the 721- and 315-token articles; the 58-token one fits whole
    assert [s["truncated_tokens"] > 0 for s in rows] == [True, False, True]
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    by_hand = [scorer.score(s["answers"][0], s["prediction"]) for s in rows]
    for key in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        mean = 100 * sum(score[key].fmeasure for score in by_hand) / 3
        assert xsum[key] == pytest.approx(mean, abs=1e-9) and len(xsum[f"{key}_ci95"]) == 2
        assert [s["scores"][key] for s in rows] == pytest.approx([100 * h[key].fmeasure for h in by_hand])
    assert xsum["dataset_size"] == 3 and "bootstrap" in xsum["ci95_method"]

    nq, rows = record["natural_questions"], by_task["natural_questions"]
    em = [100 * exact_match(s["prediction"], s["answers"], "nq_open") for s in rows]
    f1 = [100 * token_f1(s["prediction"], s["answers"], "nq_open") for s in rows]
    assert nq["exact_match"] == pytest.approx(sum(em) / 3) and nq["f1"] == pytest.approx(sum(f1) / 3)
    assert nq["normalization"] == "nq_open"

    ct = record["codexglue_code_to_text"]
    assert ct["average_over"] == ["python"] and ct["smoothed_bleu4"] == ct["tasks"]["python"]["metrics"]["smoothed_bleu4"]
    run_info = record["runs"][record["xsum"]["run"]]
    protocol = run_info["protocol"]
    assert protocol["chat_template"]["xsum"] is False  # the GPT-2 tokenizer has no chat template
    assert protocol["sampling"]["xsum"] == {"samples": 1, "temperature": 0.0, "top_p": 1.0, "seed": 1234}


def test_dialogue_state_scored_per_turn(tiny_hf, shared_data, tmp_path, capsys):
    code, _, err = _test(tiny_hf, shared_data, "multiwoz/2.1", "--data.max_samples", "4",
                         "--data.max_new_tokens", "8", capsys=capsys)
    assert code in (0, None), err
    record, rows = _outputs(tmp_path, "hf-" + tiny_hf.name)
    figures = record["multiwoz"]["tasks"]["2.1"]["metrics"]
    golds = [row["belief_state"] for row in load_rows("multiwoz/2.1", "test", data_dir=str(shared_data))[:4]]
    per = dst_per_turn([parse_belief_state(s["prediction"]) for s in rows], golds)
    assert figures["joint_goal_accuracy"] == pytest.approx(sum(t["joint_goal_accuracy"] for t in per) / 4)
    assert figures["slot_accuracy"] == pytest.approx(sum(t["slot_accuracy"] for t in per) / 4)
    assert "average_over" not in record["multiwoz"]  # 2.1 and 2.2 are reported side by side, never averaged


def test_humaneval_samples_run_in_the_sandbox(tiny_hf, shared_data, tmp_path, capsys):
    code, _, err = _test(tiny_hf, shared_data, "humaneval", "--data.max_samples", "2", "--data.samples", "3",
                         "--data.temperature", "0.8", "--data.top_p", "0.95", "--data.max_new_tokens", "12",
                         capsys=capsys)
    assert code in (0, None), err
    record, rows = _outputs(tmp_path, "hf-" + tiny_hf.name)
    he = record["humaneval"]
    assert len(rows) == 2 and all(len(s["predictions"]) == 3 and len(s["scores"]["status"]) == 3 for s in rows)
    passed = [s["scores"]["passed"] for s in rows]
    assert he["pass@1"] == pytest.approx(100 * sum(c / 3 for c in passed) / 2)  # pass@1 = c / n per problem
    assert "pass@10" in he["skipped_ks"] and he["samples_per_problem"] == 3
    assert he["sandbox"]["rlimits"] and record["runs"][he["run"]]["protocol"]["sampling"]["humaneval"] == {
        "samples": 3, "temperature": 0.8, "top_p": 0.95, "seed": 1234}


def test_generative_task_composes_with_sparsity(tiny_hf, shared_data, tmp_path, capsys):
    code, _, err = _test(tiny_hf, shared_data, "natural_questions", "--data.max_samples", "2",
                         "--data.max_new_tokens", "6", "--sparsity", "h2o", "--sparsity.ratio", "0.5",
                         "--sparsity.chunk_size", "4", capsys=capsys)
    assert code in (0, None), err
    record, rows = _outputs(tmp_path, f"hf-{tiny_hf.name}_h2o_s0.5")
    sparsity = record["runs"][record["natural_questions"]["run"]]["sparsity"]
    assert sparsity["method"] == "h2o" and 0 < sparsity["cache_fraction"] < 1 and len(rows) == 2


@pytest.mark.parametrize("args, message", [
    (["--task", "summarisation"], "valid: groups code, codexglue_code_completion_line"),
    (["--task", "multi_news"], "multi_news/test.src not found; expected Multi-News"),
    (["--task", "natural_questions", "--data.max_length", "40", "--data.max_new_tokens", "32"],
     "do not fit --data.max_length minus --data.max_new_tokens (8)"),
    (["--task", "humaneval", "--data.samples", "4"], "need --data.temperature > 0"),
])
def test_bad_generative_input_is_one_line(args, message, tiny_hf, shared_data, capsys):
    code, _, err = run(["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--data.data_dir",
                        str(shared_data), *QUIET, *args], capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("lightning_bench: error:")]
    assert len(lines) == 1 and message in lines[0], err
    assert not Path("benchmark_results").exists()


def test_generative_task_composes_with_bits(tiny_hf, shared_data, tmp_path, capsys):
    code, _, err = _test(tiny_hf, shared_data, "natural_questions", "--data.max_samples", "2",
                         "--data.max_new_tokens", "6", "--bits", "8", capsys=capsys)
    assert code in (0, None), err
    record, rows = _outputs(tmp_path, f"hf-{tiny_hf.name}_bits8")
    assert len(rows) == 2 and "exact_match" in record["natural_questions"]
    run_info = record["runs"][record["natural_questions"]["run"]]
    assert "int8" in run_info["meta"]["precision"] and run_info["config"]["bits"] == 8
