"""The parallel selective scan (lightning_bench/models/selective_scan.py) and MambaLM's use of it.

The scan must equal the sequential recurrence, and MambaLM(scan_impl="parallel") must give the
logits and parameter gradients of transformers' own path (scan_impl="transformers") on the same
weights. Kept small: the transformers path's backward is the slow part being replaced.
"""

import copy
import io
import time

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from lightning_bench.errors import ConfigError
from lightning_bench.models import MambaLM
from lightning_bench.models import selective_scan as ss
from lightning_bench.models.selective_scan import linear_scan


def sequential_scan(a, b, dim, initial_state=None):
    a, b = torch.broadcast_tensors(a, b)
    a, b = a.movedim(dim, 0), b.movedim(dim, 0)
    h = torch.zeros_like(b[0]) if initial_state is None else initial_state
    states = []
    for t in range(a.shape[0]):
        h = a[t] * h + b[t]
        states.append(h)
    return torch.stack(states).movedim(0, dim)


# ---- the scan ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("length", [1, 2, 3, 7, 8, 16, 33, 100, 128, 300])
@pytest.mark.parametrize("chunk_size", [None, 0, 5, 16, 256])  # None: the default (16 on CPU); 0: one chunk
def test_scan_equals_sequential_loop(dtype, length, chunk_size):
    gen = torch.Generator().manual_seed(length * 31 + (chunk_size or 0))
    a = torch.rand(2, 3, length, 4, generator=gen, dtype=dtype)  # decay in (0, 1)
    b = torch.randn(2, 3, length, 4, generator=gen, dtype=dtype)
    h0 = torch.randn(2, 3, 4, generator=gen, dtype=dtype)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(linear_scan(a, b, dim=2, chunk_size=chunk_size), sequential_scan(a, b, 2), **tol)
    torch.testing.assert_close(linear_scan(a, b, dim=2, initial_state=h0, chunk_size=chunk_size),
                               sequential_scan(a, b, 2, h0), **tol)


def test_scan_other_dims_broadcasting_and_empty():
    a = torch.rand(5, 1, 3, dtype=torch.float64)  # broadcast over dim 1
    b = torch.randn(5, 4, 3, dtype=torch.float64)
    torch.testing.assert_close(linear_scan(a, b, dim=0, chunk_size=2), sequential_scan(a, b, 0))
    torch.testing.assert_close(linear_scan(a, b, dim=-1), sequential_scan(a, b, -1))
    assert linear_scan(torch.rand(2, 0, 3), torch.rand(2, 0, 3), dim=1).shape == (2, 0, 3)


@pytest.mark.parametrize("chunk_size", [0, 3])
def test_scan_gradcheck(chunk_size):
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(2, 7, 3, generator=gen, dtype=torch.float64).requires_grad_()
    b = torch.randn(2, 7, 3, generator=gen, dtype=torch.float64).requires_grad_()
    h0 = torch.randn(2, 3, generator=gen, dtype=torch.float64).requires_grad_()

    def fn(a, b, h0):
        return linear_scan(a, b, dim=1, initial_state=h0, chunk_size=chunk_size)

    assert gradcheck(fn, (a, b, h0))
    assert gradgradcheck(fn, (a, b, h0))


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("shifted", [False, True])
def test_scan_directions_used_by_the_backward(reverse, shifted):
    """The backward runs the scan the other way with shifted coefficients: check all four variants
    against a loop, and their own backward by gradcheck."""
    gen = torch.Generator().manual_seed(1)
    a = torch.rand(9, 2, 3, generator=gen, dtype=torch.float64)
    b = torch.randn(9, 2, 3, generator=gen, dtype=torch.float64)
    zero = torch.zeros_like(a[:1])
    if shifted:  # coefficient of t = the previous element's a in scan order, 0 at the start
        coef = torch.cat([a[1:], zero]) if reverse else torch.cat([zero, a[:-1]])
    else:
        coef = a
    expected = (sequential_scan(coef.flip(0), b.flip(0), 0).flip(0) if reverse else sequential_scan(coef, b, 0))
    for chunk_size in (0, 2, 4):
        torch.testing.assert_close(ss.LinearScan.apply(a, b, chunk_size, reverse, shifted), expected)
    assert gradcheck(lambda a, b: ss.LinearScan.apply(a, b, 4, reverse, shifted),
                     (a.requires_grad_(), b.requires_grad_()))


# ---- MambaLM: parallel vs transformers' own path -------------------------------------------------
TINY = dict(d_model=16, n_layer=2, d_state=4, d_conv=3, expand=2, vocab_size=50)


def _pair(dtype=torch.float32, **overrides):
    torch.manual_seed(0)
    fast = MambaLM(**{**TINY, **overrides}, scan_impl="parallel").to(dtype)
    ref = MambaLM(**{**TINY, **overrides}, scan_impl="transformers").to(dtype)
    ref.load_state_dict(fast.state_dict())  # same checkpoint layout either way
    return fast, ref


def _logits_and_grads(model, ids, weights, attention_mask=None):
    model.train()
    model.zero_grad(set_to_none=True)
    logits = model.net(input_ids=ids, attention_mask=attention_mask, use_cache=False).logits
    (logits * weights).sum().backward()
    return logits.detach(), {n: p.grad for n, p in model.named_parameters()}


def test_parallel_scan_is_installed_on_every_mixer():
    fast, ref = _pair()
    assert ss.supports_installed_transformers()
    fast_mixers = [layer.mixer for layer in fast.net.backbone.layers]
    assert all(m.forward.func is ss.fast_slow_forward and m.forward.args == (m,) for m in fast_mixers)
    assert all("forward" not in vars(layer.mixer) for layer in ref.net.backbone.layers)
    assert list(fast.state_dict()) == list(ref.state_dict())
    with pytest.raises(ConfigError, match="scan_impl"):
        MambaLM(**TINY, scan_impl="loop")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("chunk_size", [None, 0, 8])
def test_patched_mamba_matches_transformers_logits_and_grads(dtype, chunk_size):
    fast, ref = _pair(dtype)
    for layer in fast.net.backbone.layers:
        layer.mixer.scan_chunk_size = chunk_size  # None (16), 8: the 37 positions cross chunk boundaries
    ids = torch.randint(0, TINY["vocab_size"], (3, 37))
    weights = torch.randn(3, 37, TINY["vocab_size"], dtype=dtype)
    logits, grads = _logits_and_grads(fast, ids, weights)
    ref_logits, ref_grads = _logits_and_grads(ref, ids, weights)
    tol = dict(rtol=1e-4, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(logits, ref_logits, **tol)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], **tol, msg=lambda m: f"{name}: {m}")


def test_patched_mamba_matches_with_padding_mask_and_in_eval():
    fast, ref = _pair(torch.float64)
    ids = torch.randint(0, TINY["vocab_size"], (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[0, :4] = 0  # left padding
    weights = torch.randn(2, 12, TINY["vocab_size"], dtype=torch.float64)
    logits, grads = _logits_and_grads(fast, ids, weights, attention_mask=mask)
    ref_logits, ref_grads = _logits_and_grads(ref, ids, weights, attention_mask=mask)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-4, atol=1e-10)
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-10)
    with torch.no_grad():
        torch.testing.assert_close(fast.eval()(ids), ref.eval()(ids), rtol=1e-4, atol=1e-10)


def test_cache_and_kernel_cases_go_to_transformers_forward(monkeypatch):
    fast, ref = _pair(torch.float64)
    fast.eval(), ref.eval()
    ids = torch.randint(0, TINY["vocab_size"], (2, 6))
    with torch.no_grad():  # with a cache (generation) the patched mixers defer to transformers
        out = fast.net(input_ids=ids, use_cache=True)
        ref_out = ref.net(input_ids=ids, use_cache=True)
        torch.testing.assert_close(out.logits, ref_out.logits)
        generated = fast.net.generate(ids, max_new_tokens=3, do_sample=False)
        assert torch.equal(generated, ref.net.generate(ids, max_new_tokens=3, do_sample=False))

    mixer = fast.net.backbone.layers[0].mixer
    cpu, accel = torch.empty(1, 2, 16), torch.empty(1, 2, 16, device="meta")
    monkeypatch.setattr(ss, "KERNEL_PACKAGES_INSTALLED", True)  # as with mamba-ssm installed
    assert ss.use_transformers_forward(mixer, accel, None, {})  # kernels on the accelerator: untouched
    assert not ss.use_transformers_forward(mixer, cpu, None, {})  # mamba-ssm has no CPU kernels
    assert ss.use_transformers_forward(mixer, cpu, object(), {})  # a cache
    assert ss.use_transformers_forward(mixer, cpu, None, {"seq_idx": torch.zeros(1)})
    monkeypatch.setattr(ss, "KERNEL_PACKAGES_INSTALLED", False)
    assert not ss.use_transformers_forward(mixer, accel, None, {})  # no kernels: the parallel scan


def test_patched_model_deepcopies_and_pickles():
    fast, _ = _pair()
    ids = torch.randint(0, TINY["vocab_size"], (2, 9))
    buffer = io.BytesIO()
    torch.save(fast, buffer)
    buffer.seek(0)
    for clone in (copy.deepcopy(fast), torch.load(buffer, weights_only=False)):
        mixer = clone.net.backbone.layers[0].mixer
        assert mixer.forward.args[0] is mixer  # bound to the copy, not the original
        with torch.no_grad():
            torch.testing.assert_close(clone(ids), fast(ids))


def test_timing_fwd_bwd_seq128_batch4(capsys):
    """Not an assertion on speed: prints one fwd+bwd of each path at seq 128, batch 4, with the block
    shape of configs/compare/mamba_small.yaml (d_model 128, 5 layers; a 1000-token vocabulary)."""
    cfg = dict(d_model=128, n_layer=5, d_state=16, d_conv=4, expand=2, tie_embeddings=False, vocab_size=1000)
    torch.manual_seed(0)
    fast = MambaLM(**cfg, scan_impl="parallel")
    ref = MambaLM(**cfg, scan_impl="transformers")
    ref.load_state_dict(fast.state_dict())
    ids = torch.randint(0, cfg["vocab_size"], (4, 129))
    seconds, losses = {}, {}
    for name, model in (("parallel", fast), ("transformers", ref)):
        model.train()
        model(ids[:, :8]).sum().backward()  # warm-up (first-call overheads)
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        logits = model(ids[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss.backward()
        seconds[name], losses[name] = time.perf_counter() - start, loss.item()
    with capsys.disabled():
        print(f"\n[mamba fwd+bwd, seq 128, batch 4, d_model 128, 5 layers] parallel {seconds['parallel']:.3f} s, "
              f"transformers {seconds['transformers']:.3f} s "
              f"(x{seconds['transformers'] / seconds['parallel']:.1f}); losses {losses['parallel']:.6f} / "
              f"{losses['transformers']:.6f}")
    assert losses["parallel"] == pytest.approx(losses["transformers"], rel=1e-5)
