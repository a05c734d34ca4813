"""`lightning_bench test --sparsity METHOD --sparsity.ratio R`: streaming evaluation under eviction,
recorded next to the dense record; sparsity 0 reproduces dense; bad inputs are one line."""

import json

import pytest

from tests.test_cli import QUIET, TINY_MODEL, run


def _test(corpus, capsys, *extra):
    return run(["test", *TINY_MODEL, "--model.max_seq_len", "64", "--data", "text", "--data.path", str(corpus),
                "--data.seq_len", "32", *QUIET, "--results_dir", "r", *extra], capsys)


def test_sparsity_records_next_to_dense(tiny_corpus, capsys, tmp_path):
    for extra in ([], ["--sparsity", "h2o", "--sparsity.ratio", "0.0"], ["--sparsity", "h2o", "--sparsity.ratio", "0.5"]):
        code, _, err = _test(tiny_corpus, capsys, *extra)
        assert code in (0, None), err
    base = tmp_path / "r" / "transformer_tiny_corpus_seq32_bits32_test"
    dense = json.loads(base.with_suffix(".json").read_text())
    zero = json.loads((tmp_path / "r" / (base.name + "_h2o_s0.0.json")).read_text())
    half = json.loads((tmp_path / "r" / (base.name + "_h2o_s0.5.json")).read_text())
    assert zero["metrics"]["loss"] == pytest.approx(dense["metrics"]["loss"], rel=1e-5)  # sparsity 0 = dense
    assert zero["sparsity"]["cache_fraction"] == pytest.approx(1.0)
    assert half["sparsity"]["method"] == "h2o" and 0.4 < half["sparsity"]["cache_fraction"] < 0.85
    assert half["metrics"]["scored_tokens"] == dense["metrics"]["scored_tokens"]
    assert half["sparsity"]["recent_ratio"] == 0.5  # the method's parameters are recorded
    assert half["sparsity"]["rounding"] == "ceil"  # and how the budget was rounded


def test_sparsity_params_reach_the_method_and_the_record(tiny_corpus, capsys, tmp_path):
    code, _, err = _test(tiny_corpus, capsys, "--sparsity", "h2o", "--sparsity.ratio", "0.5",
                         "--sparsity.params", "{recent_ratio: 0.25}")
    assert code in (0, None), err
    record = json.loads((tmp_path / "r" / "transformer_tiny_corpus_seq32_bits32_test_h2o_s0.5.json").read_text())
    assert record["sparsity"]["recent_ratio"] == 0.25


def test_sparsity_rounding_flag_reaches_the_record(tiny_corpus, capsys, tmp_path):
    code, _, err = _test(tiny_corpus, capsys, "--sparsity", "h2o", "--sparsity.ratio", "0.5",
                         "--sparsity.rounding", "floor")
    assert code in (0, None), err
    record = json.loads((tmp_path / "r" / "transformer_tiny_corpus_seq32_bits32_test_h2o_s0.5.json").read_text())
    assert record["sparsity"]["rounding"] == "floor"
    code, _, err = _test(tiny_corpus, capsys, "--sparsity", "h2o", "--sparsity.ratio", "0.5",
                         "--sparsity.rounding", "round")
    assert code == 2 and "expected one of ceil, floor" in err.strip().splitlines()[-1], err


@pytest.mark.parametrize("extra,expected", [
    (["--sparsity", "h3o", "--sparsity.ratio", "0.5"], "unknown"),
    (["--sparsity", "h2o", "--sparsity.ratio", "1.0"], "ratio"),
    (["--sparsity", "h2o", "--sparsity.ratio", "0.5", "--sparsity.params", "{recent: 0.3}"],
     "unknown parameter recent for sparsity method 'h2o'; valid: recent_ratio"),
    (["--sparsity.params", "{recent_ratio: 0.3}"], "needs a method"),
])
def test_bad_sparsity_is_one_line(extra, expected, tiny_corpus, capsys):
    code, _, err = _test(tiny_corpus, capsys, *extra)
    assert code == 2 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("lightning_bench: error:") and expected in last, err


def test_sparsity_refused_for_models_without_kv_cache(tiny_corpus, capsys):
    code, _, err = run(["test", "--model", "bk", "--model.d_model", "16", "--model.n_layers", "1", "--data", "text",
                        "--data.path", str(tiny_corpus), "--data.seq_len", "16", *QUIET, "--results_dir", "r",
                        "--sparsity", "h2o", "--sparsity.ratio", "0.5"], capsys)
    assert code == 2 and err.strip().splitlines()[-1].startswith("lightning_bench: error:"), err
