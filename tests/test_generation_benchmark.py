"""`lightning_bench generation`: cell files, aggregated statistics and t-tests recomputed independently
from the cell files, dense equal to a plain forward on the same tokens, resume, one-line user errors.

A tiny random Llama (GPT-2 BPE tokenizer, max context 512) on the tiny fixture corpus (250 tokens)."""

import hashlib
import json
import math
import shutil
import statistics
from pathlib import Path

import pytest
import torch

from tests.test_cli import run

METRICS = ("nll", "ppl", "decode_tokens_per_s", "tokens_per_s", "seconds", "prefill_seconds", "peak_memory_mb",
           "peak_memory_increase_mb", "avg_cache_length", "final_cache_length", "kv_bytes_peak", "kv_bytes_mean",
           "dense_kv_bytes_peak", "kv_fraction")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    from lightning_bench.data.tokenization import offline_gpt2_folder

    folder = tmp_path_factory.mktemp("tiny_llama")
    gpt2 = Path(offline_gpt2_folder(tmp_path_factory.mktemp("gpt2")))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50257, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=50256, eos_token_id=50256, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(folder)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copyfile(gpt2 / name, folder / name)
    return folder


def command(model, corpus, *extra, methods=("dense", "h2o", "cab"), sparsity=("0.5", "0.75"), ctx=("16",),
            seeds=("1", "2"), samples="3", continuation="4"):
    return ["generation", "--model.pretrained", str(model), "--data", f"tiny={corpus}", "--methods", *methods,
            "--ratios", *sparsity, "--context-length", *ctx, "--continuation-length", continuation,
            "--num-samples", samples, "--seeds", *seeds, "--name", "exp", "--results_dir", "r",
            "--accelerator", "cpu", *extra]


def read(path) -> dict:
    return json.loads(Path(path).read_text())


def cells_of(folder: Path) -> dict:
    return {p.name: read(p) for p in folder.glob("*_seed*.json")}


def test_files_statistics_tests_and_dense_parity(tiny_model, tiny_corpus, capsys, tmp_path):
    code, out, err = run(command(tiny_model, tiny_corpus), capsys)
    assert code in (0, None), err
    folder = tmp_path / "r" / "exp"
    expected = {f"dense_s0.0_ctx16_seed{s}.json" for s in (1, 2)} | {
        f"{m}_s{sp}_ctx16_seed{s}.json" for m in ("h2o", "cab") for sp in ("0.5", "0.75") for s in (1, 2)}
    assert {p.name for p in folder.iterdir()} == expected | {"aggregated_results.json", "significance_tests.json"}
    cells = cells_of(folder)
    sha = hashlib.sha256((tiny_corpus / "test.txt").read_text(encoding="utf-8").encode()).hexdigest()

    # every file carries config, meta and the data's sha256
    for record in [*cells.values(), read(folder / "aggregated_results.json"), read(folder / "significance_tests.json")]:
        assert record["config"]["continuation_length"] == 4 and record["config"]["methods"] == ["dense", "h2o", "cab"]
        assert record["meta"]["data"]["sha256"] == sha and record["meta"]["git"] and record["meta"]["versions"]
        assert record["meta"]["command"].startswith("lightning_bench generation --model.pretrained")

    # cells: N samples of N non-overlapping windows each, the same windows for every method of a seed,
    # no window under two seeds (each sample is one observation)
    starts = {}
    for name, cell in cells.items():
        assert name == f"{cell['method']}_s{cell['sparsity']}_ctx16_seed{cell['seed']}.json"
        assert cell["num_samples"] == len(cell["samples"]) == 3
        for sample in cell["samples"]:
            assert len(sample["token_nll"]) == 4
            assert sample["nll"] == pytest.approx(statistics.fmean(sample["token_nll"]))
            assert set(METRICS) <= set(sample)
        s = [sample["start"] for sample in cell["samples"]]
        assert all(b - a >= 20 and a % 20 == 0 for a, b in zip(s, s[1:]))  # windows of 16 + 4 tokens
        starts.setdefault(cell["seed"], set()).add(tuple(s))
    assert all(len(v) == 1 for v in starts.values())
    assert not set(*starts[1]) & set(*starts[2])
    for name, cell in cells.items():
        fraction = statistics.fmean(s["kv_fraction"] for s in cell["samples"])
        assert fraction == 1.0 if cell["method"] == "dense" else fraction < 1.0 - cell["sparsity"] / 2

    # aggregated_results.json = a recomputation over every sample of every seed
    aggregated = read(folder / "aggregated_results.json")["results"]
    assert set(aggregated) == {"dense_s0.0_ctx16"} | {f"{m}_s{sp}_ctx16" for m in ("h2o", "cab")
                                                       for sp in ("0.5", "0.75")}
    for group, row in aggregated.items():
        members = [c for c in cells.values() if f"{c['method']}_s{c['sparsity']}_ctx{c['context_length']}" == group]
        assert len(members) == 2 and row["seeds"] == [1, 2] and row["n_samples"] == 6
        for metric in METRICS:
            values = [s[metric] for c in members for s in c["samples"]]
            got = row["metrics"][metric]
            assert got["mean"] == pytest.approx(statistics.mean(values), rel=1e-9)
            assert got["std"] == pytest.approx(statistics.stdev(values), rel=1e-9, abs=1e-12)
            assert (got["min"], got["max"]) == (min(values), max(values))
        nll = [s["nll"] for c in members for s in c["samples"]]
        assert row["ppl_of_mean_nll"] == pytest.approx(math.exp(statistics.mean(nll)))

    # significance_tests.json = the paired t statistic by hand, its p-value from the t distribution
    from scipy.stats import t as student_t

    significance = read(folder / "significance_tests.json")
    assert "paired by window" in significance["test"] and "drawn once across all seeds" in significance["unit"]
    tests = significance["tests"]
    pairs = {(t["sparsity"], t["a"], t["a_sparsity"], t["b"], t["b_sparsity"]) for t in tests}
    assert pairs == {(s, a, sa, b, sb) for s in (0.5, 0.75)
                     for (a, sa), (b, sb) in [(("cab", s), ("h2o", s)), (("cab", s), ("dense", 0.0)),
                                              (("h2o", s), ("dense", 0.0))]}
    for test in tests:
        def per_sample(method, sparsity):
            return {(c["seed"], s["start"]): s["nll"] for c in cells.values()
                    if (c["method"], c["sparsity"]) == (method, sparsity) for s in c["samples"]}

        a, b = per_sample(test["a"], test["a_sparsity"]), per_sample(test["b"], test["b_sparsity"])
        assert set(a) == set(b) and len(a) == len({start for _, start in a}) == test["n"] == 6
        assert test["unit"] == "window (distinct across seeds; 6 windows)"
        diff = [a[k] - b[k] for k in sorted(a)]
        t = statistics.mean(diff) / (statistics.stdev(diff) / math.sqrt(len(diff)))
        assert test["t"] == pytest.approx(t, rel=1e-9)
        assert test["p"] == pytest.approx(2 * student_t.sf(abs(t), len(diff) - 1), rel=1e-7)
        assert test["mean_difference"] == pytest.approx(statistics.mean(diff), rel=1e-9)

    # dense at sparsity 0 = the NLL of one plain forward over the same window's tokens
    from transformers import AutoModelForCausalLM, AutoTokenizer

    net = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    tokens = AutoTokenizer.from_pretrained(tiny_model)((tiny_corpus / "test.txt").read_text(),
                                                       add_special_tokens=False)["input_ids"]
    for seed in (1, 2):
        for sample in cells[f"dense_s0.0_ctx16_seed{seed}.json"]["samples"]:
            window = torch.tensor(tokens[sample["start"]:sample["start"] + 20])
            with torch.no_grad():
                logits = net(input_ids=window[None]).logits[0]
            logp = torch.log_softmax(logits[15:19].float(), -1)
            plain = -logp.gather(-1, window[16:20, None])[:, 0]
            torch.testing.assert_close(torch.tensor(sample["token_nll"]), plain, atol=1e-5, rtol=1e-5)


def _mtimes(folder: Path) -> dict:
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*_seed*.json")}


def test_resume_skips_finished_cells_and_refuses_another_protocol(tiny_model, tiny_corpus, capsys, tmp_path):
    small = dict(methods=("dense", "h2o"), sparsity=("0.75",), seeds=("1",), samples="2")
    code, out, err = run(command(tiny_model, tiny_corpus, **small), capsys)
    assert code in (0, None), err
    folder = tmp_path / "r" / "exp"
    first, before = cells_of(folder), _mtimes(folder)
    assert set(first) == {"dense_s0.0_ctx16_seed1.json", "h2o_s0.75_ctx16_seed1.json"}

    code, out, err = run(command(tiny_model, tiny_corpus, **small), capsys)
    assert code in (0, None), err
    assert out.count(": skipped (done before") == 2 and _mtimes(folder) == before

    # a lost cell is recomputed (the same numbers), the other one is not touched
    (folder / "h2o_s0.75_ctx16_seed1.json").unlink()
    code, out, err = run(command(tiny_model, tiny_corpus, **small), capsys)
    assert code in (0, None), err
    assert out.count(": skipped") == 1
    assert _mtimes(folder)["dense_s0.0_ctx16_seed1.json"] == before["dense_s0.0_ctx16_seed1.json"]
    again = read(folder / "h2o_s0.75_ctx16_seed1.json")
    assert [s["token_nll"] for s in again["samples"]] == [s["token_nll"]
                                                         for s in first["h2o_s0.75_ctx16_seed1.json"]["samples"]]

    # another seed extends the experiment; the summaries cover every cell in the folder
    code, out, err = run(command(tiny_model, tiny_corpus, **{**small, "seeds": ("1", "2")}), capsys)
    assert code in (0, None), err
    assert out.count(": skipped") == 2
    aggregated = read(folder / "aggregated_results.json")["results"]
    assert aggregated["h2o_s0.75_ctx16"]["seeds"] == [1, 2] and aggregated["h2o_s0.75_ctx16"]["n_samples"] == 4
    tests = read(folder / "significance_tests.json")["tests"]
    assert [(t["a"], t["b"], t["n"]) for t in tests] == [("h2o", "dense", 4)]

    # seeds in another order draw other windows for seed 2: its cell is refused, not mixed in
    code, _, err = run(command(tiny_model, tiny_corpus, **{**small, "seeds": ("2", "1")}), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "holds other windows than --seeds 2 1" in err

    # a folder whose cells share a window between seeds (the earlier per-seed drawing) is refused
    # rather than counted as two observations
    cell = read(folder / "h2o_s0.75_ctx16_seed2.json")
    cell["seed"], cell["samples"][0]["start"] = 3, first["h2o_s0.75_ctx16_seed1.json"]["samples"][0]["start"]
    (folder / "h2o_s0.75_ctx16_seed3.json").write_text(json.dumps(cell))
    code, _, err = run(command(tiny_model, tiny_corpus, **small), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "is a sample of seeds 1 and 3" in err
    (folder / "h2o_s0.75_ctx16_seed3.json").unlink()

    # the same folder under another protocol would mix incomparable cells: refused, nothing written
    before = _mtimes(folder)
    code, _, err = run(command(tiny_model, tiny_corpus, **{**small, "continuation": "5"}), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "another protocol" in err
    code, _, err = run(command(tiny_model, tiny_corpus, "--method_params.h2o.recent_ratio", "0.2", **small), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "another protocol" in err
    assert _mtimes(folder) == before


BAD = {
    "unknown method": (dict(methods=("dense", "h3o")), "unknown sparsity method 'h3o'; valid:"),
    "sparsity 1": (dict(sparsity=("1.0",)), "--ratios: got '1.0'; expected a float in [0, 1)"),
    "negative sparsity": (dict(sparsity=("-0.1",)), "--ratios: got '-0.1'; expected a float in [0, 1)"),
    "longer than the data": (dict(ctx=("300",)), "longer than the data (tiny's test split: 250 tokens)"),
    "longer than the model": (dict(ctx=("510",)), "longer than the model's max context (512)"),
    "too few windows": (dict(ctx=("100",)), "2 non-overlapping windows of context + continuation = 104 tokens, "
                                            "fewer than --num_samples 3 x 2 seeds = 6"),
    # 12 windows of 20 tokens: 2 x 6 fit, 2 x 7 would need a window twice
    "windows drawn twice": (dict(samples="7"), "12 non-overlapping windows of context + continuation = 20 tokens, "
                                               "fewer than --num_samples 7 x 2 seeds = 14"),
    "bad method parameter": (dict(extra=("--method_params.h2o.recent_ratio", "2")), "recent_ratio must be in [0"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_inputs_are_one_line_exit_2(case, tiny_model, tiny_corpus, capsys, tmp_path):
    overrides, expected = BAD[case]
    overrides = dict(overrides)
    extra = overrides.pop("extra", ())
    code, out, err = run(command(tiny_model, tiny_corpus, *extra, **overrides), capsys)
    assert code == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("lightning_bench: error: ") and expected in err, err
    assert not (tmp_path / "r").exists()


def test_windows_are_drawn_once_across_seeds():
    """The issue's case: drawn per seed, 150 draws held 119 distinct windows."""
    from lightning_bench.experiments.generation.data import sample_starts

    drawn = sample_starts(280000, 1088, 50, [0, 1, 2])
    every = [start for starts in drawn.values() for start in starts]
    assert len(every) == len(set(every)) == 150 and all(start % 1088 == 0 for start in every)
    assert all(starts == sorted(starts) and len(starts) == 50 for starts in drawn.values())
    # appending a seed keeps the earlier seeds' windows (an experiment can be extended)
    assert sample_starts(280000, 1088, 50, [0, 1, 2, 3])[2] == drawn[2]


def test_missing_model_and_data_are_one_line(tiny_model, tiny_corpus, capsys, tmp_path):
    code, _, err = run(command(tmp_path / "no_model", tiny_corpus), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot load pretrained model" in err
    code, _, err = run(command(tiny_model, tmp_path / "no_data"), capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "does not exist" in err
