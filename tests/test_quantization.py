"""--bits 8 / 4: fake-quant QAT, bitsandbytes export, pretrained low-bit loading, stored size."""

import copy

import pytest
import torch
from torch import nn

from lightning_bench.errors import ConfigError
from lightning_bench.models import MambaLM, ResNetBKLM, TransformerLM
from lightning_bench.quantization import (NF4_CODE, FakeQuantWeight, QuantizationCallback, adamw8bit,
                                          activation_quant_bits, dequantized_weight, export_lowbit, exported_size,
                                          fixed_range_fake_quant, int8_fake_quant, int8_quantize, is_exported,
                                          is_qat, load_pretrained_lowbit, nf4_fake_quant, nf4_quantize,
                                          plan_quantization, prepare_qat, size_breakdown)
from tests.helpers import quiet_trainer, tiny_data

bnb = pytest.importorskip("bitsandbytes")
import bitsandbytes.functional as bnbF  # noqa: E402


def linear_stack(bias=True, seed=0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(128, 256, bias=bias), nn.ReLU(), nn.Linear(256, 128, bias=bias), nn.ReLU(),
                         nn.Linear(128, 64, bias=bias))


# ---- the quantizers ---------------------------------------------------------------------------
def test_int8_per_channel_hand_worked():
    w = torch.tensor([[0.5, -1.0, 0.25, 0.125],
                      [2.0, 1.0, -0.5, 0.0625]])
    # row 0: absmax 1, scale 1/127: 0.5*127 = 63.5 -> 64 (half to even), -127, 31.75 -> 32, 15.875 -> 16
    # row 1: absmax 2, scale 2/127: 127, 63.5 -> 64, -31.75 -> -32, 3.96875 -> 4
    codes, absmax = int8_quantize(w)
    assert codes.tolist() == [[64, -127, 32, 16], [127, 64, -32, 4]]
    assert absmax.tolist() == [1.0, 2.0]
    expected = torch.tensor([[64 / 127, -1.0, 32 / 127, 16 / 127], [2.0, 128 / 127, -64 / 127, 8 / 127]])
    torch.testing.assert_close(int8_fake_quant(w), expected, rtol=0, atol=1e-7)
    # exactly what bitsandbytes' Linear8bitLt stores (int8 codes, fp32 SCB = row absmax)
    net = nn.Sequential(nn.Linear(4, 2, bias=False))
    net[0].weight.data.copy_(w)
    export_lowbit(net, 8)
    assert torch.equal(net[0].weight.data, codes) and torch.equal(net[0].weight.SCB, absmax)


def test_nf4_codebook_and_round_trip_match_bitsandbytes():
    assert torch.equal(torch.tensor(NF4_CODE), bnbF.get_4bit_type("nf4", device="cpu"))
    torch.manual_seed(0)
    w = torch.randn(48, 128) * torch.rand(48, 1)
    w[3, 64:] = 0.0  # an all-zero block
    w[5, :64] = torch.tensor(NF4_CODE).repeat(4) * 0.3  # values on the codebook (and its midpoints' neighbours)
    packed, state = bnbF.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=False)
    reference = bnbF.dequantize_4bit(packed, state)
    assert torch.equal(nf4_fake_quant(w), reference)
    indices, absmax = nf4_quantize(w)
    assert torch.equal(absmax, state.absmax)
    assert torch.equal(((indices[::2] << 4) | indices[1::2]), packed.view(-1))  # same codes, bnb's packing


def test_ste_gradient_is_identity():
    for bits in (8, 4):
        w = torch.randn(8, 64, requires_grad=True)
        upstream = torch.randn(8, 64)
        out = FakeQuantWeight(bits)(w)
        assert not torch.equal(out, w)  # the forward is quantized ...
        out.backward(upstream)
        assert torch.equal(w.grad, upstream)  # ... the backward is the identity
    x = torch.tensor([-5.0, -1.0, 0.3, 2.9, 4.0], requires_grad=True)
    y = fixed_range_fake_quant(x, 3.0, 8)
    assert torch.allclose(y, torch.tensor([-3.0, -1.0, 0.3, 2.9, 3.0]), atol=3 / 127 / 2)
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]  # straight through inside the range, clamped outside


# ---- export -------------------------------------------------------------------------------------
@pytest.mark.parametrize("bits", [8, 4])
def test_exported_layers_compute_with_the_fake_quant_weights(bits):
    net = linear_stack()
    prepare_qat(net, bits)
    x = torch.randn(6, 128)
    net.eval()
    fake = net(x)
    report = export_lowbit(net, bits)
    assert report.max_dequant_error == 0.0 and len(report.quantized) == 3
    assert all(type(m).__name__ == ("Linear8bitLt" if bits == 8 else "Linear4bit") for m in net[::2])
    real = net(x)
    if bits == 4:  # same dequantized weights, fp32 matmul
        torch.testing.assert_close(real, fake, rtol=1e-5, atol=1e-6)
    else:  # eval-mode int8 also quantizes the input row-wise (W8A8); train mode dequantizes the weight only
        assert (real - fake).abs().max() < 0.02 * fake.abs().max()
        torch.testing.assert_close(net.train()(x), fake, rtol=1e-5, atol=1e-6)
    assert ("W8A8" in report.scheme) == (bits == 8) and "activations" in report.scheme


def test_int8_statistics_follow_the_weight_when_a_parent_moves_the_model():
    """A parent's .to(device) (Lightning moving the whole model) runs Module._apply, which only sets
    `param.data = moved`; the codes (CB) and row scales (SCB) bitsandbytes keeps beside the data, on the
    Parameter and in module.state, must follow before the next forward (the CUDA int8 matmul refused CPU
    scales). A CPU machine has no second device that set_data accepts, so the state after such a move is
    built by hand: the weight on the meta device, its statistics left on the CPU."""
    from types import SimpleNamespace

    from lightning_bench.quantization.export import int8_statistics_follow_weight

    net = linear_stack()
    export_lowbit(net, 8)
    for layer in net[::2]:
        assert int8_statistics_follow_weight in layer._forward_pre_hooks.values()
    scb, cb = net[0].weight.SCB, net[0].weight.CB
    int8_statistics_follow_weight(net[0])  # nothing moved: nothing changes
    assert net[0].weight.SCB is scb and net[0].weight.CB is cb
    net.eval()(torch.randn(2, 128))  # the first forward moves CB / SCB from the weight into module.state
    assert net[0].state.SCB is scb

    weight = nn.Parameter(torch.zeros(4, 3, dtype=torch.int8, device="meta"), requires_grad=False)
    weight.CB, weight.SCB = torch.zeros(4, 3, dtype=torch.int8), torch.ones(4)
    state = SimpleNamespace(CB=torch.zeros(4, 3, dtype=torch.int8), SCB=torch.ones(4))
    moved = SimpleNamespace(weight=weight, state=state)
    int8_statistics_follow_weight(moved)
    for holder in (weight, state):
        assert holder.CB.device.type == holder.SCB.device.type == "meta" and holder.CB.dtype == torch.int8
    state.CB = state.SCB = None  # before the first forward bitsandbytes leaves module.state empty
    int8_statistics_follow_weight(moved)
    assert state.CB is None and state.SCB is None


def test_linear8bitlt_at_inference_quantizes_each_input_row_to_int8():
    """What the 8-bit record says: Linear8bitLt (threshold 0) computes W8A8 in eval mode, the input cast to
    fp16 and each row (token) rounded to int8 on its own absmax; weight-only int8 is measurably off."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(128, 64))
    codes, absmax = int8_quantize(net[0].weight.detach())
    weight = codes.float() * absmax[:, None] / 127
    export_lowbit(net, 8)
    x = torch.randn(6, 128) * 3
    x[0, 5] = 40.0  # one large value coarsens its whole row's grid
    with torch.no_grad():
        real, bias = net.eval()(x), net[0].bias.float()
        row_max = x.half().float().abs().amax(1, keepdim=True)
        w8a8 = torch.round(x.half().float() * 127 / row_max) * row_max / 127 @ weight.T + bias
        w8 = x @ weight.T + bias
    torch.testing.assert_close(real, w8a8, rtol=0, atol=5e-4)  # fp16 output rounding
    assert (real - w8).abs().max() > 20 * (real - w8a8).abs().max()


def test_stored_size_ratios():
    int8 = linear_stack(bias=False)
    export_lowbit(int8, 8)
    size = size_breakdown(int8)
    weights = 128 * 256 + 256 * 128 + 128 * 64
    rows = 256 + 128 + 64
    # int8 codes + one fp32 scale (SCB) per output row + a 1-byte format tag per layer
    assert size["quantized_linear_mb"] * 2**20 == weights + 4 * rows + 3
    assert size["fp32_equivalent_linear_mb"] * 2**20 == 4 * weights
    assert size["ratio"] == pytest.approx(0.25 + rows / weights, abs=1e-4)  # ~0.264
    nf4 = linear_stack(bias=False)
    export_lowbit(nf4, 4)
    size = size_breakdown(nf4)
    # packed 4-bit codes + one fp32 absmax per 64 weights + per layer a 16-value quant_map and its metadata
    codes_and_absmax = weights // 2 + 4 * weights // 64
    assert codes_and_absmax + 3 * 64 < size["quantized_linear_mb"] * 2**20 < codes_and_absmax + 3 * 64 + 3 * 200
    assert size["ratio"] == pytest.approx(1 / 8 + 1 / 64, abs=0.005)  # ~0.141
    assert size["other_mb"] == 0 and size["total_mb"] == size["quantized_linear_mb"]


def test_plan_skips_refuses_and_keeps_state_dict_keys():
    with pytest.raises(ConfigError, match="bits 8 or 4, not 3"):
        plan_quantization(linear_stack(), 3)
    odd = nn.Sequential(nn.Linear(96, 64), nn.Linear(64, 2), nn.Linear(2, 64))
    with pytest.raises(ConfigError, match=r"multiple of 64.*0 \(in_features 96\)") as err:
        plan_quantization(odd, 4)
    assert "\n" not in str(err.value)
    plan = plan_quantization(odd, 4, incompatible="skip")
    assert plan.quantized == ["1"] and set(plan.kept_fp32) == {"0", "2"}  # "2": narrower than one block
    assert plan_quantization(odd, 8).quantized == ["0", "1", "2"]
    lm = TransformerLM(n_layer=1, d_model=64, n_head=4, vocab_size=50)  # tied embeddings
    plan = plan_quantization(lm.net, 8, skip_modules=("lm_head", "layers.0.mlp"))
    assert "lm_head" in plan.kept_fp32 and "model.layers.0.mlp.up_proj" in plan.kept_fp32
    assert "model.layers.0.self_attn.q_proj" in plan.quantized
    with pytest.raises(ConfigError, match="tied"):
        plan_quantization(lm.net, 8, skip_modules=())
    mamba = MambaLM(d_model=32, n_layer=1, vocab_size=50)  # its scan reads dt_proj.weight directly
    plan = plan_quantization(mamba.net, 8, layers=mamba.quantizable_layers())
    assert "backbone.layers.0.mixer.dt_proj" in plan.kept_fp32
    assert "backbone.layers.0.mixer.dt_proj" not in plan_quantization(mamba.net, 8).kept_fp32  # the model says so
    # QAT checkpoints are plain fp32 checkpoints, loadable both ways
    qat, plain = linear_stack(seed=1), linear_stack(seed=2)
    prepare_qat(qat, 8)
    assert list(qat.state_dict()) == list(plain.state_dict())
    qat.load_state_dict(plain.state_dict())
    assert torch.equal(qat[0].parametrizations.weight.original, plain[0].weight)
    fresh = linear_stack(seed=3)
    fresh.load_state_dict(qat.state_dict())
    export_lowbit(fresh, 8)
    with pytest.raises(ConfigError, match="full-precision"):
        fresh.load_state_dict(plain.state_dict())


# ---- the model families ---------------------------------------------------------------------------
FAMILIES = {
    "transformer": lambda: TransformerLM(n_layer=1, d_model=64, n_head=4, max_seq_len=32, vocab_size=50),
    "bk": lambda: ResNetBKLM(d_model=64, n_layers=1, num_experts=2, max_seq_len=16, dropout=0.0, vocab_size=50),
}


@pytest.mark.parametrize("family", ["transformer", "bk"])
@pytest.mark.parametrize("bits", [8, 4])
def test_qat_steps_then_export(family, bits):
    torch.manual_seed(0)
    model = FAMILIES[family]()
    layers = model.quantizable_layers()  # ResNet-BK: its potential v and features G are fake-quantized too
    plan = prepare_qat(model.net, bits, layers=layers)
    assert "lm_head" in plan.kept_fp32 and is_qat(model.net)
    assert activation_quant_bits(model.net) == (8 if family == "bk" else None)
    if family == "bk":
        if bits == 4:
            assert "blocks.0.layer.bk_out" in plan.kept_fp32  # Linear(2 -> d): narrower than a block
    before = {k: v.clone() for k, v in model.net.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(0, 50, (2, 16))
    for _ in range(3):
        logits = model.lm_forward(ids[:, :-1]).logits
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)
    for name in plan.quantized:
        assert not torch.equal(model.net.state_dict()[f"{name}.weight"], before[f"{name}.weight"]), name
    model.eval()
    with torch.no_grad():
        fake = model.lm_forward(ids).logits
    report = export_lowbit(model.net, bits, layers=layers)
    assert report.max_dequant_error == 0.0 and is_exported(model.net) and not is_qat(model.net)
    if family == "bk":
        assert report.act_bits == 8 and activation_quant_bits(model.net) == 8  # v / G hooks on the new modules
    with torch.no_grad():
        real = model.lm_forward(ids).logits
    tolerance = 1e-4 if bits == 4 else 0.02 * fake.abs().max()
    assert (real - fake).abs().max() < tolerance
    assert report.size["ratio"] < (0.3 if bits == 8 else 0.17)


@pytest.mark.parametrize("z_imag, bound", [(1.0, 1.0), (0.5, 2.0), (0.05, 10.0)])  # 1/Im z, or the clamp
def test_bk_features_are_quantized_on_the_bound_that_holds(z_imag, bound):
    """|G| <= 1/Im z (bk_core), so G's 8-bit grid is +-min(feature_clamp, 1/Im z). On a real forward whose
    potentials span +-v_max nothing is clipped, the error is at most half a step, and G reaches more than
    half of the 255 levels (G lies in the disc |G - i/(2 Im z)| <= 1/(2 Im z): at most 192 codes of a
    symmetric grid). The earlier +-feature_clamp grid gave 19 levels and 10x the error at z = i."""
    torch.manual_seed(0)
    model = ResNetBKLM(d_model=16, n_layers=1, num_experts=2, max_seq_len=64, dropout=0.0, vocab_size=50,
                       z_imag=z_imag)
    _, g_range = model.quantizable_layers().activations  # v, G
    assert (g_range.name, g_range.where, g_range.limit) == ("blocks.0.layer.bk_out", "input", bound)
    layer = model.net.blocks[0].layer
    with torch.no_grad():
        layer.v_proj.weight.normal_(0, 1.0)  # potentials over the whole +-v_max, as a trained model's
    prepare_qat(model.net, 8, layers=model.quantizable_layers())
    seen = {}
    layer.bk_out.register_forward_pre_hook(lambda m, args: seen.setdefault("G", args[0]), prepend=True)
    layer.bk_out.register_forward_pre_hook(lambda m, args: seen.setdefault("q(G)", args[0]))
    with torch.no_grad():
        model.net.eval()(torch.randint(0, 50, (8, 64)))
    g, q = seen["G"], seen["q(G)"]
    step = bound / 127
    assert g.abs().max() <= bound * (1 + 1e-6)
    assert (q - g).abs().max() <= step / 2 * (1 + 1e-5)
    if bound == 1 / z_imag:  # the clamp does not bind: G fills the grid the disc allows
        assert len(torch.unique(torch.round(q / step))) > 128


# ---- pretrained HF models ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    path = tmp_path_factory.mktemp("tiny_llama")
    LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("bits", [8, 4])
def test_pretrained_bitsandbytes_config_equals_fp32_then_export(tiny_llama, bits):
    ids = torch.randint(0, 100, (2, 8))
    direct, report = load_pretrained_lowbit(tiny_llama, bits, dtype=torch.float32)
    assert report.path == "bitsandbytes_config" and report.fallback_reason is None  # works on CPU
    fallback, fallback_report = load_pretrained_lowbit(tiny_llama, bits, method="export", dtype=torch.float32)
    assert fallback_report.path == "fp32_then_export"
    assert sorted(report.quantized) == sorted(fallback_report.quantized) and len(report.quantized) == 7
    assert report.size == fallback_report.size
    with torch.no_grad():
        assert torch.equal(direct.eval()(ids).logits, fallback.eval()(ids).logits)


# ---- optimizer and Lightning --------------------------------------------------------------------------
def test_adamw8bit_runs_on_cpu():
    net = linear_stack()
    groups = [{"params": [m.weight for m in net[::2]], "weight_decay": 0.1},
              {"params": [m.bias for m in net[::2]], "weight_decay": 0.0}]
    optimizer = adamw8bit(groups, lr=1e-2, betas=(0.9, 0.95))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    before = net[0].weight.detach().clone()
    net(torch.randn(4, 128)).square().mean().backward()
    optimizer.step()
    schedule.step()
    assert not torch.equal(net[0].weight, before)
    assert optimizer.state[net[0].weight]["state1"].dtype == torch.uint8  # 8-bit moments (>= 4096 elements)


def test_callback_fit_with_qat_then_test_exported_checkpoint(tiny_corpus, tmp_path):
    dm = tiny_data(tiny_corpus)
    model = TransformerLM(n_layer=1, d_model=64, n_head=4, max_seq_len=32)
    callback = QuantizationCallback(bits=4)
    trainer = quiet_trainer(max_steps=2, limit_val_batches=1, callbacks=[callback], enable_checkpointing=True,
                            default_root_dir=tmp_path)
    trainer.fit(model, datamodule=dm)
    assert is_qat(model.net) and not is_exported(model.net) and callback.report["mode"] == "qat"
    fit_size = callback.size(model)  # measured on an exported copy
    assert fit_size["quantized_layers"] == 7 and not is_exported(model.net)
    ckpt = trainer.checkpoint_callback.best_model_path
    fresh, test_callback = TransformerLM(n_layer=1, d_model=64, n_head=4, max_seq_len=32), QuantizationCallback(4)
    quiet_trainer(limit_test_batches=1, callbacks=[test_callback]).test(fresh, datamodule=dm, ckpt_path=ckpt,
                                                                        verbose=False)
    assert is_exported(fresh.net) and test_callback.report["path"] == "export"
    assert test_callback.report["max_dequant_error"] == 0.0
    assert test_callback.size(fresh) == fit_size
    loaded = torch.load(ckpt, weights_only=False)["state_dict"]
    assert torch.equal(dequantized_weight(fresh.net.model.layers[0].mlp.up_proj),
                       nf4_fake_quant(loaded["net.model.layers.0.mlp.up_proj.weight"]))
    assert exported_size(copy.deepcopy(model.net), 4) == fit_size


def test_callback_loads_pretrained_hf_model_in_low_bit(tiny_llama, tiny_corpus):
    from lightning_bench.models import HFLanguageModel

    model, callback = HFLanguageModel(pretrained=tiny_llama), QuantizationCallback(bits=8)
    quiet_trainer(limit_test_batches=1, callbacks=[callback]).test(model, datamodule=tiny_data(tiny_corpus),
                                                                   verbose=False)
    assert callback.report["path"] == "bitsandbytes_config" and is_exported(model.net)
    assert model.last_eval["test"]["ppl"] > 1 and callback.size(model)["quantized_layers"] == 7
