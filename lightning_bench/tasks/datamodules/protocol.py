"""The one place the downstream protocol is decided: which task DataModule a command runs.

`fit --task` fine-tunes (FinetuneDataModule); `test --task` scores prompts (PromptedDataModule), unless
the checkpoint it is given holds a fine-tuned task head, which is then scored with that head on the
test rows it was split with. `--data.protocol prompted|finetune` overrides the choice.
"""

from __future__ import annotations

import os
import pickle
from typing import Optional

from lightning_bench.errors import ConfigError

PROTOCOL_CLASSES = {"prompted": "lightning_bench.tasks.datamodules.PromptedDataModule",
                    "finetune": "lightning_bench.tasks.datamodules.FinetuneDataModule"}
PROTOCOLS = ("auto", *PROTOCOL_CLASSES)
HEAD_PREFIX = "task_head."  # the LanguageModule attribute a fine-tuning run adds (models/sequence_head.py)


def choose_protocol(subcommand: Optional[str], ckpt_path: Optional[str], requested: str = "auto") -> str:
    """"prompted" or "finetune" for `subcommand` (fit/test) given its checkpoint and --data.protocol."""
    if requested not in PROTOCOLS:
        raise ConfigError(f"unknown --data.protocol {requested!r}; valid: {', '.join(PROTOCOLS)}")
    if subcommand == "fit":
        if requested == "prompted":
            raise ConfigError("`fit --task` trains with the finetune protocol; drop --data.protocol prompted")
        return "finetune"
    if requested != "auto":
        return requested
    return "finetune" if ckpt_path and checkpoint_has_task_head(ckpt_path) else "prompted"


def checkpoint_has_task_head(path: str) -> bool:
    """Whether a Lightning checkpoint holds a fine-tuned task head (a `task_head.*` weight).

    Loaded with weights_only=True (no code from the file runs) and mmap=True (only the key names are
    read, not the possibly GB-sized tensors). A file that is not a checkpoint loadable that way is not
    a fine-tuned one; Lightning itself reports it when it loads the file.
    """
    if not os.path.isfile(path):
        return False
    import torch

    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except (pickle.UnpicklingError, RuntimeError, OSError, EOFError) as err:
        raise ConfigError(f"cannot read {path} as a checkpoint ({type(err).__name__}: "
                          f"{str(err).splitlines()[0] if str(err) else ''}); pass --data.protocol prompted or "
                          "finetune to say how to score it") from err
    state = checkpoint.get("state_dict", {}) if isinstance(checkpoint, dict) else {}
    return any(key.startswith(HEAD_PREFIX) for key in state)
