"""One option vocabulary: a deprecated spelling parses as its new one (the same config, the same run)
and says so in exactly one `lightning_bench: note:` line; the trainer commands' short aliases are read
by the parser itself, wherever they stand among the other options."""

import lightning.pytorch  # noqa: F401 - imported outside capsys: Lightning's log handler keeps the stderr of its import
import pytest
import yaml

from lightning_bench.tasks.datamodules.protocol import PROTOCOL_CLASSES
from tests.test_cli import run


def printed_config(argv, capsys) -> tuple[dict, str]:
    code, out, err = run([*argv, "--print_config"], capsys)
    assert code in (0, None), err
    return yaml.safe_load(out), err


def notes(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("lightning_bench: note:")]


def test_sparsity_params_is_method_params_with_one_note(capsys):
    new, err_new = printed_config(["test", "--sparsity", "h2o", "--sparsity.method_params", "{recent_ratio: 0.3}"],
                                  capsys)
    old, err_old = printed_config(["test", "--sparsity=h2o", "--sparsity.params", "{recent_ratio: 0.3}"], capsys)
    assert old == new and new["sparsity"]["method_params"] == {"recent_ratio": 0.3}
    assert new["sparsity"]["method"] == "h2o" and not notes(err_new)
    assert notes(err_old) == ["lightning_bench: note: --sparsity.params is deprecated; use --sparsity.method_params"]


def test_short_aliases_parse_in_place(capsys):
    """`--data ptb` sets the source of the data class in use, as `--data.source ptb` does, before or after
    other --data options; `--model bk` is the class path."""
    a, _ = printed_config(["fit", "--data.seq_len", "16", "--data", "ptb", "--model", "bk"], capsys)
    b, _ = printed_config(["fit", "--model", "lightning_bench.models.ResNetBKLM", "--data.source", "ptb",
                           "--data.seq_len", "16"], capsys)
    assert a == b and a["data"]["init_args"]["seq_len"] == 16


def test_task_chooses_the_protocol_datamodule(capsys, tmp_path):
    """`--task` sets its protocol's DataModule where it stands, so the --data.* options after it are that class's;
    a --config naming another data class gives way to it."""
    config, _ = printed_config(["test", "--task", "glue/sst2", "--data.max_samples", "5"], capsys)
    assert config["data"]["class_path"] == PROTOCOL_CLASSES["prompted"] and config["task"] == ["glue/sst2"]
    assert config["data"]["init_args"]["max_samples"] == 5 and config["data"]["init_args"]["tasks"] == "glue/sst2"
    config, _ = printed_config(["fit", "--model", "bk", "--task", "glue/sst2", "--task", "glue/cola"], capsys)
    assert config["data"]["class_path"] == PROTOCOL_CLASSES["finetune"]
    assert config["data"]["init_args"]["tasks"] == "glue/sst2,glue/cola"
    code, _, err = run(["test", "--task", "glue/sst3"], capsys)
    assert code == 2 and err.strip().splitlines()[-1].startswith("lightning_bench: error: unknown glue task 'sst3'")


@pytest.mark.parametrize("command", ["generate_ruler", "infinitebench_generate"])
def test_generators_out_is_data_dir_with_one_note(command, tmp_path, capsys):
    """`--out` is the old spelling of `--data_dir`: the same folder is checked (here: refused, a file)."""
    taken = tmp_path / "taken"
    taken.write_text("a file")
    base = {"generate_ruler": ["--tokenizer", "gpt2", "--lengths", "512"],
            "infinitebench_generate": ["--task", "passkey", "--tokenizer", "gpt2", "--lengths", "256"]}[command]
    errors = []
    for spelling in ("--data_dir", "--out"):
        code, _, err = run([command, *base, spelling, str(taken)], capsys)
        assert code == 2
        errors.append(err.strip().splitlines())
    assert errors[1][-1] == errors[0][-1] and errors[0][-1].startswith(f"lightning_bench: error: --data_dir {taken}")
    assert notes("\n".join(errors[0])) == []
    assert notes("\n".join(errors[1])) == ["lightning_bench: note: --out is deprecated; use --data_dir"]


def test_recorded_command_is_the_one_run(tiny_corpus, capsys, tmp_path, monkeypatch):
    """The record names the command as typed (an experiment runs several in one process: sys.argv is not it)."""
    import json

    monkeypatch.setattr("sys.argv", ["pytest", "something", "else"])
    argv = ["fit", "--model", "transformer", "--model.n_layer", "1", "--model.d_model", "32", "--model.n_head", "2",
            "--data", "text", "--data.path", str(tiny_corpus), "--data.seq_len", "16", "--trainer.max_steps", "2",
            "--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false", "--profile", "false",
            "--results_dir", "r"]
    code, _, err = run(argv, capsys)
    assert code in (0, None), err
    record = json.loads(next((tmp_path / "r").glob("*.json")).read_text())
    assert record["meta"]["command"] == " ".join(["lightning_bench", *argv])
