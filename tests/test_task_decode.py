"""`generate_for_task`: prefill, compress, decode on the pruned cache for a context + question + cue prompt,
under both protocols (kvpress's: the cue is fed after compression, every answer token comes from the
compressed cache), checked against plain transformers decoding, a method that records what it scored, and
the budget arithmetic."""

import math
from dataclasses import dataclass

import pytest
import torch

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity import METHODS, KVRecord
from lightning_bench.sparsity.methods import H2O
from lightning_bench.sparsity.task_decode import PROTOCOLS, continue_prompt, generate_for_task, prefill_prompt
from tests.helpers import tiny_llama

VOCAB, TC, TQ, TCUE, N = 512, 15, 6, 3, 8


@pytest.fixture(scope="module")
def net():
    return tiny_llama(VOCAB)


@pytest.fixture(scope="module")
def prompt():
    g = torch.Generator().manual_seed(3)
    return tuple(torch.randint(0, VOCAB, (1, n), generator=g) for n in (TC, TQ, TCUE))  # context, question, cue


class CharTokenizer:
    """Only what generate_for_task reads: decode(list of ids) -> text."""

    def decode(self, ids):
        return "".join(f"<{i}>" for i in ids)


@dataclass
class Recording(H2O):
    """h2o that records, per compression, what layer 0's statistics describe: the cache slots scored, the
    highest position among them and the queries observed (the `cum` mass is 1 per query and query head)."""

    name = "recording"

    def __post_init__(self):
        super().__post_init__()
        self.calls = []

    def priority(self, view):
        if view.layer_idx == 0:
            queries = float(view.stats["cum"].sum()) / (view.keys.shape[1] * view.group_size)
            self.calls.append({"slots": view.keys.shape[2], "max_position": int(view.positions.max()),
                               "queries": round(queries, 3)})
        return super().priority(view)


def run(net, prompt, method="dense", **kwargs):
    kwargs.setdefault("max_new_tokens", N)
    return generate_for_task(net, prompt[0], prompt[1], method, cue_ids=prompt[2], **kwargs)


def _one_line(err):
    assert "\n" not in str(err.value)
    return str(err.value)


# ---- exactness -------------------------------------------------------------------------------
def test_sparsity_zero_reproduces_dense_and_dense_is_transformers_greedy(net, prompt):
    from transformers import GenerationConfig

    ids = torch.cat(prompt, dim=1)  # context, question, cue
    config = GenerationConfig(max_new_tokens=N, do_sample=False, num_beams=1, pad_token_id=0, eos_token_id=None)
    reference = net.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)[0, ids.shape[1]:]
    dense = {p: run(net, prompt, protocol=p) for p in PROTOCOLS}
    assert dense["query_aware"].tokens == dense["query_agnostic"].tokens == reference.tolist()
    assert len(set(reference.tolist())) > 2  # not a degenerate repetition
    for p, res in dense.items():
        assert isinstance(res, KVRecord) and res.stopped is None and len(res.tokens) == N
        assert res.kept_tokens == res.compressed_tokens == (TC if p == "query_agnostic" else TC + TQ)
        assert res.kv_bytes_peak == res.dense_kv_bytes_peak and res.compressions == 0
        assert res.cache_length_final == TC + TQ + TCUE + N - 1 and res.cue_tokens == TCUE
        assert res.method["protocol"] == p and res.method["question_tokens"] == TQ and res.method["protocol_version"] == 2
    for name in sorted(METHODS):
        params = {"seed": 7} if name == "random" else {}
        for p in PROTOCOLS:
            for interval in (0, 2):
                res = run(net, prompt, name, sparsity=0.0, protocol=p, interval=interval, method_params=params)
                assert res.tokens == dense[p].tokens, (name, p, interval)
                assert res.compressions == 0 and res.kv_bytes_peak == dense[p].kv_bytes_peak
    # not vacuous: a real compression changes the answer on this model
    assert run(net, prompt, "h2o", sparsity=0.5).tokens != dense["query_aware"].tokens


def test_one_shared_prefill_continued_by_every_method_equals_separate_runs(net, prompt):
    """The driver prefills each example once and continues it for every method and budget: the tokens,
    kept slots, cache sizes and compressions are those of separate generate_for_task calls, and the
    shared prompt is left untouched by each continuation (reuse)."""
    names = sorted(METHODS)
    params = {"random": {"seed": 7}}
    for p in PROTOCOLS:
        shared = prefill_prompt(net, prompt[0], prompt[1], p, names, method_params=params, cue_ids=prompt[2])
        assert len(shared.recorders) >= 3  # h2o's cum, snapkv's window, tova's last row, cab's two-hop, ...
        length = shared.state.length
        for name in names:
            for sparsity, interval in ((0.5, 0), (0.8, 0), (0.5, 2)):
                kwargs = dict(sparsity=sparsity, interval=interval, max_new_tokens=N, method_params=params.get(name))
                alone = generate_for_task(net, prompt[0], prompt[1], name, protocol=p, cue_ids=prompt[2], **kwargs)
                again = continue_prompt(shared, name, **kwargs)
                got = (again.tokens, again.kept_tokens, again.kv_bytes_peak, again.cache_length_final,
                       again.compressions, again.compressed_tokens)
                want = (alone.tokens, alone.kept_tokens, alone.kv_bytes_peak, alone.cache_length_final,
                        alone.compressions, alone.compressed_tokens)
                assert got == want, (p, name, sparsity, interval)
                assert shared.state.length == length and shared.state.compressions == 0
    only_dense = prefill_prompt(net, prompt[0], prompt[1], "query_aware", ["dense"])
    with pytest.raises(ConfigError) as err:
        continue_prompt(only_dense, "h2o", sparsity=0.5)
    assert "prefill_prompt(methods=" in _one_line(err)


def test_no_question_makes_both_protocols_one_run(net, prompt):
    a = generate_for_task(net, prompt[0], None, "h2o", sparsity=0.5, protocol="query_aware", max_new_tokens=4,
                          cue_ids=prompt[2])
    b = generate_for_task(net, prompt[0], torch.empty(1, 0, dtype=torch.long), "h2o", sparsity=0.5,
                          protocol="query_agnostic", max_new_tokens=4, cue_ids=prompt[2])
    assert a.tokens == b.tokens and a.kept_tokens == b.kept_tokens == math.ceil(0.5 * TC)
    assert b.method["question_tokens"] == 0 and b.compressed_tokens == TC


def test_no_answer_token_comes_from_the_dense_prefill(net, prompt):
    """The first answer token is predicted on the compressed cache (after the cue is fed), not read from
    the dense prefill's logits: a heavy compression changes it. Without a cue (and, for query_agnostic,
    without a question) the span's last token is held back and fed after compression."""
    dense = run(net, prompt, max_new_tokens=1).tokens
    heavy = [run(net, prompt, "streaming_llm", budget_tokens=b, max_new_tokens=1).tokens for b in (1, 2, 4)]
    assert any(first != dense for first in heavy)  # version 1 gave every method dense's first token
    for p in PROTOCOLS:
        method = Recording()
        bare = generate_for_task(net, prompt[0], None, method, sparsity=0.5, protocol=p, max_new_tokens=2)
        assert bare.compressed_tokens == TC - 1 and method.calls[0]["slots"] == TC - 1
        assert bare.cache_length_final == math.ceil(0.5 * (TC - 1)) + 1 + 1  # kept + the held-back token + 1
    with pytest.raises(ConfigError, match="nothing to compress"):
        generate_for_task(net, prompt[0][:, :1], None, "h2o", sparsity=0.5)


# ---- protocols -------------------------------------------------------------------------------
def test_query_agnostic_compresses_the_context_before_the_question(net, prompt):
    seen = {}
    for p in PROTOCOLS:
        method = Recording()
        res = run(net, prompt, method, sparsity=0.5, protocol=p, max_new_tokens=3)
        assert res.compressions == 1 and len(method.calls) == 1
        seen[p] = (method.calls[0], res)
    first, res = seen["query_agnostic"]
    # the keys of the context only, and only the context's queries observed
    assert first == {"slots": TC, "max_position": TC - 1, "queries": TC}
    assert res.compressed_tokens == TC and res.kept_tokens == math.ceil(0.5 * TC)
    # the question and the cue are appended to the compressed context, never compressed: kept + fed + decoded
    assert res.cache_length_final == math.ceil(0.5 * TC) + TQ + TCUE + 2
    first, res = seen["query_aware"]
    # the question inside the compressed span, the cue after it: never a candidate for eviction
    assert first == {"slots": TC + TQ, "max_position": TC + TQ - 1, "queries": TC + TQ}
    assert res.compressed_tokens == TC + TQ and res.kept_tokens == math.ceil(0.5 * (TC + TQ))
    assert res.cache_length_final == math.ceil(0.5 * (TC + TQ)) + TCUE + 2
    assert seen["query_agnostic"][1].kept_tokens != seen["query_aware"][1].kept_tokens


def test_query_agnostic_later_compressions_see_the_question(net, prompt):
    method = Recording()
    res = run(net, prompt, method, sparsity=0.5, protocol="query_agnostic", interval=2, max_new_tokens=5)
    kept = math.ceil(0.5 * TC)
    # first: the context; at step 2: the kept context + question + cue + 2 decoded tokens, budget over all seen
    assert [c["slots"] for c in method.calls] == [TC, kept + TQ + TCUE + 2]
    assert method.calls[1]["max_position"] == TC + TQ + TCUE + 1
    assert res.compressions == 2 and res.cache_length_final == math.ceil(0.5 * (TC + TQ + TCUE + 2)) + 2


def test_budget_tokens_is_a_fixed_count_over_the_compressed_span(net, prompt):
    for p, compressed in (("query_aware", TC + TQ), ("query_agnostic", TC)):
        res = run(net, prompt, "streaming_llm", budget_tokens=TC, protocol=p, max_new_tokens=2)
        assert res.kept_tokens == TC and res.compressed_tokens == compressed
        assert res.method["budget_tokens"] == TC and res.method["sparsity"] is None


# ---- memory and re-compression ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["h2o", "streaming_llm"])
def test_half_sparsity_keeps_less_and_interval_recompresses(net, prompt, name):
    for p in PROTOCOLS:
        dense = run(net, prompt, protocol=p)
        once = run(net, prompt, name, sparsity=0.5, protocol=p)
        assert once.kept_tokens < dense.kept_tokens
        assert once.kv_bytes_peak < dense.kv_bytes_peak and once.kv_bytes_peak < once.dense_kv_bytes_peak
        assert once.dense_kv_bytes_peak == dense.kv_bytes_peak
        assert once.kv_bytes_prefill == dense.kv_bytes_prefill  # the dense prefill is the same for everyone
        often = run(net, prompt, name, sparsity=0.5, protocol=p, interval=2)
        assert once.compressions == 1 and often.compressions > once.compressions
        assert often.kv_bytes_peak <= once.kv_bytes_peak and often.cache_length_final < once.cache_length_final
        assert once.prefill_seconds > 0 and once.decode_seconds > 0
        assert once.decode_tokens_per_s == pytest.approx((N - 1) / once.decode_seconds)


# ---- stopping and sampling -------------------------------------------------------------------
def _first_new(tokens, start=1):
    """Index of the first token (from `start`) not seen before it."""
    return next(i for i in range(start, len(tokens)) if tokens[i] not in tokens[:i])


def test_stop_token_and_stop_string_end_generation(net, prompt):
    ref = run(net, prompt, "h2o", sparsity=0.5).tokens
    k = _first_new(ref, 2)
    res = run(net, prompt, "h2o", sparsity=0.5, stop_ids={ref[k]})
    assert res.tokens == ref[:k + 1] and res.stopped == "stop_token"
    # a string spanning two tokens: it stops at the token completing its first occurrence
    tok = CharTokenizer()
    stop = tok.decode(ref[k - 1:k + 1])
    res = run(net, prompt, "h2o", sparsity=0.5, stop_strings=(stop, "never"), tokenizer=tok)
    end = next(i for i in range(1, N) if stop in tok.decode(ref[:i + 1]))
    assert res.tokens == ref[:end + 1] and res.stopped == "stop_string"
    one = run(net, prompt, "h2o", sparsity=0.5, stop_ids={ref[0]})
    assert one.tokens == ref[:1] and one.stopped == "stop_token" and one.decode_tokens_per_s is None
    assert run(net, prompt, "h2o", sparsity=0.5, max_new_tokens=3).stopped is None


def test_seeded_sampling_is_reproducible_and_depends_on_the_seed(net, prompt):
    def sample(seed, p="query_agnostic"):
        return run(net, prompt, "snapkv", sparsity=0.5, protocol=p, temperature=1.0, top_p=0.9, max_new_tokens=12,
                   generator=torch.Generator().manual_seed(seed)).tokens

    assert sample(0) == sample(0) and sample(0) != sample(1)
    assert sample(5, "query_aware") == sample(5, "query_aware")


# ---- errors ----------------------------------------------------------------------------------
def test_bad_arguments_raise_one_line_config_errors(net, prompt):
    from lightning_bench.models import MambaLM

    with pytest.raises(ConfigError) as err:
        run(net, prompt, "h2o", budget_tokens=TC + 1, protocol="query_agnostic")
    assert "larger than the compressed span" in _one_line(err)
    with pytest.raises(ConfigError) as err:
        run(net, prompt, "h2o", budget_tokens=TC + TQ + 1)
    assert "larger than the compressed span" in _one_line(err)
    with pytest.raises(ConfigError) as err:
        run(net, prompt, "h2o", sparsity=1.0)
    assert "[0, 1)" in _one_line(err)
    with pytest.raises(ConfigError) as err:
        run(net, prompt, "h2o", sparsity=0.5, protocol="query_blind")
    assert "query_aware" in _one_line(err) and "query_agnostic" in _one_line(err)
    with pytest.raises(ConfigError) as err:
        generate_for_task(net, prompt[0].repeat(2, 1), prompt[1].repeat(2, 1), "h2o", sparsity=0.5)
    assert "one row" in _one_line(err)
    with pytest.raises(ConfigError) as err:
        run(net, prompt, "h2o")
    _one_line(err)  # an evicting method needs a budget
    with pytest.raises(ConfigError) as err:
        run(net, prompt, "h2o", sparsity=0.5, stop_strings=("x",))
    assert "tokenizer" in _one_line(err)
    with pytest.raises(ConfigError) as err:
        run(MambaLM(d_model=16, n_layer=1, vocab_size=VOCAB), prompt, "h2o", sparsity=0.5)
    assert "no KV cache" in _one_line(err)
