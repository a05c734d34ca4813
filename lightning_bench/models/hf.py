"""Any pretrained causal LM from the HF hub, a local folder, or a GGUF file."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Literal, Optional

import torch
from torch import nn

from lightning_bench.errors import ConfigError
from lightning_bench.models.base import ClassDefault, LanguageModule
from lightning_bench.models.mamba import mamba_analytic_flops, mamba_quantizable_layers

# a hub repo id (`gpt2`, `HuggingFaceTB/SmolLM2-135M`); anything else that does not exist locally is a wrong path
HUB_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "auto": "auto"}
# transformers model types that keep a recurrent state, not a KV cache
NO_KV_CACHE = {"mamba", "mamba2", "falcon_mamba", "rwkv", "xlstm"}


def config_has_kv_cache(config) -> bool:
    """Whether a transformers config describes an attention model with a KV cache to evict from."""
    return getattr(config, "model_type", None) not in NO_KV_CACHE and hasattr(config, "num_attention_heads")


class HFLanguageModel(LanguageModule):
    """A pretrained `AutoModelForCausalLM`, evaluated or fine-tuned with the shared recipe.

    Args:
        pretrained: hub id (e.g. HuggingFaceTB/SmolLM2-135M-Instruct), local folder, or `.gguf` file.
        dtype: weights dtype (float32, bfloat16, float16, auto = as stored).
        trust_remote_code: run code shipped with the checkpoint; off unless you trust it.
        revision: hub revision (branch, tag or commit) for reproducible downloads.
    """

    alias = "hf"
    # most checkpoints are attention models; an instance answers from its own config
    supports_kv_cache = ClassDefault(True, lambda self: config_has_kv_cache(self.config))

    def __init__(self, pretrained: str, dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32",
                 trust_remote_code: bool = False, revision: Optional[str] = None,
                 learning_rate: float = 2e-5, weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999),
                 warmup_steps: int = 50, min_lr_ratio: float = 0.1):
        super().__init__(learning_rate, weight_decay, betas, warmup_steps, min_lr_ratio)
        if dtype not in DTYPES:
            raise ConfigError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
        self.save_hyperparameters()
        self._config = None

    @property
    def pretrained_location(self) -> tuple[str, dict]:
        """(name or folder, from_pretrained kwargs); a .gguf file is loaded from its folder with
        gguf_file=<name> (transformers dequantizes it)."""
        path = self.hparams.pretrained
        kwargs = {"trust_remote_code": self.hparams.trust_remote_code}
        if path.endswith(".gguf"):
            if not os.path.isfile(path):
                raise ConfigError(f"GGUF file {path!r} does not exist")
            return str(Path(path).parent), {**kwargs, "gguf_file": Path(path).name}
        if not os.path.exists(path) and not HUB_ID.fullmatch(path):
            # not a hub id either: say so, rather than let transformers explain its repo-id rules
            raise ConfigError(f"cannot load pretrained model {path!r}: no such folder or file "
                              "(nor a hub id, which looks like org/name)")
        if self.hparams.revision:
            kwargs["revision"] = self.hparams.revision
        return path, kwargs

    @property
    def tokenizer_source(self) -> dict:
        name, kwargs = self.pretrained_location
        return {"name": name, "kwargs": {k: v for k, v in kwargs.items() if k in ("gguf_file", "trust_remote_code")}}

    @property
    def config(self):
        if self._config is None:
            from transformers import AutoConfig

            name, kwargs = self.pretrained_location
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

        name, kwargs = self.pretrained_location
        net = AutoModelForCausalLM.from_pretrained(name, config=self.config if "gguf_file" not in kwargs else None,
                                                   dtype=DTYPES[self.hparams.dtype], **kwargs)
        check_vocabulary(net, vocab_size)
        return net.train()  # from_pretrained returns eval mode; Lightning switches modes per stage from here

    def load_quantized(self, bits: int, vocab_size: Optional[int] = None, **options):
        """The checkpoint loaded straight into bitsandbytes low-bit Linear layers (quantization/export.py)."""
        from lightning_bench.quantization.export import load_pretrained_lowbit

        name, kwargs = self.pretrained_location
        net, report = load_pretrained_lowbit(name, bits, dtype=DTYPES[self.hparams.dtype],
                                             describe_layers=mamba_quantizable_layers, **kwargs, **options)
        check_vocabulary(net, vocab_size)
        self.net = net
        return report

    # a Mamba checkpoint is run by the same transformers mixer as MambaLM
    def analytic_flops(self):
        return mamba_analytic_flops(self.net) if self.net is not None else []

    def quantizable_layers(self):
        return mamba_quantizable_layers(self.net) if self.net is not None else super().quantizable_layers()


def check_vocabulary(net: nn.Module, vocab_size: Optional[int]) -> None:
    available = net.get_input_embeddings().num_embeddings
    if vocab_size is not None and vocab_size > available:
        raise ConfigError(f"the data's tokenizer has {vocab_size} tokens but the model only {available}; "
                          "use --data.tokenizer auto")
