"""KV-cache sparsity: statistics, importance functions and the eviction mechanism, each against a
reference computed differently (eager attention maps, hand computations, dense runs with masks)."""

import math

import pytest
import torch

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity import (METHODS, AttentionRecorder, KVEngine, LayerView, Needs, budget,
                                      generate_with_eviction, make_method, prefill, select_slots)
from lightning_bench.sparsity import capture
from lightning_bench.sparsity.methods import CABV4, KNorm, SnapKV, StreamingLLM, key_uniqueness

EVICTING = sorted(m for m in METHODS if m != "dense")


def tiny_llama(layers=2, seed=0, attn="sdpa"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None, attn_implementation=attn)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def net():
    return tiny_llama()


def batch(T=20, pad=3, seed=1, n_new=6):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 128, (2, T), generator=g)
    mask = torch.ones_like(ids)
    mask[0, :pad] = 0
    ref = torch.randint(0, 128, (2, n_new), generator=g)
    return ids, mask, ref


def full_forward_nll(net, ids, mask, ref, mask_4d=None):
    """Teacher-forced NLL of `ref` from ONE dense forward over context + continuation (no cache)."""
    seq = torch.cat([ids, ref], 1)
    m2 = torch.cat([mask, torch.ones_like(ref)], 1)
    pos = (m2.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = net(input_ids=seq, attention_mask=m2 if mask_4d is None else mask_4d, position_ids=pos).logits
    T, N = ids.shape[1], ref.shape[1]
    logp = torch.log_softmax(logits[:, T - 1:T + N - 1].float(), -1)
    return -logp.gather(-1, ref[..., None])[..., 0]


def view_of(keys, window_rows=None, keep=None, group_size=1):
    B, H, S, _ = keys.shape
    valid = torch.ones(B, S, dtype=torch.bool)
    stats = {} if window_rows is None else {"window": window_rows}
    return LayerView(layer_idx=0, keys=keys, values=keys.clone(), positions=torch.arange(S).expand(B, H, S),
                     valid=valid, keep=torch.full((B,), S if keep is None else keep), group_size=group_size,
                     stats=stats)


def eager_maps(net, ids, mask):
    """Per layer, the eager attention probabilities (B, Hq, T, T), padding query rows zeroed."""
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        net.set_attn_implementation("eager")
        try:
            maps = net(input_ids=ids, attention_mask=mask, position_ids=pos, output_attentions=True).attentions
        finally:
            net.set_attn_implementation("sdpa")
    return [att.float() * mask[:, None, :, None] for att in maps]


# ---- statistics against eager attention maps -------------------------------------------------
@pytest.mark.parametrize("needs", [Needs(window=4), Needs(cumulative=True), Needs(cumulative=True, two_hop=True)],
                         ids=["window", "cumulative", "two_hop"])
def test_capture_computes_only_the_declared_statistic_and_it_equals_eager_attention(net, needs, monkeypatch):
    """Prefill of 10 tokens then 2 more through `KVEngine.feed` (a window rolls over, cum accumulates), in chunks of 5
    query rows (the cumulative pass runs backwards over several chunks); against ONE eager forward of all 12."""
    monkeypatch.setattr(capture, "CHUNK_ELEMENTS", 2 * 4 * 12 * 5)  # B * Hq * S * 5 rows
    ids, mask, _ = batch(T=12, pad=3)
    rec = AttentionRecorder(needs)
    engine = KVEngine(net, rec)
    logits = engine.prefill(ids[:, :10], mask[:, :10])
    assert net.config._attn_implementation == "sdpa"  # restored
    pos = (mask[:, :10].cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        plain = net(input_ids=ids[:, :10], attention_mask=mask[:, :10], position_ids=pos, logits_to_keep=1).logits
    assert torch.equal(logits, plain[:, -1])  # the capture does not change the model's outputs
    two_hop = [rec.stats(i).get("frc") for i in range(2)]  # after the prefill: the 2-hop term of one call
    engine.feed(ids[:, 10:])
    B, T = ids.shape
    for layer, att in enumerate(eager_maps(net, ids, mask)):
        stats = rec.stats(layer)
        assert set(stats) == set(needs.names())
        grouped = att.view(B, 2, 2, T, T)  # (B, kv heads, group, queries, keys)
        if needs.window:  # the last 4 query rows, per query head
            torch.testing.assert_close(stats["window"], att[:, :, -4:], atol=1e-5, rtol=1e-5)
        if needs.cumulative:  # h2o: column sums over the queries and the group's heads
            torch.testing.assert_close(stats["cum"], grouped.sum(2).sum(2), atol=1e-5, rtol=1e-5)
            assert stats["cum"][0, :, :3].abs().max() == 0  # padding keys receive nothing
        if needs.two_hop:  # cab_v3's R = c^T A on the group-mean graph of the prefill
            mean = grouped[:, :, :, :10, :10].mean(2)
            expected = torch.einsum("bhk,bhks->bhs", mean.sum(2), mean)
            torch.testing.assert_close(two_hop[layer], expected, atol=1e-5, rtol=1e-5)


def test_key_only_methods_capture_nothing():
    for name in ("dense", "knorm", "streaming_llm", "random", "local_strided", "cab_v4"):
        assert AttentionRecorder.for_method(make_method(name)) is None, name  # the model's own attention runs
    assert make_method("tova").needs == Needs(window=1)
    assert make_method("snapkv", window=16).needs == Needs(window=16)


# ---- importance functions by hand ------------------------------------------------------------
def test_tova_is_the_last_query_averaged_over_all_heads_and_evicts_the_same_tokens_everywhere(net):
    ids, mask, _ = batch(T=12, pad=3)
    rec = AttentionRecorder.for_method(make_method("tova"))
    state, _ = prefill(net, ids, mask, rec)
    maps = eager_maps(net, ids, mask)
    for layer in range(2):
        layer_cache = state.cache.layers[layer]
        view = LayerView(layer, layer_cache.keys, layer_cache.values, state.positions[layer], state.valid,
                         torch.tensor([5, 5]), 2, rec.stats(layer))
        score = make_method("tova").priority(view).score
        by_hand = maps[layer][:, :, -1].mean(1)  # the last query's attention, mean over the 4 query heads
        torch.testing.assert_close(score, by_hand[:, None].expand(2, 2, 12), atol=1e-6, rtol=1e-6)
    state.compress(make_method("tova"), budget(state.seen, 0.6), rec)
    for positions in state.positions:
        assert torch.equal(positions[:, 0], positions[:, 1])  # the same tokens in every KV head


def test_observed_attention_by_hand_and_on_eager_maps(net):
    """kvpress's ObservedAttentionPress score: attention received summed over the queries that saw the key,
    divided by how many did (q_len - j for key j of a prefill), then the mean over the group's query heads."""
    # by hand, one KV head with 2 query heads over 3 keys: causal rows of each head's attention
    a = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]])
    b = torch.tensor([[1.0, 0, 0], [0.9, 0.1, 0], [0.6, 0.2, 0.2]])
    cum = (a.sum(0) + b.sum(0))[None, None]  # the recorder's statistic: summed over queries and the group's heads
    keys = torch.zeros(1, 1, 3, 4)
    view = LayerView(0, keys, keys, torch.arange(3).expand(1, 1, 3), torch.ones(1, 3, dtype=torch.bool),
                     torch.tensor([2]), group_size=2, stats={"cum": cum}, seen=torch.tensor([3]))
    score = make_method("observed_attention").priority(view).score
    # key 0: (1 + .5 + .2) / 3 and (1 + .9 + .6) / 3 -> mean 0.7; key 1: (.8 / 2 + .3 / 2) / 2; key 2: (.5 + .2) / 2
    torch.testing.assert_close(score, torch.tensor([[[0.7, 0.275, 0.35]]]))
    # on a real prefill (left padding, GQA): the same formula on eager attention maps
    ids, mask, _ = batch(T=12, pad=3)
    rec = AttentionRecorder.for_method(make_method("observed_attention"))
    state, _ = prefill(net, ids, mask, rec)
    for layer, att in enumerate(eager_maps(net, ids, mask)):
        layer_cache = state.cache.layers[layer]
        view = LayerView(layer, layer_cache.keys, layer_cache.values, state.positions[layer], state.valid,
                         torch.tensor([5, 5]), 2, rec.stats(layer), seen=state.seen)
        score = make_method("observed_attention").priority(view).score
        seen_by = (mask.sum(-1)[:, None] - state.positions[layer][:, 0]).clamp(min=1)  # (B, S) queries per key
        by_hand = att.sum(2).view(2, 2, 2, 12).mean(2) / seen_by[:, None]  # sum over queries, mean over the group
        valid = state.valid[:, None].expand_as(score)
        torch.testing.assert_close(score[valid], by_hand[valid], atol=1e-6, rtol=1e-5)


def test_knorm_keeps_lowest_norms_by_hand():
    keys = torch.tensor([[3.0, 0], [0, 1], [2, 2], [0.5, 0], [0, -4]])[None, None]  # norms 3, 1, 2.83, .5, 4
    view = view_of(keys, keep=2)
    index, valid = select_slots(KNorm().priority(view), view.valid, view.positions, view.keep)
    assert index.tolist() == [[[1, 3]]] and valid.all()


@pytest.mark.parametrize("pooling", ["avg", "max"])
def test_snapkv_pooling_by_hand(pooling):
    """2 query heads of one KV head, a window of 2 queries over 8 keys (slots 6, 7 are the window's own)."""
    rows = torch.tensor([[[0.1, 0.5, 0.0, 0.2, 0.0, 0.9, 0.3, 0.1],
                          [0.3, 0.1, 0.0, 0.0, 0.1, 0.1, 0.2, 0.4]],
                         [[0.0, 0.0, 0.8, 0.0, 0.0, 0.0, 0.5, 0.5],
                          [0.2, 0.0, 0.6, 0.0, 0.0, 0.2, 0.0, 0.9]]])[None]  # (B, Hq, W, S)
    view = view_of(torch.randn(1, 1, 8, 4), window_rows=rows, keep=4, group_size=2)
    pr = SnapKV(window=2, kernel=3, pooling=pooling).priority(view)
    votes = [[0.2, 0.3, 0.0, 0.1, 0.05, 0.5, 0, 0], [0.1, 0.0, 0.7, 0.0, 0.0, 0.1, 0, 0]]  # window mean, window slots 0
    pool = (lambda xs: sum(xs) / 3) if pooling == "avg" else max  # zero padding at both ends
    per_head = [[pool(([0.0] + head + [0.0])[j:j + 3]) for j in range(8)] for head in votes]
    expected = [(a + b) / 2 for a, b in zip(*per_head)]  # mean over the group's query heads
    torch.testing.assert_close(pr.score[0, 0], torch.tensor(expected))
    assert pr.tier[0, 0].tolist() == [0] * 6 + [1, 1]
    index, _ = select_slots(pr, view.valid, view.positions, view.keep)
    best_two = sorted(sorted(range(6), key=lambda j: -expected[j])[:2])
    assert index.tolist() == [[best_two + [6, 7]]]  # the window + the 2 best pooled older keys


def test_local_strided_and_h2o_splits_by_hand():
    view = view_of(torch.randn(1, 1, 20, 4), keep=8)
    index, _ = select_slots(make_method("local_strided").priority(view), view.valid, view.positions, view.keep)
    assert index.tolist() == [[[0, 4, 8, 12, 16, 17, 18, 19]]]  # window of 4 + stride ceil(16 / 4) = 4
    cum = torch.tensor([5.0, 1, 9, 0, 7, 2, 3, 8, 4, 6, 0, 0])[None, None]
    view = view_of(torch.randn(1, 1, 12, 4), keep=6)
    view.stats = {"cum": cum}
    index, _ = select_slots(make_method("h2o").priority(view), view.valid, view.positions, view.keep)
    assert index.tolist() == [[[2, 4, 7, 9, 10, 11]]]  # the 3 heaviest older (9, 7, 8) + 3 recent


def test_cab_v4_uniqueness_by_hand_on_three_keys():
    keys = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])[None, None]
    c = 1 / math.sqrt(2)  # cos(k0, k2) = cos(k1, k2); cos(k0, k1) = 0
    uniq = key_uniqueness(keys, torch.ones(1, 3, dtype=torch.bool))
    torch.testing.assert_close(uniq[0, 0], torch.tensor([1 - c / 2, 1 - c / 2, 1 - c]))
    # magnitude min-max: norms 2, 1, sqrt 2 -> 1, 0, sqrt2 - 1; uniqueness min-max -> 1, 1, 0
    score = CABV4(alpha=0.5).priority(view_of(keys)).score[0, 0]
    torch.testing.assert_close(score, torch.tensor([1.0, 0.5, (math.sqrt(2) - 1) / 2]))


def test_streaming_llm_keeps_exactly_sinks_and_recent_and_cache_shrinks(net):
    ids, mask, _ = batch(T=20, pad=3)
    state, _ = prefill(net, ids, mask)
    before = [(layer.keys.clone(), layer.values.clone()) for layer in state.cache.layers]
    dense_bytes = state.kv_bytes()
    assert state.compress(StreamingLLM(n_sink=4), torch.tensor([10, 10]))
    for i, layer in enumerate(state.cache.layers):
        assert tuple(layer.keys.shape) == (2, 2, 10, 16) and tuple(layer.values.shape) == (2, 2, 10, 16)
        assert state.positions[i][0, 0].tolist() == [0, 1, 2, 3, 11, 12, 13, 14, 15, 16]  # 17 tokens
        assert state.positions[i][1, 1].tolist() == [0, 1, 2, 3, 14, 15, 16, 17, 18, 19]
        slots = torch.tensor([0, 1, 2, 3, 14, 15, 16, 17, 18, 19])  # row 0: its tokens sit 3 slots later
        assert torch.equal(layer.keys[1], before[i][0][1][:, slots])
        assert torch.equal(layer.values[1], before[i][1][1][:, slots])
        assert torch.equal(layer.keys[0], before[i][0][0][:, [3, 4, 5, 6, 14, 15, 16, 17, 18, 19]])
    assert state.valid.all()
    assert state.kv_bytes() == dense_bytes * 10 // 20
    # a budget above a row's token count: that row keeps all its tokens plus one padding filler
    state, _ = prefill(net, ids, mask)
    state.compress(StreamingLLM(n_sink=4), torch.tensor([18, 18]))
    assert state.valid[0].tolist() == [False] + [True] * 17 and state.valid[1].all()
    assert state.positions[0][0, 0, 1:].tolist() == list(range(17))


def test_methods_declare_their_parameters():
    for name, cls in METHODS.items():
        for param, spec in cls.param_specs().items():
            assert spec["description"], (name, param)
            assert spec["low"] is not None or spec["choices"] is not None or param == "seed", (name, param)
        assert make_method(name).describe() == {"method": name, **{p: s["default"]
                                                                 for p, s in cls.param_specs().items()}}
    assert make_method("h2o", recent_ratio=1).recent_ratio == 1.0  # a YAML integer for a ratio
    with pytest.raises(ConfigError, match=r"^unknown parameters recent, x for sparsity method 'h2o'; "
                                          r"valid: recent_ratio$"):
        make_method("h2o", recent=0.5, x=1)
    with pytest.raises(ConfigError, match=r"h2o parameter recent_ratio must be in \[0.0, 1.0\], got 1.5"):
        make_method("h2o", recent_ratio=1.5)
    with pytest.raises(ConfigError, match="odd"):
        make_method("snapkv", kernel=4)
    with pytest.raises(ConfigError, match=r"snapkv parameter pooling must be one of \['avg', 'max'\], got 'mean'"):
        make_method("snapkv", pooling="mean")
    with pytest.raises(ConfigError, match="sum to 1"):
        make_method("cab", local_ratio=0.5)


def test_budget_rounding():
    n = torch.tensor([10, 512, 7, 1])
    assert budget(n, 0.7).tolist() == [3, 154, 3, 1]  # ceil(0.3 * n) without float fuzz (0.3 * 10 = 3.0000000000000004)
    assert budget(n, 0.7, rounding="floor").tolist() == [3, 153, 2, 1]  # int(0.3 * n), at least 1
    # kvpress's max(1, int(n * (1 - ratio))) to the bit: (1 - .9) * 100 = 9.999999999999998 keeps 9
    n = torch.tensor([10, 4096, 20, 100, 30])
    kvpress = [max(1, int(k * (1 - 0.9))) for k in n.tolist()]
    assert budget(n, 0.9, rounding="floor").tolist() == kvpress == [1, 409, 1, 9, 2]
    n = torch.tensor([10, 512, 7, 1])
    assert budget(n, 0.0, rounding="floor").tolist() == [10, 512, 7, 1]
    assert budget(n, budget_tokens=8, rounding="floor").tolist() == [8, 8, 7, 1]
    with pytest.raises(ConfigError, match=r"^--sparsity.rounding must be one of ceil, floor .*got 'round'$"):
        budget(n, 0.7, rounding="round")


def test_rounding_reaches_the_budget_and_the_record(net):
    ids, mask, _ = batch(T=16, pad=0)
    for rounding, keep in (("ceil", 4), ("floor", 3)):  # 0.225 * 16 = 3.6
        res = generate_with_eviction(net, ids, mask, "knorm", sparsity=0.775, max_new_tokens=2, rounding=rounding)
        assert res.keep.tolist() == [keep, keep] and res.summary()["rounding"] == rounding


# ---- the mechanism end to end ----------------------------------------------------------------
@pytest.mark.parametrize("method", EVICTING)
def test_cache_tensors_shrink_to_budget_and_bytes_drop(net, method):
    ids, mask, _ = batch(T=16, pad=0)
    res = generate_with_eviction(net, ids, mask, method, sparsity=0.75, interval=1, max_new_tokens=5)
    assert res.cache_lengths[0] == 16
    for t in range(4):  # before the forward of step t: ceil(0.25 * seen) slots, then the new token
        assert res.cache_lengths[t + 1] == math.ceil(0.25 * (16 + t)) + 1
    per_token = res.kv_bytes[0] // 16
    assert res.kv_bytes[1:] == [per_token * n for n in res.cache_lengths[1:]]
    assert res.kv_bytes[-1] < 0.4 * res.dense_kv_bytes[-1]
    # the tensors themselves, per layer, after one compression of a left-padded batch
    ids, mask, _ = batch(T=16, pad=4)
    m = make_method(method)
    rec = AttentionRecorder.for_method(m)
    state, _ = prefill(net, ids, mask, rec)
    assert state.compress(m, budget(state.seen, 0.75), rec)
    assert state.layer_shapes() == [(2, 2, 4, 16)] * 2  # ceil(.25 * 12) = 3 (+1 filler), ceil(.25 * 16) = 4
    assert state.valid.tolist() == [[False, True, True, True], [True] * 4]
    if rec is not None:
        assert all(v.shape[-1] == 4 for i in range(2) for v in rec.stats(i).values())


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_sparsity_zero_reproduces_dense_exactly_for_every_method(attn):
    net = tiny_llama(attn=attn)
    ids, mask, ref = batch()
    dense = generate_with_eviction(net, ids, mask, "dense", reference_continuation=ref)
    greedy = generate_with_eviction(net, ids, mask, "dense", max_new_tokens=6)
    torch.testing.assert_close(dense.nll, full_forward_nll(net, ids, mask, ref), atol=1e-5, rtol=1e-5)
    for method in EVICTING:
        res = generate_with_eviction(net, ids, mask, method, sparsity=0.0, interval=1, reference_continuation=ref)
        assert torch.equal(res.nll, dense.nll), method
        assert res.cache_lengths == dense.cache_lengths
        gen = generate_with_eviction(net, ids, mask, method, sparsity=0.0, interval=2, max_new_tokens=6)
        assert torch.equal(gen.tokens, greedy.tokens) and torch.equal(gen.nll, greedy.nll), method
    assert net.config._attn_implementation == attn


def test_gqa_batch_with_left_padding_equals_rows_alone(net):
    ids, mask, ref = batch(T=20, pad=5)
    for method in sorted(set(EVICTING) - {"random"}):  # random draws depend on the batch shape
        both = generate_with_eviction(net, ids, mask, method, sparsity=0.5, interval=2, reference_continuation=ref)
        short = generate_with_eviction(net, ids[:1, 5:], None, method, sparsity=0.5, interval=2,
                                       reference_continuation=ref[:1])
        full = generate_with_eviction(net, ids[1:], None, method, sparsity=0.5, interval=2,
                                      reference_continuation=ref[1:])
        torch.testing.assert_close(both.nll[0], short.nll[0], atol=1e-4, rtol=1e-4, msg=method)
        torch.testing.assert_close(both.nll[1], full.nll[0], atol=1e-4, rtol=1e-4, msg=method)
        assert both.keep.tolist() == [8, 10]


def _masked_reference(net, ids, mask, ref, kept_by_head):
    """Dense forward over context + continuation in which continuation queries see, of the context,
    only the kept positions of their KV head (kept_by_head: (B, Hkv, T) bool over context slots)."""
    B, T = ids.shape
    L = T + ref.shape[1]
    causal = torch.ones(L, L).tril().bool()
    seen = torch.cat([mask, torch.ones_like(ref)], 1).bool()
    allowed = (causal[None, None] & seen[:, None, None, :]).expand(B, 4, L, L).clone()
    kept_q = kept_by_head.repeat_interleave(2, dim=1)  # query head h uses KV head h // 2
    allowed[:, :, T:, :T] &= kept_q[:, :, None, :]
    allowed |= torch.eye(L, dtype=torch.bool)  # padding queries: anything finite
    bias = torch.zeros(B, 4, L, L).masked_fill(~allowed, torch.finfo(torch.float32).min)
    return full_forward_nll(net, ids, mask, ref, mask_4d=bias)


def test_decoding_on_compressed_cache_equals_dense_run_with_evicted_keys_masked(net):
    """Original RoPE positions: the compressed-cache run must equal ONE dense forward in which the
    continuation cannot see the evicted context tokens (a check of the position bookkeeping)."""
    ids, mask, ref = batch(T=20, pad=3)
    res = generate_with_eviction(net, ids, mask, "streaming_llm", budget_tokens=8, interval=0,
                                 reference_continuation=ref)
    kept = torch.zeros(2, 2, 20, dtype=torch.bool)
    kept[0, :, [3, 4, 5, 6, 16, 17, 18, 19]] = True  # 4 sinks + 4 recent, after 3 padding slots
    kept[1, :, [0, 1, 2, 3, 16, 17, 18, 19]] = True
    torch.testing.assert_close(res.nll, _masked_reference(net, ids, mask, ref, kept), atol=1e-4, rtol=1e-4)
    # budget >= length: nothing is evicted and the run equals the plain dense forward
    res = generate_with_eviction(net, ids, mask, "knorm", budget_tokens=20, interval=0, reference_continuation=ref)
    torch.testing.assert_close(res.nll, full_forward_nll(net, ids, mask, ref), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method,params", [("knorm", {}), ("snapkv", {"window": 2, "kernel": 3}), ("tova", {})])
def test_per_head_eviction_equals_dense_run_with_per_head_masks(method, params):
    net = tiny_llama(layers=1, attn="eager")  # one layer: the kept sets are the whole story
    ids, mask, ref = batch(T=20, pad=3)
    res = generate_with_eviction(net, ids, mask, method, sparsity=0.6, interval=0, reference_continuation=ref,
                                 method_params=params)
    m = make_method(method, **params)
    rec = AttentionRecorder.for_method(m)
    state, _ = prefill(net, ids, mask, rec)
    state.compress(m, budget(state.seen, 0.6), rec)
    kept = torch.zeros(2, 2, 20, dtype=torch.bool)
    slots = state.positions[0] + (20 - mask.sum(-1))[:, None, None]  # token position -> context slot
    kept.scatter_(-1, slots, state.valid[:, None, :].expand_as(slots).clone())
    assert kept.sum(-1).tolist() == [[7, 7], [8, 8]]
    # the KV heads really keep different tokens, except under tova (one ranking for the whole layer)
    assert torch.equal(kept[:, 0], kept[:, 1]) == (method == "tova")
    torch.testing.assert_close(res.nll, _masked_reference(net, ids, mask, ref, kept), atol=1e-4, rtol=1e-4)


def test_rerotate_equals_dense_run_on_the_kept_tokens():
    """One layer: re-rotated kept keys are exactly the keys of a fresh prefill of the kept tokens."""
    net = tiny_llama(layers=1)
    ids, _, ref = batch(T=20, pad=0)
    res = generate_with_eviction(net, ids, None, "streaming_llm", budget_tokens=8, interval=0, rerotate=True,
                                 reference_continuation=ref)
    kept = ids[:, [0, 1, 2, 3, 16, 17, 18, 19]]
    dense = full_forward_nll(net, kept, torch.ones_like(kept), ref)
    torch.testing.assert_close(res.nll[:, 1:], dense[:, 1:], atol=1e-4, rtol=1e-4)
    plain = generate_with_eviction(net, ids, None, "streaming_llm", budget_tokens=8, interval=0,
                                   reference_continuation=ref)
    assert not torch.allclose(plain.nll[:, 1:], res.nll[:, 1:])  # original positions differ from rerotated


# ---- user errors -------------------------------------------------------------------------------
def _one_line(err):
    assert "\n" not in str(err.value)
    return str(err.value)


def test_bad_inputs_raise_one_line_config_errors(net):
    from lightning_bench.models import MambaLM, ResNetBKLM

    ids, mask, _ = batch(T=10, pad=0)
    with pytest.raises(ConfigError) as err:
        make_method("h3o")
    assert "valid: cab, cab_v3, cab_v4, dense, h2o, knorm, local_strided, observed_attention, random, snapkv, streaming_llm, tova" \
        in _one_line(err)
    with pytest.raises(ConfigError) as err:
        generate_with_eviction(net, ids, mask, "nope", sparsity=0.5, max_new_tokens=2)
    assert "unknown sparsity method 'nope'" in _one_line(err)
    for ratio in (1.0, -0.1, 1.5):
        with pytest.raises(ConfigError) as err:
            generate_with_eviction(net, ids, mask, "h2o", sparsity=ratio, max_new_tokens=2)
        assert "[0, 1)" in _one_line(err)
    with pytest.raises(ConfigError) as err:
        generate_with_eviction(net, ids, mask, "h2o", budget_tokens=11, max_new_tokens=2)
    assert "larger than the context" in _one_line(err)
    with pytest.raises(ConfigError) as err:
        generate_with_eviction(net, ids, mask, "h2o", max_new_tokens=2)
    _one_line(err)
    right_padded = mask.clone()
    right_padded[0, -2:] = 0
    with pytest.raises(ConfigError) as err:
        generate_with_eviction(net, ids, right_padded, "h2o", sparsity=0.5, max_new_tokens=2)
    assert "left" in _one_line(err)
    with pytest.raises(ConfigError) as err:
        make_method("snapkv", kernel=4)
    _one_line(err)
    for module in (MambaLM(d_model=16, n_layer=1, vocab_size=128), ResNetBKLM(d_model=16, n_layers=1, vocab_size=128)):
        for target in (module, module.net):
            with pytest.raises(ConfigError) as err:
                generate_with_eviction(target, ids, mask, "h2o", sparsity=0.5, max_new_tokens=2)
            assert "no KV cache" in _one_line(err)
