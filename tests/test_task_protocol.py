"""The downstream protocol is decided in one place (tasks/datamodules/protocol.py), from the command, the
checkpoint and --data.protocol, and `--task` turns into the DataModule of that protocol."""

import pytest
import torch

from lightning_bench.tasks.datamodules.protocol import PROTOCOL_CLASSES, checkpoint_has_task_head, choose_protocol
from lightning_bench.errors import ConfigError
from lightning_bench.trainer_cli import parsed_config


@pytest.fixture
def checkpoints(tmp_path):
    """A fine-tuned checkpoint (it holds a task head) and a language-model one, as Lightning lays them out."""
    body = {"epoch": 1, "global_step": 2, "state_dict": {"net.embed.weight": torch.zeros(4, 2)},
            "hyper_parameters": {"learning_rate": 1e-3, "betas": (0.9, 0.95)}}
    lm, tuned = tmp_path / "lm.ckpt", tmp_path / "tuned.ckpt"
    torch.save(body, lm)
    torch.save({**body, "state_dict": {**body["state_dict"], "task_head.proj.weight": torch.zeros(2, 2)}}, tuned)
    return str(lm), str(tuned)


def test_checkpoint_with_a_task_head_is_scored_with_its_head(checkpoints):
    lm, tuned = checkpoints
    assert checkpoint_has_task_head(tuned) and not checkpoint_has_task_head(lm)
    assert choose_protocol("test", tuned) == "finetune"
    assert choose_protocol("test", lm) == choose_protocol("test", None) == "prompted"
    assert choose_protocol("fit", None) == "finetune"
    assert choose_protocol("test", tuned, "prompted") == "prompted"  # --data.protocol overrides
    with pytest.raises(ConfigError, match="fit --task` trains with the finetune protocol"):
        choose_protocol("fit", None, "prompted")
    with pytest.raises(ConfigError, match="unknown --data.protocol 'head'; valid: auto, prompted, finetune"):
        choose_protocol("test", None, "head")


def test_task_flag_becomes_the_protocols_datamodule(checkpoints):
    """The parsed config (nothing built, nothing run) holds the DataModule of the protocol the command, the
    checkpoint and --data.protocol choose; Lightning still gets the checkpoint."""
    lm, tuned = checkpoints

    def parsed(*argv):
        return parsed_config(list(argv))

    assert parsed("test", "--task", "glue/sst2")["data"]["class_path"] == PROTOCOL_CLASSES["prompted"]
    assert parsed("fit", "--model", "bk", "--task", "glue/sst2")["data"]["class_path"] == PROTOCOL_CLASSES["finetune"]
    config = parsed("test", "--task", "glue/sst2", "--ckpt_path", tuned)
    assert config["data"]["class_path"] == PROTOCOL_CLASSES["finetune"] and config["ckpt_path"] == tuned
    assert parsed("test", "--task=glue/sst2", f"--ckpt_path={lm}")["data"]["class_path"] == PROTOCOL_CLASSES["prompted"]
    assert parsed("test", "--task", "glue/sst2", "--data.protocol", "finetune")["data"]["class_path"] \
        == PROTOCOL_CLASSES["finetune"]


def test_unreadable_checkpoint_is_one_line(tmp_path):
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError) as info:
        choose_protocol("test", str(bad))
    assert "--data.protocol" in str(info.value) and "\n" not in str(info.value)


def test_the_protocols_datamodules(tmp_path):
    from lightning_bench.tasks.datamodules import FinetuneDataModule, PromptedDataModule

    assert not hasattr(PromptedDataModule(), "finetune_num_labels")  # no head is built for prompted scoring
    assert FinetuneDataModule("glue/stsb").finetune_num_labels == 1
    with pytest.raises(ConfigError, match="squad cannot be fine-tuned"):
        FinetuneDataModule("squad")
    with pytest.raises(ConfigError, match="one task at a time"):
        FinetuneDataModule("glue")
