"""Data options and outputs fail before the work, in one line: the ranges declared on the DataModules'
options (parse time and Python construction), the output checks of the data commands and of the
tokenized cache, and a cache-hit flag that says whether the cache was hit."""

from __future__ import annotations

import io

import pytest
import torch

from lightning_bench.data import LMDataModule
from lightning_bench.tasks.datamodules import PromptedDataModule
from lightning_bench.data.export_documents import main as export_main
from lightning_bench.tasks.infinitebench.generate import main as infinitebench_main
from lightning_bench.tasks.ruler.generate import main as ruler_main
from lightning_bench.data.tokenization import offline_gpt2_folder
from lightning_bench.errors import ConfigError
from tests.helpers import tiny_data
from tests.test_cli import run

PROC = "/proc/lightning_bench_test"


# --- ranges ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("flag, value, expected", [
    # a slice of -1 used to drop the last document and record the run as completed; 0 wrote no record
    ("--data.eval_max_documents", "-1", "got '-1'; expected an int > 0 or null"),
    ("--data.eval_max_documents", "0", "got '0'; expected an int > 0 or null"),
    ("--data.eval_batch_size", "0", "got '0'; expected an int > 0 or null"),
    ("--data.num_workers", "-1", "got '-1'; expected an int >= 0"),
    ("--data.val_fraction", "1", "got '1'; expected a float in [0, 1)"),
])
def test_a_data_option_outside_its_range_is_refused_while_parsing(flag, value, expected, capsys):
    code, _, err = run(["fit", flag, value, "--print_config"], capsys)
    assert code == 2 and err.strip().splitlines()[-1] == f"lightning_bench: error: {flag}: {expected}", err


def test_a_long_dataset_name_is_one_short_line(capsys):
    code, _, err = run(["fit", "--data.name", "n" * 400, "--print_config"], capsys)
    line = err.strip().splitlines()[-1]
    assert code == 2 and line.startswith("lightning_bench: error: --data.name: got 'nnn") and len(line) < 200, err
    assert "(400 characters); expected a name of at most 100 letters" in line


@pytest.mark.parametrize("cls, options, expected", [
    (LMDataModule, {"eval_max_documents": -1}, "--data.eval_max_documents: got -1; expected an int > 0"),
    (LMDataModule, {"seq_len": 2.5}, "--data.seq_len: got 2.5; expected an int > 0"),
    (LMDataModule, {"name": "a/b"}, "--data.name: got 'a/b'; expected a name of"),
    (LMDataModule, {"seq_len": 16, "rolling_context": 17, "eval_protocol": "document_rolling"}, "--data.rolling_context must be in [1, seq_len=16]"),
    (PromptedDataModule, {"top_p": 0.0}, "--data.top_p: got 0.0; expected a float in (0, 1]"),
    (PromptedDataModule, {"max_context": 4}, "--data.max_context: got 4; expected an int >= 8"),
    (PromptedDataModule, {"num_fewshot": -1}, "--data.num_fewshot: got -1; expected an int >= 0"),
])
def test_a_datamodule_built_in_python_checks_the_same_ranges(cls, options, expected):
    # a sweep's `datasets:` entries and export_documents build DataModules without the parser
    with pytest.raises(ConfigError) as err:
        cls(**options) if cls is LMDataModule else cls(tasks="glue/sst2", **options)
    assert expected in str(err.value)


def test_hyperparameters_are_plain_numbers_a_weights_only_checkpoint_can_hold():
    from jsonargparse.typing import PositiveInt

    dm = PromptedDataModule(tasks="glue/sst2", max_samples=PositiveInt(3), batch_size=PositiveInt(2))
    assert type(dm.hparams.max_samples) is int and type(dm.hparams.batch_size) is int
    buffer = io.BytesIO()
    torch.save({"datamodule_hyper_parameters": dict(dm.hparams)}, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["datamodule_hyper_parameters"]["max_samples"] == 3


# --- the tokenized cache ---------------------------------------------------------------------------
def test_cache_hits_say_whether_the_cache_was_hit(tiny_corpus, tmp_path):
    first = tiny_data(tiny_corpus, cache_dir=str(tmp_path / "c"))
    first.setup("fit")
    first.train_dataloader()
    first.unigram_perplexity("validation")  # reads the train stream again, now from the cache
    assert first.cache_hits == {"train/stream": False, "validation/stream": False}
    assert first.provenance()["tokenized_cache_hits"] == first.cache_hits
    second = tiny_data(tiny_corpus, cache_dir=str(tmp_path / "c"))
    second.setup("fit")
    second.train_dataloader()
    second.unigram_perplexity("validation")
    assert second.cache_hits == {"train/stream": True, "validation/stream": True}


@pytest.mark.parametrize("where", ["file", "proc"])
def test_an_unwritable_cache_folder_fails_before_tokenizing(where, tiny_corpus, tmp_path, monkeypatch):
    taken = tmp_path / "taken"
    taken.write_text("a file")
    monkeypatch.setenv("LB_CACHE_DIR", str(taken) if where == "file" else PROC)
    dm = tiny_data(tiny_corpus)
    with pytest.raises(ConfigError, match=r"^LB_CACHE_DIR .*choose another LB_CACHE_DIR$"):
        dm.setup("fit")
    assert dm.tokenizer is None and not dm.splits  # nothing read or tokenized
    with pytest.raises(ConfigError, match=r"^--data.cache_dir .*taken/sub: cannot write there"):
        tiny_data(tiny_corpus, cache_dir=str(taken / "sub")).setup("fit")


def test_the_offline_gpt2_tokenizer_names_the_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("LB_CACHE_DIR", PROC)
    with pytest.raises(ConfigError, match="^LB_CACHE_DIR /proc/"):
        offline_gpt2_folder()


# --- the data commands: one line, outputs checked before the work -------------------------------------
def _one_line(command, argv, capsys) -> str:
    with pytest.raises(ConfigError) as err:
        command(argv)
    assert capsys.readouterr().err == ""  # no usage block before the line
    assert "\n" not in str(err.value)
    return str(err.value)


def test_generate_ruler_errors_are_one_line(tmp_path, capsys):
    assert _one_line(ruler_main, ["--tokenizer", "gpt2"], capsys) == \
        "generate_ruler: --data_dir is required (on the command line or in --config)"
    assert _one_line(ruler_main, ["--tokenizer", "gpt2", "--data_dir", "d", "--lengths", "-5"], capsys) == \
        "generate_ruler: --lengths: got '-5'; expected an int > 0"
    assert _one_line(ruler_main, ["--tokenizer", "gpt2", "--data_dir", "d", "--depth", "101"], capsys) == \
        "generate_ruler: --depth: got '101'; expected a float in [0, 100] or null"
    # the output is checked first: a missing tokenizer would be the next complaint
    line = _one_line(ruler_main, ["--tokenizer", str(tmp_path / "none"), "--data_dir", PROC], capsys)
    assert line.startswith(f"--data_dir {PROC}: cannot write there")
    assert not (tmp_path / "d").exists()


def test_infinitebench_generate_errors_are_one_line(tmp_path, capsys):
    assert _one_line(infinitebench_main, ["--tokenizer", "gpt2"], capsys) == \
        "infinitebench_generate: --task, --lengths are required (on the command line or in --config)"
    base = ["--task", "passkey", "--tokenizer", str(tmp_path / "none"), "--lengths", "256"]
    assert "give --data_dir DIR or -o/--output FILE, not both" in _one_line(
        infinitebench_main, [*base, "--data_dir", str(tmp_path), "-o", str(tmp_path / "x.jsonl")], capsys)
    assert _one_line(infinitebench_main, [*base, "--depth", "1.5", "-o", "x.jsonl"], capsys) == \
        "infinitebench_generate: --depth: got '1.5'; expected a float in [0, 1]"
    assert _one_line(infinitebench_main, [*base, "--data_dir", PROC], capsys).startswith(
        f"--data_dir {PROC}: cannot write")
    assert _one_line(infinitebench_main, [*base, "-o", str(tmp_path)], capsys) == \
        f"-o {tmp_path}: is a folder; name a file to write"
    assert not list(tmp_path.iterdir())


def test_export_documents_errors_are_one_line(tiny_corpus, tmp_path, capsys):
    data = ["--data", "text", "--data.path", str(tiny_corpus)]
    assert _one_line(export_main, data, capsys) == \
        "export_documents: --output is required (on the command line or in --config)"
    taken = tmp_path / "taken"
    taken.write_text("a file")
    assert _one_line(export_main, [*data, "-o", str(taken / "d.jsonl")], capsys) == \
        f"-o {taken / 'd.jsonl'}: {taken} is a file, not a folder; choose another -o"
    assert _one_line(export_main, [*data, "--data.eval_max_documents", "-1", "-o", str(tmp_path / "d.jsonl")],
                     capsys) == \
        "export_documents: --data.eval_max_documents: got '-1'; expected an int > 0 or null"
    assert _one_line(export_main, [*data, "--data.use_hub", "maybe", "-o", str(tmp_path / "d.jsonl")], capsys) == \
        "export_documents: --data.use_hub: got 'maybe'; expected true or false"
    (tmp_path / "list.yaml").write_text("- 1\n- 2\n")
    assert str(tmp_path / "list.yaml") in _one_line(export_main, ["-c", str(tmp_path / "list.yaml"), "-o",
                                                                  str(tmp_path / "d.jsonl")], capsys)
    assert not (tmp_path / "d.jsonl").exists()


def test_the_cli_prints_a_data_command_error_as_one_line(tmp_path, capsys):
    code, _, err = run(["infinitebench_generate", "--task", "nope"], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith(
        "lightning_bench: error: infinitebench_generate: --task: got 'nope'; expected one of passkey, number_string, "
        "kv_retrieval"), err
