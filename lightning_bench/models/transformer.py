"""The Transformer baseline: a Llama-style decoder (RMSNorm, RoPE, SwiGLU, GQA) with random init.

Built from transformers' LlamaForCausalLM rather than by hand: it is the reference implementation
the sparsity methods and the HF models share (same attention interface and KV cache), and its
numerics are tested upstream. Sizes use the names researchers know (n_layer, d_model, n_head, ...).
"""

from __future__ import annotations

from typing import Optional

from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from torch import nn

from lightning_bench.errors import ConfigError
from lightning_bench.models.base import Betas, Fraction, LanguageModule


class TransformerLM(LanguageModule):
    """Llama-style decoder LM.

    Args:
        n_layer: decoder blocks.
        d_model: hidden size.
        n_head: attention heads.
        n_kv_head: key/value heads (GQA); default = n_head (multi-head attention).
        d_ff: SwiGLU inner size; default = the Llama rule, 8/3 * d_model rounded up to a multiple of 64.
        max_seq_len: longest context (RoPE has no table, but the limit is checked like a real model's).
        rope_theta: RoPE base.
        dropout: attention dropout (Llama uses none; kept for small-data runs).
        tie_embeddings: share the input embedding and the output projection.
        vocab_size: default None = the data's tokenizer's vocabulary.
    """

    alias = "transformer"
    supports_kv_cache = True

    def __init__(self, n_layer: PositiveInt = 2, d_model: PositiveInt = 128, n_head: PositiveInt = 4,
                 n_kv_head: Optional[PositiveInt] = None, d_ff: Optional[PositiveInt] = None,
                 max_seq_len: PositiveInt = 1024, rope_theta: PositiveFloat = 10000.0,
                 dropout: Fraction = 0.0, tie_embeddings: bool = True,
                 vocab_size: Optional[PositiveInt] = None, learning_rate: PositiveFloat = 1e-3,
                 weight_decay: NonNegativeFloat = 0.1, betas: Betas = (0.9, 0.95),
                 warmup_steps: NonNegativeInt = 100, min_lr_ratio: ClosedUnitInterval = 0.1):
        super().__init__(learning_rate, weight_decay, betas, warmup_steps, min_lr_ratio)
        check_heads(d_model, n_head, n_kv_head)
        self.save_hyperparameters()
        if vocab_size is not None:
            self.build(vocab_size)

    def build_network(self, vocab_size: int) -> nn.Module:
        from transformers import LlamaConfig, LlamaForCausalLM

        hp = self.hparams
        d_ff = hp.d_ff or 64 * -(-int(8 * hp.d_model / 3) // 64)
        config = LlamaConfig(vocab_size=vocab_size, hidden_size=hp.d_model, intermediate_size=d_ff,
                             num_hidden_layers=hp.n_layer, num_attention_heads=hp.n_head,
                             num_key_value_heads=hp.n_kv_head or hp.n_head, max_position_embeddings=hp.max_seq_len,
                             rope_theta=hp.rope_theta, attention_dropout=hp.dropout,
                             tie_word_embeddings=hp.tie_embeddings, bos_token_id=None, eos_token_id=None,
                             pad_token_id=None)
        return LlamaForCausalLM(config)

    @property
    def max_seq_len(self) -> int:
        return self.hparams.max_seq_len


def check_heads(d_model: int, n_head: int, n_kv_head: Optional[int]) -> None:
    """The head sizes must split evenly; each range alone is checked by the parser."""
    if d_model % n_head:
        raise ConfigError(f"--model.d_model {d_model} must be divisible by --model.n_head {n_head} "
                          "(every head gets d_model / n_head channels)")
    if (d_model // n_head) % 2:
        # RoPE rotates channel pairs
        raise ConfigError(f"--model.d_model {d_model} / --model.n_head {n_head} = {d_model // n_head} channels "
                          "per head; RoPE needs an even number: change either")
    if n_kv_head is not None and n_head % n_kv_head:
        raise ConfigError(f"--model.n_kv_head {n_kv_head} must divide --model.n_head {n_head} "
                          "(each key/value head serves n_head / n_kv_head query heads)")
