"""Summed negative log-likelihood of the scored tokens, without full-vocabulary fp32 log-probabilities.

The loss a LanguageModule computes on evaluation batches (models/base.py); it lives with the models (the
bottom layer), and the evaluation and benchmark code import it from here.

Perplexity needs, per scored token, `logsumexp(logits) - logits[target]`. `F.cross_entropy` on the
(tokens, vocab) logits writes a second (tokens, vocab) fp32 tensor of log-probabilities; for a 49k
vocabulary and 1,024 tokens that is 200 MB written and read again per batch. Two cheaper routes:

* `head_nll`: the output head fused with the loss. The head (a plain Linear) is applied to the
  scored positions' hidden states one vocabulary slice at a time; each slice's logits stay in cache
  while their logsumexp and the targets falling in the slice are taken, and the slices' logsumexps
  are combined exactly (logsumexp of logsumexps). Only scored positions go through the head. torch
  has no fused linear + cross-entropy for CPU (nor for bf16 logits in fp32 arithmetic), hence this.
* `logits_nll`: when only logits are available (a KV-cache eviction's streaming logits, a head
  that is not a plain Linear), logsumexp and the gathered target, in row blocks cast to fp32.

Both take the logits in the dtype the model computes them in (bf16 under `--bits 16`, as a bf16
model's own logits are), do the softmax arithmetic in fp32 and return per-token NLL (fp32), which
the caller sums in float64.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

# the label of a position no loss scores (a window's context, padding): torch's cross_entropy default. The
# model's losses own it; data/windows.py builds labels with it, evaluation/ re-exports it.
IGNORE_INDEX = -100
VOCAB_SLICE = 4096  # logits per token per slice: (rows x 4096) fp32 is 16 MB at 1,024 rows
ROW_BLOCK = 2048  # tokens per block: bounds each slice's memory for large batches


def head_nll(hidden: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], targets: torch.Tensor,
             vocab_slice: int = VOCAB_SLICE, row_block: int = ROW_BLOCK) -> torch.Tensor:
    """Per-token NLL (N,) fp32: logsumexp(hidden_i W^T + b) - (hidden_i W^T + b)[targets_i], hidden (N, d)."""
    out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
    vocab = weight.shape[0]
    for start in range(0, hidden.shape[0], row_block):
        h, y = hidden[start:start + row_block], targets[start:start + row_block]
        slice_lse, target_logit = [], torch.empty(len(y), dtype=torch.float32, device=h.device)
        for v0 in range(0, vocab, vocab_slice):
            v1 = min(v0 + vocab_slice, vocab)
            logits = F.linear(h, weight[v0:v1], None if bias is None else bias[v0:v1]).float()
            slice_lse.append(torch.logsumexp(logits, dim=-1))
            inside = ((y >= v0) & (y < v1)).nonzero().squeeze(1)
            if len(inside):
                target_logit[inside] = logits[inside, y[inside] - v0]
        out[start:start + len(y)] = torch.logsumexp(torch.stack(slice_lse, dim=-1), dim=-1) - target_logit
    return out


def logits_nll(logits: torch.Tensor, labels: torch.Tensor, row_block: int = ROW_BLOCK) -> torch.Tensor:
    """Per-token NLL (N,) fp32 of logits (..., V) at the labels (...) that are not IGNORE_INDEX, in order."""
    logits, labels = logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
    rows = (labels != IGNORE_INDEX).nonzero().squeeze(1)
    out = torch.empty(len(rows), dtype=torch.float32, device=logits.device)
    for start in range(0, len(rows), row_block):
        idx = rows[start:start + row_block]
        block = logits[idx].float()
        target = block.gather(1, labels[idx, None]).squeeze(1)
        out[start:start + len(idx)] = torch.logsumexp(block, dim=-1) - target
    return out
