"""Streaming evaluation under KV-cache eviction: `streaming_logits` against dense forwards (plain and
masked), the SparsityCallback against plain Lightning runs, and the `sweep` command's JSON, resume
and presets. Tiny random Llama configs only."""

import json
from pathlib import Path

import pytest
import torch
import yaml

from lightning_bench.errors import ConfigError
from lightning_bench.experiments.core.config import parse_command
from lightning_bench.experiments.sweep.config import SweepConfig
from lightning_bench.sparsity import METHODS
from lightning_bench.sparsity.callback import SparsityCallback
from lightning_bench.sparsity.streaming import StreamingEviction
from lightning_bench.sparsity.streaming import streaming_logits
from tests.helpers import quiet_trainer, tiny_data, tiny_model
from tests.test_cli import run
from tests.test_sparsity import tiny_llama

EVICTING = sorted(m for m in METHODS if m != "dense")
PRESETS = sorted((Path(__file__).resolve().parent.parent / "configs" / "perplexity").glob("*.yaml"))


@pytest.fixture(scope="module")
def net():
    return tiny_llama()


def ids_batch(T=24, seed=3):
    return torch.randint(0, 128, (2, T), generator=torch.Generator().manual_seed(seed))


def dense_logits(net, ids, mask_4d=None):
    with torch.no_grad():
        return net(input_ids=ids, attention_mask=mask_4d).logits


def nll(logits, ids):
    logp = torch.log_softmax(logits[:, :-1].float(), -1)
    return -logp.gather(-1, ids[:, 1:, None])[..., 0]


# ---- streaming_logits ------------------------------------------------------------------------
def test_sparsity_zero_reproduces_the_dense_forward_for_every_method_and_chunk(net):
    ids = ids_batch()
    dense = dense_logits(net, ids)
    for method in sorted(METHODS):
        for chunk in (1, 5):
            logits, stats = streaming_logits(net, ids, None, method, sparsity=0.0, chunk_size=chunk)
            torch.testing.assert_close(logits, dense, atol=1e-5, rtol=1e-5, msg=f"{method} chunk {chunk}")
            assert stats.compressions == 0 and stats.cache_lengths == list(range(1, 25))
            assert stats.peak_kv_bytes == stats.dense_kv_bytes_peak
    keep = torch.tensor([0, 4, 5, 17, 23])  # the evaluation's logits_to_keep: only those positions
    logits, _ = streaming_logits(net, ids, None, "h2o", sparsity=0.0, chunk_size=5, logits_to_keep=keep)
    torch.testing.assert_close(logits, dense[:, keep], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("method", EVICTING)
def test_chunk_1_and_chunk_4_give_the_same_nll_when_nothing_is_evicted(net, method):
    ids = ids_batch()
    one, _ = streaming_logits(net, ids, None, method, sparsity=0.0, chunk_size=1)
    four, _ = streaming_logits(net, ids, None, method, sparsity=0.0, chunk_size=4)
    torch.testing.assert_close(nll(one, ids), nll(four, ids), atol=1e-5, rtol=1e-5)
    # a budget as long as the text: every chunk goes through `compress`, which must keep everything
    full, stats = streaming_logits(net, ids, None, method, budget_tokens=24, chunk_size=4)
    torch.testing.assert_close(nll(full, ids), nll(one, ids), atol=1e-5, rtol=1e-5)
    assert stats.compressions == 0


def sinks_and_window_mask(T, chunk, budget, n_sink, H=4):
    """Additive (1, H, T, T) mask of what streaming_llm(n_sink) with a fixed budget leaves each query:
    chunk [lo, hi) sees, of the tokens before lo, all of them while lo <= budget, else the n_sink first
    and the budget - n_sink last; and its own chunk causally."""
    allowed = torch.zeros(T, T, dtype=torch.bool)
    for q in range(T):
        lo = q - q % chunk
        before = list(range(lo)) if lo <= budget else [*range(n_sink), *range(lo - (budget - n_sink), lo)]
        allowed[q, before] = True
        allowed[q, lo:q + 1] = True
    bias = torch.zeros(T, T).masked_fill(~allowed, torch.finfo(torch.float32).min)
    return bias[None, None].expand(1, H, T, T)


@pytest.mark.parametrize("chunk", [1, 4])
def test_evicted_stream_equals_one_dense_forward_with_the_evicted_keys_masked(net, chunk):
    """True positions: the compressed-cache stream must equal ONE dense forward in which every query
    sees exactly the kept keys (a check of positions, chunking and the compression schedule)."""
    ids = ids_batch(T=30)
    logits, stats = streaming_logits(net, ids, None, "streaming_llm", budget_tokens=8, chunk_size=chunk)
    reference = dense_logits(net, ids, sinks_and_window_mask(30, chunk, 8, 4).expand(2, 4, 30, 30))
    torch.testing.assert_close(logits, reference, atol=1e-4, rtol=1e-4)
    lengths = [min(q - q % chunk, 8) + q % chunk + 1 for q in range(30)]
    assert stats.cache_lengths == lengths
    assert stats.mean_cache_length == pytest.approx(sum(lengths) / 30)


def test_right_padded_rows_stream_like_the_rows_alone(net):
    ids = ids_batch(T=24)
    mask = torch.ones_like(ids)
    mask[0, 18:] = 0
    both, stats = streaming_logits(net, ids, mask, "h2o", sparsity=0.5, chunk_size=3)
    alone, _ = streaming_logits(net, ids[:1, :18], None, "h2o", sparsity=0.5, chunk_size=3)
    torch.testing.assert_close(both[:1, :18], alone, atol=1e-4, rtol=1e-4)
    assert stats.counted_tokens == 18 + 24  # padding is fed but not counted


def test_rounding_sets_the_streamed_budget_and_is_recorded(net):
    ids = ids_batch(T=12)
    for rounding, kept in (("ceil", [1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6]), ("floor", [1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5])):
        _, stats = streaming_logits(net, ids, None, "knorm", sparsity=0.5, chunk_size=1, rounding=rounding)
        # token t + 1 attends the budget of the t + 1 tokens before it (compressed before it came) and itself
        assert stats.cache_lengths == [1] + [k + 1 for k in kept], rounding
        assert stats.summary()["rounding"] == rounding
    assert SparsityCallback("h2o", ratio=0.5, rounding="floor").summary()["rounding"] == "floor"
    assert SparsityCallback("h2o", ratio=0.5).summary()["rounding"] == "ceil"


# ---- the callback -------------------------------------------------------------------------------
@pytest.fixture
def data_and_model(tiny_corpus):
    dm = tiny_data(tiny_corpus, seq_len=16, eval_stride=12)  # sliding windows: logits_to_keep is exercised
    dm.setup("test")
    torch.manual_seed(0)
    return dm, tiny_model(dm.vocab_size, n_layer=2)


def test_callback_at_sparsity_zero_equals_the_plain_test_run(data_and_model):
    dm, model = data_and_model
    quiet_trainer().test(model, datamodule=dm, verbose=False)
    plain = model.last_eval["test"]
    plain_nll = torch.cat([b.flatten() for b in quiet_trainer().predict(model, datamodule=dm)])
    callback = SparsityCallback("h2o", ratio=0.0, chunk_size=3)
    quiet_trainer(callbacks=[callback]).test(model, datamodule=dm, verbose=False)
    assert model.evaluation is None  # the eviction was left: the module's own forward is back
    assert model.last_eval["test"]["scored_tokens"] == plain["scored_tokens"]
    assert model.last_eval["test"]["loss"] == pytest.approx(plain["loss"], rel=1e-6)
    summary = callback.summary()
    assert summary["method"] == "h2o" and summary["ratio"] == 0.0 and summary["chunk_size"] == 3
    assert summary["cache_fraction"] == 1.0 and summary["scored_tokens"] == plain["scored_tokens"]
    streamed = torch.cat([b.flatten() for b in quiet_trainer(callbacks=[SparsityCallback("tova", ratio=0.0,
                                                                                        chunk_size=5)])
                          .predict(model, datamodule=dm)])
    torch.testing.assert_close(streamed, plain_nll, atol=1e-5, rtol=1e-5, equal_nan=True)


def test_callback_at_half_sparsity_halves_the_cache(data_and_model):
    dm, model = data_and_model
    quiet_trainer().test(model, datamodule=dm, verbose=False)
    dense_loss = model.last_eval["test"]["loss"]
    callback = SparsityCallback("h2o", ratio=0.5, chunk_size=1)
    quiet_trainer(callbacks=[callback]).validate(model, datamodule=dm, verbose=False)
    summary = callback.summary()
    assert summary["stage"] == "validation"
    # per-token streaming: a token at position t attends ceil(t / 2) kept slots + itself
    assert 0.45 < summary["cache_fraction"] < 0.6
    assert summary["peak_kv_bytes"] < 0.6 * summary["dense_peak_kv_bytes"]
    quiet_trainer(callbacks=[callback]).test(model, datamodule=dm, verbose=False)
    assert model.last_eval["test"]["loss"] != pytest.approx(dense_loss, rel=1e-6)  # eviction changed the scores


def test_eviction_is_left_whatever_happens(data_and_model, monkeypatch):
    dm, model = data_and_model
    eviction = StreamingEviction.build("h2o", ratio=0.5, chunk_size=4)
    ids = torch.randint(0, dm.vocab_size, (2, 12))
    with eviction.applied(model):
        assert model.evaluation is eviction
        evicted = model.evaluation.logits(model, ids)
    torch.testing.assert_close(evicted, streaming_logits(model.net, ids, None, "h2o", sparsity=0.5, chunk_size=4)[0])
    assert eviction.totals["tokens"] == 24 and model.evaluation is None
    with pytest.raises(ZeroDivisionError), eviction.applied(model):
        1 / 0
    assert model.evaluation is None

    def failing_step(batch, batch_idx):
        assert model.evaluation is not None  # the stage runs under the eviction
        raise ZeroDivisionError

    monkeypatch.setattr(model, "test_step", failing_step)
    with pytest.raises(ZeroDivisionError):
        quiet_trainer(callbacks=[SparsityCallback("h2o", ratio=0.5)]).test(model, datamodule=dm, verbose=False)
    assert model.evaluation is None


def _one_line(err):
    assert "\n" not in str(err.value)
    return str(err.value)


def test_callback_bad_inputs_are_one_line_config_errors(data_and_model):
    from lightning_bench.models import MambaLM, ResNetBKLM

    dm, model = data_and_model
    with pytest.raises(ConfigError) as err:
        SparsityCallback("h3o", ratio=0.5)
    assert "valid: cab, cab_v3, cab_v4, dense, h2o, knorm, local_strided, observed_attention, random, snapkv, streaming_llm, tova" \
        in _one_line(err)
    for ratio in (1.0, -0.1):
        with pytest.raises(ConfigError) as err:
            SparsityCallback("h2o", ratio=ratio)
        assert "[0, 1)" in _one_line(err)
    for kwargs in ({}, {"ratio": 0.5, "budget_tokens": 4}, {"ratio": 0.5, "chunk_size": 0},
                   {"ratio": 0.5, "rounding": "nearest"}):
        with pytest.raises(ConfigError) as err:
            SparsityCallback("h2o", **kwargs)
        _one_line(err)
    with pytest.raises(ConfigError) as err:
        quiet_trainer(callbacks=[SparsityCallback("h2o", budget_tokens=17)]).test(model, datamodule=dm, verbose=False)
    assert "larger than the evaluation window" in _one_line(err)
    assert model.evaluation is None
    for family in (MambaLM(d_model=16, n_layer=1, vocab_size=dm.vocab_size),
                   ResNetBKLM(d_model=16, n_layers=1, vocab_size=dm.vocab_size, max_seq_len=16)):
        with pytest.raises(ConfigError) as err:
            quiet_trainer(callbacks=[SparsityCallback("h2o", ratio=0.5)]).test(family, datamodule=dm, verbose=False)
        assert "no KV cache" in _one_line(err)


# ---- the sweep -------------------------------------------------------------------------------------
def tiny_sweep(tmp_path, tiny_corpus, **changes) -> Path:
    config = {
        "model": {"class_path": "lightning_bench.models.TransformerLM",
                  "init_args": {"n_layer": 1, "d_model": 32, "n_head": 4, "n_kv_head": 2, "max_seq_len": 64}},
        "datasets": {"tiny": {"source": "text", "path": str(tiny_corpus), "tokenizer": "word", "max_tokens": 48}},
        "eval_batch_size": 2,
        "methods": ["dense", "h2o", "streaming_llm"],
        "sparsity_sweep": {"context_length": 16, "sparsity_levels": [0.0, 0.5]},
        "context_length_sweep": {"sparsity": 0.5, "context_lengths": [8, 16]},
        "streaming": {"chunk_size": 2},
        "accelerator": "cpu",
        "output": str(tmp_path / "sweep.json"),
    }
    config.update(changes)
    path = tmp_path / "tiny_sweep.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def sweep(capsys, *argv):
    code, out, err = run(["sweep", *argv], capsys)
    assert code in (0, None), f"exit {code}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
    return out


def test_sweep_writes_the_benchmark_json_and_resumes(tmp_path, tiny_corpus, capsys, monkeypatch):
    from lightning_bench.experiments.sweep import streaming_eval as sweep_module

    config = tiny_sweep(tmp_path, tiny_corpus)
    out = sweep(capsys, "--config", str(config))
    assert "8 cells run now, 11/11" in out  # 11 cells, 3 of them the same (L=16, s) as the other sweep
    doc = json.loads((tmp_path / "sweep.json").read_text())
    results = doc["results"]["tiny"]
    assert set(results) == {"dense", "h2o", "streaming_llm"}
    assert set(results["h2o"]) == {"context_length_sweep", "sparsity_sweep"}
    assert set(results["h2o"]["sparsity_sweep"]) == {"0.0", "0.5"}
    assert set(results["dense"]["sparsity_sweep"]) == {"0.0"}
    assert set(results["h2o"]["context_length_sweep"]) == {"8", "16"}
    cell = results["h2o"]["sparsity_sweep"]["0.5"]
    for key in ("perplexity", "bits_per_token", "cross_entropy", "mean_cache_size", "tokens", "seconds",
                "peak_kv_bytes", "context_length", "sparsity"):
        assert cell[key] is not None, key
    assert cell["tokens"] == 64 and cell["context_length"] == 16  # 48 targets -> 3 windows -> 2 batches of 2
    assert cell["mean_cache_size"] < 0.75 * cell["dense_mean_cache_size"]
    assert results["h2o"]["context_length_sweep"]["16"] == cell  # measured once
    # sparsity 0 never compresses: every method reproduces dense
    dense = results["dense"]["sparsity_sweep"]["0.0"]["perplexity"]
    assert results["h2o"]["sparsity_sweep"]["0.0"]["perplexity"] == pytest.approx(dense, rel=1e-6)
    assert doc["config"]["methods"] == ["dense", "h2o", "streaming_llm"] and doc["complete"]
    meta = doc["meta"]
    assert meta["versions"]["torch"] and meta["data"]["tiny"]["splits"]["test"]["sha256"]
    assert meta["data"]["tiny"]["tokenizer"]["kind"] == "word"
    assert meta["evaluation_protocol"]["tiny"]["streaming"]["chunk_size"] == 2

    # run again: every cell is skipped, nothing changes
    out = sweep(capsys, "--config", str(config))
    assert out.count("skipped") == 11 and "0 cells run now" in out
    assert json.loads((tmp_path / "sweep.json").read_text())["results"] == doc["results"]

    # delete one cell: only that one is computed again, to the same value
    edited = json.loads((tmp_path / "sweep.json").read_text())
    del edited["results"]["tiny"]["streaming_llm"]["context_length_sweep"]["8"]
    (tmp_path / "sweep.json").write_text(json.dumps(edited))
    out = sweep(capsys, "--config", str(config))
    assert "1 cells run now" in out
    again = json.loads((tmp_path / "sweep.json").read_text())["results"]["tiny"]["streaming_llm"]
    before = results["streaming_llm"]["context_length_sweep"]["8"]
    assert again["context_length_sweep"]["8"]["perplexity"] == pytest.approx(before["perplexity"], rel=1e-9)

    # killed after two cells: the file holds them, the next run does the rest only
    real_run, calls = sweep_module.CellRunner.run, []

    def dies_on_the_third(self, cell):
        calls.append(cell)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_run(self, cell)

    monkeypatch.setattr(sweep_module.CellRunner, "run", dies_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        run(["sweep", "--config", str(config), "--output", str(tmp_path / "killed.json")], capsys)
    assert json.loads((tmp_path / "killed.json").read_text())["cells_done"] == 3  # 2 run + 1 shared with them
    monkeypatch.setattr(sweep_module.CellRunner, "run", real_run)
    out = sweep(capsys, "--config", str(config), "--output", str(tmp_path / "killed.json"))
    assert out.count("skipped") == 3 and "6 cells run now, 11/11" in out
    resumed = json.loads((tmp_path / "killed.json").read_text())["results"]["tiny"]
    assert resumed["h2o"]["sparsity_sweep"]["0.5"]["perplexity"] == pytest.approx(cell["perplexity"], rel=1e-9)


TIMINGS = ("seconds", "tokens_per_second")


def without_timings(results: dict) -> dict:
    return {d: {m: {sw: {k: {f: v for f, v in cell.items() if f not in TIMINGS} for k, cell in cells.items()}
                    for sw, cells in sweeps.items()} for m, sweeps in methods.items()}
            for d, methods in results.items()}


def test_sweep_killed_by_sigkill_resumes_to_the_same_json(tmp_path, tiny_corpus, capsys, cli_process):
    """kill -9 in the middle of a sweep (a process of its own), then the same command: the final JSON is the
    uninterrupted one."""
    import time

    config = tiny_sweep(tmp_path, tiny_corpus)
    sweep(capsys, "--config", str(config))
    killed = tmp_path / "killed.json"
    proc = cli_process(["sweep", "--config", str(config), "--output", str(killed)], tmp_path / "killed.log")
    deadline = time.monotonic() + 300
    while proc.is_alive() and time.monotonic() < deadline and not killed.exists():
        time.sleep(0.02)  # the file appears (atomically) once the first cell is done
    proc.kill()  # SIGKILL
    proc.join()
    partial = json.loads(killed.read_text())
    assert 1 <= partial["cells_done"] < 11 and not partial["complete"]
    out = sweep(capsys, "--config", str(config), "--output", str(killed))
    assert "11/11" in out
    resumed, reference = json.loads(killed.read_text()), json.loads((tmp_path / "sweep.json").read_text())
    cells = lambda doc: {(d, m, s, p): cell for d, methods in doc["results"].items()  # noqa: E731
                         for m, sweeps in methods.items() for s, points in sweeps.items() for p, cell in points.items()}
    before = cells(partial)  # reused as the killed run left them (timings too): not measured again
    assert {key: cell for key, cell in cells(resumed).items() if key in before} == before
    assert without_timings(resumed["results"]) == without_timings(reference["results"])
    assert resumed["complete"] and resumed["fingerprint"] == reference["fingerprint"]


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_presets_load_and_validate_with_the_sweep_parser(preset, monkeypatch):
    def parsed(*overrides):
        return parse_command("sweep", SweepConfig, ["--config", str(preset), *overrides], "")

    monkeypatch.delenv("LB_SMOLLM2_DIR", raising=False)
    cfg = parsed().config
    assert cfg.methods == ["dense", "random", "streaming_llm", "local_strided", "h2o", "knorm", "snapkv", "tova",
                           "cab_v3", "cab_v4", "cab"]
    assert cfg.name == preset.stem and cfg.output == f"benchmark_results/perplexity/{preset.stem}.json"
    if preset.stem == "quick_test":
        assert cfg.sparsity_sweep.sparsity_levels == [0.0, 0.5, 0.9]
        assert cfg.data["wikitext2"].data["test_path"] == "../shared/data/wikitext-2/test.txt"
        assert cfg.model.keywords["pretrained"] == str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct")
        assert parsed("--model.pretrained", "/models/smol").config.model.keywords["pretrained"] == "/models/smol"
        monkeypatch.setenv("LB_SMOLLM2_DIR", "/env/smol")  # the presets' ${oc.env:LB_SMOLLM2_DIR,...}
        assert parsed().resolved["model"]["init_args"]["pretrained"] == "/env/smol"
    if preset.stem == "icml_full":
        assert {d.data["source"] for d in cfg.data.values()} == {"wikitext103", "c4", "pg19"}
        assert cfg.context_length_sweep.context_lengths == [512, 1024, 2048, 4096]
    if preset.stem == "ablation_sparsity":
        assert len(cfg.sparsity_sweep.sparsity_levels) >= 10


@pytest.mark.parametrize("changes, option, expected", [
    ({"methods": ["dense", "h3o"]}, [], "unknown sparsity method 'h3o'; valid: cab, cab_v3"),
    ({"sparsity_sweep": {"context_length": 16, "sparsity_levels": [0.5, 1.0]}}, [], "[0, 1)"),
    ({"model": {"class_path": "lightning_bench.models.MambaLM", "init_args": {"d_model": 16, "n_layer": 1}}}, [],
     "no KV cache"),
    ({"bogus": 1}, [], "bogus"),
    ({}, ["--streaming.chunk_size", "0"], "--streaming.chunk_size: got '0'; expected an int > 0"),
    ({}, ["--datasets.tiny.split", "train"], "unknown split for dataset 'tiny'"),
    ({"model": {"class_path": "lightning_bench.models.HFLanguageModel",
                "init_args": {"pretrained": "${oc.env:LB_TEST_UNSET_DIR}"}}}, [], "LB_TEST_UNSET_DIR"),
])
def test_sweep_bad_inputs_are_one_line(tmp_path, tiny_corpus, capsys, changes, option, expected):
    config = tiny_sweep(tmp_path, tiny_corpus, **changes)
    code, _, err = run(["sweep", "--config", str(config), *option], capsys)
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("lightning_bench: error: ") and expected in last, err


def test_sweep_grows_but_refuses_a_file_made_with_other_settings(tmp_path, tiny_corpus, capsys):
    config = tiny_sweep(tmp_path, tiny_corpus, methods=["dense", "h2o"], context_length_sweep=None,
                        sparsity_sweep={"context_length": 16, "sparsity_levels": [0.5]})
    sweep(capsys, "--config", str(config))
    for option, value, expected in (("--streaming.chunk_size", "4", "other settings"),
                                    ("--method_params.h2o.recent_ratio", "0.25", "measured h2o with parameters"),
                                    ("--datasets.tiny.max_tokens", "32", "dataset 'tiny' in")):
        code, _, err = run(["sweep", "--config", str(config), option, value], capsys)
        assert code == 2 and expected in err.strip().splitlines()[-1], err
    # the default written out is the same parameter: the cells are reused
    out = sweep(capsys, "--config", str(config), "--method_params.h2o.recent_ratio", "0.5")
    assert "0 cells run now" in out
    # a new dataset and a new method only add cells
    out = sweep(capsys, "--config", str(config), "--methods", "[dense, h2o, tova]",
                "--datasets.again", json.dumps({"source": "text", "path": str(tiny_corpus), "tokenizer": "word",
                                                "max_tokens": 16}))
    assert out.count("skipped") == 2 and "4 cells run now, 6/6" in out
    doc = json.loads((tmp_path / "sweep.json").read_text())
    assert set(doc["results"]) == {"tiny", "again"} and set(doc["dataset_specs"]) == {"tiny", "again"}
