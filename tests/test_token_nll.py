"""The evaluation's NLL routes (fused head + loss, logits) against float64 cross-entropy; which route a
model gets; bf16 weights; windows sorted by length."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from lightning_bench.models import ResNetBKLM
from lightning_bench.models.token_nll import IGNORE_INDEX, head_nll, logits_nll
from tests.helpers import quiet_trainer, tiny_data, tiny_model


def _reference(hidden, weight, bias, targets):
    logits = F.linear(hidden.double(), weight.double(), None if bias is None else bias.double())
    return F.cross_entropy(logits, targets, reduction="none")


@pytest.mark.parametrize("with_bias", [False, True])
def test_head_nll_equals_float64_cross_entropy(with_bias):
    torch.manual_seed(0)
    n, d, vocab = 37, 16, 1000  # vocabulary not a multiple of the slice; rows not of the block
    hidden, weight = torch.randn(n, d), torch.randn(vocab, d)
    bias = torch.randn(vocab) if with_bias else None
    targets = torch.randint(0, vocab, (n,))
    targets[:4] = torch.tensor([0, 255, 256, vocab - 1])  # slice edges
    got = head_nll(hidden, weight, bias, targets, vocab_slice=256, row_block=8)
    assert got.dtype == torch.float32 and got.shape == (n,)
    torch.testing.assert_close(got.double(), _reference(hidden, weight, bias, targets), rtol=1e-5, atol=1e-4)


def test_logits_nll_skips_ignored_positions_in_order():
    torch.manual_seed(1)
    logits = torch.randn(2, 5, 50)
    labels = torch.randint(0, 50, (2, 5))
    labels[0, :2] = IGNORE_INDEX
    labels[1, 4] = IGNORE_INDEX
    got = logits_nll(logits, labels, row_block=3)
    keep = labels != IGNORE_INDEX
    want = F.cross_entropy(logits[keep].double(), labels[keep], reduction="none")
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)


def test_bf16_logits_are_scored_in_fp32():
    torch.manual_seed(2)
    hidden, weight = torch.randn(9, 8).bfloat16(), torch.randn(300, 8).bfloat16()
    targets = torch.randint(0, 300, (9,))
    got = head_nll(hidden, weight, None, targets, vocab_slice=128)
    # the model's bf16 logits, softmax in fp32: what a bf16 model's logits through F.cross_entropy give
    want = F.cross_entropy(F.linear(hidden, weight).float(), targets, reduction="none")
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _test(model, dm, **trainer_kwargs):
    quiet_trainer(**trainer_kwargs).test(model, datamodule=dm, verbose=False)
    return model.last_eval["test"]


def test_fused_and_logits_routes_give_the_same_perplexity(tiny_corpus):
    torch.manual_seed(0)
    dm = tiny_data(tiny_corpus, eval_protocol="document_rolling", batch_size=3)
    dm.setup("test")
    model = tiny_model(dm.vocab_size).eval()
    fused = _test(model, dm)
    assert model.eval_path["nll"].startswith("output head fused")
    model.output_head = lambda: None  # no head known: the logits route
    logits = _test(model, dm)
    assert model.eval_path["nll"].startswith("logits")
    assert fused["scored_tokens"] == logits["scored_tokens"]
    assert fused["loss"] == pytest.approx(logits["loss"], rel=1e-6)


def test_a_head_that_is_not_the_whole_story_fails_the_probe(tiny_corpus):
    """A family whose logits are not head(hidden) (here: scaled, as Cohere's logit_scale does) must keep
    the logits route, and score the logits the network gives."""
    torch.manual_seed(0)
    dm = tiny_data(tiny_corpus)
    dm.setup("test")
    model = tiny_model(dm.vocab_size).eval()
    model.build(dm.vocab_size)
    plain = model.network_forward
    model.network_forward = lambda ids, keep=None: type(plain(ids, keep))(5 * plain(ids, keep).logits)
    scaled = _test(model, dm)
    assert model.eval_path["nll"].startswith("logits")
    model.network_forward = plain
    unscaled = _test(model, dm)
    assert model.eval_path["nll"].startswith("output head fused")
    assert scaled["loss"] != pytest.approx(unscaled["loss"], rel=1e-3)


def test_resnet_bk_uses_its_untied_head(tiny_corpus):
    torch.manual_seed(0)
    dm = tiny_data(tiny_corpus)
    dm.setup("test")
    model = ResNetBKLM(d_model=16, n_layers=1, max_seq_len=16, num_experts=2)
    fused = _test(model, dm)
    assert model.eval_path["nll"].startswith("output head fused")
    model.output_head = lambda: None
    assert _test(model, dm)["loss"] == pytest.approx(fused["loss"], rel=1e-6)


def test_bf16_true_keeps_exact_token_counts(tiny_corpus):
    """bf16-true casts the whole module, the evaluation sums included: they must stay float64."""
    torch.manual_seed(0)
    dm = tiny_data(tiny_corpus, eval_protocol="document_rolling")
    dm.setup("test")
    model = tiny_model(dm.vocab_size).eval()
    fp32 = _test(model, dm)
    bf16 = _test(model, dm, precision="bf16-true")
    assert model.eval_path["head_weights"] == "bfloat16" and "native_bf16" in model.eval_path["bf16"]
    assert bf16["scored_tokens"] == fp32["scored_tokens"]
    assert bf16["loss"] == pytest.approx(fp32["loss"], rel=2e-2)


def test_eval_windows_sorted_by_length_predict_in_text_order(tiny_corpus):
    dm = tiny_data(tiny_corpus, eval_protocol="document_rolling", seq_len=16, batch_size=2, document_split="lines")
    dm.setup("test")
    lengths = [len(w["input_ids"]) for w in dm.test_dataloader().dataset]
    assert lengths == sorted(lengths, reverse=True) and len(set(lengths)) > 1
    in_order = [w["input_ids"].tolist() for w in dm.predict_dataloader().dataset]
    assert sorted(in_order, key=len, reverse=True) == [w["input_ids"].tolist() for w in dm.test_dataloader().dataset]
    assert [len(w) for w in in_order] != lengths  # the text's order: a short first window leads a document


def test_cli_bits16_evaluates_bf16_weights_dense_and_under_eviction(tiny_corpus, capsys, tmp_path):
    import json

    from tests.test_cli import QUIET, TINY_MODEL, run

    def test(*extra):
        code, _, err = run(["test", *TINY_MODEL, "--model.max_seq_len", "64", "--data", "text", "--data.path",
                            str(tiny_corpus), "--data.seq_len", "32", *QUIET, "--results_dir", "r", *extra], capsys)
        assert code in (0, None), err
        return err

    test("--bits", "32")
    err = test("--bits", "16")
    assert "bf16 weights" in err  # the note says which path, and whether this CPU has native bf16
    test("--bits", "16", "--sparsity", "h2o", "--sparsity.ratio", "0.5")
    base = tmp_path / "r" / "transformer_tiny_corpus_seq32_bits"
    fp32, bf16 = (json.loads(Path(f"{base}{b}_test.json").read_text()) for b in (32, 16))
    evicted = json.loads(Path(f"{base}16_test_h2o_s0.5.json").read_text())
    assert bf16["eval_path"]["head_weights"] == "bfloat16" and fp32["eval_path"]["head_weights"] == "float32"
    assert bf16["metrics"]["scored_tokens"] == fp32["metrics"]["scored_tokens"] == evicted["metrics"]["scored_tokens"]
    assert bf16["metrics"]["loss"] == pytest.approx(fp32["metrics"]["loss"], rel=2e-2)
    assert bf16["model_size_mb"] == pytest.approx(fp32["model_size_mb"] / 2, rel=1e-3)  # bf16 weights are stored
    assert evicted["eval_path"]["nll"].startswith("output head fused")  # decided at start; eviction -> logits route
