"""Model folders and checkpoints that cannot serve the command: each is one `lightning_bench: error:` line
that names the file or option and what is wrong, exit 2, before the data or the weights load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from lightning_bench.data.tokenization import offline_gpt2_folder
from lightning_bench.models import hf
from tests.test_cli import QUIET, TINY_MODEL, run


def one_error_line(code, err) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines and sum(line.startswith("lightning_bench: error: ") for line in lines) == 1, err
    assert lines[-1].startswith("lightning_bench: error: "), err
    return lines[-1]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    """A random 1-layer Llama with the offline GPT-2 tokenizer, saved as save_pretrained writes a hub folder."""
    from transformers import LlamaConfig, LlamaForCausalLM

    folder = tmp_path_factory.mktemp("tiny_llama")
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=50257, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, max_position_embeddings=64)).save_pretrained(folder)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copyfile(Path(offline_gpt2_folder(folder / "cache")) / name, folder / name)
    shutil.rmtree(folder / "cache")
    return folder


def damaged(tiny_llama: Path, tmp_path: Path, damage: str) -> Path:
    folder = tmp_path / damage
    if damage == "empty":
        folder.mkdir()
        return folder
    shutil.copytree(tiny_llama, folder)
    weights = folder / "model.safetensors"
    if damage == "no weights":
        weights.unlink()
    elif damage == "garbage weights":
        weights.write_bytes(b"\x00\x13 not a safetensors file" * 64)
    elif damage == "missing shard":
        weights.unlink()
        index = {"metadata": {}, "weight_map": {"lm_head.weight": "model-00001-of-00002.safetensors"}}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    elif damage == "custom code":
        config = json.loads((folder / "config.json").read_text())
        config["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}
        (folder / "config.json").write_text(json.dumps(config))
        (folder / "modeling_custom.py").write_text(f"open({str(tmp_path / 'code_ran')!r}, 'w').close()\n")
    return folder


FOLDER_ERRORS = {
    "empty": "no config.json (the folder is empty)",
    "no weights": "no weights (none of model.safetensors, model.safetensors.index.json, pytorch_model.bin",
    "garbage weights": "model.safetensors is not a readable safetensors file (",
    "missing shard": "model.safetensors.index.json lists model-00001-of-00002.safetensors, missing from the folder",
    "custom code": "the model ships its own code (config.json auto_map: modeling_custom.py), which runs only "
                   "with --model.trust_remote_code true",
}


@pytest.mark.parametrize("damage", sorted(FOLDER_ERRORS))
def test_a_damaged_model_folder_is_one_line_naming_the_file(damage, tiny_llama, tiny_corpus, tmp_path, capsys):
    folder = damaged(tiny_llama, tmp_path, damage)
    code, _, err = run(["test", "--model", "hf", "--model.pretrained", str(folder), "--data", "text",
                        "--data.path", str(tiny_corpus), *QUIET], capsys)
    line = one_error_line(code, err)
    assert f"--model.pretrained {folder}: {FOLDER_ERRORS[damage]}" in line, line
    assert "--data.tokenizer" not in line  # the model folder is what to fix, not the tokenizer
    assert not (tmp_path / "code_ran").exists()


def test_an_intact_folder_and_trusted_code_pass_the_check(tiny_llama, tmp_path):
    hf.check_model_folder(str(tiny_llama), trust_remote_code=False)
    hf.check_model_folder(str(damaged(tiny_llama, tmp_path, "custom code")), trust_remote_code=True)
    assert not (tmp_path / "code_ran").exists()  # checking a folder runs none of its code


def _fit_checkpoint(capsys, corpus, model_args) -> Path:
    code, _, err = run(["fit", *model_args, "--data", "text", "--data.path", str(corpus), "--data.seq_len", "16",
                        "--data.batch_size", "8", "--trainer.max_steps", "2", *QUIET], capsys)
    assert code in (0, None), err
    (last,) = Path("checkpoints").glob("*/*/last.ckpt")
    return last


def test_a_word_vocabulary_checkpoint_refuses_another_tokenizer(tiny_corpus, capsys):
    last = _fit_checkpoint(capsys, tiny_corpus, TINY_MODEL)  # the default tokenizer of a random-init model: words
    words = torch.load(last, weights_only=True)["hyper_parameters"]["vocab_size"]
    code, _, err = run(["validate", "--ckpt_path", str(last), "--data", "text", "--data.path", str(tiny_corpus),
                        "--data.seq_len", "16", "--data.tokenizer", "gpt2", *QUIET], capsys)
    line = one_error_line(code, err)
    assert f"the data's tokenizer has 50257 tokens but the model only {words}; use --data.tokenizer auto" in line


def test_options_for_the_default_model_contradicting_a_checkpoint_are_refused(tiny_corpus, capsys):
    bk = ["--model", "bk", "--model.d_model", "16", "--model.n_layers", "1", "--model.max_seq_len", "16",
          "--model.warmup_steps", "2"]
    last = _fit_checkpoint(capsys, tiny_corpus, bk)
    data = ["--data", "text", "--data.path", str(tiny_corpus), "--data.seq_len", "16", *QUIET]
    # no --model: the checkpoint's ResNet-BK is used, so options given for the default transformer would be dropped
    code, _, err = run(["validate", "--ckpt_path", str(last), "--model.d_model", "32", "--model.n_head", "2", *data],
                       capsys)
    line = one_error_line(code, err)
    assert "--model.d_model 32 (checkpoint: 16)" in line
    assert "--model.n_head 2 (checkpoint: a ResNetBKLM, which has no n_head)" in line
    assert f"contradicts the model saved in {last}" in line
    code, _, err = run(["validate", "--ckpt_path", str(last), "--model.d_model", "16", *data], capsys)
    assert code in (0, None), err  # an option that agrees with the checkpoint is fine


def test_an_unreachable_hub_fails_at_once_in_one_line(tiny_corpus, capsys, monkeypatch):
    from huggingface_hub import constants

    import lightning_bench.hub
    import lightning_bench.logging_setup

    # restored after the test: the check sets them for the whole process
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(lightning_bench.hub, "unreachable_hubs", [])
    monkeypatch.setattr(lightning_bench.logging_setup, "server_reachable", lambda url, timeout=3.0: False)
    code, _, err = run(["test", "--model", "hf", "--model.pretrained", "lightning-bench-tests/no-such-model",
                        "--data", "text", "--data.path", str(tiny_corpus), *QUIET], capsys)
    line = one_error_line(code, err)
    assert f"the hub {constants.ENDPOINT} is unreachable and it is not in the local cache" in line
    assert "Retrying" not in err  # huggingface_hub's retries (~36 s) are skipped: the process went offline
    assert constants.is_offline_mode()
