"""Any pretrained causal LM from the HF hub, a local folder, or a GGUF file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Optional

import torch
from torch import nn

from lightning_bench.errors import ConfigError
from lightning_bench.models.base import LanguageModule

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}


class HFLanguageModel(LanguageModule):
    """A pretrained `AutoModelForCausalLM`, evaluated or fine-tuned with the shared recipe.

    Args:
        pretrained: hub id (e.g. HuggingFaceTB/SmolLM2-135M-Instruct), local folder, or `.gguf` file.
        dtype: weights dtype (float32, bfloat16, float16, auto = as stored).
        trust_remote_code: run code shipped with the checkpoint; off unless you trust it.
        revision: hub revision (branch, tag or commit) for reproducible downloads.
    """

    alias = "hf"

    def __init__(self, pretrained: str, dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32",
                 trust_remote_code: bool = False, revision: Optional[str] = None,
                 learning_rate: float = 2e-5, weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999),
                 warmup_steps: int = 50, min_lr_ratio: float = 0.1):
        super().__init__(learning_rate, weight_decay, betas, warmup_steps, min_lr_ratio)
        if dtype not in DTYPES:
            raise ConfigError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
        self.save_hyperparameters()
        self._config = None

    # a .gguf file is loaded from its folder with gguf_file=<name> (transformers dequantizes it)
    @property
    def _location(self) -> tuple[str, dict]:
        path = self.hparams.pretrained
        kwargs = {"trust_remote_code": self.hparams.trust_remote_code}
        if path.endswith(".gguf"):
            if not os.path.isfile(path):
                raise ConfigError(f"GGUF file {path!r} does not exist")
            return str(Path(path).parent), {**kwargs, "gguf_file": Path(path).name}
        if self.hparams.revision:
            kwargs["revision"] = self.hparams.revision
        return path, kwargs

    @property
    def tokenizer_source(self) -> dict:
        name, kwargs = self._location
        return {"name": name, "kwargs": {k: v for k, v in kwargs.items() if k in ("gguf_file", "trust_remote_code")}}

    @property
    def config(self):
        if self._config is None:
            from transformers import AutoConfig

            name, kwargs = self._location
            try:
                self._config = AutoConfig.from_pretrained(name, **kwargs)
            except (OSError, ValueError) as err:
                first = (str(err).strip().splitlines() or [type(err).__name__])[0]
                raise ConfigError(f"cannot load pretrained model {self.hparams.pretrained!r}: {first}") from err
        return self._config

    @property
    def max_seq_len(self) -> Optional[int]:
        return getattr(self.config, "max_position_embeddings", None)

    @property
    def model_name(self) -> str:
        return "hf-" + Path(self.hparams.pretrained.rstrip("/")).name.replace(".gguf", "")

    def build_network(self, vocab_size: int) -> nn.Module:
        from transformers import AutoModelForCausalLM

        name, kwargs = self._location
        net = AutoModelForCausalLM.from_pretrained(name, config=self.config if "gguf_file" not in kwargs else None,
                                                   dtype=DTYPES[self.hparams.dtype], **kwargs)
        if vocab_size > net.get_input_embeddings().num_embeddings:
            raise ConfigError(f"the data's tokenizer has {vocab_size} tokens but the model only "
                              f"{net.get_input_embeddings().num_embeddings}; use --data.tokenizer auto")
        return net.train()  # from_pretrained returns eval mode; Lightning switches modes per stage from here
