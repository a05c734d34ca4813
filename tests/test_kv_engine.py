"""The KV engine (sparsity/engine.py): copy and expand continue one prefill like separate prefills, every
schedule returns the one record type, one seed rule, and `lightning_bench test --task X --sparsity M`
generates on the engine exactly what the `downstream` cell (X, M) generates."""

import json
from pathlib import Path

import pytest
import torch

from lightning_bench.sparsity import KVEngine, KVRecord, generate_with_eviction
from lightning_bench.sparsity.capture import AttentionRecorder
from lightning_bench.sparsity.methods import make_method
from lightning_bench.sparsity.sampling import draw_generator, draw_seed
from lightning_bench.sparsity.streaming import streaming_logits
from lightning_bench.sparsity.task_decode import generate_for_task
from tests.helpers import grid_results, tiny_llama

VOCAB = 256


@pytest.fixture(scope="module")
def net():
    return tiny_llama(VOCAB)


def _ids(n=20, seed=1):
    return torch.randint(0, VOCAB, (1, n), generator=torch.Generator().manual_seed(seed))


def _decode(engine, method, keep, steps=4):
    """Compress once, then greedy steps; the logits of every step."""
    engine.compress(method, keep)
    logits, out = engine.last, []
    for _ in range(steps):
        logits = engine.step(logits.argmax(-1))
        out.append(logits)
    return torch.stack(out, 1)


def test_a_fork_continues_like_a_fresh_prefill_and_leaves_the_original_as_it_was(net):
    """fork shares the prefill's tensors for a compression (no copy); what it compressed, stacked into a
    batch of its own, decodes as a fresh prefill would, and the shared prefill stays as it was."""
    method = make_method("h2o")
    fresh = KVEngine(net, AttentionRecorder.for_method(method))
    fresh.last = fresh.prefill(_ids())
    shared = KVEngine(net, AttentionRecorder.for_method(method))
    shared.last = shared.prefill(_ids())
    before, stats = shared.state.kv_bytes(), {k: v.clone() for k, v in shared.recorder.layers[0].items()}
    fork = shared.fork(shared.recorder)
    assert fork.compress(method, torch.tensor([8]))
    fork = KVEngine.stack([fork])  # with the statistics it kept, which h2o goes on recording
    fork.last = shared.last
    torch.testing.assert_close(_decode(fork, method, torch.tensor([8])), _decode(fresh, method, torch.tensor([8])),
                               atol=0, rtol=0)
    assert shared.state.length == 20 and shared.state.kv_bytes() == before and shared.state.compressions == 0
    assert all(torch.equal(stats[k], v) for k, v in shared.recorder.layers[0].items())


def test_every_schedule_returns_the_one_record(net):
    ids = _ids()
    res = generate_with_eviction(net, ids, None, "h2o", sparsity=0.5, max_new_tokens=3)
    _, stats = streaming_logits(net, ids, None, "h2o", sparsity=0.5, chunk_size=4)
    gen = generate_for_task(net, ids[:, :14], ids[:, 14:], "h2o", sparsity=0.5, max_new_tokens=3)
    for record in (res, stats, gen):
        assert isinstance(record, KVRecord) and record.compressions >= 1
        assert record.peak_kv_bytes <= record.dense_kv_bytes_peak and record.summary()["method"] == "h2o"
    assert len(res.cache_lengths) == 3 and res.forwards == 3  # the prefill and two decoding steps
    assert len(stats.cache_lengths) == 20 and stats.chunks == 5
    assert gen.kept_tokens == 10 and len(gen.tokens) == 3


def test_one_seed_rule():
    assert draw_seed(1234, 7, 2) == 1234 * 1_000_003 + 7 * 1009 + 2
    assert draw_generator(1234, 7, 2, 0.0) is None
    a, b = draw_generator(1, 2, 3, 1.0), draw_generator(1, 2, 3, 1.0)
    assert torch.equal(torch.rand(4, generator=a), torch.rand(4, generator=b))


@pytest.mark.shared_data
def test_test_task_under_sparsity_generates_what_the_downstream_cell_generates(tiny_hf, shared_data, tmp_path,
                                                                            capsys):
    from tests.test_cli import run

    code, _, err = run(["downstream", "--model.pretrained", str(tiny_hf), "--data_dir", str(shared_data),
                        "--results_dir", str(tmp_path / "r"), "--name", "t", "--max_samples", "2",
                        "--max_new_tokens", "4", "--max_length", "192", "--tasks", "xsum", "--methods", "h2o",
                        "--sparsity", "0.5", "--protocols", "query_aware"], capsys)
    assert code == 0, err
    cell = grid_results(tmp_path / "r" / "t" / "t_results.json")["cells"][
        "xsum__h2o_s0.5_query_aware_seed1234"]
    assert all(s["kept_tokens"] < s["compressed_tokens"] for s in cell["samples"])
    code, _, err = run(["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--task", "xsum",
                        "--data.data_dir", str(shared_data), "--data.max_samples", "2", "--data.max_new_tokens", "4",
                        "--data.max_length", "192", "--sparsity", "h2o", "--sparsity.ratio", "0.5",
                        "--trainer.enable_progress_bar", "false", "--trainer.logger", "false"], capsys)
    assert code in (0, None), err
    samples = Path("benchmark_results") / f"hf-{tiny_hf.name}_h2o_s0.5_downstream.samples.jsonl"
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    assert [s["prediction"] for s in cell["samples"]] == [r["prediction"] for r in rows]
