"""The sampling maskers (sparsity/masking/sampled.py) against hand computations and their statistical promises:
MagicPIG's collision probability and unbiasedness, random sampling's counter-based draws, vAttention's budget
and its (epsilon, delta) coverage, and the independence of a row's entries from its batch and chunking."""

import math

import pytest
import torch

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity.masking import MaskContext, MaskerStack
from lightning_bench.sparsity.masking import sampled
from lightning_bench.sparsity.masking.base import uniform
from lightning_bench.sparsity.masking.fixed import Local, Sink
from lightning_bench.sparsity.masking.sampled import (AdaptiveSampling, MagicPig, RandomSampling,
                                                      collision_probability, sample_budget)


def make_ctx(q, k, pad=(), mask=None, layer_idx=0, seed=0, scale=None, lo=0, hi=None):
    """The MaskContext the stack builds for query rows lo:hi of a call: q (B, Hq, c, D) are the last c of the
    S key slots of k (B, Hkv, S, D) (c = 1: a decode step, c = S: a prefill); row b's first pad[b] slots are
    left padding (rank -1, never visible); a chunk sees the keys up to its last query's slot."""
    B, Hq, c, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    hi = c if hi is None else hi
    end = S - c + hi
    valid = torch.ones(B, S, dtype=torch.bool)
    for b, n in enumerate(pad):
        valid[b, :n] = False
    rank = (valid.long().cumsum(-1) - 1).masked_fill(~valid, -1)
    queries = q.float().reshape(B, Hkv, Hq // Hkv, c, D)[:, :, :, lo:hi]
    keys = k.float()[:, :, :end]
    scale = D ** -0.5 if scale is None else scale
    scores = torch.matmul(queries * scale, keys.transpose(-1, -2).unsqueeze(2))
    visible = torch.ones(hi - lo, end, dtype=torch.bool).tril_(end - (hi - lo)) & valid[:, None, None, None, :end]
    scores = scores.masked_fill(~visible, float("-inf"))
    return MaskContext(scores, visible, rank[:, :end].view(B, 1, 1, 1, end),
                       rank[:, S - c + lo:S - c + hi].view(B, 1, 1, hi - lo, 1), queries, keys,
                       torch.zeros_like(scores) if mask is None else mask, layer_idx, seed)


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def weights(ctx):
    """e_j = exp(s_j - max visible s), float64."""
    return torch.exp(ctx.scores - ctx.scores.amax(-1, keepdim=True)).double()


# ---- magic_pig ---------------------------------------------------------------------------------------------
def test_collision_probability_values():
    assert float(collision_probability(0.0, 8, 75)) == pytest.approx(0.2543824, abs=1e-6)
    assert float(collision_probability(1.0, 8, 75)) == 1.0
    assert float(collision_probability(-1.0, 8, 75)) == 0.0
    assert float(collision_probability(0.5, 8, 75)) == pytest.approx(1 - (1 - (2 / 3) ** 8) ** 75, rel=1e-12)
    assert float(collision_probability(0.5, 8, 75)) == pytest.approx(0.94946, abs=1e-5)


def test_magic_pig_hand_example_values_when_both_keys_collide():
    """center off, q = (1, 0), k1 = (1, 0), k2 = (0, 2): M = 2, c1 = 0.5 -> p = 0.94946, c2 = 0 -> p = 0.25438."""
    q = torch.tensor([1.0, 0.0]).view(1, 1, 1, 2)
    k = torch.tensor([[1.0, 0.0], [0.0, 2.0]]).view(1, 1, 2, 2)
    both = None
    for seed in range(64):  # the first projection under which the query's code meets both keys' in a table
        entries = MagicPig(lsh_k=8, lsh_l=75, center=False, seed=seed, stats_block=1).entries(make_ctx(q, k))
        if bool((entries > 0).all()):
            both = entries.flatten()
            break
    assert both is not None
    assert both.tolist() == pytest.approx([0.94946, 0.25438], abs=1e-5)


def test_magic_pig_is_unbiased_and_collides_at_its_probability():
    """Over 400 projections (seeds) the mean of sum_kept e/p is within 3 standard errors of sum e, a kept key's
    value is p of its centred cosine (computed here), and one key's collision rate is within 3 sigma of its p."""
    D, S, trials, K, L = 8, 48, 400, 6, 10
    q, k = randn(1, 1, 1, D, seed=1), randn(1, 1, S, D, seed=2) + 0.3
    ctx = make_ctx(q, k)
    e = weights(ctx).flatten()
    mean = k[0, 0].double().mean(0)
    centred = k[0, 0].double() - mean
    cos = centred @ (q.flatten().double() - mean) / ((q.flatten().double() - mean).norm() * centred.norm(dim=-1).max())
    p = collision_probability(cos, K, L)
    estimates, hits = [], []
    for seed in range(trials):
        entries = MagicPig(lsh_k=K, lsh_l=L, seed=seed, stats_block=1).entries(ctx).double().flatten()
        kept = entries > 0
        torch.testing.assert_close(entries[kept], p[kept], rtol=1e-5, atol=1e-6)
        estimates.append(float((e[kept] / entries[kept]).sum()))
        hits.append(kept)
    estimates = torch.tensor(estimates, dtype=torch.float64)
    assert abs(float(estimates.mean() - e.sum())) <= 3 * float(estimates.std()) / math.sqrt(trials)
    assert float(p.min()) < 0.1 and float(p.max()) > 0.5  # p spans a range where a wrong one would show
    key = int((p - 0.5).abs().argmin())
    rate = torch.stack(hits)[:, key].double().mean()
    assert abs(float(rate - p[key])) <= 3 * math.sqrt(float(p[key] * (1 - p[key])) / trials)


def test_magic_pig_keeps_only_free_visible_keys():
    q, k = randn(2, 4, 12, 8, seed=3), randn(2, 2, 12, 8, seed=4)
    earlier = torch.zeros(2, 2, 2, 12, 12)
    earlier[..., :3] = 1.0
    ctx = make_ctx(q, k, pad=(0, 4))
    ctx.mask = earlier.masked_fill(~ctx.visible, 0.0)
    entries = MagicPig(lsh_k=2, lsh_l=16, stats_block=1).entries(ctx)
    assert bool((entries > 0).any())
    assert not bool((entries > 0)[~ctx.free].any())


def test_magic_pig_codes_do_not_depend_on_the_block_of_tables(monkeypatch):
    ctx = make_ctx(randn(2, 4, 30, 8, seed=25), randn(2, 2, 30, 8, seed=26), pad=(0, 5))
    whole = MagicPig(lsh_k=5, lsh_l=13, stats_block=1).entries(ctx)
    monkeypatch.setattr(sampled, "CODE_ELEMENTS", 7)  # one table per block
    assert bool((whole > 0).any()) and torch.equal(MagicPig(lsh_k=5, lsh_l=13, stats_block=1).entries(ctx), whole)


def test_magic_pig_cached_key_codes_give_the_entries_of_a_fresh_masker(monkeypatch):
    """A prefill chunk then decoding steps through ONE masker (its key signatures cached, the new keys hashed)
    equal a fresh masker per call, also across a change of statistics (stats_block 8: positions 8 and 16) and
    when another example's keys follow (its codes recomputed, not reused)."""
    q, k = randn(1, 4, 20, 8, seed=30), randn(1, 2, 20, 8, seed=31)
    other_q, other_k = randn(1, 4, 20, 8, seed=32), randn(1, 2, 20, 8, seed=33)
    cached = MagicPig(lsh_k=4, lsh_l=12, stats_block=8)
    calls = [(q, k, 0, 12)] + [(q, k, t, t + 1) for t in range(12, 20)] + [(other_q, other_k, 0, 20)]
    for queries, keys, lo, hi in calls:
        ctx = make_ctx(queries, keys, lo=lo, hi=hi)
        mine = cached.entries(ctx)
        fresh = MagicPig(lsh_k=4, lsh_l=12, stats_block=8).entries(ctx)
        assert bool((fresh > 0).any()) and torch.equal(mine, fresh), (lo, hi)
    assert cached.cached_keys(0) == 20  # the last call's codes, of its 20 keys
    monkeypatch.setattr(sampled, "CACHED_KEY_ELEMENTS", 10)  # a cache larger than the bound is not kept
    ctx = make_ctx(q, k, lo=0, hi=20)
    assert torch.equal(cached.entries(ctx), MagicPig(lsh_k=4, lsh_l=12, stats_block=8).entries(ctx))
    assert cached.cached_keys(0) == 0


# ---- random_sampling ---------------------------------------------------------------------------------------
def test_random_sampling_draws_by_rank_and_its_uniform_value_cancels():
    B, Hkv, G, S, D, r = 1, 2, 2, 40, 8, 0.2
    q, k, v = randn(B, Hkv * G, S, D, seed=5), randn(B, Hkv, S, D, seed=6), randn(B, Hkv, S, D, seed=7)
    ctx = make_ctx(q, k, layer_idx=3, seed=11)
    m = RandomSampling(sampling_rate=r).entries(ctx)
    assert set(m.unique().tolist()) == {0.0, torch.tensor(r).item()}  # r in float32
    assert not bool((m > 0)[~ctx.visible.expand_as(m)].any())
    for h in range(Hkv * G):  # the draws by hand: draw d of (layer, head, t) is the key of rank floor(u (t + 1))
        for t in range(S):
            ranks = {math.floor(float(uniform(11, 3, h, t, d)) * (t + 1)) for d in range(math.floor(r * (t + 1)))}
            assert set(torch.nonzero(m[0, h // G, h % G, t]).flatten().tolist()) == ranks
    e = weights(ctx)
    w = torch.where(m > 0, e / m.double().clamp(min=1e-30), 0.0)  # the stack's estimator
    o = (w @ v.double().unsqueeze(2)) / w.sum(-1, keepdim=True)
    drawn = torch.where(m > 0, e, 0.0)  # softmax attention restricted to the drawn keys
    reference = (drawn / drawn.sum(-1, keepdim=True)) @ v.double().unsqueeze(2)
    rows = (m > 0).any(-1)
    torch.testing.assert_close(o[rows], reference[rows], rtol=1e-12, atol=1e-12)
    assert not bool(rows[..., :4].any()) and bool(rows[..., 4:].all())  # floor(0.2 n_t) = 0 below n_t = 5


# ---- adaptive_sampling -------------------------------------------------------------------------------------
def test_adaptive_budget_formula():
    assert int(sample_budget(1.0, 200.0, 100, 0.1, 0.05, 2, one_sided=True)) == 67  # (1.6449 * 100 / 20)^2 = 67.6
    assert int(sample_budget(1.0, 200.0, 100, 0.1, 0.05, 2)) == 96  # two-sided: (1.9600 * 100 / 20)^2 = 96.04
    assert int(sample_budget(0.0, 200.0, 100, 0.1, 0.05, 5)) == 5  # sigma 0: the base sample size
    assert int(sample_budget(50.0, 200.0, 100, 0.1, 0.05, 5)) == 100  # at most every residual key


def test_adaptive_constant_row_takes_the_base_budget():
    """S = 20 decode, all scores equal (sigma = 0): sink 2 + local 2 + one key in the middle kept earlier;
    R = ranks [2, 18) less rank 10, n_s = 15, b0 = max(2, floor(0.25 * 15)) = 3 keys of value 3/15."""
    q, k = torch.zeros(1, 2, 1, 4), torch.zeros(1, 1, 20, 4)
    ctx = make_ctx(q, k)
    earlier = (Sink(2).entries(ctx) + Local(2).entries(ctx)).clamp(0, 1)
    earlier[..., 10] = 1.0
    ctx.mask = earlier
    entries = AdaptiveSampling(base_rate_sampling=0.25, init_offset=2, local_offset=2).entries(ctx)
    for row in entries.view(2, 20):
        kept = torch.nonzero(row).flatten().tolist()
        assert len(kept) == 3 and all(2 <= j < 18 and j != 10 for j in kept)
        assert row[kept].tolist() == pytest.approx([3 / 15] * 3)


def test_adaptive_adds_nothing_without_residual_keys():
    ctx = make_ctx(randn(1, 1, 1, 4, seed=8), randn(1, 1, 200, 4, seed=9))
    assert not bool(AdaptiveSampling().entries(ctx).any())  # 200 keys, offsets 128 + 128


def coverage(masker, trials=400, S=2032, spread=0.6):
    """|D^ - D| / D over `trials` seeds of the stack (sink 16 + local 16 exact, the rest lognormal weights
    exp(N(0, spread^2))) and the budgets drawn."""
    q, k = torch.ones(1, 1, 1, 1), randn(1, 1, S, 1, seed=10) * spread
    errors, budgets = [], []
    for seed in range(trials):
        ctx = make_ctx(q, k, scale=1.0, seed=seed)
        ctx.mask = (Sink(16).entries(ctx) + Local(16).entries(ctx)).clamp(0, 1)
        entries = masker.entries(ctx)
        m = (ctx.mask + entries).clamp(0, 1).double()
        e = weights(ctx)
        errors.append(float((torch.where(m > 0, e / m.clamp(min=1e-30), 0.0).sum() - e.sum()) / e.sum()))
        budgets.append(int((entries > 0).sum()))
    return torch.tensor(errors), budgets


def test_adaptive_meets_epsilon_delta_on_lognormal_rows():
    """n_s = 2000, epsilon = delta = 0.1, 400 fixed seeds: |D^ - D| <= epsilon D in at least 1 - delta of the
    trials, with 3 binomial standard errors of margin (the noise of sigma^ from the base sample costs a few points
    on heavier tails). The hub's one-sided z meets each one-sided bound at that level, the two-sided at ~1 - 2 delta."""
    epsilon, delta, trials = 0.1, 0.1, 400
    margin = 3 * math.sqrt(delta * (1 - delta) / trials)
    settings = dict(base_rate_sampling=0.02, epsilon=epsilon, delta=delta, init_offset=16, local_offset=16)
    errors, budgets = coverage(AdaptiveSampling(**settings), trials)
    assert min(budgets) >= 40 and 50 < sum(budgets) / trials < 2000  # adaptive: b0 = 40 < b < n_s
    assert float((errors.abs() <= epsilon).double().mean()) >= 1 - delta - margin
    errors, _ = coverage(AdaptiveSampling(**settings, one_sided=True), trials)
    assert float((errors <= epsilon).double().mean()) >= 1 - delta - margin
    assert float((errors >= -epsilon).double().mean()) >= 1 - delta - margin


def test_adaptive_with_replacement_gives_the_hubs_value():
    q, k = randn(1, 1, 1, 4, seed=12), randn(1, 1, 300, 4, seed=13)
    ctx = make_ctx(q, k)
    exact = AdaptiveSampling(init_offset=10, local_offset=10).entries(ctx)
    drawn = AdaptiveSampling(init_offset=10, local_offset=10, replacement=True).entries(make_ctx(q, k))
    budget, value = int((exact > 0).sum()), float(exact.max())
    assert value == pytest.approx(budget / 280)
    distinct = torch.nonzero(drawn.flatten()).flatten()
    assert 0 < len(distinct) < budget  # repeats collapse
    assert bool(((distinct >= 10) & (distinct < 290)).all()) and set(drawn[drawn > 0].tolist()) == {value}


# ---- every sampling masker ---------------------------------------------------------------------------------
MASKERS = {"random_sampling": lambda: RandomSampling(0.3),
           "magic_pig": lambda: MagicPig(lsh_k=3, lsh_l=8, stats_block=4),
           "adaptive_sampling": lambda: AdaptiveSampling(base_rate_sampling=0.2, init_offset=2, local_offset=2)}


@pytest.mark.parametrize("name", MASKERS)
def test_a_rows_entries_do_not_depend_on_its_batch(name):
    """Prefill of row x (14 tokens) alone, and left-padded by 6 garbage slots next to a 20-token row."""
    Hkv, G, D, n, pad = 2, 2, 8, 14, 6
    qx, kx = randn(1, Hkv * G, n, D, seed=14), randn(1, Hkv, n, D, seed=15)
    q = torch.cat([randn(1, Hkv * G, n + pad, D, seed=16), torch.cat([randn(1, Hkv * G, pad, D, seed=17), qx], 2)])
    k = torch.cat([randn(1, Hkv, n + pad, D, seed=18), torch.cat([randn(1, Hkv, pad, D, seed=19), kx], 2)])
    alone = MASKERS[name]().entries(make_ctx(qx, kx, layer_idx=1, seed=5))
    batched = MASKERS[name]().entries(make_ctx(q, k, pad=(0, pad), layer_idx=1, seed=5))
    assert bool((alone > 0).any())
    assert torch.equal(batched[1, :, :, pad:, pad:], alone[0])
    assert not bool(batched[1, :, :, :pad].any()) and not bool(batched[1, ..., :pad].any())


@pytest.mark.parametrize("name", ["random_sampling", "adaptive_sampling", "magic_pig"])
def test_a_rows_entries_do_not_depend_on_the_chunking(name):
    Hkv, G, D, S = 2, 2, 8, 24
    q, k = randn(1, Hkv * G, S, D, seed=20), randn(1, Hkv, S, D, seed=21)
    whole = MASKERS[name]().entries(make_ctx(q, k))
    for lo, hi in [(0, 7), (7, 8), (8, 24)]:
        chunk = MASKERS[name]().entries(make_ctx(q, k, lo=lo, hi=hi))
        if name == "magic_pig":  # the same keys kept; p from a product of another shape: float rounding apart
            assert torch.equal(chunk > 0, whole[..., lo:hi, :hi] > 0)
            torch.testing.assert_close(chunk, whole[..., lo:hi, :hi], atol=1e-6, rtol=1e-6)
        else:
            assert torch.equal(chunk, whole[..., lo:hi, :hi])


@pytest.mark.parametrize("name", MASKERS)
def test_the_stack_runs_each_sampling_masker(name):
    B, Hq, Hkv, S, D = 2, 4, 2, 64, 8
    q, k, v = randn(B, Hq, S, D, seed=22), randn(B, Hkv, S, D, seed=23), randn(B, Hkv, S, D, seed=24)
    dense = torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1),
                                                             is_causal=True).transpose(1, 2)
    stack = MaskerStack([Sink(4), Local(4), MASKERS[name]()], seed=1)
    out = stack.attend(0, q, k, v, None, None, None, dense)
    figures = stack.figures()
    assert bool(torch.isfinite(out).all()) and 0 < figures["density"] < 1 and figures["attention_error"] > 0


def test_parameters_are_checked():
    for make in [lambda: RandomSampling(0), lambda: RandomSampling(1.5), lambda: MagicPig(lsh_k=0),
                 lambda: MagicPig(lsh_l=257), lambda: MagicPig(lsh_k=2.5), lambda: AdaptiveSampling(epsilon=0),
                 lambda: AdaptiveSampling(delta=1), lambda: AdaptiveSampling(base_rate_sampling=0),
                 lambda: AdaptiveSampling(init_offset=-1), lambda: AdaptiveSampling(local_offset=1.5)]:
        with pytest.raises(ConfigError):
            make()
    pig = MaskerStack.parse("magic_pig:4:32:center=false").maskers[0]
    assert (pig.lsh_k, pig.lsh_l, pig.center, pig.seed) == (4, 32, False, 0)
    assert MaskerStack.parse("adaptive_sampling:0.1:0.2:0.3:0.01:64").maskers[0].params() == {
        "base_rate_sampling": 0.1, "epsilon": 0.2, "delta": 0.3, "init_offset": 0.01, "local_offset": 64,
        "replacement": False, "one_sided": False}
