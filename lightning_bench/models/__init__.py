"""Model families behind one LanguageModule interface; MODEL_ALIASES maps --model aliases to classes."""

from lightning_bench.models.base import LanguageModule, LMOutput
from lightning_bench.models.hf import HFLanguageModel
from lightning_bench.models.mamba import MambaLM
from lightning_bench.models.resnet_bk import ResNetBKLM
from lightning_bench.models.transformer import TransformerLM

MODEL_ALIASES = {
    "transformer": "lightning_bench.models.TransformerLM",
    "hf": "lightning_bench.models.HFLanguageModel",
    "bk": "lightning_bench.models.ResNetBKLM",
    "mamba": "lightning_bench.models.MambaLM",
}

__all__ = ["LanguageModule", "LMOutput", "HFLanguageModel", "MambaLM", "ResNetBKLM", "TransformerLM", "MODEL_ALIASES"]
