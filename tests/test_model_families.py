"""ResNet-BK (`--model bk`) and Mamba (`--model mamba`) behind the LanguageModule interface.

Everything is tiny (d_model 16, one or two blocks, a few steps): these check the wiring, the
training-loss math and causality, not that the models learn.
"""

import csv
import json
import math

import pytest
import torch
import torch.nn.functional as F

from lightning_bench.errors import ConfigError
from lightning_bench.models import MODEL_ALIASES, MambaLM, ResNetBKLM
from tests.test_cli import QUIET, run

TINY = {
    "bk": ["--model", "bk", "--model.d_model", "16", "--model.n_layers", "1", "--model.num_experts", "2",
           "--model.max_seq_len", "16", "--model.warmup_steps", "2"],
    "mamba": ["--model", "mamba", "--model.d_model", "16", "--model.n_layer", "1", "--model.d_state", "4",
              "--model.warmup_steps", "2"],
}


def fit_args(corpus, model_args, *extra, steps=4, seq_len=16):
    return ["fit", *model_args, "--data", "text", "--data.path", str(corpus), "--data.seq_len", str(seq_len),
            "--data.batch_size", "8", "--trainer.max_steps", str(steps), *QUIET, "--results_dir", "r", *extra]


def test_aliases_registered():
    assert MODEL_ALIASES["bk"] == "lightning_bench.models.ResNetBKLM"
    assert MODEL_ALIASES["mamba"] == "lightning_bench.models.MambaLM"
    assert ResNetBKLM.alias == "bk" and MambaLM.alias == "mamba"


# ---- (a) the CLI trains both families and writes their records ---------------------------------
@pytest.mark.parametrize("family", ["bk", "mamba"])
def test_cli_fit_writes_record(family, tiny_corpus, tmp_path, capsys):
    code, _, err = run(fit_args(tiny_corpus, TINY[family], "--trainer.log_every_n_steps", "1"), capsys)
    assert code in (0, None), err
    record = json.loads((tmp_path / "r" / f"{family}_tiny_corpus_seq16_bits32.json").read_text())
    assert record["model_name"] == family
    assert record["global_steps"] == 4
    assert math.isfinite(record["final_perplexity"]) and record["final_perplexity"] > 1
    assert record["final_perplexity"] == pytest.approx(math.exp(record["final_loss"]))
    assert record["config"]["model"]["class_path"] == MODEL_ALIASES[family]
    assert record["parameters"]["total"] > 0
    # the router's load-balancing loss reaches the logger (bk only: Mamba has no aux loss)
    (metrics,) = (tmp_path / "logs").rglob("metrics.csv")
    with metrics.open() as f:
        columns = set(csv.DictReader(f).fieldnames)
    assert ("train/aux_loss" in columns) == (family == "bk")
    assert "train/loss" in columns


# ---- (b) bk: training loss = CE + load_balance_weight * aux -------------------------------------
def _training_step(model, batch):
    """Run the base's training_step outside a Trainer: record self.log calls, stub the optimizer."""
    logged = {}
    model.log = lambda name, value, **kw: logged.__setitem__(name, value)
    model.optimizers = lambda: torch.optim.SGD(model.parameters(), lr=0.1)
    return model.training_step(batch, 0), logged


@pytest.mark.parametrize("weight", [0.0, 0.01, 0.5])
def test_bk_training_loss_adds_weighted_aux_loss(weight):
    torch.manual_seed(0)
    model = ResNetBKLM(d_model=16, n_layers=2, num_experts=3, max_seq_len=12, vocab_size=40,
                       load_balance_weight=weight).eval()  # eval: dropout off, so forwards repeat exactly
    assert model.aux_loss_weight == weight == model.hparams.load_balance_weight
    ids = torch.randint(0, 40, (2, 13))
    batch = {"input_ids": ids[:, :-1], "labels": ids[:, 1:]}

    out = model.lm_forward(batch["input_ids"])
    ce = F.cross_entropy(out.logits.flatten(0, 1), batch["labels"].flatten())
    assert out.aux_loss is not None and out.aux_loss.requires_grad
    assert torch.isfinite(out.aux_loss) and out.aux_loss.item() > 0  # summed over the 2 layers, ~1 each

    result, logged = _training_step(model, batch)
    assert torch.allclose(logged["train/aux_loss"], out.aux_loss)
    assert torch.allclose(result["ce"], ce)
    assert torch.allclose(result["loss"], ce + weight * out.aux_loss, rtol=0, atol=1e-6)
    assert (result["loss"] - result["ce"]).item() == pytest.approx(weight * out.aux_loss.item(), abs=1e-6)

    model.zero_grad()
    result["loss"].backward()
    router = model.net.blocks[0].layer.moe.router.weight
    assert router.grad is not None and torch.isfinite(router.grad).all()


def test_bk_config_errors_are_config_errors():
    with pytest.raises(ConfigError, match="top_k"):
        ResNetBKLM(num_experts=2, top_k=3)
    with pytest.raises(ConfigError, match="z_imag must be > 0"):
        ResNetBKLM(z_imag=0.0)
    assert ResNetBKLM(max_seq_len=8).max_seq_len == 8
    assert ResNetBKLM(max_seq_len=8, position_embedding="none").max_seq_len is None


# ---- (c) Mamba is causal as a whole model ---------------------------------------------------------
def test_mamba_whole_model_is_causal():
    torch.manual_seed(0)
    model = MambaLM(d_model=16, n_layer=2, d_state=4, d_conv=3, vocab_size=50).eval()
    assert model.max_seq_len is None
    n = 10
    ids = torch.randint(0, 50, (2, n))
    with torch.no_grad():
        base = model(ids)
        assert base.shape == (2, n, 50)
        for j in range(n):  # change token j: logits at positions < j must not move, position j must
            changed = ids.clone()
            changed[:, j] = (changed[:, j] + 1 + torch.randint(0, 49, (2,))) % 50
            logits = model(changed)
            assert torch.allclose(logits[:, :j], base[:, :j], rtol=0, atol=1e-6), f"position < {j} saw token {j}"
            assert not torch.allclose(logits[:, j], base[:, j])


def test_mamba_excludes_ssm_parameters_from_weight_decay():
    from types import SimpleNamespace

    model = MambaLM(d_model=16, n_layer=1, d_state=4, vocab_size=30)
    model.trainer = SimpleNamespace(estimated_stepping_batches=10)  # all the optimizer reads from it
    decay, no_decay = model.configure_optimizers()["optimizer"].param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert any(names[id(p)].endswith("A_log") for p in no_decay["params"])
    assert not any(names[id(p)].endswith(("A_log", ".D")) for p in decay["params"])
    assert any("in_proj" in names[id(p)] for p in decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


# ---- (d) bk's learned position table bounds the window; "none" lifts the bound -----------------------
def test_bk_window_above_learned_positions_is_one_clear_line(tiny_corpus, tmp_path, capsys):
    model = [*TINY["bk"], "--model.max_seq_len", "8"]
    code, _, err = run(fit_args(tiny_corpus, model, steps=2), capsys)
    assert code == 2
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("lightning_bench: error: ") and "exceeds the model's maximum context 8" in last, err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())

    code, _, err = run(fit_args(tiny_corpus, [*model, "--model.position_embedding", "none"], steps=2), capsys)
    assert code in (0, None), err
    record = json.loads((tmp_path / "r" / "bk_tiny_corpus_seq16_bits32.json").read_text())
    assert record["config"]["model"]["init_args"]["position_embedding"] == "none"
    assert math.isfinite(record["final_perplexity"])


def test_bk_bad_config_is_one_clear_line(tiny_corpus, capsys):
    code, _, err = run(fit_args(tiny_corpus, [*TINY["bk"], "--model.top_k", "3"]), capsys)
    assert code == 2 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("lightning_bench: error: ") and "top_k" in last, err
