"""Any pretrained causal LM from the HF hub, a local folder, or a GGUF file."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Callable, Literal, Optional

import torch
from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveFloat
from torch import nn

from lightning_bench.errors import ConfigError
from lightning_bench.hub import hub_offline_reason
from lightning_bench.models.base import Betas, ClassDefault, LanguageModule, vocabulary_mismatch
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
                 learning_rate: PositiveFloat = 2e-5, weight_decay: NonNegativeFloat = 0.0,
                 betas: Betas = (0.9, 0.999), warmup_steps: NonNegativeInt = 50,
                 min_lr_ratio: ClosedUnitInterval = 0.1):
        super().__init__(learning_rate, weight_decay, betas, warmup_steps, min_lr_ratio)
        if dtype not in DTYPES:
            raise ConfigError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
        if os.path.isdir(pretrained):
            check_model_folder(pretrained, trust_remote_code)
        self.save_hyperparameters()
        self._config = None
        self._hub_offline = None  # why the hub is not used (hub_offline_reason), checked at the first hub id load

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
        if not os.path.exists(path) and self._hub_offline is None:
            self._hub_offline = hub_offline_reason() or ""
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
                raise self._load_error(err) from err
        return self._config

    def _load_error(self, err: Exception) -> ConfigError:
        reason = self._hub_offline or (str(err).strip().splitlines() or [type(err).__name__])[0]
        return ConfigError(f"cannot load pretrained model {self.hparams.pretrained!r}: {reason}")

    @property
    def max_seq_len(self) -> Optional[int]:
        return getattr(self.config, "max_position_embeddings", None)

    @property
    def model_name(self) -> str:
        return "hf-" + Path(self.hparams.pretrained.rstrip("/")).name.replace(".gguf", "")

    def build_network(self, vocab_size: int) -> nn.Module:
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # a bar over the tensors of a local file: nothing to act on, and it stays
        name, kwargs = self.pretrained_location
        config = self.config if "gguf_file" not in kwargs else None
        try:
            net = AutoModelForCausalLM.from_pretrained(name, config=config, dtype=DTYPES[self.hparams.dtype], **kwargs)
        except OSError as err:  # e.g. the config is in the local cache but the weights are not
            raise self._load_error(err) from err
        check_vocabulary(net, vocab_size)
        return net.train()  # from_pretrained returns eval mode; Lightning switches modes per stage from here

    def load_quantized(self, bits: int, vocab_size: Optional[int] = None, loader: Optional[Callable] = None,
                       **options):
        """The checkpoint loaded straight into bitsandbytes low-bit Linear layers by `loader`, quantization's
        `load_pretrained_lowbit` (quantization/export.py), which the caller passes: models/ does not import
        quantization/ (LanguageModule.use_8bit_optimizer says why)."""
        if loader is None:
            raise ConfigError("load_quantized needs loader=lightning_bench.quantization.load_pretrained_lowbit")

        name, kwargs = self.pretrained_location
        net, report = loader(name, bits, dtype=DTYPES[self.hparams.dtype],
                             describe_layers=mamba_quantizable_layers, **kwargs, **options)
        check_vocabulary(net, vocab_size)
        self.net = net
        return report

    # a Mamba checkpoint is run by the same transformers mixer as MambaLM
    def analytic_flops(self):
        return mamba_analytic_flops(self.net) if self.net is not None else []

    def quantizable_layers(self):
        return mamba_quantizable_layers(self.net) if self.net is not None else super().quantizable_layers()


def end_of_turn_ids(net) -> frozenset:
    """The ids the model's generation_config ends a generation at (one id or a list: Llama 3's <|eot_id|>
    beside <|end_of_text|>), as transformers' generate and kvpress's pipeline stop; empty without one."""
    eos = getattr(getattr(net, "generation_config", None), "eos_token_id", None)
    return frozenset([eos] if isinstance(eos, int) else eos or [])


def check_vocabulary(net: nn.Module, vocab_size: Optional[int]) -> None:
    if vocab_size is not None:
        vocabulary_mismatch(vocab_size, net.get_input_embeddings().num_embeddings)


# what save_pretrained writes, in the order transformers looks for them
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def check_model_folder(folder: str, trust_remote_code: bool) -> None:
    """A local model folder, checked before anything loads from it: what is missing or damaged, as one
    line naming the file (transformers reports it as a traceback, or the tokenizer's load fails first)."""
    path, where = Path(folder), f"--model.pretrained {folder}"
    if not (path / "config.json").is_file():
        found = sorted(p.name for p in path.iterdir())
        raise ConfigError(f"{where}: no config.json ({'found: ' + _few(found) if found else 'the folder is empty'}); "
                          "a model folder holds config.json and the weights, as save_pretrained writes them")
    config = _read_json(path / "config.json", where)
    if config.get("auto_map") and not trust_remote_code:
        files = sorted(p.name for p in path.glob("*.py"))
        raise ConfigError(f"{where}: the model ships its own code (config.json auto_map{': ' if files else ''}"
                          f"{_few(files)}), which runs only with --model.trust_remote_code true: pass it only "
                          "for code you trust")
    for shard in _weight_files(path, where):
        if shard.endswith(".safetensors"):
            _check_safetensors(path / shard, where)


def _weight_files(path: Path, where: str) -> list[str]:
    """The weight files the folder's first weights entry names (an index lists its shards)."""
    name = next((n for n in WEIGHT_FILES if (path / n).is_file()), None)
    if name is None:
        gguf = sorted(p.name for p in path.glob("*.gguf"))
        fix = f"for a GGUF file pass the file: --model.pretrained {path / gguf[0]}" if gguf else "re-save the model"
        raise ConfigError(f"{where}: no weights (none of {', '.join(WEIGHT_FILES)}); {fix}")
    if not name.endswith(".index.json"):
        return [name]
    shards = sorted(set((_read_json(path / name, where).get("weight_map") or {}).values()))
    missing = [s for s in shards if not (path / s).is_file()]
    if missing or not shards:
        raise ConfigError(f"{where}: {name} lists {_few(missing) if missing else 'no weight files'}, "
                          f"{'missing from the folder' if missing else 'so nothing can be loaded'}; "
                          "re-save or re-download the model")
    return shards


def _check_safetensors(file: Path, where: str) -> None:
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt"):  # reads the header only
            pass
    except Exception as err:  # noqa: BLE001 - safetensors raises its own error type for every damage
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ConfigError(f"{where}: {file.name} is not a readable safetensors file ({reason}); "
                          "re-save or re-download the model") from err


def _read_json(file: Path, where: str) -> dict:
    try:
        value = json.loads(file.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"{where}: {file.name} is not readable JSON ({err})") from err
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: {file.name} holds a {type(value).__name__}, not a JSON object")
    return value


def _few(names: list[str], shown: int = 5) -> str:
    return ", ".join(names[:shown]) + (f", ... ({len(names)} files)" if len(names) > shown else "")
