"""Defaults a researcher expects: a pretrained model is scored in its own context (capped), and says so."""

import json
from pathlib import Path

import pytest

from tests.test_bad_inputs import Place
from tests.test_cli import QUIET, run


@pytest.fixture
def tiny_hf(tiny_corpus, tmp_path) -> str:
    return Place(tiny_corpus, tmp_path).tiny_hf()  # a random Llama with a 512-token context


def _test(model, corpus, capsys, *extra):
    code, out, err = run(["test", "--model", "hf", "--model.pretrained", model, "--data", "text", "--data.path",
                          str(corpus), "--results_dir", "r", *QUIET, *extra], capsys)
    assert code in (0, None), err
    record = json.loads(next(Path("r").glob("*_test.json")).read_text())
    return out, err, record


def test_a_pretrained_model_is_scored_in_its_own_context(tiny_hf, tiny_corpus, capsys):
    out, err, record = _test(tiny_hf, tiny_corpus, capsys)
    assert "evaluation window 512 tokens (the model's context 512; --data.seq_len sets another)" in err
    assert record["seq_len"] == 512 and record["meta"]["evaluation_protocol"]["window"] == 512
    assert record["meta"]["evaluation_protocol"]["stride"] == 512
    assert record["config"]["data"]["init_args"]["seq_len"] == 512  # the record's config says what ran
    assert out.strip().splitlines()[-1].startswith("test: perplexity ")
    assert "(token_windows, window 512 tokens, stride 512, split test)" in out


def test_a_given_window_is_kept_and_a_long_context_is_capped(tiny_hf, tiny_corpus, capsys, monkeypatch):
    _, err, record = _test(tiny_hf, tiny_corpus, capsys, "--data.seq_len", "64")
    assert "evaluation window" not in err and record["seq_len"] == 64
    import lightning_bench.trainer_cli as cli

    monkeypatch.setattr(cli, "EVAL_WINDOW_CAP", 128)
    for path in Path("r").iterdir():
        path.unlink()
    _, err, record = _test(tiny_hf, tiny_corpus, capsys)
    assert "evaluation window 128 tokens (the model's context 512, capped at 128;" in err
    assert record["seq_len"] == 128
