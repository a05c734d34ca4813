"""The command line end to end: a tiny fit writes a trustworthy record; bad input is one line + exit 2."""

import hashlib
import json
import math

import lightning.pytorch  # noqa: F401 - imported outside capsys: Lightning's log handler keeps the stderr of its import
import pytest
import yaml

from lightning_bench.cli import main

TINY_MODEL = ["--model", "transformer", "--model.n_layer", "1", "--model.d_model", "32", "--model.n_head", "2",
              "--model.warmup_steps", "2"]
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false"]


def run(argv, capsys):
    """(exit code, stdout, stderr) of one in-process `lightning_bench` call."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def tiny_fit_args(corpus, *extra):
    return ["fit", *TINY_MODEL, "--data", "text", "--data.path", str(corpus), "--data.seq_len", "16",
            "--data.batch_size", "8", "--trainer.max_steps", "12", "--trainer.max_epochs", "5", *QUIET, *extra]


def test_fit_writes_complete_record(tiny_corpus, capsys, tmp_path):
    code, out, err = run(tiny_fit_args(tiny_corpus, "--results_dir", "results"), capsys)
    assert code in (0, None), err
    record = json.loads((tmp_path / "results" / "transformer_tiny_corpus_seq16_bits32.json").read_text())
    for key in ("model_name", "dataset", "seq_len", "bits", "final_loss", "final_perplexity", "best_perplexity",
                "training_time", "forward_flops", "backward_flops", "total_flops", "peak_memory_mb",
                "model_size_mb", "epoch_losses", "epoch_perplexities", "config", "meta"):
        assert key in record, key
    assert record["bits"] == 32 and record["seq_len"] == 16 and record["dataset"] == "tiny_corpus"
    # the final validation describes the final weights (max_steps stopped mid-epoch)
    assert record["validation_curve"][-1]["step"] == record["global_steps"] == 12
    assert record["final_perplexity"] == pytest.approx(math.exp(record["final_loss"]))
    assert record["best_perplexity"] <= record["final_perplexity"]
    assert record["validation_curve"][-1]["scored_tokens"] == record["meta"]["evaluation_protocol"]["units"]["tokens"]
    assert record["config"]["model"]["class_path"] == "lightning_bench.models.TransformerLM"
    assert record["config"]["data"]["init_args"]["seq_len"] == 16
    meta = record["meta"]
    assert meta["seed"] == 1234 and meta["versions"]["torch"] and "commit" in meta["git"]
    train_sha = hashlib.sha256((tiny_corpus / "train.txt").read_bytes()).hexdigest()
    assert meta["data"]["splits"]["train"]["sha256"] == train_sha
    assert meta["data"]["tokenizer"]["kind"] == "word"
    assert meta["evaluation_protocol"]["name"] == "token_windows"
    # model size is what the stored tensors weigh: fp32 = 4 bytes per parameter (embeddings tied)
    assert record["model_size_mb"] == pytest.approx(record["parameters"]["total"] * 4 / 2**20, rel=0.01)
    # a word-level model must beat nothing in 12 steps, but its numbers must be finite and consistent
    assert all(math.isfinite(x) for x in record["epoch_losses"])
    # cost, measured by the profiling callback on the first training step
    assert 0 < record["forward_flops"] < record["backward_flops"]
    assert record["total_flops"] == record["forward_flops"] + record["backward_flops"]
    assert record["tokens_per_sec"] > 0 and record["peak_memory_kind"] == "cpu_peak_rss_process"
    assert record["mfu"] is None  # no known peak FLOP/s for a CPU


def test_profiling_can_be_switched_off(tiny_corpus, capsys, tmp_path):
    code, _, err = run(tiny_fit_args(tiny_corpus, "--profile", "false", "--trainer.max_steps", "2",
                                     "--results_dir", "r"), capsys)
    assert code in (0, None), err
    record = json.loads((tmp_path / "r" / "transformer_tiny_corpus_seq16_bits32.json").read_text())
    assert record["forward_flops"] is None and record["tokens_per_sec"] is None
    assert record["peak_memory_mb"] > 0  # memory is still read (it costs one syscall)


def test_test_and_validate_write_records(tiny_corpus, capsys, tmp_path):
    common = [*TINY_MODEL, "--data", "text", "--data.path", str(tiny_corpus), "--data.seq_len", "16",
              "--data.eval_protocol", "document_rolling", *QUIET, "--results_dir", "r"]
    for stage in ("test", "validate"):
        code, _, err = run([stage, *common], capsys)
        assert code in (0, None), err
    test = json.loads((tmp_path / "r" / "transformer_tiny_corpus_seq16_bits32_test.json").read_text())
    val = json.loads((tmp_path / "r" / "transformer_tiny_corpus_seq16_bits32_validate.json").read_text())
    for record in (test, val):
        metrics = record["metrics"]
        assert metrics["word_ppl"] and metrics["byte_ppl"] and metrics["bits_per_byte"]
        assert record["meta"]["evaluation_protocol"]["name"] == "document_rolling"
    assert test["meta"]["evaluation_protocol"]["split"] == "test"
    assert val["meta"]["evaluation_protocol"]["split"] == "validation"


def test_bits_16_is_mixed_precision(tiny_corpus, capsys, tmp_path):
    code, _, err = run(tiny_fit_args(tiny_corpus, "--bits", "16", "--trainer.max_steps", "2", "--results_dir", "r"),
                       capsys)
    assert code in (0, None), err
    record = json.loads((tmp_path / "r" / "transformer_tiny_corpus_seq16_bits16.json").read_text())
    assert "bf16" in record["meta"]["precision"] or "fp16" in record["meta"]["precision"]


def _bad_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("model: [unclosed\n  trainer: {")
    return str(path)


def _empty_file(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_text("")
    return str(path)


BAD_INPUTS = {
    "unknown model alias": (lambda c, t: ["fit", "--model", "bq"], "unknown model 'bq'; valid:"),
    "unknown data alias": (lambda c, t: ["fit", "--data", "wikitext9"], "unknown data 'wikitext9'; valid:"),
    "missing path": (lambda c, t: ["fit", "--data", "text", "--data.path", str(t / "nope")], "does not exist"),
    "missing file": (lambda c, t: ["test", "--data", "text", "--data.train_path", str(c / "train.txt"),
                                   "--data.test_path", str(t / "nope.txt")], "does not exist"),
    "empty file": (lambda c, t: ["fit", "--data", "text", "--data.train_path", _empty_file(t)], "is empty"),
    "malformed yaml": (lambda c, t: ["fit", "--config", _bad_yaml(t)], ""),
    "bits 3": (lambda c, t: ["fit", "--bits", "3"], "--bits: got '3'; expected one of 32, 16, 8, 4"),
    "4-bit layer width not a multiple of 64": (lambda c, t: ["fit", *TINY_MODEL, "--model.d_model", "96",
                                                             "--bits", "4", "--data", "text",
                                                             "--data.path", str(c), "--data.seq_len", "16"],
                                              "multiple of 64"),
    "window above model max": (lambda c, t: ["fit", *TINY_MODEL, "--model.max_seq_len", "8", "--data", "text",
                                             "--data.path", str(c), "--data.seq_len", "16"],
                               "exceeds the model's maximum context 8"),
    "unknown option": (lambda c, t: ["fit", "--data.sequence_len", "4"], "sequence_len"),
    "stride above window": (lambda c, t: ["fit", "--data.seq_len", "8", "--data.eval_stride", "9"], "eval_stride"),
    "unknown tokenizer": (lambda c, t: ["test", "--data", "text", "--data.path", str(c), "--data.tokenizer",
                                        str(t / "no-such-tokenizer")], "cannot load tokenizer"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_clear_line(case, tiny_corpus, tmp_path, capsys):
    make_args, expected = BAD_INPUTS[case]
    code, _, err = run([*make_args(tiny_corpus, tmp_path), *QUIET, "--results_dir", "r"], capsys)
    assert code == 2
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("lightning_bench: error: ") and expected in last, err
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())  # no half-written result


def test_aliases_are_read_by_the_parser_and_class_paths_pass_through(capsys):
    code, out, _ = run(["fit", "--model", "hf", "--data=ptb", "--data.seq_len", "16", "--print_config"], capsys)
    config = yaml.safe_load(out)
    assert code in (0, None) and config["model"]["class_path"] == "lightning_bench.models.HFLanguageModel"
    assert config["data"]["class_path"] == "lightning_bench.data.LMDataModule"
    assert config["data"]["init_args"]["source"] == "ptb" and config["data"]["init_args"]["seq_len"] == 16
    code, out, _ = run(["fit", "--model", "lightning_bench.models.ResNetBKLM", "--print_config"], capsys)
    assert yaml.safe_load(out)["model"]["class_path"] == "lightning_bench.models.ResNetBKLM"


def test_print_config_round_trips(capsys, tmp_path):
    code, out, _ = run(["fit", "--model", "transformer", "--data", "ptb", "--print_config"], capsys)
    assert code in (0, None)
    config = yaml.safe_load(out)
    assert config["data"]["init_args"]["source"] == "ptb"
    path = tmp_path / "c.yaml"
    path.write_text(out)
    code, out2, _ = run(["fit", "--config", str(path), "--print_config"], capsys)
    assert yaml.safe_load(out2) == config


def test_predict_saves_per_token_nll(tiny_corpus, capsys, tmp_path):
    import torch

    code, _, err = run(["predict", *TINY_MODEL, "--data", "text", "--data.path", str(tiny_corpus),
                        "--data.seq_len", "16", *QUIET, "--results_dir", "r"], capsys)
    assert code in (0, None), err
    saved = torch.load(tmp_path / "r" / "transformer_tiny_corpus_seq16_bits32_predict.pt")
    nll = torch.cat([w.flatten() for w in saved["windows"]])
    scored = nll[~nll.isnan()]
    assert len(scored) == saved["protocol"]["units"]["tokens"] and (scored > 0).all()


def test_callbacks_contribute_their_own_record_fields(tiny_corpus, tmp_path):
    import lightning as L

    from lightning_bench.results.recorder import PERF_FIELDS, ResultsRecorder
    from tests.helpers import quiet_trainer, tiny_data, tiny_model

    class Tagger(L.Callback):
        record_keys = ("tag",)

        def record_fields(self, trainer, pl_module):
            return {"tag": {"model": pl_module.model_name}}

    dm = tiny_data(tiny_corpus)
    dm.setup("test")
    recorder = ResultsRecorder(str(tmp_path))
    quiet_trainer(limit_test_batches=1, callbacks=[Tagger(), recorder]).test(tiny_model(dm.vocab_size), datamodule=dm,
                                                                              verbose=False)
    record = json.loads(recorder.written["test"].read_text())
    assert record["tag"] == {"model": "transformer"} and list(record)[-1] == "tag"  # after the recorder's own
    assert all(key in record for key in PERF_FIELDS) and record["peak_memory_mb"] > 0  # no profiling: memory only


def test_the_git_revision_is_read_once_per_process(monkeypatch):
    """A run that lasts hours names the code it loaded: later commits do not change its records."""
    from lightning_bench.results import meta

    first = meta.git_revision()

    def no_second_read(*args, **kwargs):
        raise AssertionError("git was asked again")

    monkeypatch.setattr(meta.subprocess, "run", no_second_read)
    again = meta.git_revision()
    assert again == first and again is not first  # a copy: a caller's change cannot alter later records
