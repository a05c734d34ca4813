"""`--bits 8|4` through the CLI: QAT fit, then test on real bitsandbytes modules from the checkpoint."""

import json

import pytest

from tests.test_cli import QUIET, run

MODEL = ["--model", "transformer", "--model.n_layer", "1", "--model.d_model", "64", "--model.n_head", "2",
         "--model.warmup_steps", "2", "--model.tie_embeddings", "false"]


@pytest.mark.parametrize("bits,ratio", [(8, 0.25), (4, 0.125)])
def test_fit_then_test_low_bit(bits, ratio, tiny_corpus, capsys, tmp_path):
    data = ["--data", "text", "--data.path", str(tiny_corpus), "--data.seq_len", "16", "--data.batch_size", "8"]
    common = [*MODEL, *data, *QUIET, "--bits", str(bits), "--results_dir", "r"]
    code, _, err = run(["fit", *common, "--trainer.max_steps", "4"], capsys)
    assert code in (0, None), err
    code, _, err = run(["test", *common, "--ckpt_path", "last"], capsys)
    assert code in (0, None), err
    stem = tmp_path / "r" / f"transformer_tiny_corpus_seq16_bits{bits}"
    fit, test = json.loads(stem.with_suffix(".json").read_text()), json.loads((tmp_path / "r" / (stem.name + "_test.json")).read_text())
    assert fit["quantization"]["mode"] == "qat" and test["quantization"]["mode"] == "lowbit"
    assert test["quantization"]["max_dequant_error"] == 0.0  # the modules hold exactly what QAT trained
    for record in (fit, test):
        size = record["model_size"]
        # measured from stored tensors: 1/4 (int8) or 1/8 (nf4) of fp32, plus scales
        assert ratio < size["ratio"] < ratio * 1.25, size
        assert record["model_size_mb"] == pytest.approx(size["total_mb"])
    assert test["parameters"] == fit["parameters"]  # logical counts, not packed storage
    assert test["metrics"]["ppl"] > 1 and "bitsandbytes" in test["meta"]["precision"]
    # the record says what is quantized at inference: Linear8bitLt rounds the activations too
    w8a8 = "each input row quantized by its absmax" in test["meta"]["precision"]
    assert w8a8 == (bits == 8) and ("W8A8" in test["quantization"]["scheme"]) == (bits == 8)


def test_optimizer_8bit_flag_trains(tiny_corpus, capsys, tmp_path):
    from lightning_bench.trainer_cli import run_cli

    data = ["--data", "text", "--data.path", str(tiny_corpus), "--data.seq_len", "16", "--data.batch_size", "8"]
    cli = run_cli(["fit", *MODEL, *data, *QUIET, "--optimizer_8bit", "true", "--trainer.max_steps", "2",
                   "--results_dir", "r"])
    optimizer = cli.trainer.optimizers[0]
    assert type(optimizer).__module__.startswith("bitsandbytes")
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]  # the shared groups
    record = json.loads((tmp_path / "r" / "transformer_tiny_corpus_seq16_bits32.json").read_text())
    assert record["global_steps"] == 2 and record["final_perplexity"] > 1
