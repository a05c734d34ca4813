"""The data commands (generate_ruler, infinitebench_generate, export_documents) are configured as every other
command: `--print_config` writes the resolved options as YAML, and that file fed back with `--config` makes
the same files as the command line did; a bad value in a --config file is one line naming the file and the
option, and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import FIXTURES
from tests.test_cli import run

# each command's arguments, writing under OUT (a placeholder for the folder or file of one run)
COMMANDS = {
    "generate_ruler": ["generate_ruler", "--tokenizer", "gpt2", "--lengths", "512", "--tasks", "niah_single_1",
                       "niah_multivalue", "--num_samples", "2", "--seed", "3", "--depth", "40", "--data_dir", "OUT"],
    "infinitebench_generate": ["infinitebench_generate", "--task", "passkey", "number_string", "--tokenizer", "gpt2",
                               "--length", "300", "--depth", "0", "0.5", "--seed", "2", "--data_dir", "OUT"],
    "export_documents": ["export_documents", "--data", "text", "--data.path", str(FIXTURES / "tiny_corpus"),
                         "--data.eval_max_documents", "2", "-o", "OUT/documents.jsonl"],
}


def argv_for(command: str, out: Path) -> list[str]:
    return [a.replace("OUT", str(out)) for a in COMMANDS[command]]


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def printed_config(argv: list[str], capsys) -> str:
    code, out, err = run([*argv, "--print_config"], capsys)
    assert code == 0, err
    return out


@pytest.mark.parametrize("command", list(COMMANDS))
def test_printed_config_fed_back_makes_the_same_files(command, tmp_path, capsys):
    by_flags, by_config = tmp_path / "flags", tmp_path / "config"
    config = tmp_path / "config.yaml"
    config.write_text(printed_config(argv_for(command, by_config), capsys))
    assert not by_config.exists()  # --print_config only prints
    code, _, err = run(argv_for(command, by_flags), capsys)
    assert code in (0, None), err
    code, _, err = run([command, "--config", str(config)], capsys)
    assert code in (0, None), err
    assert files(by_flags) and files(by_config) == files(by_flags)
    # the printed file holds every option by the flag's name: printed again, it is the same file
    assert printed_config([command, "--config", str(config)], capsys) == config.read_text()


def test_flags_after_the_config_override_it(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(printed_config(argv_for("generate_ruler", tmp_path / "d"), capsys))
    printed = yaml.safe_load(printed_config(["generate_ruler", "--config", str(config), "--lengths", "1024", "2048",
                                             "--seed", "5"], capsys))
    assert (printed["lengths"], printed["seed"], printed["num_samples"]) == ([1024, 2048], 5, 2)


def test_a_deprecated_spelling_is_printed_as_its_new_name(tmp_path, capsys):
    code, out, err = run([*COMMANDS["infinitebench_generate"][:-2], "--out", str(tmp_path), "--print_config"], capsys)
    assert code == 0 and yaml.safe_load(out)["data_dir"] == str(tmp_path) and "out" not in yaml.safe_load(out)
    assert err.splitlines() == ["lightning_bench: note: --out is deprecated; use --data_dir"]


def test_export_reads_the_data_section_of_a_trainer_config(tmp_path, capsys):
    trainer = tmp_path / "fit.yaml"
    trainer.write_text(f"model: {{class_path: lightning_bench.models.TransformerLM}}\ntrainer: {{max_steps: 3}}\n"
                       f"data:\n  class_path: lightning_bench.data.LMDataModule\n  init_args: {{source: text, "
                       f"path: {FIXTURES / 'tiny_corpus'}, seq_len: 9, eval_max_documents: 2}}\n")
    printed = yaml.safe_load(printed_config(["export_documents", "--config", str(trainer), "-o", "d.jsonl"], capsys))
    assert printed["data"]["path"] == str(FIXTURES / "tiny_corpus") and printed["data"]["eval_max_documents"] == 2
    assert "seq_len" not in printed["data"] and set(printed) == {"data", "split", "output"}
    alias = tmp_path / "alias.yaml"
    alias.write_text("data: ptb\n")
    assert yaml.safe_load(printed_config(["export_documents", "-c", str(alias), "-o", "d.jsonl"], capsys)
                          )["data"]["source"] == "ptb"


BAD_FILES = {  # command -> (the file, the other options, what its one line says after `--config FILE: `)
    "generate_ruler": ("num_samples: 0\n", ["--tokenizer", "gpt2", "--data_dir", "OUT"],
                       "--num_samples: got '0'; expected an int > 0"),
    "infinitebench_generate": ("depth: [0.5, 2]\n", ["--task", "passkey", "--tokenizer", "gpt2", "--lengths", "300",
                                                    "--data_dir", "OUT"],
                               "--depth: got '2'; expected a float in [0, 1]"),
    "export_documents": ("data: {source: text, eval_max_documents: 0}\n", ["-o", "OUT/d.jsonl"],
                         "--data.eval_max_documents: got '0'; expected an int > 0 or null"),
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bad_value_in_the_config_is_one_line(command, tmp_path, capsys):
    text, options, says = BAD_FILES[command]
    config, out = tmp_path / "bad.yaml", tmp_path / "out"
    config.write_text(text)
    code, _, err = run([command, "--config", str(config), *[a.replace("OUT", str(out)) for a in options]], capsys)
    assert code == 2 and err.splitlines() == [f"lightning_bench: error: {command}: --config {config}: {says}"], err
    assert not out.exists()


@pytest.mark.parametrize("text, says", [("", "is empty"), ("- 1\n", "holds a list"), ("a: [\n", "not valid YAML"),
                                        ("frobnicate: 1\n", "--frobnicate is not an option here")])
def test_a_config_that_is_no_mapping_of_options_is_one_line(text, says, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(text)
    code, _, err = run([*argv_for("generate_ruler", tmp_path / "out"), "--config", str(config)], capsys)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("lightning_bench: error: generate_ruler: ") and \
        says in lines[0], err
    assert not (tmp_path / "out").exists()
