"""Prefill, compress, decode on the pruned cache: `generate_with_eviction`, a schedule of the KV engine.

One protocol for every method: the context is prefilled densely (the first continuation token is
predicted from the full context), the cache is compressed to the budget, then each decoding step
feeds one token with its TRUE position (or, with `rerotate`, the next contiguous one) and an
attention mask over the compressed cache, and the cache is re-compressed every `interval` steps
(`Compress.interval`, the DecodingPress of kvpress). Decoding is greedy, or teacher-forced on
`reference_continuation`, whose per-token NLL is returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch
import torch.nn.functional as F

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity.capture import AttentionRecorder
from lightning_bench.sparsity.engine import Budget, KVEngine, KVRecord, check_rows, positive_int
from lightning_bench.sparsity.methods import Method


@dataclass
class Compress:
    """A compression: the budget's method down to its budget of each row's tokens seen so far, repeated every
    `interval` steps of a schedule (0: never again; kvpress's DecodingPress). With `rerotate` the kept keys
    are then re-rotated to contiguous positions, new tokens continuing right after them (KeyRerotationPress)."""

    budget: Budget
    rerotate: bool = False
    interval: int = 0

    def __call__(self, engine: KVEngine) -> bool:
        return engine.compress(self.budget.method, self.budget.keep(engine.state), self.rerotate)

    def due(self, step: int) -> bool:
        return bool(self.interval) and step % self.interval == 0


def _new_tokens(input_ids, reference: Optional[torch.Tensor], max_new_tokens) -> int:
    if reference is not None and (reference.dim() != 2 or reference.shape[0] != input_ids.shape[0]):
        raise ConfigError(f"reference_continuation must be (batch, N) with batch {input_ids.shape[0]}, "
                          f"got {tuple(reference.shape)}")
    n_new = int(max_new_tokens) if reference is None else reference.shape[1]
    if n_new < 1:
        raise ConfigError("nothing to decode: give max_new_tokens >= 1 or a reference_continuation")
    return n_new


@torch.no_grad()
def generate_with_eviction(net, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                           method: Union[str, Method] = "dense", sparsity: Optional[float] = None,
                           budget_tokens: Optional[int] = None, interval: int = 1, max_new_tokens: int = 0,
                           rerotate: bool = False, reference_continuation: Optional[torch.Tensor] = None,
                           method_params: Optional[dict] = None, rounding: str = "ceil") -> KVRecord:
    """Prefill `input_ids`, compress the KV cache with `method`, decode `max_new_tokens` tokens.

    Args:
        net: as KVEngine's. input_ids: (B, T) context; attention_mask: (B, T), left padding only (None = none).
        method, method_params, sparsity, budget_tokens, rounding: as Budget.build; budget_tokens at most the
            context length.
        interval: re-compress every `interval` decoding steps (0: only after the prefill).
        max_new_tokens: tokens to decode greedily (ignored when `reference_continuation` is given).
        rerotate: re-rotate kept keys to contiguous positions after each compression.
        reference_continuation: (B, N) tokens to teacher-force; their per-token NLL is returned.
    Returns the KVRecord: tokens (B, N), nll (B, N) float32, the series (entry 0 the dense prefill, then one
    per decoding step), figures keep (B,) (slots kept by the first compression) and context_lengths (B,).
    """
    engine = KVEngine(net)
    plan = Budget.build(method, sparsity, budget_tokens, rounding, method_params)
    attention_mask = check_rows(input_ids, attention_mask, "left")
    context = int(attention_mask.sum(-1).max())
    plan.fits(context, f"the context ({context} tokens)")
    positive_int("interval", interval, minimum=0)
    n_new = _new_tokens(input_ids, reference_continuation, max_new_tokens)
    engine.check_rope(rerotate)
    schedule = Compress(plan, rerotate, interval)
    engine.recorder = AttentionRecorder.for_method(plan.method)
    with engine.evaluating():
        start = engine.clock()
        logits = engine.prefill(input_ids, attention_mask)
        engine.meter()
        record = engine.record
        record.prefill_seconds = engine.clock() - start
        B, keep0 = input_ids.shape[0], None
        tokens = torch.empty(B, n_new, dtype=torch.long, device=engine.device)
        nll = torch.empty(B, n_new, dtype=torch.float32, device=engine.device)
        for t in range(n_new):
            logp = F.log_softmax(logits.float(), dim=-1)
            tok = logp.argmax(-1) if reference_continuation is None else reference_continuation[:, t].to(engine.device)
            tokens[:, t] = tok
            nll[:, t] = -logp.gather(-1, tok[:, None])[:, 0]
            if t == n_new - 1:
                break
            if t == 0 or schedule.due(t):
                schedule(engine)
                keep0 = engine.state.n_valid.clone() if keep0 is None else keep0
            logits = engine.step(tok)
            engine.meter()
        record.decode_seconds = engine.clock() - start - record.prefill_seconds
    lengths = attention_mask.sum(-1).cpu()
    record.tokens, record.nll = tokens.cpu(), nll.cpu()
    record.figures = {"keep": (keep0.cpu() if keep0 is not None else lengths), "context_lengths": lengths}
    record.method = {**plan.describe(), "interval": interval, "rerotate": rerotate}
    return record
