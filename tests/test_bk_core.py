"""Tests for the ResNet-BK core (causal resolvent-diagonal scan) and the ResNetBKNet model."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lightning_bench.models.bk_core import (
    bk_diagonal_noncausal,
    bk_diagonal_scan,
    bk_diagonal_sequential,
    bk_features,
)
from lightning_bench.models.resnet_bk_net import (
    BKConfig,
    MoEFeedForward,
    ResNetBKNet,
)

V_MAX = 3.0


def _random_v(*shape, dtype=torch.float64, seed=0):
    """Random potentials with a sizeable fraction sitting exactly on the +-v_max clamp."""
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=dtype) * 8 - 4).clamp(-V_MAX, V_MAX)


def _dense_leading_block_diag(v: torch.Tensor, z: complex) -> torch.Tensor:
    """g_i = [(H_{0..i} - zI)^{-1}]_{ii} by explicitly inverting each leading block.

    Independent of the recurrence: builds H = tridiag(1, -2 + v, 1) densely and uses
    torch.linalg.inv. v: (N,) float64.
    """
    n = v.shape[0]
    a = torch.diag(v.to(torch.complex128) - 2 - z)
    off = torch.ones(n - 1, dtype=torch.complex128)
    a = a + torch.diag(off, 1) + torch.diag(off, -1)
    return torch.stack([torch.linalg.inv(a[: i + 1, : i + 1])[i, i] for i in range(n)])


def _dense_full_diag(v: torch.Tensor, z: complex) -> torch.Tensor:
    n = v.shape[0]
    a = torch.diag(v.to(torch.complex128) - 2 - z)
    off = torch.ones(n - 1, dtype=torch.complex128)
    a = a + torch.diag(off, 1) + torch.diag(off, -1)
    return torch.diagonal(torch.linalg.inv(a))


# --------------------------------------------------------------------------- core


@pytest.mark.parametrize("n", [1, 2, 7, 64, 1000])
def test_scan_matches_sequential(n):
    v64 = _random_v(3, n, seed=n)
    assert (v64.abs() == V_MAX).any() or n < 7  # the clamp is exercised
    torch.testing.assert_close(
        bk_diagonal_scan(v64), bk_diagonal_sequential(v64), rtol=1e-10, atol=1e-12
    )
    v32 = v64.float()
    g_scan, g_seq = bk_diagonal_scan(v32), bk_diagonal_sequential(v32)
    assert g_scan.dtype == g_seq.dtype == torch.complex64
    torch.testing.assert_close(g_scan, g_seq, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("z", [1j, 0.5 + 0.3j, -1.0 + 2.0j, 0.05j])
def test_scan_matches_sequential_other_shifts(z):
    v = _random_v(2, 257, seed=3)
    torch.testing.assert_close(
        bk_diagonal_scan(v, z), bk_diagonal_sequential(v, z), rtol=1e-9, atol=1e-12
    )


@pytest.mark.parametrize("z", [1j, 0.7 + 0.4j])
def test_against_dense_inverse_of_leading_blocks(z):
    v = _random_v(12, seed=1)
    expected = _dense_leading_block_diag(v, z)
    torch.testing.assert_close(bk_diagonal_sequential(v, z), expected, rtol=1e-11, atol=1e-13)
    torch.testing.assert_close(bk_diagonal_scan(v, z), expected, rtol=1e-11, atol=1e-13)
    # complex64 path is right too, to single precision
    torch.testing.assert_close(
        bk_diagonal_scan(v.float(), z), expected.to(torch.complex64), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("impl", ["scan", "sequential"])
def test_noncausal_is_exact_full_diagonal(impl):
    v = _random_v(11, seed=2)
    torch.testing.assert_close(
        bk_diagonal_noncausal(v, 1j, impl=impl), _dense_full_diag(v, 1j), rtol=1e-11, atol=1e-13
    )


def test_core_is_causal_and_noncausal_is_not():
    v = _random_v(2, 40, seed=4)
    g = bk_diagonal_scan(v)
    G = bk_diagonal_noncausal(v)
    for j in (1, 17, 39):
        v2 = v.clone()
        v2[:, j] += 1.0
        # Earlier prefixes are computed from exactly the same numbers: bitwise equal.
        assert torch.equal(bk_diagonal_scan(v2)[:, :j], g[:, :j])
        assert (bk_diagonal_scan(v2)[:, j] - g[:, j]).abs().min() > 1e-6
        assert (bk_diagonal_noncausal(v2)[:, j - 1] - G[:, j - 1]).abs().min() > 1e-6


def test_long_sequence_extreme_potentials_stay_finite_and_bounded():
    n = 8192
    alt = V_MAX * (1 - 2 * (torch.arange(n) % 2)).float()
    v = torch.stack(
        [torch.full((n,), V_MAX), torch.full((n,), -V_MAX), alt, _random_v(n, dtype=torch.float32)]
    )
    for z in (1j, 0.5j):
        g = bk_diagonal_scan(v, z)
        assert torch.isfinite(torch.view_as_real(g)).all()
        assert g.abs().max().item() <= 1 / z.imag * (1 + 1e-5)
        assert (g.imag > 0).all()  # the bound's proof: Im g stays in the upper half-plane
        # float32 scan vs float64 reference over the whole length (normalisation works)
        ref = bk_diagonal_sequential(v.double(), z)
        assert (g.to(torch.complex128) - ref).abs().max().item() < 1e-5
    g_seq = bk_diagonal_sequential(v)
    assert torch.isfinite(torch.view_as_real(g_seq)).all()


def test_gradcheck_scan_float64():
    v = _random_v(2, 9, seed=5).requires_grad_(True)

    def fn(x):
        return torch.view_as_real(bk_diagonal_scan(x, 0.3 + 1j))

    assert torch.autograd.gradcheck(fn, (v,), eps=1e-6, atol=1e-8)


def test_scan_gradient_matches_sequential_gradient():
    v = _random_v(2, 300, seed=6)
    w = torch.randn(2, 300, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    grads = []
    for fn in (bk_diagonal_scan, bk_diagonal_sequential):
        x = v.clone().requires_grad_(True)
        (torch.view_as_real(fn(x)) * w).sum().backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-9, atol=1e-12)


def test_bk_features_shape_dtype_clamp():
    v = _random_v(3, 5, dtype=torch.float32)
    f = bk_features(v)
    assert f.shape == (3, 5, 2) and f.dtype == torch.float32
    g = bk_diagonal_scan(v)
    torch.testing.assert_close(f, torch.stack([g.real, g.imag], -1))
    assert bk_features(v.to(torch.bfloat16)).dtype == torch.bfloat16
    # tiny Im z -> single-site resonance g_0 = 1/(v - 2 - 0.01j) reaches 100j at v = 2;
    # the clamp must bite there and leave small values alone
    vr = torch.cat([torch.linspace(-3, 3, 200), torch.tensor([2.0])]).double()
    vr = vr.unsqueeze(-1)  # 201 sequences of length 1
    fr = bk_features(vr, z=0.01j, feature_clamp=10.0)
    raw = torch.view_as_real(1 / (vr - 2 - 0.01j))
    assert fr.abs().max().item() == 10.0 and raw.abs().max().item() > 99
    small = raw.abs() < 10
    torch.testing.assert_close(fr[small], raw[small])
    with pytest.raises(ValueError, match="unknown BK impl"):
        bk_features(v, impl="fast")


# --------------------------------------------------------------------------- model


def _tiny_config(**kw):
    base = dict(vocab_size=37, d_model=16, n_layers=2, max_seq_len=16, num_experts=4, top_k=1)
    base.update(kw)
    return BKConfig(**base)


@pytest.mark.parametrize("top_k", [1, 2])
def test_whole_network_is_causal(top_k):
    torch.manual_seed(0)
    model = ResNetBKNet(_tiny_config(top_k=top_k)).eval()
    ids = torch.randint(0, 37, (2, 12))
    with torch.no_grad():
        base, _ = model(ids)
        for j in range(1, 12):
            ids2 = ids.clone()
            ids2[:, j] = (ids2[:, j] + 1 + torch.arange(2)) % 37
            out, _ = model(ids2)
            # Positions < j must not see token j. (Tolerance, not bitwise: expert GEMMs run
            # on different token batches, so BLAS blocking may differ in the last ulp.)
            torch.testing.assert_close(out[:, :j], base[:, :j], rtol=0, atol=1e-6)
            assert (out[:, j] - base[:, j]).abs().max() > 1e-4  # the change is visible


def test_noncausal_option_does_leak():
    """Guards the causality test itself: the same probe detects the future-dependent form."""
    torch.manual_seed(0)
    model = ResNetBKNet(_tiny_config(causal=False, bk_scale=50.0)).eval()
    ids = torch.randint(0, 37, (2, 12))
    with torch.no_grad():
        base, _ = model(ids)
        ids2 = ids.clone()
        ids2[:, 8] = (ids2[:, 8] + 1) % 37
        out, _ = model(ids2)
    assert (out[:, :8] - base[:, :8]).abs().max() > 1e-6


def test_sequential_and_scan_models_agree():
    torch.manual_seed(0)
    m_scan = ResNetBKNet(_tiny_config()).eval()
    m_seq = ResNetBKNet(_tiny_config(scan_impl="sequential")).eval()
    m_seq.load_state_dict(m_scan.state_dict())
    ids = torch.randint(0, 37, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(m_scan(ids)[0], m_seq(ids)[0], rtol=1e-4, atol=1e-5)


def test_router_gets_task_gradient_with_top1():
    torch.manual_seed(0)
    model = ResNetBKNet(_tiny_config(top_k=1, dropout=0.0))
    ids = torch.randint(0, 37, (2, 16))
    logits, aux = model(ids)
    # Task loss alone (no load-balancing term): the router must still learn.
    F.cross_entropy(logits[:, :-1].reshape(-1, 37), ids[:, 1:].reshape(-1)).backward()
    for block in model.blocks:
        moe = block.layer.moe
        # Relative threshold: a renormalised top-1 gate (== 1) leaves only ~1e-10 of
        # rounding noise here, versus ~5e-2 of the expert weights' gradient norm.
        expert_grad = sum(e[3].weight.grad.norm() for e in moe.experts)
        assert moe.router.weight.grad.norm() > 1e-3 * expert_grad
    # And the auxiliary loss alone also reaches the router.
    model.zero_grad()
    _, aux = model(ids)
    aux.backward()
    for block in model.blocks:
        assert block.layer.moe.router.weight.grad.abs().sum() > 0


def _hand_moe(top_k):
    moe = MoEFeedForward(d_model=2, num_experts=2, top_k=top_k, dropout=0.0)
    with torch.no_grad():
        moe.router.weight.copy_(torch.eye(2))
        moe.router.bias.zero_()
    # router logits per token: (2, 0), (0, 1), (1, 0)
    x = torch.tensor([[[2.0, 0.0], [0.0, 1.0], [1.0, 0.0]]])
    return moe, x


def test_load_balance_loss_hand_computed():
    e = math.e
    p = [  # softmax of the logits above
        (e**2 / (e**2 + 1), 1 / (e**2 + 1)),
        (1 / (1 + e), e / (1 + e)),
        (e / (e + 1), 1 / (e + 1)),
    ]
    P = [sum(t[k] for t in p) / 3 for k in range(2)]
    # top-1 picks experts 0, 1, 0 -> f = (2/3, 1/3)
    expected_top1 = 2 * (2 / 3 * P[0] + 1 / 3 * P[1])
    moe, x = _hand_moe(top_k=1)
    out, aux = moe(x)
    assert aux.item() == pytest.approx(expected_top1, rel=1e-6)
    assert aux.item() == pytest.approx(1.084622, rel=1e-5)
    # output = raw probability of the chosen expert * that expert (Switch gating)
    with torch.no_grad():
        chosen = [0, 1, 0]
        for t in range(3):
            ref = p[t][chosen[t]] * moe.experts[chosen[t]](x[0, t])
            torch.testing.assert_close(out[0, t], ref, rtol=1e-5, atol=1e-6)
    # top-2 with 2 experts: every expert gets half the assignments -> loss = E * 0.5 * sum P = 1
    moe2, x2 = _hand_moe(top_k=2)
    out2, aux2 = moe2(x2)
    assert aux2.item() == pytest.approx(1.0, rel=1e-6)
    with torch.no_grad():
        for t in range(3):  # renormalised gates over both experts = the softmax itself
            ref = p[t][0] * moe2.experts[0](x2[0, t]) + p[t][1] * moe2.experts[1](x2[0, t])
            torch.testing.assert_close(out2[0, t], ref, rtol=1e-5, atol=1e-6)


def test_aux_loss_is_sum_over_layers():
    torch.manual_seed(0)
    model = ResNetBKNet(_tiny_config(n_layers=3)).eval()
    ids = torch.randint(0, 37, (1, 10))
    per_layer = []
    hooks = [
        b.layer.moe.register_forward_hook(lambda m, i, o: per_layer.append(o[1].item()))
        for b in model.blocks
    ]
    with torch.no_grad():
        _, aux = model(ids)
    for h in hooks:
        h.remove()
    assert len(per_layer) == 3
    assert aux.item() == pytest.approx(sum(per_layer), rel=1e-6)
    # sum_e f_e P_e <= max_e P_e <= 1, so each term is in (0, E]
    assert all(0.0 < v <= 4.0 + 1e-6 for v in per_layer)


def test_position_embedding_modes():
    torch.manual_seed(0)
    ids = torch.randint(0, 37, (1, 40))  # longer than max_seq_len=16
    learned = ResNetBKNet(_tiny_config(position_embedding="learned"))
    with pytest.raises(ValueError, match="exceeds max_seq_len=16"):
        learned(ids)
    learned(ids[:, :16])  # at the cap is fine
    none = ResNetBKNet(_tiny_config(position_embedding="none")).eval()
    logits, aux = none(ids)
    assert logits.shape == (1, 40, 37) and torch.isfinite(logits).all()
    with pytest.raises(ValueError, match="position_embedding"):
        _tiny_config(position_embedding="rope")


def test_config_validation():
    with pytest.raises(ValueError, match="top_k"):
        BKConfig(vocab_size=10, num_experts=2, top_k=3)
    with pytest.raises(ValueError, match="z_imag"):
        BKConfig(vocab_size=10, z_imag=0.0)
    with pytest.raises(ValueError, match="scan_impl"):
        BKConfig(vocab_size=10, scan_impl="cuda")


def test_reference_parameter_count():
    """Reference defaults (vocab 30k, d 64, 4 layers, 4 experts, n_seq 128).

    Breakdown: token emb 30000*64 = 1,920,000; learned positions 128*64 = 8,192;
    per layer 66,949 (LayerNorm 128, v_proj 65, bk_out 192, router 260,
    4 experts * 16,576) -> 267,796; final LayerNorm 128; untied lm_head with bias
    64*30000 + 30000 = 1,950,000. Total 4,146,116 ~ the design's 4.15M.
    (Without the lm_head bias it would be 4,116,116 ~ 4.12M.)
    """
    model = ResNetBKNet(BKConfig(vocab_size=30000))
    n = model.num_parameters()
    print(f"ResNetBKNet reference default: {n:,} parameters")
    assert n == 4_146_116
    assert abs(n - 4.15e6) / 4.15e6 < 0.005
    assert model.num_parameters(exclude_embeddings=True) == n - 1_920_000 - 8_192
