"""Downstream fine-tuning: one classification/regression head on a causal LM's sequence representation.

The protocol is the same for every family: the sequence is represented by the final hidden state
of its last real token (for a causal LM the only position that has read the whole input; what
transformers' *ForSequenceClassification does for GPT-2 and Llama), and a dropout + Linear head
maps it to `num_labels` outputs. num_labels 1 is regression (MSE, as transformers' problem_type
"regression"); >= 2 is classification (cross-entropy).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def last_token_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T, d) hidden states, (B, T) right-padded mask (1 = real token) -> (B, d) at each row's last real token."""
    lengths = attention_mask.sum(1)
    if (lengths == 0).any():
        raise ValueError("a row has no real token (its attention_mask is all zeros)")
    # with left padding the last real token is at T - 1, not at length - 1: refuse rather than pool padding
    prefix = torch.arange(attention_mask.shape[1], device=attention_mask.device) < lengths[:, None]
    if not torch.equal(attention_mask.bool(), prefix):
        raise ValueError("last_token_pool needs right padding (every row's real tokens first)")
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), lengths - 1]


class SequenceHead(nn.Module):
    """Dropout + Linear(d_model, num_labels), with its loss and predictions."""

    def __init__(self, d_model: int, num_labels: int, dropout: float = 0.1):
        super().__init__()
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1 (1 = regression), got {num_labels}")
        self.num_labels = num_labels
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(d_model, num_labels)
        nn.init.normal_(self.proj.weight, std=0.02)  # the LMs' own init scale
        nn.init.zeros_(self.proj.bias)

    @property
    def regression(self) -> bool:
        return self.num_labels == 1

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        # the net may run in bf16/fp16 (hf --model.dtype) while the head stays in its own dtype
        return self.proj(self.dropout(pooled.to(self.proj.weight.dtype)))

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self.regression:
            return F.mse_loss(logits.squeeze(-1).float(), targets.float())
        return F.cross_entropy(logits.float(), targets)

    def predictions(self, logits: torch.Tensor) -> torch.Tensor:
        """Class ids (long) for classification, scores (float) for regression."""
        return logits.squeeze(-1).float() if self.regression else logits.argmax(-1)
