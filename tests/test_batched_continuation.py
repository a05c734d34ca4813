"""`continue_rows`: one prefill continued by many methods and budgets as rows of ONE batch gives, row by row,
what `continue_prompt` gives one row at a time: the same greedy tokens, stop, cache series and kept slots
(every method x both protocols x 3 budgets), the same sampled tokens from the same per-row generators, and
the same again when a row cap splits the batch. `continue_prompts`: the rows of several examples (prompts
of different lengths) in shared batches, the same again."""

import pytest
import torch

from lightning_bench.sparsity import METHODS
from lightning_bench.sparsity.engine import KVEngine
from lightning_bench.sparsity.task_decode import PROTOCOLS, continuation, continue_prompt, continue_prompts, continue_rows, prefill_prompt
from tests.helpers import tiny_llama

VOCAB, TC, TQ, N = 512, 24, 5, 10
BUDGETS = [{"sparsity": 0.5}, {"sparsity": 0.8}, {"budget_tokens": 7}]


@pytest.fixture(scope="module")
def net():
    return tiny_llama(VOCAB)


@pytest.fixture(scope="module")
def prompt():
    g = torch.Generator().manual_seed(11)
    return torch.randint(0, VOCAB, (1, TC), generator=g), torch.randint(0, VOCAB, (1, TQ), generator=g)


def grid():
    """(method, budget) of every method: dense once, the others at each budget."""
    return [("dense", {})] + [(m, b) for m in sorted(METHODS) if m != "dense" for b in BUDGETS]


def same_record(one, batched):
    assert batched.tokens == one.tokens
    assert batched.stopped == one.stopped
    assert batched.cache_lengths == one.cache_lengths
    assert batched.kv_bytes == one.kv_bytes
    assert batched.dense_kv_bytes == one.dense_kv_bytes
    assert batched.compressions == one.compressions and batched.forwards == one.forwards
    for name in ("kept_tokens", "compressed_tokens", "context_tokens", "question_tokens", "kv_bytes_prefill"):
        assert batched.figures[name] == one.figures[name], name
    assert batched.method == one.method


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_method_and_budget_decodes_in_one_batch_as_it_does_alone(net, prompt, protocol):
    cells = grid()
    shared = prefill_prompt(net, prompt[0], prompt[1], protocol, [m for m, _ in cells])
    stops = {7, 300}  # a row that stops early leaves the batch; the others go on
    alone = [continue_prompt(shared, m, max_new_tokens=N, stop_ids=stops, **b) for m, b in cells]
    rows = [continuation(m, max_new_tokens=N, stop_ids=stops, **b) for m, b in cells]
    batched = continue_rows(shared, rows, max_rows=len(rows))
    assert len({tuple(r.tokens) for r in alone}) > 3  # the methods really decode differently here
    for (method, budget), one, row in zip(cells, alone, batched):
        same_record(one, row)
    # the shared prefill is left as it was: continuing it again gives the same
    again = continue_prompt(shared, "h2o", max_new_tokens=N, stop_ids=stops, sparsity=0.5)
    assert again.tokens == alone[cells.index(("h2o", {"sparsity": 0.5}))].tokens


def test_rows_recompressed_every_interval_steps_decode_in_batches_as_they_do_alone(net, prompt):
    """With an interval, each row's method re-compresses it from its running statistics: rows reading the
    same statistics share a batch (h2o and tova both read `cum` here), each row as it decodes alone."""
    cells = grid()[::2]
    shared = prefill_prompt(net, prompt[0], prompt[1], "query_aware", [m for m, _ in cells])
    alone = [continue_prompt(shared, m, max_new_tokens=N, interval=3, **b) for m, b in cells]
    rows = [continuation(m, max_new_tokens=N, **b) for m, b in cells]
    batched = continue_rows(shared, rows, max_rows=4, interval=3)
    assert sum(r.compressions for r in alone) > len(cells)  # re-compressions happened
    for one, row in zip(alone, batched):
        same_record(one, row)


def test_sampled_rows_draw_from_their_own_generators_and_a_row_cap_changes_nothing(net, prompt):
    cells = [("dense", {}), ("h2o", {"sparsity": 0.5}), ("snapkv", {"budget_tokens": 9}), ("knorm", {"sparsity": 0.8})]
    shared = prefill_prompt(net, prompt[0], prompt[1], "query_aware", [m for m, _ in cells])
    sampling = dict(max_new_tokens=N, temperature=0.9, top_p=0.9)
    gen = lambda i: torch.Generator().manual_seed(100 + i)  # noqa: E731
    alone = [continue_prompt(shared, m, generator=gen(i), **sampling, **b) for i, (m, b) in enumerate(cells)]
    for cap in (len(cells), 3, 1):
        rows = [continuation(m, generator=gen(i), **sampling, **b) for i, (m, b) in enumerate(cells)]
        for one, row in zip(alone, continue_rows(shared, rows, max_rows=cap)):
            same_record(one, row)


def test_stacked_rows_attend_only_to_their_own_slots(net, prompt):
    """Two rows of different cache lengths stacked: each one's next logits are those it has alone."""
    shared = prefill_prompt(net, prompt[0], None, "query_aware", ["knorm"])
    short = shared.engine.fork()
    short.compress(METHODS["knorm"](), torch.tensor([5]))
    long = shared.engine.fork()
    batch = KVEngine.stack([short, long])  # no cue: the span is the context but its last token (held back)
    assert batch.state.length == TC - 1 and batch.state.n_valid.tolist() == [5, TC - 1]
    token = torch.tensor([3, 3])
    with batch.evaluating():
        both = batch.step(token)
        alone = [KVEngine.stack([e]).step(token[:1]) for e in (short, long)]
    for row, logits in enumerate(alone):
        torch.testing.assert_close(both[row], logits[0], rtol=1e-5, atol=1e-5)


def test_a_batch_holds_rows_of_similar_cache_lengths(net, prompt):
    """A dense row (every slot) is not batched with rows keeping a fifth of them: each row of a batch
    attends over its longest row's slots."""
    from lightning_bench.sparsity.task_decode import batches_by_cache_length

    shared = prefill_prompt(net, prompt[0], prompt[1], "query_aware", ["knorm"])
    rows = [continuation(m, **b) for m, b in [("dense", {}), ("knorm", {"sparsity": 0.8}), ("knorm", {"sparsity": 0.5}),
                                              ("knorm", {"budget_tokens": 7})]]
    work = [(shared, rows)]
    chunks = batches_by_cache_length(work, [(0, r) for r in range(4)], max_rows=8)
    assert chunks == [[(0, 1), (0, 3)], [(0, 0), (0, 2)]]  # 6 and 7 slots; 15 and 29
    assert batches_by_cache_length(work, [(0, r) for r in range(4)], max_rows=1) == [[(0, 1)], [(0, 3)], [(0, 2)], [(0, 0)]]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_rows_of_several_examples_share_batches_and_decode_as_they_do_alone(net, protocol):
    """Three examples of different context, question and cue lengths (so different fed parts and cache
    lengths), every method x 3 budgets each: their rows decoded in shared batches, greedy and sampled,
    give each row's record alone; a row cap that splits them changes nothing."""
    from lightning_bench.sparsity.task_decode import batches_by_cache_length

    g = torch.Generator().manual_seed(5)
    shapes = [(TC, TQ, 3), (TC + 9, TQ + 4, 0), (TC - 6, 1, 2)]
    examples = [[torch.randint(0, VOCAB, (1, n), generator=g) for n in shape] for shape in shapes]
    cells = grid()
    stops = {7, 300}
    sampled = dict(temperature=0.9, top_p=0.9)
    gen = lambda e, i: torch.Generator().manual_seed(1000 * e + i)  # noqa: E731
    settings = lambda e, i: sampled | {"generator": gen(e, i)} if i % 4 == 1 else {}  # noqa: E731 - some rows sample
    prompts = [prefill_prompt(net, c, q, protocol, [m for m, _ in cells], cue_ids=cue) for c, q, cue in examples]
    alone = [[continue_prompt(p, m, max_new_tokens=N, stop_ids=stops, **settings(e, i), **b)
              for i, (m, b) in enumerate(cells)] for e, p in enumerate(prompts)]
    assert len({tuple(r.tokens) for rows in alone for r in rows}) > 10
    for cap in (3 * len(cells), 7):
        work = [(p, [continuation(m, max_new_tokens=N, stop_ids=stops, **settings(e, i), **b)
                     for i, (m, b) in enumerate(cells)]) for e, p in enumerate(prompts)]
        chunks = batches_by_cache_length(work, [(e, i) for e in range(3) for i in range(len(cells))], cap)
        assert any(len({e for e, _ in chunk}) == 3 for chunk in chunks)  # the examples really share a batch
        for ones, batched in zip(alone, continue_prompts(work, max_rows=cap)):
            for one, row in zip(ones, batched):
                same_record(one, row)
