"""The attention error of eviction (sparsity/attention_error.py): one call against sdpa over the kept and over the
full keys by hand, continuations at sparsity 0 (no error) and at 0.5, batched rows equal to rows alone, the
`downstream --attention_error` cells, and the refusal under re-rotation."""

import pytest
import torch

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity import task_decode
from lightning_bench.sparsity.attention_error import FullCacheReference
from lightning_bench.sparsity.growing_layer import growing_cache
from lightning_bench.sparsity.masking.stack import attention_figures
from tests.test_sparsity import tiny_llama
from tests.helpers import grid_results


def sdpa(query, keys, values):
    """(Hq, q, D) attention of `query` over (Hkv, S, D) keys, GQA by repeat, the last q keys causal."""
    G = query.shape[0] // keys.shape[0]
    q, S = query.shape[1], keys.shape[1]
    allowed = torch.ones(q, S, dtype=torch.bool).tril_(S - q)
    return torch.nn.functional.scaled_dot_product_attention(query, keys.repeat_interleave(G, 0),
                                                            values.repeat_interleave(G, 0), attn_mask=allowed)


def test_one_call_against_attention_by_hand():
    g = torch.Generator().manual_seed(0)
    Hkv, G, P, q, D = 2, 3, 12, 2, 8
    prefix_k, prefix_v = torch.randn(Hkv, P, D, generator=g), torch.randn(Hkv, P, D, generator=g)
    new_k, new_v, query = (torch.randn(Hkv, q, D, generator=g), torch.randn(Hkv, q, D, generator=g),
                           torch.randn(Hkv * G, q, D, generator=g))
    kept = torch.tensor([0, 1, 5, 9, 11])  # what an eviction left of the prefix
    keys, values = torch.cat([prefix_k[:, kept], new_k], 1), torch.cat([prefix_v[:, kept], new_v], 1)
    compressed = sdpa(query, keys, values)  # what the model computed on the compressed cache
    full = sdpa(query, torch.cat([prefix_k, new_k], 1), torch.cat([prefix_v, new_v], 1))
    cache = growing_cache(tiny_llama(layers=1).config)
    cache.update(prefix_k[None], prefix_v[None], 0)
    reference = FullCacheReference()
    reference.add_row(7, cache)
    reference.rows = [7]
    out = reference.attend(0, query[None], keys[None], values[None], None, None, None, compressed.transpose(0, 1)[None])
    assert torch.equal(out[0], compressed.transpose(0, 1))  # the model's output is left as it was
    sums = {layer: t[:, 0].tolist() for layer, t in reference.drain().items()}
    figures = attention_figures(sums)
    assert figures["density"] == pytest.approx((2 * 5 + 1 + 2) / (2 * P + 1 + 2))  # per query: kept + causal new
    expected = float((compressed - full).norm() / full.norm())
    assert figures["attention_error"] == pytest.approx(expected, rel=1e-4)
    assert reference.suffix[7][0][0].shape == (Hkv, q, D)  # the new tokens join the row's full cache


@pytest.fixture(scope="module")
def net():
    return tiny_llama()


def rows_of(prompt, methods, max_new_tokens=5):
    return [task_decode.continuation(method, sparsity=sparsity, max_new_tokens=max_new_tokens)
            for method, sparsity in methods]


def test_continuations_meter_their_error_against_the_full_cache(net):
    ids = torch.randint(0, 128, (1, 40), generator=torch.Generator().manual_seed(1))
    prompt = task_decode.prefill_prompt(net, ids[:, :30], ids[:, 30:36], "query_aware", ["h2o", "streaming_llm"],
                                        cue_ids=ids[:, 36:])
    methods = [("h2o", 0.0), ("h2o", 0.5), ("streaming_llm", 0.8)]
    batched = task_decode.continue_rows(prompt, rows_of(prompt, methods), attention_error=True)
    alone = [task_decode.continue_rows(prompt, rows_of(prompt, [m]), attention_error=True)[0] for m in methods]
    plain = task_decode.continue_rows(prompt, rows_of(prompt, methods))
    figures = [attention_figures(r.figures["attention_sums"]) for r in batched]
    assert figures[0]["density"] == 1.0 and figures[0]["attention_error"] < 1e-5  # nothing evicted
    assert 0.4 < figures[1]["density"] < 0.75 and figures[1]["attention_error"] > 1e-3
    assert figures[2]["density"] < figures[1]["density"] and figures[2]["attention_error"] > 1e-3
    for one, many, bare in zip(alone, batched, plain):
        assert one.tokens == many.tokens == bare.tokens  # metering changes no token
        a, b = (attention_figures(r.figures["attention_sums"]) for r in (one, many))
        assert a["density"] == b["density"] and a["attention_error"] == pytest.approx(b["attention_error"], rel=1e-4, abs=1e-6)
        assert "attention_sums" not in bare.figures
    with pytest.raises(ConfigError, match="drop rerotate or the attention error"):
        task_decode.continue_rows(prompt, rows_of(prompt, methods[1:2]), rerotate=True, attention_error=True)


@pytest.mark.shared_data
def test_downstream_attention_error_cells(tiny_hf, shared_data, tmp_path, capsys):
    from tests.test_cli import run

    code, _, err = run(["downstream", "--model.pretrained", str(tiny_hf), "--data_dir", str(shared_data),
                        "--results_dir", str(tmp_path), "--name", "t", "--max_samples", "2", "--max_new_tokens", "4",
                        "--max_length", "192", "--tasks", "xsum", "--methods", "dense", "h2o", "--ratios", "0.5",
                        "--attention_error", "true"], capsys)
    assert code == 0, err
    cells = grid_results(tmp_path / "t" / "t_results.json")["cells"]
    h2o, dense = cells["xsum__h2o_s0.5_query_aware_seed1234"], cells["xsum__dense_s0.0_query_aware_seed1234"]
    assert dense["attention"]["density"] == 1.0 and dense["attention"]["attention_error"] < 1e-5
    assert 0.4 < h2o["attention"]["density"] < 0.8 and h2o["attention"]["attention_error"] > 0
    assert all("attention_sums" in s for s in h2o["samples"])
    assert "xsum__h2o_s0.5_query_aware_seed1234: density 0." in (tmp_path / "t" / "t_summary.txt").read_text()
    code, _, err = run(["downstream", "--model.pretrained", str(tiny_hf), "--data_dir", str(shared_data),
                        "--results_dir", str(tmp_path), "--name", "t", "--max_samples", "2", "--max_new_tokens", "4",
                        "--max_length", "192", "--tasks", "xsum", "--methods", "dense", "h2o", "--ratios", "0.5",
                        "--attention_error", "true", "--meter_every", "2"], capsys)
    assert code == 2 and "was made under other settings" in err  # figures over other steps: not mixed


def test_meter_every_n_meters_the_fed_part_and_every_nth_step(net):
    """7 tokens: the fed part, then decoding steps 0..5. Every step meters them all; every 3rd step 0 and 3; every
    100th step 0 only. A step's visible count grows by one slot per query head and layer, so (all - only 0) is
    5 x (every 3rd - only 0); the error sums shrink with the steps left out; the tokens never change. The same
    for a masker stack's own meter."""
    from lightning_bench.sparsity.masking.method import MaskedAttention

    ids = torch.randint(0, 128, (1, 40), generator=torch.Generator().manual_seed(3))
    stack = MaskedAttention("window", "sink:2,local:6")
    prompt = task_decode.prefill_prompt(net, ids[:, :30], ids[:, 30:36], "query_agnostic", ["streaming_llm", stack],
                                        cue_ids=ids[:, 36:])
    for method, error in ((("streaming_llm", 0.5), True), ((stack, 0.0), False)):
        runs = {n: task_decode.continue_rows(prompt, rows_of(prompt, [method], max_new_tokens=7),
                                             attention_error=error, meter_every=n)[0] for n in (1, 3, 100)}
        assert runs[1].tokens == runs[3].tokens == runs[100].tokens and len(runs[1].tokens) == 7
        sums = {n: r.figures["attention_sums"] for n, r in runs.items()}
        assert set(sums[1]) == set(sums[3]) == set(sums[100]) == {0, 1}  # the tiny model's two layers
        for layer in sums[1]:
            every, third, first = (sums[n][layer] for n in (1, 3, 100))
            assert every[1] - first[1] == pytest.approx(5 * (third[1] - first[1]))  # visible slots
            assert every[1] > third[1] > first[1] > 0
            assert every[2] >= third[2] >= first[2] > 0  # error^2: a sum over fewer steps
    with pytest.raises(ConfigError, match="meter_every"):
        task_decode.continue_rows(prompt, rows_of(prompt, [("h2o", 0.5)]), attention_error=True, meter_every=0)
