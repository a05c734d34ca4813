"""The Transformer baseline: a Llama-style decoder (RMSNorm, RoPE, SwiGLU, GQA) with random init.

Built from transformers' LlamaForCausalLM rather than by hand: it is the reference implementation
the sparsity methods and the HF models share (same attention interface and KV cache), and its
numerics are tested upstream. Sizes use the names researchers know (n_layer, d_model, n_head, ...).
"""

from __future__ import annotations

from typing import Optional

from torch import nn

from lightning_bench.models.base import LanguageModule


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

    def __init__(self, n_layer: int = 2, d_model: int = 128, n_head: int = 4, n_kv_head: Optional[int] = None,
                 d_ff: Optional[int] = None, max_seq_len: int = 1024, rope_theta: float = 10000.0,
                 dropout: float = 0.0, tie_embeddings: bool = True, vocab_size: Optional[int] = None,
                 learning_rate: float = 1e-3, weight_decay: float = 0.1, betas: tuple[float, float] = (0.9, 0.95),
                 warmup_steps: int = 100, min_lr_ratio: float = 0.1):
        super().__init__(learning_rate, weight_decay, betas, warmup_steps, min_lr_ratio)
        if d_model % n_head:
            from lightning_bench.errors import ConfigError
            raise ConfigError(f"d_model {d_model} must be divisible by n_head {n_head}")
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
