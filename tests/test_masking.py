"""Query-time sparse attention (sparsity/masking): the stack's estimator on hand-worked rows, the deterministic
maskers against hand-made masks, exact dense rows, sink + local against StreamingLLM's eviction, GQA, padded
batches, chunking, the meter and the one-line errors. Tiny random Llama configs only."""

import math
from dataclasses import dataclass

import pytest
import torch

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity import capture
from lightning_bench.sparsity.capture import capturing
from lightning_bench.sparsity.masking import MaskContext, Masker, MaskerStack
from lightning_bench.sparsity.masking.fixed import OracleTopP, Quest
from lightning_bench.sparsity.streaming import streaming_logits
from tests.test_sparsity_cli import _test as _test_run
from tests.test_sparsity import tiny_llama
from tests.helpers import grid_results


@pytest.fixture(scope="module")
def net():
    return tiny_llama()


def ids_batch(T=24, seed=3, rows=2):
    return torch.randint(0, 128, (rows, T), generator=torch.Generator().manual_seed(seed))


def masked_logits(net, ids, spec, mask=None, **options):
    stack = MaskerStack.parse(spec, **options)
    with torch.no_grad(), capturing(net, None, masking=stack):
        return net(input_ids=ids, attention_mask=mask).logits, stack


@dataclass
class Given(Masker):
    """A masker that adds a fixed mask (the hand-worked examples)."""

    name = "given"
    values: object = None

    def entries(self, ctx):
        return self.values.to(ctx.mask.dtype).expand_as(ctx.mask) * ctx.visible


def attend_one(values_mask, e, v):
    """One decode-step query over len(e) keys with scores log(e) (D = 1 query and key, scale 1)."""
    S = len(e)
    key = torch.tensor([math.log(x) for x in e]).view(1, 1, S, 1)
    query = torch.ones(1, 1, 1, 1)
    value = torch.tensor(v, dtype=torch.float32).view(1, 1, S, 1)
    dense = torch.nn.functional.scaled_dot_product_attention(query, key, value, scale=1.0).transpose(1, 2)
    stack = MaskerStack([Given(values=torch.tensor(values_mask, dtype=torch.float32))])
    return float(stack.attend(0, query, key, value, None, 1.0, None, dense)), float(dense), stack


def test_the_estimator_on_a_hand_worked_row():
    e, v = [4.0, 2.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0]
    out, dense, stack = attend_one([1.0, 0.0, 0.5, 0.0], e, v)
    assert dense == pytest.approx(15 / 8, abs=1e-6)
    assert out == pytest.approx((4 * 1 + (1 / 0.5) * 3) / (4 + 2), abs=1e-6)  # 1.6667
    figures = stack.figures()
    assert figures["density"] == pytest.approx(2 / 4)
    assert figures["attention_error"] == pytest.approx(abs(10 / 6 - 15 / 8) / (15 / 8), rel=1e-5)
    # a uniform value cancels: value 0.3 on {0, 2} is the softmax over {0, 2}
    out, _, _ = attend_one([0.3, 0.0, 0.3, 0.0], e, v)
    assert out == pytest.approx((4 * 1 + 1 * 3) / 5, abs=1e-6)
    # empty and full masks are the dense row itself, bit for bit
    for values in ([0.0] * 4, [1.0] * 4):
        out, dense, stack = attend_one(values, e, v)
        assert out == dense and stack.figures()["attention_error"] == 0.0
        assert stack.figures()["density"] == 1.0


@pytest.mark.parametrize("spec", ["sink:1.0", "local:1.0", "oracle_topk:1.0", "oracle_topp:1.0", "sink:1000",
                                  "quest:1.0:4", "sink:2,local:3,oracle_topk:1.0"])
def test_full_density_is_the_dense_forward_exactly(net, spec):
    ids = ids_batch()
    with torch.no_grad():
        dense = net(input_ids=ids).logits
    logits, stack = masked_logits(net, ids, spec)
    assert torch.equal(logits, dense)
    figures = stack.figures()
    assert figures["density"] == 1.0 and figures["attention_error"] == 0.0
    assert figures["layers"] == [0, 1]


@pytest.mark.parametrize("n_sink,window", [(2, 3), (4, 5), (1, 1)])
def test_sink_plus_local_is_streaming_llm_on_the_full_cache(net, n_sink, window):
    """StreamingLLM's eviction, streamed one token at a time with n_sink sinks and a budget of n_sink + window - 1
    cached tokens (true positions), leaves every query exactly the keys sink + local masks."""
    ids = ids_batch(T=30)
    logits, stack = masked_logits(net, ids, f"sink:{n_sink},local:{window}")
    evicted, _ = streaming_logits(net, ids, None, "streaming_llm", budget_tokens=n_sink + window - 1, chunk_size=1,
                                  method_params={"n_sink": n_sink})
    torch.testing.assert_close(logits, evicted, atol=1e-5, rtol=1e-5)
    kept = sum(min(t + 1, n_sink + window) for t in range(30))
    assert stack.figures()["density"] == pytest.approx(kept / sum(range(1, 31)))
    assert stack.figures()["attention_error"] > 0


def context(scores, mask=None, visible=None, keys=None, queries=None):
    """A MaskContext of one decode-step query (c = 1) over the given scores (B, Hkv, G, 1, S)."""
    B, Hkv, G, c, S = scores.shape
    visible = torch.ones_like(scores, dtype=torch.bool) if visible is None else visible
    rank = torch.arange(S).view(1, 1, 1, 1, S).expand(B, 1, 1, 1, S)
    D = 2
    return MaskContext(scores, visible, rank, torch.full((B, 1, 1, c, 1), S - 1),
                       torch.zeros(B, Hkv, G, c, D) if queries is None else queries,
                       torch.zeros(B, Hkv, S, D) if keys is None else keys,
                       torch.zeros_like(scores) if mask is None else mask, 0)


def test_oracle_topk_is_a_hand_made_top_k_mask():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 2, 3, 1, 40, generator=g)
    earlier = torch.zeros_like(scores)
    earlier[..., :4] = 1.0  # what a sink masker kept: not chosen again
    entries = MaskerStack.parse("oracle_topk:7").maskers[0].entries(context(scores, earlier))
    hand = torch.zeros_like(scores)
    order = scores[..., 4:].argsort(-1, descending=True)[..., :7] + 4
    hand.scatter_(-1, order, 1.0)
    assert torch.equal(entries, hand)
    fraction = MaskerStack.parse("oracle_topk:0.25").maskers[0].entries(context(scores))
    assert torch.equal(fraction.sum(-1), torch.full((2, 2, 3, 1), 10.0))  # floor(0.25 * 40)


@pytest.mark.parametrize("p,kept", [(0.6, [1, 1, 0, 0]), (0.75, [1, 1, 0, 0]), (0.8, [1, 1, 1, 1]),
                                    (0.4, [1, 0, 0, 0]), (1.0, [1, 1, 1, 1])])
def test_oracle_topp_keeps_the_smallest_set_reaching_p_and_its_ties(p, kept):
    scores = torch.tensor([math.log(4), math.log(2), 0.0, 0.0]).view(1, 1, 1, 1, 4)  # softmax 1/2, 1/4, 1/8, 1/8
    entries = OracleTopP(top_p=p).entries(context(scores))
    assert entries.flatten().tolist() == kept


def test_quest_keeps_the_page_of_the_highest_upper_bound():
    keys = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 2.0], [2.0, -1.0]]).view(1, 1, 4, 2)
    query = torch.tensor([1.0, -1.0]).view(1, 1, 1, 1, 2)
    scores = (query @ keys.transpose(-1, -2)).view(1, 1, 1, 1, 4)
    entries = Quest(heavy_size=2, page_size=2).entries(context(scores, keys=keys, queries=query))
    assert entries.flatten().tolist() == [0, 0, 1, 1]  # page scores 1 and 3 (upper bounds of 1 and 3)
    query = torch.tensor([-1.0, 1.0]).view(1, 1, 1, 1, 2)  # page 0 scores 1, page 1 scores 3 again: -q.(−1, 2)
    entries = Quest(heavy_size=4, page_size=2).entries(context(scores, keys=keys, queries=query))
    assert entries.flatten().tolist() == [1, 1, 1, 1]


def hand_masked_attention(net, ids, layer_mask):
    """The masked forward computed independently: sdpa with a 4D boolean mask per query head is the masking
    when every entry is 1 (deterministic maskers)."""
    T = ids.shape[1]
    return net(input_ids=ids, attention_mask=layer_mask.view(ids.shape[0], -1, T, T)).logits


def test_gqa_query_heads_read_their_own_kv_head(net, monkeypatch):
    """oracle_topk ranks per QUERY head: the top keys of query head h, recomputed by hand from the RAW attention
    inputs (query (B, Hq, q, D), key (B, Hkv, S, D)) with key head h // G as transformers' repeat_kv pairs them,
    are the entries the stack kept for that head."""
    ids = ids_batch(T=16, rows=1)
    seen = {}
    attend = MaskerStack.attend

    def recording(self, layer_idx, query, key, *args, **kwargs):
        if layer_idx == 0:
            seen["query"], seen["key"] = query.detach().clone(), key.detach().clone()
        return attend(self, layer_idx, query, key, *args, **kwargs)

    class Spy(Masker):
        name = "spy"

        def entries(self, ctx):
            if ctx.layer_idx == 0:
                seen["mask"] = ctx.mask.clone()
            return torch.zeros_like(ctx.mask)

    monkeypatch.setattr(MaskerStack, "attend", recording)
    stack = MaskerStack([MaskerStack.parse("oracle_topk:3").maskers[0], Spy()])
    with torch.no_grad(), capturing(net, None, masking=stack):
        net(input_ids=ids)
    query, key, mask = seen["query"], seen["key"], seen["mask"]  # (1, 4, 16, D), (1, 2, 16, D), (1, 2, 2, 16, 16)
    G = query.shape[1] // key.shape[1]
    for head in range(query.shape[1]):
        scores = query[0, head] @ key[0, head // G].T
        scores = scores.masked_fill(torch.ones(16, 16, dtype=torch.bool).triu(1), float("-inf"))
        for t in range(16):
            top = set(scores[t].topk(min(3, t + 1)).indices.tolist())
            assert set(mask[0, head // G, head % G, t].nonzero().flatten().tolist()) == top, (head, t)


def test_padded_rows_and_chunks_change_nothing(net, monkeypatch):
    ids = ids_batch(T=20)
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding, as prompts are batched
    spec = "sink:2,local:0.25,oracle_topk:0.2"
    batched, _ = masked_logits(net, ids, spec, mask)
    alone, _ = masked_logits(net, ids[:1, 5:], spec)
    torch.testing.assert_close(batched[0, 5:], alone[0], atol=1e-5, rtol=1e-5)
    monkeypatch.setattr(capture, "CHUNK_ELEMENTS", 64)  # a few query rows per chunk
    chunked, _ = masked_logits(net, ids, spec, mask)
    torch.testing.assert_close(chunked[:, 5:], batched[:, 5:], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(chunked[1], batched[1], atol=1e-6, rtol=1e-6)


def test_dense_layers_are_left_alone(net):
    ids = ids_batch()
    _, stack = masked_logits(net, ids, "sink:1,local:2", dense_layers=[0])
    assert stack.figures()["layers"] == [1]
    assert stack.describe()["dense_layers"] == [0] and stack.describe()["mechanism"] == "masking"


@pytest.mark.parametrize("spec,expected", [
    ("sinks:4", "unknown masker 'sinks'; valid: adaptive_sampling, local, magic_pig, oracle_topk, oracle_topp, "
                "quest, random_sampling, sink"),
    ("oracle_topk:0.0", "oracle_topk parameter heavy_size is a fraction of the keys: in (0, 1], got 0.0"),
    ("oracle_topk:1.5", "oracle_topk parameter heavy_size is a fraction of the keys: in (0, 1], got 1.5"),
    ("local:-3", "local parameter window_size counts tokens: >= 0, got -3"),
    ("quest:0.1:0", "quest parameter page_size must be in [1, 4096], got 0"),
    ("oracle_topp:top=0.5", "unknown parameter top for masker 'oracle_topp'; valid: top_p"),
    ("sink:4:5", "masker 'sink' takes at most 1 values (sink_size), got 2"),
    ("random_sampling:0.1,magic_pig", "at most one sampling masker per stack, got random_sampling, magic_pig"),
    ("", "an attention sparsity stack needs at least one masker"),
])
def test_bad_stacks_are_one_line_errors(spec, expected):
    with pytest.raises(ConfigError) as err:
        MaskerStack.parse(spec)
    assert str(err.value) == expected


def test_specs_aliases_and_yaml_lists_parse_alike():
    one = MaskerStack.parse("sink_masker:4, local_masker:window_size=8, oracle_topk:0.05")
    two = MaskerStack.parse([{"sink": 4}, "local:8", {"name": "oracle_topk", "heavy_size": 0.05}])
    assert one.describe() == two.describe()
    assert one.name == two.name == "sink:4+local:8+oracle_topk:0.05"
    assert [m["masker"] for m in one.describe()["maskers"]] == ["sink", "local", "oracle_topk"]


# ---- `lightning_bench test --attention_sparsity` ----------------------------------------------
@pytest.mark.parametrize("bits", [32, 8])
def test_cli_perplexity_under_a_stack_is_recorded_beside_dense(bits, tiny_corpus, capsys, tmp_path):
    """Full density is the dense run itself (also on int8 weights: stacks compose with --bits); a sparse stack's
    record holds its maskers, density and attention error per layer."""
    import json

    for extra in ([], ["--attention_sparsity", "sink:1.0"], ["--attention_sparsity", "sink:2,local:4"]):
        code, _, err = _test_run(tiny_corpus, capsys, "--bits", str(bits), *extra)
        assert code in (0, None), err
    base = tmp_path / "r" / f"transformer_tiny_corpus_seq32_bits{bits}_test"
    dense = json.loads(base.with_suffix(".json").read_text())
    full = json.loads((tmp_path / "r" / (base.name + "_attn_sink1.0.json")).read_text())
    sparse = json.loads((tmp_path / "r" / (base.name + "_attn_sink2-local4.json")).read_text())
    assert full["metrics"]["loss"] == dense["metrics"]["loss"]  # full density: the dense forward itself
    assert full.get("quantization") == dense.get("quantization")
    assert full["sparsity"]["density"] == 1.0 and full["sparsity"]["attention_error"] == 0.0
    assert sparse["sparsity"]["maskers"] == [{"masker": "sink", "sink_size": 2}, {"masker": "local", "window_size": 4}]
    assert 0.1 < sparse["sparsity"]["density"] < 0.5 and sparse["sparsity"]["attention_error"] > 0
    assert len(sparse["sparsity"]["density_per_layer"]) == len(sparse["sparsity"]["layers"]) > 0
    assert sparse["metrics"]["loss"] != dense["metrics"]["loss"]


@pytest.mark.parametrize("extra,expected", [
    (["--attention_sparsity", "sinks:4"], "unknown masker 'sinks'"),
    (["--attention_sparsity", "oracle_topk:2.0"], "oracle_topk parameter heavy_size is a fraction of the keys"),
    (["--attention_sparsity", "sink:4", "--sparsity", "h2o", "--sparsity.ratio", "0.5"], "not both"),
])
def test_cli_bad_stacks_are_one_line(extra, expected, tiny_corpus, capsys):
    code, _, err = _test_run(tiny_corpus, capsys, *extra)
    assert code == 2 and "Traceback" not in err
    assert expected in err.strip().splitlines()[-1]


# ---- masker stacks as methods of the `downstream` grid ---------------------------------------------------
@pytest.mark.shared_data
def test_downstream_stacks_full_density_is_dense_and_sparse_ones_are_metered(tiny_hf, shared_data, tmp_path, capsys):
    from tests.test_cli import run

    stacks = '{full: "sink:1.0", window: "sink:2,local:8", topk: "oracle_topk:0.1"}'
    code, _, err = run(["downstream", "--model.pretrained", str(tiny_hf), "--data_dir", str(shared_data),
                        "--results_dir", str(tmp_path), "--name", "t", "--max_samples", "2", "--max_new_tokens", "6",
                        "--max_length", "192", "--tasks", "xsum", "--methods", "dense", "--attention_sparsity", stacks,
                        "--protocols", "query_agnostic", "--max_batch_rows", "3"], capsys)
    assert code == 0, err
    cells = grid_results(tmp_path / "t" / "t_results.json")["cells"]
    dense = cells["xsum__dense_s0.0_query_agnostic_seed1234"]
    full = cells["xsum__full_s0.0_query_agnostic_seed1234"]
    window = cells["xsum__window_s0.0_query_agnostic_seed1234"]
    assert [s["generated"] for s in full["samples"]] == [s["generated"] for s in dense["samples"]]
    assert full["attention"]["density"] == 1.0 and full["attention"]["attention_error"] == 0.0
    assert full["method_params"]["maskers"] == [{"masker": "sink", "sink_size": 1.0}]
    # the question and the answer attend to 2 sinks + 8 recent keys of a context of >100 tokens
    assert window["attention"]["density"] < 0.2 and window["attention"]["attention_error"] > 0
    assert window["cache"]["kept_fraction_of_compressed"] == 1.0  # nothing is evicted
    assert all(0 < s["density"] < 0.2 for s in window["samples"])
    summary = (tmp_path / "t" / "t_summary.txt").read_text()
    assert "window[sink2-local8]" in summary and "xsum__window_s0.0_query_agnostic_seed1234: density 0." in summary
    # the same rows decoded one per batch give the same tokens and the same metered sums
    code, _, err = run(["downstream", "--model.pretrained", str(tiny_hf), "--data_dir", str(shared_data),
                        "--results_dir", str(tmp_path / "one"), "--name", "t", "--max_samples", "2",
                        "--max_new_tokens", "6", "--max_length", "192", "--tasks", "xsum", "--methods", "dense",
                        "--attention_sparsity", stacks, "--protocols", "query_agnostic", "--max_batch_rows", "1"],
                       capsys)
    assert code == 0, err
    alone = grid_results(tmp_path / "one" / "t" / "t_results.json")["cells"]
    for key in ("xsum__window_s0.0_query_agnostic_seed1234", "xsum__topk_s0.0_query_agnostic_seed1234"):
        assert [s["generated"] for s in alone[key]["samples"]] == [s["generated"] for s in cells[key]["samples"]]
        assert alone[key]["attention"]["density"] == pytest.approx(cells[key]["attention"]["density"], rel=1e-9)


@pytest.mark.shared_data
@pytest.mark.parametrize("stacks,expected", [
    ('{h2o: "sink:4"}', "--attention_sparsity name 'h2o': use lowercase letters"),
    ('{Big: "sink:4"}', "--attention_sparsity name 'Big'"),
    ('{w: "sink:4,magic_pig,random_sampling"}', "at most one sampling masker per stack"),
])
def test_downstream_bad_stacks_are_one_line(stacks, expected, tiny_hf, shared_data, tmp_path, capsys):
    from tests.test_cli import run

    code, _, err = run(["downstream", "--model.pretrained", str(tiny_hf), "--data_dir", str(shared_data),
                        "--results_dir", str(tmp_path), "--tasks", "xsum", "--attention_sparsity", stacks], capsys)
    assert code == 2 and "Traceback" not in err
    assert expected in err.strip().splitlines()[-1]


def test_perplexity_batches_of_other_sizes_are_metered_apart(net):
    """The evaluation's last batch is often smaller: each forward's sums are absorbed before the next."""
    from lightning_bench.sparsity.masking.perplexity import QueryTimeSparsity

    class Module:
        def __init__(self, net):
            self.net = net

    sparse = QueryTimeSparsity.build("sink:2,local:4")
    module, ids = Module(net), ids_batch(T=16, rows=3)
    two, one = sparse.logits(module, ids[:2]), sparse.logits(module, ids[2:])
    alone, stack = masked_logits(net, ids, "sink:2,local:4")
    torch.testing.assert_close(torch.cat([two, one]), alone, atol=1e-6, rtol=1e-6)
    assert sparse.figures()["density"] == pytest.approx(stack.figures()["density"])
    assert sparse.figures()["forwards"] == 2
    with pytest.raises(RuntimeError, match="drain"):
        with torch.no_grad(), capturing(net, None, masking=sparse.stack):
            net(input_ids=ids[:2])
            net(input_ids=ids[:1])


def test_stack_options_stand_among_the_maskers():
    one = MaskerStack.parse("sink:4,dense_layers:0:16,magic_pig:10:75,seed:7")
    two = MaskerStack.parse([{"sink": 4}, {"dense_layers": [0, 16]}, "magic_pig:10:75", {"seed": 7}])
    assert one.describe() == two.describe()
    assert one.dense_layers == (0, 16) and one.seed == 7 and [m.name for m in one.maskers] == ["sink", "magic_pig"]
    for bad, message in (("sink:4,seed:1:2", "the stack option seed takes one integer"),
                         ("sink:4,dense_layers:a", "dense_layers are layer indices")):
        with pytest.raises(ConfigError, match=message):
            MaskerStack.parse(bad)


# ---- masker stacks as methods of the perplexity `sweep` -----------------------------------------------------
def test_sweep_runs_stacks_beside_eviction(tmp_path, tiny_corpus, capsys):
    import json

    from tests.test_streaming_sparsity import sweep, tiny_sweep

    config = tiny_sweep(tmp_path, tiny_corpus, methods=["dense", "h2o"],
                        attention_sparsity={"full": "sink:1.0", "window": "sink:1,local:3"}, context_length_sweep=None)
    out = sweep(capsys, "--config", str(config))
    results = json.loads((tmp_path / "sweep.json").read_text())["results"]["tiny"]
    dense, full = results["dense"]["sparsity_sweep"]["0.0"], results["full"]["sparsity_sweep"]["0.0"]
    window = results["window"]["sparsity_sweep"]["0.0"]
    assert set(results["window"]["sparsity_sweep"]) == {"0.0"}  # a stack evicts nothing: one cell per length
    # dense streams in chunks of 2 tokens, a stack scores a window in one forward: the same up to float rounding
    assert full["perplexity"] == pytest.approx(dense["perplexity"], rel=1e-6)
    assert full["density"] == 1.0 and full["attention_error"] == 0.0
    assert 0 < window["density"] < 1 and window["attention_error"] > 0 and window["perplexity"] != dense["perplexity"]
    assert window["method_params"]["maskers"] == [{"masker": "sink", "sink_size": 1}, {"masker": "local", "window_size": 3}]
    assert "(density " in out
    changed = tiny_sweep(tmp_path, tiny_corpus, methods=["dense", "h2o"],
                         attention_sparsity={"full": "sink:1.0", "window": "sink:1,local:4"}, context_length_sweep=None)
    code, _, err = run_sweep(capsys, "--config", str(changed))
    assert code == 2 and "window" in err.strip().splitlines()[-1]  # another stack under the same name: refused


def run_sweep(capsys, *argv):
    from tests.test_cli import run

    return run(["sweep", *argv], capsys)


def test_sampling_maskers_at_full_coverage_are_dense_exactly(net):
    """adaptive_sampling with a budget of every residual key gives them b / n_s = 1: with sink and local covering
    the rest the mask is full, so the forward is the dense one bit for bit (random_sampling draws with replacement
    and magic_pig by collision: neither is ever full; their estimators are tested in test_masking_sampled.py)."""
    ids = ids_batch()
    with torch.no_grad():
        dense = net(input_ids=ids).logits
    full, stack = masked_logits(net, ids, "sink:2,local:2,adaptive_sampling:1.0:0.001:0.001:2:2")
    assert torch.equal(full, dense) and stack.figures()["density"] == 1.0


def test_a_registered_masker_is_parsed_like_the_shipped_ones():
    from lightning_bench.sparsity.masking import register_masker, unregister_masker
    from lightning_bench.sparsity.parameters import param

    @dataclass
    class EveryOther(Masker):
        name = "every_other"
        needs_weights = None
        phase: int = param(0, "keep the keys of this rank parity", choices=(0, 1))

        def entries(self, ctx):
            return ((ctx.key_rank % 2 == self.phase) & ctx.visible).float().expand_as(ctx.mask)

    register_masker(EveryOther)
    try:
        stack = MaskerStack.parse("sink:1,every_other:1")
        assert [m.name for m in stack.maskers] == ["sink", "every_other"] and stack.maskers[1].phase == 1
        with pytest.raises(ConfigError, match="must be one of"):
            MaskerStack.parse("every_other:2")
        with pytest.raises(ValueError, match="no other masker has"):
            register_masker(EveryOther)
    finally:
        unregister_masker("every_other")
    with pytest.raises(ConfigError, match="unknown masker 'every_other'"):
        MaskerStack.parse("every_other:1")


@pytest.mark.parametrize("spec", ["sink:2,local:4,magic_pig:3:8:stats_block=4", "sink:2,local:4,quest:8:4",
                                  "oracle_topk:0.3", "oracle_topp:0.8", "sink:2,random_sampling:0.3",
                                  "sink:1,local:2,adaptive_sampling:0.2:0.3:0.3:1:2"])
def test_a_sparse_prefill_never_reads_a_later_token(net, spec):
    """Changing the last token moves no earlier position's logits: every masker is causal (MagicPIG's key mean and
    norm, Quest's page bounds included)."""
    ids = ids_batch(T=24, rows=1)
    other = ids.clone()
    other[0, -1] = (other[0, -1] + 1) % 128
    first, _ = masked_logits(net, ids, spec)
    second, _ = masked_logits(net, other, spec)
    torch.testing.assert_close(first[:, :-1], second[:, :-1], atol=1e-6, rtol=1e-6)


def test_kept_keys_far_below_the_visible_maximum_still_attend():
    """local:2 with a huge score on an unkept key: the weights are taken relative to the kept maximum."""
    out, _, _ = attend_one([0.0, 0.0, 1.0, 1.0], [math.exp(80.0), 1e-30, 1e-30, 1e-30], [1.0, 2.0, 3.0, 4.0])
    assert out == pytest.approx(3.5, abs=1e-6)


def test_fractions_keep_the_keys_they_name():
    scores = torch.randn(1, 1, 1, 1, 100, generator=torch.Generator().manual_seed(0))
    for fraction, kept in ((0.29, 29), (0.57, 57), (0.07, 7)):
        entries = MaskerStack.parse(f"oracle_topk:{fraction}").maskers[0].entries(context(scores))
        assert int(entries.sum()) == kept


def test_sliding_window_models_are_refused():
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=6)
    model = MistralForCausalLM(config).eval()
    with pytest.raises(ConfigError, match="sliding-window attention"):
        masked_logits(model, torch.randint(0, 64, (1, 10)), "sink:2,local:4")


def test_record_names_hold_every_parameter_that_differs():
    assert MaskerStack.parse("magic_pig:8:150").name == "magic_pig:8:lsh_l=150"
    assert MaskerStack.parse("magic_pig:8:75,dense_layers:0:16,seed:3").slug == "magic_pig8-dense_layers016-seed3"
