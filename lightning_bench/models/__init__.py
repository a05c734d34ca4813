"""Model families behind one LanguageModule interface; MODEL_ALIASES maps --model aliases to classes."""

from lightning_bench.models.base import LanguageModule, LMOutput
from lightning_bench.models.hf import HFLanguageModel
from lightning_bench.models.transformer import TransformerLM

MODEL_ALIASES = {
    "transformer": "lightning_bench.models.TransformerLM",
    "hf": "lightning_bench.models.HFLanguageModel",
}

__all__ = ["LanguageModule", "LMOutput", "HFLanguageModel", "TransformerLM", "MODEL_ALIASES"]
