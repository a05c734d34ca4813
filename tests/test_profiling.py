"""Profiling: FLOP counts against hand counts, the analytic scan formulas against the ops the code
really runs, the transformer preset against 2*N*params + attention, and the callbacks in a tiny fit."""

import importlib
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from lightning.pytorch.loggers import Logger
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from lightning_bench.models import MambaLM, ResNetBKLM, TransformerLM
from lightning_bench.models.bk_core import bk_diagonal_scan
from lightning_bench.profiling import (SUMMARY_KEYS, ProfilingCallback, bk_scan_forward_flops, counter_custom_mapping,
                                       linear_weight_params, mamba_scan_forward_flops, measure_flops,
                                       transformer_forward_flops)
from tests.helpers import quiet_trainer, tiny_data, tiny_model

aten = torch.ops.aten
PRESETS = Path(__file__).resolve().parent.parent / "configs" / "compare"


def lm_batch(vocab: int, batch: int, seq: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq), generator=g)
    return {"input_ids": ids, "labels": ids}


class ElementwiseCensus(TorchDispatchMode):
    """Real FLOPs of the elementwise ops actually executed, in flops.py's conventions: real op = 1 per
    output element; complex add/sub 2, mul 6 (2 if one operand is real), div 11 (2 by a real), |z| 4.
    Matmuls, copies, comparisons, sign flips count 0 (matmuls are the torch counter's business)."""

    ARITH = {aten.add, aten.sub, aten.mul, aten.div, aten.exp, aten.softplus, aten.silu, aten.abs}

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        op = func._overloadpacket
        if op in self.ARITH:
            operands = [a for a in args if isinstance(a, (torch.Tensor, int, float, complex))]
            n_complex = sum(a.is_complex() if isinstance(a, torch.Tensor) else isinstance(a, complex) for a in operands)
            if op is aten.abs and n_complex:
                per = 4
            elif not out.is_complex():
                per = 1
            elif op in (aten.add, aten.sub):
                per = 2
            elif op is aten.mul:
                per = 6 if n_complex == 2 else 2
            elif op is aten.div:
                per = 11 if n_complex == 2 else 2
            else:
                raise AssertionError(f"no convention for complex {op}")
            self.flops += per * out.numel()
        return out


# ---- counter fixes ----------------------------------------------------------------------------
def test_tiny_llama_matches_hand_count():
    """1 layer, d 32, 4 heads (2 KV heads, d_head 8), d_ff 128 (the 8/3 rule rounded to 64), vocab 50,
    tied head; B 2, T 16 (32 tokens)."""
    model = TransformerLM(n_layer=1, d_model=32, n_head=4, n_kv_head=2, max_seq_len=64, vocab_size=50)
    step = measure_flops(model, lm_batch(50, 2, 16))
    p_mm = (32 * 32 + 32 * 16 + 32 * 16 + 32 * 32   # q, k, v (2 KV heads x 8), o
            + 3 * 32 * 128                          # gate, up, down
            + 32 * 50)                              # LM head (tied: still a matmul)
    matmuls = 2 * 32 * p_mm                         # 1,085,440
    attention = 2 * 2 * 2 * 16 * 16 * 4 * 8         # QK^T + AV: 2 flops x B x T x T x H x d_head = 65,536
    assert step.forward_flops == matmuls + attention == 1_150_976
    # backward: 2 x each matmul (grad input + grad weight); attention 2.5 x (scores recomputed)
    assert step.backward_flops == 2 * matmuls + 5 * attention // 2
    assert step.forward.by_op["aten._scaled_dot_product_flash_attention_for_cpu"] == attention
    assert step.backward.by_op["aten._scaled_dot_product_flash_attention_for_cpu_backward"] == 5 * attention // 2
    assert step.forward.analytic == 0 and step.flops_per_token == step.total_flops / 32


def test_cpu_sdpa_formula_is_the_cuda_one_and_agrees_with_the_math_path():
    mapping = counter_custom_mapping()
    q, k, v = torch.randn(2, 4, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)
    shapes = (q.shape, k.shape, v.shape)
    cuda_formula = flop_registry[aten._scaled_dot_product_flash_attention]
    assert mapping[aten._scaled_dot_product_flash_attention_for_cpu](*shapes) == cuda_formula(*shapes)
    # where torch has a formula (this torch's counts GQA), ours for the same kernel counts the same
    overridden = [op for op in mapping if op in flop_registry and op is not aten.convolution_backward]
    assert aten._scaled_dot_product_efficient_attention in overridden
    for op in overridden:
        args = ((q.shape,) if "backward" in str(op) else ()) + shapes
        assert mapping[op](*args) == flop_registry[op](*args), op
    from torch.nn.attention import SDPBackend, sdpa_kernel

    counts = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
        with sdpa_kernel(backend), FlopCounterMode(display=False, custom_mapping=mapping) as fc:
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        counts.append(fc.get_total_flops())
    assert counts[0] == counts[1] == 2 * 2 * 4 * 8 * 8 * 16 * 2  # the math path's two bmms


def test_grouped_conv_backward_is_twice_the_forward():
    conv = torch.nn.Conv1d(6, 6, kernel_size=4, groups=6, padding=3)
    x = torch.randn(2, 6, 10, requires_grad=True)
    with FlopCounterMode(display=False, custom_mapping=counter_custom_mapping()) as fwd:
        y = conv(x)
    with FlopCounterMode(display=False, custom_mapping=counter_custom_mapping()) as bwd:
        y.sum().backward()
    assert fwd.get_total_flops() == 2 * 2 * 6 * 13 * 4  # B x C x L_out x K multiply-adds
    assert bwd.get_total_flops() == 2 * fwd.get_total_flops()  # torch's own formula: 7 x (groups + 1)


# ---- analytic scans ---------------------------------------------------------------------------
def test_bk_scan_formula_hand_value_and_census():
    # N = 8: steps s = 1, 2, 4 update 7 + 6 + 4 = 17 positions at 80 flops; alpha 2 and g = b/d 11 each
    assert bk_scan_forward_flops(1, 8) == 2 * 8 + 80 * 17 + 11 * 8 == 1464
    assert bk_scan_forward_flops(3, 1) == 3 * 13 and bk_scan_forward_flops(2, 8, "sequential") == 2 * 15 * 8
    for n in (1, 5, 8, 13):
        v = torch.randn(3, n)
        with ElementwiseCensus() as census:
            bk_diagonal_scan(v)
        assert census.flops == bk_scan_forward_flops(3, n), n


def test_mamba_scan_formula_census():
    from transformers.models.mamba.modeling_mamba import mamba_selective_scan

    b, d, n, length = 2, 6, 4, 5
    g = torch.Generator().manual_seed(0)
    u, dt, z = (torch.randn(b, d, length, generator=g) for _ in range(3))
    bmat, cmat = torch.randn(b, n, length, generator=g), torch.randn(b, n, length, generator=g)
    with torch.no_grad(), ElementwiseCensus() as census:
        mamba_selective_scan(u, dt, -torch.rand(d, n, generator=g), bmat, cmat, D=torch.randn(d), z=z,
                             delta_bias=torch.randn(d), delta_softplus=True)
    assert census.flops == mamba_scan_forward_flops(b, length, d, n)["elementwise"] == (6 * n + 6) * b * length * d


def test_scans_are_added_to_what_the_counter_sees():
    # Mamba: d 16 -> d_inner 32, N 4, 2 layers; the counter saw every matmul/conv of the mixers, so the
    # analytic term is exactly the scan's elementwise work, and the grouped conv backward is 2 x forward
    mamba = MambaLM(d_model=16, n_layer=2, d_state=4, vocab_size=50)
    step = measure_flops(mamba, lm_batch(50, 2, 8))
    assert step.forward.analytic_terms == {"mamba_selective_scan": 2 * (6 * 4 + 6) * 2 * 8 * 32}
    assert step.forward.by_op["aten.bmm"] == 2 * 2 * 2 * 8 * 32 * 4  # the contraction h @ C, 2 layers
    assert step.backward.by_op["aten.convolution_backward"] == 2 * step.forward.by_op["aten.convolution"]
    assert step.backward.analytic == 2 * step.forward.analytic
    assert "analytic: mamba_selective_scan (2 calls: (6N+6)*B*L*d_inner" in step.description
    # BK: only the scan is invisible to the counter (its projections and experts are matmuls)
    bk = ResNetBKLM(d_model=16, n_layers=2, num_experts=2, vocab_size=50, max_seq_len=16)
    step = measure_flops(bk, lm_batch(50, 2, 8))
    assert step.forward.analytic_terms == {"bk_scan": 2 * bk_scan_forward_flops(2, 8)}
    assert step.description.startswith("torch.utils.flop_counter + analytic: bk_scan (2 calls: ")


def test_fvcore_cross_check_agrees_on_the_forward():
    for model in (TransformerLM(n_layer=1, d_model=32, n_head=4, n_kv_head=2, max_seq_len=64, vocab_size=50),
                  MambaLM(d_model=16, n_layer=1, d_state=4, vocab_size=50),
                  ResNetBKLM(d_model=16, n_layers=1, num_experts=2, vocab_size=50, max_seq_len=16)):
        batch = lm_batch(50, 2, 8)
        torch_count, fv = measure_flops(model, batch), measure_flops(model, batch, counter="fvcore")
        assert fv.forward_flops == torch_count.forward_flops, type(model).__name__
        assert fv.backward_flops == 2 * fv.forward_flops and fv.description.startswith("fvcore (1 MAC = 2 flops)")


def test_transformer_preset_forward_within_2_percent_of_analytic():
    """configs/compare/transformer_small.yaml at the PTB word vocabulary, its seq_len 128 (batch 4).
    Analytic: 2 * tokens * P_mm + n_layer * 4 * B * T^2 * d_model."""
    config = yaml.safe_load((PRESETS / "transformer_small.yaml").read_text())
    module, _, name = config["model"]["class_path"].rpartition(".")
    hp = config["model"]["init_args"]
    model = getattr(importlib.import_module(module), name)(**hp, vocab_size=10_000)
    b, t = 4, config["data"]["init_args"]["seq_len"]
    measured = measure_flops(model, lm_batch(10_000, b, t), backward=False).forward_flops
    p_mm = linear_weight_params(model.net)
    assert p_mm == 3 * (4 * 128 * 128 + 3 * 128 * 341) + 10_000 * 128
    analytic = transformer_forward_flops(b, t, hp["n_layer"], hp["d_model"], p_mm)
    assert abs(measured - analytic) <= 0.02 * analytic
    assert measured == analytic  # the counter is exact for matmuls and attention
    # with every non-embedding parameter (norm weights too) as N: still within 2%
    loose = transformer_forward_flops(b, t, hp["n_layer"], hp["d_model"], model.parameter_counts()["non_embedding"])
    assert abs(measured - loose) <= 0.02 * loose


# ---- callbacks --------------------------------------------------------------------------------
class Capture(Logger):
    name, version = "capture", 0

    def __init__(self):
        super().__init__()
        self.metrics = {}

    @property
    def experiment(self):
        return None

    def log_metrics(self, metrics, step=None):
        self.metrics.update(metrics)

    def log_hyperparams(self, params, *args, **kwargs):
        pass


FAMILIES = {
    "transformer": lambda vocab: tiny_model(vocab, dropout=0.1),
    "bk": lambda vocab: ResNetBKLM(d_model=16, n_layers=1, num_experts=2, max_seq_len=16, vocab_size=vocab),
    "mamba": lambda vocab: MambaLM(d_model=16, n_layer=1, d_state=4, vocab_size=vocab),
}


def _fit(corpus, callbacks, logger=False, seed=0, family="transformer"):
    L.seed_everything(seed, verbose=False)
    dm = tiny_data(corpus)
    dm.setup("fit")
    model = FAMILIES[family](dm.vocab_size)
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=4, limit_val_batches=2, callbacks=callbacks,
                            logger=logger, num_sanity_val_steps=1)
    trainer.fit(model, datamodule=dm)
    return model, dm, trainer


def test_profiling_callback_fit_summary_and_logs(tiny_corpus):
    prof, logger = ProfilingCallback(peak_flops=1e12), Capture()
    model, dm, trainer = _fit(tiny_corpus, [prof], logger=logger)
    s = prof.summary()
    assert tuple(s) == SUMMARY_KEYS
    batch = next(iter(dm.train_dataloader()))
    offline = measure_flops(model, batch)  # same model shape and batch shape as the measured step
    assert (s["forward_flops"], s["backward_flops"]) == (offline.forward_flops, offline.backward_flops)
    assert s["total_flops"] == s["forward_flops"] + s["backward_flops"]
    assert s["flops_per_token"] == s["total_flops"] / batch["input_ids"].numel()
    assert s["flop_counter"].startswith("torch.utils.flop_counter + analytic: none")
    train = s["per_stage"]["train"]
    assert train["batches"] == 3  # 4 batches minus the measured one
    assert s["tokens_per_sec"] == train["tokens_per_sec"] > 0 and train["samples_per_sec"] > 0
    assert s["mfu"] == pytest.approx(s["flops_per_token"] * s["tokens_per_sec"] / 1e12)
    assert s["per_stage"]["val"]["batches"] == 1 and s["per_stage"]["val"]["backward_flops"] is None
    assert s["peak_memory_kind"] == "cpu_peak_rss_process" and s["peak_memory_mb"] > 0
    for key in ("perf/forward_flops", "perf/backward_flops", "perf/total_flops", "perf/flops_per_token",
                "perf/train/tokens_per_sec", "perf/train/mfu", "perf/val/forward_flops", "perf/peak_memory_mb"):
        assert key in logger.metrics, key
    assert prof.throughput.peak_flops == 1e12
    # an evaluation-only run (fvcore counter): the top-level FLOPs are the test step's forward
    prof_test = ProfilingCallback(counter="fvcore")
    quiet_trainer(limit_test_batches=2, callbacks=[prof_test]).test(model, datamodule=dm)
    t = prof_test.summary()
    assert t["backward_flops"] is None and t["total_flops"] == t["forward_flops"]
    assert t["flops_per_token"] == s["forward_flops"] / batch["input_ids"].numel()  # same T, same model
    assert t["flop_counter"].startswith("fvcore (1 MAC = 2 flops) + analytic: none")
    assert t["tokens_per_sec"] == t["per_stage"]["test"]["tokens_per_sec"]
    assert prof_test.throughput.peak_flops is None and t["mfu"] is None  # CPU: not in Lightning's table


@pytest.mark.parametrize("family", list(FAMILIES))
def test_profiling_does_not_change_training(tiny_corpus, family):
    """The measured step is the real one (no extra forward, no RNG draw, native kernels): bit-identical."""
    prof = ProfilingCallback()
    with_prof = _fit(tiny_corpus, [prof], family=family)[0]
    assert prof.summary()["total_flops"] > 0
    without = _fit(tiny_corpus, [], family=family)[0]
    for a, b in zip(with_prof.parameters(), without.parameters()):
        assert torch.equal(a, b)


def test_everything_off_is_inert():
    prof = ProfilingCallback(flops=False, memory=False, throughput=False)
    assert prof.parts == [] and prof.summary() == {**dict.fromkeys(SUMMARY_KEYS), "per_stage": {}}
    with pytest.raises(ValueError):
        ProfilingCallback(counter="thop")
