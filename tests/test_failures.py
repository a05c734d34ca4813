"""Issue 11's failure modes (docs/failures.md): each bad input is exactly one informative
`lightning_bench: error:` line and exit 2, with no traceback, no record and no log folder left behind."""

import logging
import os
import time
import warnings
from pathlib import Path

import pytest
import torch

from lightning_bench.errors import parser_error_line
from lightning_bench.logging_setup import server_reachable
from tests.test_cli import QUIET, TINY_MODEL, run, tiny_fit_args

CKPT = Path("checkpoints/transformer_tiny_corpus_seq16_bits32_seed1234")


class RunsCode:
    """A pickle that would create `marker` when loaded without weights_only."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _unsafe_ckpt(t):
    torch.save({"state_dict": {}, "payload": RunsCode(t / "pwned")}, t / "unsafe.ckpt")
    return str(t / "unsafe.ckpt")


def _corrupt_ckpt(t):
    (t / "corrupt.ckpt").write_bytes(torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(0),
                                                   dtype=torch.uint8).numpy().tobytes())
    return str(t / "corrupt.ckpt")


def _bad_yaml(t):
    (t / "bad.yaml").write_text("trainer:\n  max_steps: 3\nmodel: [unclosed\n  x: {")
    return str(t / "bad.yaml")


def _tiny(c, *extra):
    return [*TINY_MODEL, "--data", "text", "--data.path", str(c), "--data.seq_len", "16", *extra]


BAD_INPUTS = {
    "bits not a number": (lambda c, t: ["fit", "--bits", "abc"], "--bits: got 'abc'; expected one of 32, 16, 8, 4"),
    "unknown eval protocol": (lambda c, t: ["fit", "--data.eval_protocol", "bogus"],
                              "--data.eval_protocol: got 'bogus'; expected one of token_windows, document_rolling"),
    "negative max_steps": (lambda c, t: ["fit", *_tiny(c, "--trainer.max_steps", "-5")],
                           "--trainer: `max_steps` must be a non-negative integer"),
    "missing checkpoint": (lambda c, t: ["fit", *_tiny(c, "--ckpt_path", str(t / "nope.ckpt"))], "nope.ckpt: no such file"),
    "corrupt checkpoint": (lambda c, t: ["validate", *_tiny(c, "--ckpt_path", _corrupt_ckpt(t))],
                           "not a readable PyTorch checkpoint"),
    "checkpoint that runs code": (lambda c, t: ["validate", *_tiny(c, "--ckpt_path", _unsafe_ckpt(t))],
                                  "refused: loading it would run code (posix.mkdir)"),
    "weights_only false": (lambda c, t: ["validate", *_tiny(c, "--ckpt_path", "last", "--weights_only", "false")],
                           "loads checkpoints weights-only"),
    "missing pretrained folder": (lambda c, t: ["test", "--model", "hf", "--model.pretrained", str(t / "no/model"),
                                                "--data", "text", "--data.path", str(c)],
                                  "no/model': no such folder or file"),
    "malformed yaml": (lambda c, t: ["fit", "--config", _bad_yaml(t)], "bad.yaml: invalid YAML at line 4"),
    "eval_stride 0": (lambda c, t: ["fit", *_tiny(c, "--data.eval_stride", "0")],
                      "--data.eval_stride: got '0'; expected an int > 0 or null"),
    "validate last without a checkpoint": (lambda c, t: ["validate", *_tiny(c, "--ckpt_path", "last")],
                                           "--ckpt_path last: no checkpoint in checkpoints"),
    # fails in the model's setup, after Lightning has written config.yaml and hparams.yaml
    "failure after the logger started": (lambda c, t: ["fit", *_tiny(c, "--model.max_seq_len", "8")],
                                         "exceeds the model's maximum context 8"),
}


def assert_one_error_line(code, err, expected, tmp_path):
    assert code == 2, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("lightning_bench: error: ")]
    assert len(errors) == 1 and errors[0] == err.strip().splitlines()[-1], err
    assert expected in errors[0], err
    assert not list(tmp_path.glob("r/*")), "no record from a failed run"
    # a failed run leaves no log folder of its own (one holding only config.yaml / hparams.yaml)
    assert all(list(d.glob("*.csv")) for d in tmp_path.glob("logs/*/*")), "log folder of a failed run"


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_informative_line(case, tiny_corpus, tmp_path, capsys):
    make_args, expected = BAD_INPUTS[case]
    code, _, err = run([*make_args(tiny_corpus, tmp_path), *QUIET, "--results_dir", "r"], capsys)
    assert_one_error_line(code, err, expected, tmp_path)
    assert not (tmp_path / "pwned").exists()  # the refused pickle ran nothing


def test_nested_union_error_keeps_the_informative_part():
    message = ('Parser key "eval_stride":\n  Does not validate against any of the Union subtypes\n'
               "  Subtypes: [<class 'int'>, <class 'NoneType'>]\n  Errors:\n    - Expected a <class 'int'>\n"
               "    - Expected a <class 'NoneType'>\n  Given value type: <class 'str'>\n  Given value: abc")
    assert parser_error_line(message, ["fit", "--data.eval_stride", "abc"]) == \
        "--data.eval_stride: got 'abc'; expected an int or null"


def test_checkpoint_options_conflict_and_resume_last(tiny_corpus, tmp_path, capsys):
    fit = tiny_fit_args(tiny_corpus, "--trainer.max_steps", "2", "--results_dir", "r")
    code, _, err = run([*fit, "--ckpt_path", "last"], capsys)  # nothing to resume yet: says so, trains
    assert code in (0, None), err
    assert "--ckpt_path last: no checkpoint in checkpoints" in err and "starting from scratch" in err
    (last,) = CKPT.glob("*/last.ckpt")  # the run's own folder: {configuration}/{run_id}/
    for record in (tmp_path / "r").iterdir():
        record.unlink()  # the failures below must write nothing
    # the checkpoint has d_model 32: a different --model.d_model is refused, never silently dropped
    code, _, err = run(["validate", *_tiny(tiny_corpus, "--ckpt_path", str(last), "--model.d_model", "64"), *QUIET,
                        "--results_dir", "r"], capsys)
    assert_one_error_line(code, err, "--model.d_model 64 (checkpoint: 32)", tmp_path)
    code, _, err = run([*fit, "--ckpt_path", "last", "--model.d_model", "64"], capsys)  # `last` too
    assert_one_error_line(code, err, "--model.d_model 64 (checkpoint: 32)", tmp_path)
    # the same options as the checkpoint's (or none) are fine
    code, _, err = run(["validate", *_tiny(tiny_corpus, "--ckpt_path", str(last)), *QUIET, "--results_dir", "r"],
                       capsys)
    assert code in (0, None), err


@pytest.mark.timeout(120)
def test_wandb_key_without_server_falls_back_to_offline(tiny_corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.setenv("WANDB_API_KEY", "0" * 40)  # "logged in", but no server answers
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # discard port: refused at once, no network needed
    code, _, err = run(tiny_fit_args(tiny_corpus, "--wandb", "true", "--wandb_dir", "wb", "--trainer.max_steps", "2",
                                     "--results_dir", "r"), capsys)
    assert code in (0, None), err
    assert "W&B server http://127.0.0.1:9 unreachable: logging offline" in err
    assert len(list((tmp_path / "wb" / "wandb").glob("offline-run-*"))) == 1


def test_reachability_check_cannot_hang(monkeypatch):
    import socket

    def hanging_lookup(*args, **kwargs):
        time.sleep(3)
        raise OSError("timed out")

    monkeypatch.setattr(socket, "create_connection", hanging_lookup)
    start = time.monotonic()
    assert not server_reachable("https://api.wandb.ai", timeout=0.5)
    assert time.monotonic() - start < 2


def test_first_screen(tiny_corpus, capsys, caplog):
    """Run name, data, model size and the measured FLOPs; no FLOPs-0 column, v_num, tip or _pytree warning."""
    argv = ["fit", *_tiny(tiny_corpus, "--trainer.max_steps", "2", "--results_dir", "r")]
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        code, out, err = run(argv, capsys)
    assert code in (0, None), err
    assert "run transformer_tiny_corpus_seq16_bits32: data tiny_corpus (word tokens, vocab 57" in err
    assert "parameters: 18.3 K" in out and "measured FLOPs per training step: " in err
    assert "FLOPs" not in out.split("parameters:")[0]  # the summary table has no FLOPs column
    assert "v_num" not in out + err
    noise = ("Tip:", "already configured", "TPU available", "HPU available", "GPU available: False",
             "to estimate number of stepping batches")
    assert not [r for r in caplog.records if any(n in r.getMessage() for n in noise)]
    assert not [w for w in caught if "LeafSpec" in str(w.message)]


def test_library_loads_checkpoints_weights_only():
    root = Path(__file__).resolve().parent.parent / "lightning_bench"
    loads = [f"{p}:{i}" for p in root.rglob("*.py") for i, line in enumerate(p.read_text().splitlines(), 1)
             if "torch.load(" in line and "weights_only=True" not in line]
    assert loads == []
    assert not [p for p in root.rglob("*.py") if "weights_only=False" in p.read_text()]


def test_pickle_payload_would_run_without_the_safe_loader(tmp_path):
    """The refusal test above means something: the payload does run when unpickled unsafely."""
    torch.load(_unsafe_ckpt(tmp_path), weights_only=False)
    assert (tmp_path / "pwned").exists()
