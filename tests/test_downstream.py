"""Downstream protocols end to end: prompted scoring (`test --task`) and fine-tuning (`fit --task`).

The scores the library writes are checked against log-probabilities computed here by hand from a
plain forward of the same network, so a wrong offset, a misaligned label or a mixed-up choice fails.
"""

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from lightning_bench.data.tokenization import build_tokenizer
from lightning_bench.tasks.datamodules import encoding
from lightning_bench.evaluation import request_scoring
from lightning_bench.models import HFLanguageModel
from tests.conftest import FIXTURES
from tests.test_cli import run

TASK_DATA = FIXTURES / "tasks"


@pytest.fixture(scope="module")
def tiny_module(tiny_hf):
    module = HFLanguageModel(pretrained=str(tiny_hf))
    module.build(50257)
    return module.eval()


@pytest.fixture(scope="module")
def gpt2():
    return build_tokenizer("gpt2")


@torch.no_grad()
def by_hand(module, tokens: list[int], n_continuation: int) -> float:
    """Summed log-probability of the last `n_continuation` tokens, from one full forward."""
    ids = torch.tensor([tokens])
    logp = F.log_softmax(module.net(input_ids=ids).logits.float(), -1)[0]
    return sum(float(logp[t - 1, tokens[t]]) for t in range(len(tokens) - n_continuation, len(tokens)))


def test_continuation_split_keeps_the_boundary_token_with_the_continuation(gpt2):
    ctx, cont = encoding.split_continuation(gpt2, "Answer:", " yes")
    assert gpt2.decode(ctx) == "Answer:" and gpt2.decode(cont) == " yes"
    # "abc" + "def" tokenises as one piece: the continuation starts at the first differing token
    whole = gpt2.encode("the catapult")
    ctx, cont = encoding.split_continuation(gpt2, "the cat", "apult")
    assert ctx + cont == whole and cont


def test_single_token_choices_share_one_row_and_match_per_choice_rows(tiny_module, gpt2):
    context = "The movie was great.\nQuestion: Is this sentence positive or negative?\nAnswer:"
    grouped = encoding.encode_multiple_choice(gpt2, 0, context, [" negative", " positive"], 512)
    assert [r.kind for r in grouped] == ["next_token"]
    out = request_scoring.score_batch(tiny_module, encoding.collate(grouped, 0))
    ctx = gpt2.encode(context)
    for i, choice in enumerate([" negative", " positive"]):
        (token,) = gpt2.encode(choice)
        assert out["loglik"][0][i] == pytest.approx(by_hand(tiny_module, ctx + [token], 1), abs=1e-5)


def test_multi_token_choices_sum_their_tokens_in_a_padded_batch(tiny_module, gpt2):
    context, choices = "Q: capital of France?\nA:", [" Paris", " the city of Lyon"]
    rows = encoding.encode_multiple_choice(gpt2, 3, context, choices, 512)
    assert [r.kind for r in rows] == ["loglikelihood", "loglikelihood"]
    out = request_scoring.score_batch(tiny_module, encoding.collate(rows, 0))  # rows differ in length: padding
    for i, choice in enumerate(choices):
        whole = gpt2.encode(context + choice)
        n = len(whole) - len(gpt2.encode(context))
        assert out["loglik"][i] == pytest.approx(by_hand(tiny_module, whole, n), abs=1e-4)
    assert out["choice_index"] == [0, 1] and out["request_id"] == [3, 3]


def test_left_truncation_keeps_the_continuation(gpt2):
    rows = encoding.encode_multiple_choice(gpt2, 0, "word " * 50 + "end:", [" a b c", " d e f g"], 16)
    for row in rows:
        assert len(row.tokens) <= 16 and row.truncated > 0 and row.tokens[row.scored_from + 1:] == row.targets[:-1]


def KeepEverything():
    """A KV eviction that evicts nothing (dense): generation runs on the KV engine, not HF generate."""
    from lightning_bench.sparsity.streaming import StreamingEviction

    return StreamingEviction.build("dense")


def test_greedy_generation_through_lm_forward_equals_hf_generate(tiny_module, gpt2):
    ids = torch.tensor([gpt2.encode("Title: x\n\nQuestion: what?\n\nAnswer:")])
    batch = {"input_ids": ids, "request_id": torch.tensor([0])}
    cached = request_scoring.generate(tiny_module, batch, tokenizer=gpt2, max_new_tokens=6)
    # as under KV eviction: decoded on the KV engine's cache
    recomputed = request_scoring.generate(tiny_module, batch, tokenizer=gpt2, max_new_tokens=6, no_answer_tokens=[7, 8],
                                   kv=KeepEverything())
    assert cached["tokens"] == recomputed["tokens"] and len(cached["tokens"][0]) == 6
    na_prob = math.exp(by_hand(tiny_module, ids[0].tolist() + [7, 8], 2))  # P(7, 8 | prompt)
    assert recomputed["no_answer_prob"][0] == pytest.approx(na_prob, rel=1e-4)


def test_generation_stops_at_a_stop_token(tiny_module, gpt2):
    ids = torch.tensor([gpt2.encode("Answer:")])
    first = request_scoring.generate(tiny_module, {"input_ids": ids, "request_id": torch.tensor([0])}, tokenizer=gpt2,
                              max_new_tokens=5)["tokens"][0][0]
    out = request_scoring.generate(tiny_module, {"input_ids": ids, "request_id": torch.tensor([0])}, tokenizer=gpt2,
                            max_new_tokens=5, stop_ids=frozenset({first}))
    assert out["tokens"] == [[first]] and out["text"] == [""]


def _record(results_dir: Path, stem: str) -> dict:
    return json.loads((results_dir / f"{stem}_downstream.json").read_text())


def test_cli_prompted_record_matches_scores_by_hand(tiny_hf, tiny_module, gpt2, tmp_path, capsys):
    base = ["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--data.data_dir", str(TASK_DATA),
            "--trainer.enable_progress_bar", "false", "--trainer.logger", "false"]
    squad = json.dumps({"squad_v2": str(TASK_DATA / "squad_v2.0" / "dev.json")})
    code, _, err = run([*base, "--task", "glue/sst2", "--task", "squad_v2", "--data.paths", squad,
                        "--data.max_new_tokens", "4"], capsys)
    assert code in (0, None), err
    stem = "hf-" + tiny_hf.name
    record = _record(tmp_path / "benchmark_results", stem)
    sst2 = record["glue"]["tasks"]["sst2"]
    assert sst2["num_samples"] == 3 and record["glue"]["sst2"] == sst2["score"] == sst2["metrics"]["accuracy"]
    assert record["glue"]["average_over"] == ["sst2"]
    run_info = record["runs"][sst2["run"]]
    assert run_info["protocol"]["prompt_versions"]["glue/sst2"] == "glue/sst2@1"
    assert run_info["meta"]["data"]["sources"]["glue/sst2"]["eval"]["files"][0]["sha256"]
    assert {"exact", "f1", "HasAns_exact", "NoAns_exact", "best_f1_thresh"} <= set(record["squad_v2"])
    samples = [json.loads(line) for line in
               (tmp_path / "benchmark_results" / f"{stem}_downstream.samples.jsonl").read_text().splitlines()]
    assert all(1 <= s["generated_tokens"] <= 4 for s in samples if s["task"] == "squad_v2")
    first = next(s for s in samples if s["task"] == "glue/sst2")
    from lightning_bench.tasks import load_rows
    from lightning_bench.tasks.prompts import build_request

    row = load_rows("glue/sst2", "eval", data_dir=str(TASK_DATA))[0]
    request = build_request("glue/sst2", row)
    for i, choice in enumerate(request.choices):
        whole = gpt2.encode(request.context + choice)
        assert first["loglik"][i] == pytest.approx(by_hand(tiny_module, whole, 1), abs=1e-4)
    correct = sum(s["prediction"] == s["gold"] for s in samples if s["task"] == "glue/sst2")
    assert sst2["metrics"]["accuracy"] == pytest.approx(correct / 3)

    # a second run adds its task to the same file and the average covers both
    code, _, err = run([*base, "--task", "glue/cola"], capsys)
    assert code in (0, None), err
    record = _record(tmp_path / "benchmark_results", stem)
    assert record["glue"]["average_over"] == ["cola", "sst2"]
    assert record["glue"]["average"] == pytest.approx((record["glue"]["cola"] + record["glue"]["sst2"]) / 2)
    assert len(record["runs"]) == 2 and "squad_v2" in record


def test_cli_mmlu_k_shot_and_subject_aggregation(tiny_hf, tmp_path, capsys):
    code, _, err = run(["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--task", "mmlu/astronomy",
                        "--data.data_dir", str(TASK_DATA), "--data.num_fewshot", "2",
                        "--trainer.enable_progress_bar", "false", "--trainer.logger", "false"], capsys)
    assert code in (0, None), err
    mmlu = _record(tmp_path / "benchmark_results", "hf-" + tiny_hf.name)["mmlu"]
    assert mmlu["num_subjects_evaluated"] == 1 and set(mmlu["category_scores"]) == {"STEM"}
    assert mmlu["accuracy"] == mmlu["subject_scores"]["astronomy"] and mmlu["mixed_protocols"] is False
    # a run over another subject joins the entry; the figures are recomputed over both
    code, _, err = run(["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--task", "mmlu/anatomy",
                        "--data.data_dir", str(TASK_DATA), "--data.paths",
                        json.dumps({"mmlu/anatomy": str(TASK_DATA / "mmlu" / "test" / "astronomy_test.csv")}),
                        "--trainer.enable_progress_bar", "false", "--trainer.logger", "false"], capsys)
    assert code in (0, None), err
    both = _record(tmp_path / "benchmark_results", "hf-" + tiny_hf.name)["mmlu"]
    assert both["num_subjects_evaluated"] == 2 and set(both["category_scores"]) == {"STEM", "other"}
    counts = both["subject_counts"]
    assert both["accuracy"] == pytest.approx(sum(c["correct"] for c in counts.values()) /
                                             sum(c["total"] for c in counts.values()))
    assert both["mixed_protocols"] is True  # 2-shot and 0-shot results share this entry


@pytest.mark.parametrize("args, message", [
    (["--task", "glue/nope"], "valid: cola, mnli"),
    (["--task", "mmlu/astronomy", "--data.num_fewshot", "9"], "larger than"),
    (["--task", "glue/sst2", "--data.paths", '{"glue/sst2": "SQUAD"}'], "not a GLUE SST-2"),
])
def test_bad_downstream_input_is_one_line(args, message, tiny_hf, capsys):
    args = [a.replace("SQUAD", str(TASK_DATA / "squad_v2.0" / "dev.json")) for a in args]
    code, out, err = run(["test", "--model", "hf", "--model.pretrained", str(tiny_hf),
                          "--data.data_dir", str(TASK_DATA), *args], capsys)
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("lightning_bench: error:")]
    assert len(lines) == 1 and message in lines[0], err
    assert not Path("benchmark_results").exists()


@pytest.mark.parametrize("family", ["transformer", "bk"])
def test_cli_finetune_writes_a_record(family, tmp_path, capsys):
    code, _, err = run(["fit", "--model", family, "--task", "glue/sst2", "--data.data_dir", str(TASK_DATA),
                        "--data.holdout_fraction", "0.3", "--data.val_fraction", "0", "--data.batch_size", "2",
                        "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false",
                        "--trainer.logger", "false"], capsys)
    assert code in (0, None), err
    record = _record(tmp_path / "benchmark_results", f"{family}_finetune")
    sst2 = record["glue"]["tasks"]["sst2"]
    assert sst2["num_samples"] == 1 and sst2["metrics"]["accuracy"] in (0.0, 1.0)
    protocol = record["runs"][sst2["run"]]["protocol"]
    assert protocol["name"] == "finetune" and protocol["split_sizes"] == {"train": 2, "validation": 0, "test": 1}
    assert protocol["training"]["global_steps"] == 2 and protocol["majority_class_test_accuracy"] in (0.0, 1.0)
    if family != "transformer":
        return
    # the saved checkpoint is scored with its head (not prompted), on the same held-out rows
    (ckpt,) = Path("checkpoints").glob("*/*/last.ckpt")  # {configuration}/{run_id}/
    test = ["test", "--model", family, "--task", "glue/sst2", "--data.data_dir", str(TASK_DATA),
            "--data.val_fraction", "0", "--ckpt_path", str(ckpt), "--trainer.enable_progress_bar", "false",
            "--trainer.logger", "false", "--results_dir", "again"]
    code, _, err = run([*test, "--data.holdout_fraction", "0.3"], capsys)
    assert code in (0, None), err
    again = _record(tmp_path / "again", f"{family}_finetune")["glue"]["tasks"]["sst2"]
    assert again["metrics"] == sst2["metrics"] and again["num_samples"] == 1
    again_run = _record(tmp_path / "again", f"{family}_finetune")["runs"][again["run"]]
    assert again_run["protocol"]["training"]["global_steps"] == 2  # the fit's summary, from the checkpoint
    code, _, err = run([*test, "--data.holdout_fraction", "0.7"], capsys)  # other test rows: refused
    assert code == 2 and "other test rows" in err


def test_diverged_finetuning_leaves_a_diverged_record(tmp_path, capsys):
    code, _, err = run(["fit", "--model", "transformer", "--task", "glue/sst2", "--data.data_dir", str(TASK_DATA),
                        "--data.holdout_fraction", "0.3", "--data.val_fraction", "0", "--data.batch_size", "2",
                        "--model.learning_rate", "1e9", "--model.warmup_steps", "0", "--trainer.max_epochs", "3",
                        "--trainer.enable_progress_bar", "false", "--trainer.logger", "false"], capsys)
    assert code == 2 and "diverged" in err.strip().splitlines()[-1] and "Traceback" not in err, err
    (path,) = (tmp_path / "benchmark_results").glob("*_downstream_diverged.json")
    record = json.loads(path.read_text())
    assert record["status"] == "diverged" and record["divergence"]["value"] in ("nan", "inf")
    assert record["tasks"] == ["glue/sst2"] and record["meta"]["seed"] is not None
    assert not list((tmp_path / "benchmark_results").glob("*_downstream.json"))  # no score from a diverged run


def test_prompted_scoring_composes_with_sparsity(tiny_hf, tmp_path, capsys):
    """Sparsity 0 reproduces dense scores exactly; an evicting run writes its own record with cache figures."""
    base = ["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--task", "glue/sst2", "--data.data_dir",
            str(TASK_DATA), "--trainer.enable_progress_bar", "false", "--trainer.logger", "false"]
    stem = "hf-" + tiny_hf.name
    samples = {}
    for extra, suffix in (([], ""), (["--sparsity", "streaming_llm", "--sparsity.ratio", "0.0"], "_streaming_llm_s0.0"),
                          (["--sparsity", "h2o", "--sparsity.ratio", "0.5", "--sparsity.chunk_size", "4"],
                           "_h2o_s0.5")):
        code, _, err = run([*base, *extra], capsys)
        assert code in (0, None), err
        path = tmp_path / "benchmark_results" / f"{stem}{suffix}_downstream.samples.jsonl"
        samples[suffix] = [v for line in path.read_text().splitlines() for v in json.loads(line)["loglik"]]
    assert samples["_streaming_llm_s0.0"] == pytest.approx(samples[""], abs=1e-5)
    assert samples["_h2o_s0.5"] != pytest.approx(samples[""], abs=1e-5)
    record = _record(tmp_path / "benchmark_results", f"{stem}_h2o_s0.5")
    sparsity = record["runs"][record["glue"]["tasks"]["sst2"]["run"]]["sparsity"]
    assert sparsity["method"] == "h2o" and 0 < sparsity["cache_fraction"] < 1


def test_downstream_scores_reach_the_wandb_run(tiny_hf, tmp_path, capsys):
    from tests.wandb_reader import config_history_summary

    code, _, err = run(["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--task", "glue/sst2",
                        "--data.data_dir", str(TASK_DATA), "--wandb", "true", "--wandb_dir", str(tmp_path / "wb"),
                        "--trainer.enable_progress_bar", "false"], capsys)
    assert code in (0, None), err
    (run_dir,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    _, history, _ = config_history_summary(next(run_dir.glob("*.wandb")))
    logged = {key: value for row in history for key, value in row.items()}
    record = _record(tmp_path / "benchmark_results", "hf-" + tiny_hf.name)
    assert logged["downstream/glue/sst2/accuracy"] == pytest.approx(record["glue"]["sst2"])
    tables = [k for k in logged if k.startswith("record/task_") and k.endswith("/_type")]  # the report's table
    assert len(tables) == 1 and logged[tables[0]] == "table-file"
