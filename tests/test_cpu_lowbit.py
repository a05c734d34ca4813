"""The fast CPU forward of the low-bit modules (quantization/cpu_lowbit.py): same tensors, same function
as bitsandbytes' Linear8bitLt / Linear4bit, a kernel named in the report, and a switch back."""

import copy
import io

import pytest
import torch
from torch import nn

from lightning_bench.errors import ConfigError
from lightning_bench.models import ResNetBKLM, TransformerLM
from lightning_bench.quantization import (QuantizationCallback, dequantized_weight, export_lowbit, is_exported,
                                          size_breakdown)
from lightning_bench.quantization import cpu_lowbit
from lightning_bench.quantization.cpu_lowbit import (BNB_KERNEL, INT8_KERNEL, NF4_KERNEL, int8_rowwise_codes,
                                                     kernel_counts, kernel_name, nf4_dequantize_lut,
                                                     use_bitsandbytes_kernels, use_cpu_kernels, uses_cpu_kernels)
from lightning_bench.quantization.fake_quant import is_lowbit
from tests.helpers import quiet_trainer, tiny_data

bnb = pytest.importorskip("bitsandbytes")
import bitsandbytes.functional as bnbF  # noqa: E402

@pytest.fixture(autouse=True)
def int8_kernel_on(monkeypatch):
    """These tests check the int8 kernel itself; on an AVX-512 CPU use_cpu_kernels would leave int8
    modules to bitsandbytes (test_int8_left_to_bitsandbytes_on_avx512 checks that choice)."""
    monkeypatch.setattr(cpu_lowbit, "int8_kernel_applies", lambda: True)


SHAPES = [(64, 4, True), (128, 333, True), (192, 7, False), (576, 192, True), (1536, 64, True)]


def exported(in_f: int, out_f: int, bias: bool, bits: int, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(in_f, out_f, bias=bias))
    if bias:
        nn.init.normal_(net[0].bias)
    export_lowbit(net, bits, cpu_kernel="bitsandbytes")
    return net.eval()


def inputs(in_f: int, seed: int = 1) -> torch.Tensor:
    torch.manual_seed(seed)
    x = torch.randn(3, 29, in_f) * torch.rand(3, 29, 1) * 4
    x[0, 3, 5] = 40.0  # an outlier coarsens its row's grid
    x[1, 2] = 0.0  # an all-zero row
    return x


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("in_f,out_f,bias", SHAPES)
def test_cpu_kernel_equals_bitsandbytes(bits, in_f, out_f, bias):
    net = exported(in_f, out_f, bias, bits)
    x = inputs(in_f)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    size = size_breakdown(net)
    with torch.inference_mode():
        ref = net(x)
        assert use_cpu_kernels(net) == ["0"] and uses_cpu_kernels(net[0]) and is_lowbit(net[0])
        calls = kernel_counts().get(net[0].kernel, 0)
        out = net(x)
    assert kernel_counts()[net[0].kernel] == calls + 1
    assert out.shape == ref.shape and out.dtype == ref.dtype == torch.float32
    # bit-equal: nf4 the same dequantized weight and fp32 matmul; int8 the same codes, exact integer
    # accumulation and the scale products in bitsandbytes' order
    assert torch.equal(out, ref)
    after = net.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], before[k]) for k in before)
    assert size_breakdown(net) == size
    assert torch.equal(dequantized_weight(net[0]), dequantized_weight(copy.deepcopy(net)[0]))


def test_int8_codes_are_bitsandbytes_codes():
    x = inputs(300).reshape(-1, 300)
    codes, absmax = int8_rowwise_codes(x)
    ref_codes, ref_absmax, _ = bnbF.int8_vectorwise_quant(x.half())
    assert torch.equal(absmax.squeeze(1), ref_absmax)
    assert torch.equal(codes, ref_codes.float())


def test_nf4_lookup_dequantizes_like_bitsandbytes():
    torch.manual_seed(0)
    w = torch.randn(96, 192)
    packed, state = bnbF.quantize_4bit(w, blocksize=64, quant_type="nf4")
    mine = nf4_dequantize_lut(packed, state.absmax, state.code, tuple(state.shape), state.blocksize)
    assert torch.equal(mine, bnbF.dequantize_4bit(packed, state))


@pytest.mark.parametrize("bits", [8, 4])
def test_state_dict_round_trip_and_pickle(bits):
    src, dst = exported(128, 96, True, bits, seed=0), exported(128, 96, True, bits, seed=5)
    use_cpu_kernels(src)
    use_cpu_kernels(dst)
    x = inputs(128)
    with torch.inference_mode():
        assert not torch.equal(src(x), dst(x))
        dst.load_state_dict(src.state_dict())
        torch.testing.assert_close(dst(x), src(x), rtol=0, atol=0)
    buf = io.BytesIO()
    torch.save(src, buf)
    buf.seek(0)
    again = torch.load(buf, weights_only=False)
    assert uses_cpu_kernels(again[0])
    with torch.inference_mode():
        torch.testing.assert_close(again(x), src(x), rtol=0, atol=0)
    with pytest.raises(ConfigError):  # the float-weight guard stays on the swapped module
        dst.load_state_dict({"0.weight": torch.zeros(96, 128), "0.bias": torch.zeros(96)}, strict=False)


def test_fallbacks_to_bitsandbytes_where_the_function_differs():
    net = exported(64, 32, True, 8)
    use_cpu_kernels(net)
    x = inputs(64)
    calls = kernel_counts().get(BNB_KERNEL, 0)
    with torch.no_grad():
        net.train()(x)  # train mode: bitsandbytes dequantizes the weight (no activation quantization)
        net.eval()(x.double().float().half().float())
        net(x.to(torch.bfloat16))  # other input dtypes
    assert kernel_counts()[BNB_KERNEL] == calls + 2


def test_switch_back_to_bitsandbytes_and_export_option():
    net = exported(64, 32, True, 4)
    assert not uses_cpu_kernels(net[0]) and kernel_name(net) == BNB_KERNEL
    use_cpu_kernels(net)
    assert kernel_name(net) == NF4_KERNEL and kernel_name(net, "cuda") == BNB_KERNEL
    assert use_bitsandbytes_kernels(net) == ["0"] and type(net[0]) is bnb.nn.Linear4bit
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(64, 32))
    report = export_lowbit(plain, 8)  # default cpu_kernel="auto"
    assert report.kernel == INT8_KERNEL and report.as_dict()["kernel"] == INT8_KERNEL
    with pytest.raises(ConfigError):
        export_lowbit(nn.Sequential(nn.Linear(64, 32)), 8, cpu_kernel="fast")
    with pytest.raises(ConfigError):
        QuantizationCallback(8, cpu_kernel="fast")


@pytest.mark.parametrize("cpu_kernel,bits,kernel", [("auto", 8, INT8_KERNEL), ("bitsandbytes", 8, BNB_KERNEL),
                                                    ("auto", 4, NF4_KERNEL)])
def test_callback_reports_the_kernel_and_forced_bitsandbytes(tiny_corpus, cpu_kernel, bits, kernel):
    dm = tiny_data(tiny_corpus)
    torch.manual_seed(0)
    model = TransformerLM(n_layer=1, d_model=64, n_head=4, max_seq_len=32)
    callback = QuantizationCallback(bits, cpu_kernel=cpu_kernel)
    quiet_trainer(limit_test_batches=2, callbacks=[callback]).test(model, datamodule=dm, verbose=False)
    assert is_exported(model.net) and callback.report["kernel"] == kernel
    fields = callback.record_fields(None, model)
    calls = fields["quantization"]["kernel_calls"]
    assert (kernel in calls) == (cpu_kernel == "auto") and all(n > 0 for n in calls.values())
    swapped = [uses_cpu_kernels(m) for m in model.net.modules() if is_lowbit(m)]
    assert swapped and all(s == (cpu_kernel == "auto") for s in swapped)


def test_callback_cpu_kernel_from_environment(monkeypatch):
    monkeypatch.setenv("LB_CPU_KERNEL", "bitsandbytes")
    assert QuantizationCallback(8).cpu_kernel == "bitsandbytes"
    monkeypatch.delenv("LB_CPU_KERNEL")
    assert QuantizationCallback(8).cpu_kernel == "auto"


def test_bk_fast_and_bitsandbytes_logits_agree():
    """ResNet-BK (many small Linear layers, MoE dispatch, activation fake-quant hooks kept)."""
    torch.manual_seed(0)
    model = ResNetBKLM(d_model=64, n_layers=2, num_experts=4, max_seq_len=64)
    model.build(100)
    ids = torch.randint(0, 100, (2, 48))
    for bits in (8, 4):
        net = copy.deepcopy(model.net).eval()
        report = export_lowbit(net, bits, layers=model.quantizable_layers())
        assert report.kernel == (INT8_KERNEL if bits == 8 else NF4_KERNEL)
        with torch.inference_mode():
            fast = net(ids)[0]
            use_bitsandbytes_kernels(net)
            ref = net(ids)[0]
        assert torch.equal(fast, ref)  # bit-equal through 2 blocks of W8A8 / nf4 layers


def test_int8_left_to_bitsandbytes_on_avx512(monkeypatch):
    monkeypatch.setattr(cpu_lowbit, "int8_kernel_applies", lambda: False)
    assert use_cpu_kernels(exported(64, 4, True, 8)) == []  # bitsandbytes' torch._int_mm path there
    assert use_cpu_kernels(exported(64, 4, True, 4)) == ["0"]
    monkeypatch.undo()
    assert cpu_lowbit.int8_kernel_applies() == (torch.backends.cpu.get_cpu_capability() != "AVX512")
