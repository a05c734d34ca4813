"""Streaming evaluation under KV-cache eviction: `streaming_logits`, a schedule of the KV engine.

A text is read the way a model serving a long stream reads it: in chunks of `chunk_size` tokens, on a
KV cache that is compressed as it grows. The tokens of chunk k attend to the compressed cache of
chunks 0..k-1 and, causally, to each other; after every `interval`-th chunk the cache is compressed
to the budget (engine.Budget) of the n tokens seen so far, capped at n. So every token is scored on
what survived of its past, and the perplexity of the logits is the quality a method keeps at that cache size.

- chunk_size 1 is exact per-token streaming: the cache is compressed before every token.
- a larger chunk is faster (one forward per chunk) but its tokens see each other uncompressed, so the
  cache a token attends is up to chunk_size - 1 slots larger than the budget.
- sparsity 0 (or the dense method) never compresses: the logits are those of one dense forward.

`StreamingEviction` is the same schedule attached to a LanguageModule's evaluation for a block, as a
kvpress press is applied: `with eviction.applied(model):` makes it the module's `evaluation` (whose
`logits` its evaluation steps ask for), or the `kv` of a task's evaluator.Evaluation, which then also
generates the answers on the KV engine; leaving, also on an exception, clears it. `eviction.totals`
sums the figures of the forwards run inside. The module's own forward is never replaced.

Note on cab_v3: its 2-hop term is accumulated over forwards of more than one query (capture.py), so
with chunk_size 1 it is never fed and cab_v3 ranks by attention received alone.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

import torch

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity.capture import AttentionRecorder
from lightning_bench.sparsity.decode import Compress
from lightning_bench.sparsity.engine import Budget, KVEngine, KVRecord, check_rows, positive_int
from lightning_bench.sparsity.methods import Method


def check_streaming_args(method: Union[str, Method], sparsity: Optional[float], budget_tokens: Optional[int],
                         chunk_size: int, interval: int = 1, method_params: Optional[dict] = None,
                         rounding: str = "ceil") -> Budget:
    """The Budget after checking every argument of a streaming run; one-line ConfigErrors otherwise."""
    plan = Budget.build(method, sparsity, budget_tokens, rounding, method_params)
    positive_int("chunk_size", chunk_size)
    positive_int("interval", interval)
    return plan


def _kept_positions(logits_to_keep, T: int) -> Optional[torch.Tensor]:
    if logits_to_keep is None:
        return None
    keep = torch.as_tensor(logits_to_keep, dtype=torch.long).flatten().cpu()
    if len(keep) and (keep.min() < 0 or keep.max() >= T or bool((keep[1:] <= keep[:-1]).any())):
        raise ConfigError(f"logits_to_keep must be increasing positions in [0, {T}), got {keep.tolist()}")
    return keep


def _read(engine: KVEngine, input_ids: torch.Tensor, chunk_size: int, keep: Optional[torch.Tensor],
          schedule: Compress, evicts: bool) -> tuple[list, list]:
    """Feed the text chunk by chunk; (logit pieces, slots attended by each token)."""
    B, T = input_ids.shape
    pieces, lengths = [], []
    for chunk, lo in enumerate(range(0, T, chunk_size), start=1):
        hi = min(T, lo + chunk_size)
        wanted = 0 if keep is None else (keep[(keep >= lo) & (keep < hi)] - lo).to(engine.device)
        if engine.state is None:  # the stream's first token starts the cache, the rest of the chunk extends it
            first = engine.prefill(input_ids[:, :1])
            if keep is None or (len(wanted) and int(wanted[0]) == 0):
                pieces.append(first[:, None])
            cached = 0
            if hi > 1:
                pieces.append(engine.feed(input_ids[:, 1:hi], wanted if keep is None else wanted[wanted > 0] - 1))
        else:
            cached = engine.state.length
            pieces.append(engine.feed(input_ids[:, lo:hi], wanted))
        lengths.extend(range(cached + 1, cached + hi - lo + 1))
        engine.meter()
        if evicts and hi < T and schedule.due(chunk):
            schedule(engine)
    return pieces, lengths


@torch.no_grad()
def streaming_logits(net, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                     method: Union[str, Method] = "dense", sparsity: Optional[float] = None,
                     budget_tokens: Optional[int] = None, chunk_size: int = 1, method_params: Optional[dict] = None,
                     interval: int = 1, rerotate: bool = False, logits_to_keep: Optional[torch.Tensor] = None,
                     scored: Optional[torch.Tensor] = None, rounding: str = "ceil") -> tuple[torch.Tensor, KVRecord]:
    """Logits of `input_ids` read as a stream on a KV cache compressed by `method` (see module docstring).

    Args:
        net: as KVEngine's. input_ids: (B, T). attention_mask: (B, T) right padding only (None = none).
            Padding is fed like text (it follows every real token of its row, so no real token sees it);
            its logits mean nothing.
        method, method_params, sparsity, budget_tokens, rounding: as Budget.build (a budget at or above the
            text length keeps everything).
        chunk_size: tokens per forward (1 = per-token streaming). interval: compress after every
            `interval`-th chunk. rerotate: re-rotate kept keys to contiguous positions at each compression.
        logits_to_keep: optional sorted 1-D positions; then only those logits are computed and returned
            (B, len(logits_to_keep), V), as `LanguageModule.lm_forward` does.
        scored: optional (B, T) bool, the tokens counted in the cache-length means (default: non-padding).
    Returns:
        (logits (B, T, V) in the model's dtype, KVRecord: cache_lengths one per token (the same for every
        row), kv_bytes / dense_kv_bytes one per chunk, figures mean_cache_length, dense_mean_cache_length,
        counted_tokens (over the counted tokens) and chunks).
    """
    engine = KVEngine(net)
    plan = check_streaming_args(method, sparsity, budget_tokens, chunk_size, interval, method_params, rounding)
    mask = check_rows(input_ids, attention_mask, "right").bool()
    if scored is not None and scored.shape != input_ids.shape:
        raise ConfigError(f"scored {tuple(scored.shape)} does not match input_ids {tuple(input_ids.shape)}")
    keep = _kept_positions(logits_to_keep, input_ids.shape[1])
    engine.check_rope(rerotate)
    engine.recorder = AttentionRecorder.for_method(plan.method)
    evicts = plan.method.evicts and (budget_tokens is not None or plan.sparsity > 0)
    with engine.evaluating():
        start = engine.clock()
        pieces, lengths = _read(engine, input_ids.to(engine.device), chunk_size, keep,
                                Compress(plan, rerotate, interval), evicts)
        record = engine.record
        record.decode_seconds = engine.clock() - start
    record.cache_lengths = lengths
    record.method = {**plan.describe(), "chunk_size": chunk_size, "interval": interval, "rerotate": rerotate}
    record.figures = _cache_means(lengths, mask if scored is None else scored.bool(), -(-input_ids.shape[1] // chunk_size))
    return torch.cat(pieces, dim=1), record


def _cache_means(lengths: list, counted: torch.Tensor, chunks: int) -> dict:
    per_row = counted.cpu().sum(0).double()  # how many rows count position t
    n = int(per_row.sum())
    cache = torch.tensor(lengths, dtype=torch.float64)
    dense = torch.arange(1, len(lengths) + 1, dtype=torch.float64)
    return {"mean_cache_length": float((per_row * cache).sum() / n) if n else float("nan"),
            "dense_mean_cache_length": float((per_row * dense).sum() / n) if n else float("nan"),
            "counted_tokens": n, "chunks": chunks}


def new_totals() -> dict:
    """Sums over forwards: slots (cache, dense) attended x tokens, tokens, peak KV bytes, compressions, chunks."""
    return {"cache": 0.0, "dense": 0.0, "tokens": 0, "peak": 0, "dense_peak": 0, "compressions": 0, "forwards": 0}


@dataclass
class StreamingEviction:
    """Streaming evaluation of a module's forward under `plan` (arguments: see SparsityCallback)."""

    plan: Budget
    chunk_size: int = 1
    interval: int = 1
    rerotate: bool = False
    totals: dict = field(default_factory=new_totals)
    # (B, T) bool: the tokens the next forwards count in the cache figures (None: every token)
    scored: Optional[torch.Tensor] = None

    @classmethod
    def build(cls, method="dense", ratio: Optional[float] = None, budget_tokens: Optional[int] = None,
              chunk_size: int = 1, interval: int = 1, rerotate: bool = False,
              method_params: Optional[dict] = None, rounding: str = "ceil") -> "StreamingEviction":
        """Checked arguments (one-line ConfigErrors); `method` is a registry name or a Method."""
        plan = check_streaming_args(method, ratio, budget_tokens, chunk_size, interval, method_params, rounding)
        return cls(plan, chunk_size, interval, bool(rerotate))

    method = property(lambda self: self.plan.method)

    def settings(self) -> dict:
        plan = self.plan
        return {**plan.method.describe(), "ratio": plan.sparsity, "budget_tokens": plan.budget_tokens,
                "rounding": plan.rounding, "chunk_size": self.chunk_size, "interval": self.interval,
                "rerotate": self.rerotate}

    @contextmanager
    def applied(self, module) -> Iterator["StreamingEviction"]:
        """Score `module`'s evaluation through this eviction inside the block: it becomes the module's
        `evaluation`, or the `kv` of the one a task's evaluator set (evaluation/evaluator.py)."""
        if not hasattr(module, "evaluation"):
            raise ConfigError(f"KV-cache sparsity applies to LanguageModules, not {type(module).__name__}")
        if not module.supports_kv_cache:
            raise ConfigError(f"{type(module).__name__} has no KV cache to evict from; KV-cache sparsity needs an "
                              "attention model (--model transformer or --model hf)")
        holder = module.evaluation
        if holder is not None and (not hasattr(holder, "kv") or holder.kv is not None):
            raise RuntimeError("a KV-cache sparsity is already applied to this module")
        if holder is None:
            module.evaluation = self
        else:
            holder.kv = self
        try:
            yield self
        finally:
            if module.evaluation is self:
                module.evaluation = None
            elif getattr(module.evaluation, "kv", None) is self:
                module.evaluation.kv = None

    def scores(self, batch) -> bool:
        """Request batches are scored by a task's evaluation (evaluator.Evaluation), never by the eviction alone."""
        return False

    def logits(self, module, input_ids: torch.Tensor, logits_to_keep: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The streaming logits of `input_ids` under this eviction; adds the forward's figures to `totals`."""
        scored = self.scored if self.scored is not None and self.scored.shape == input_ids.shape else None
        plan = self.plan
        logits, stats = streaming_logits(module.net, input_ids, None, plan.method, sparsity=plan.sparsity,
                                         budget_tokens=plan.budget_tokens, chunk_size=self.chunk_size,
                                         interval=self.interval, rerotate=self.rerotate,
                                         logits_to_keep=logits_to_keep, scored=scored, rounding=plan.rounding)
        counted = stats.counted_tokens
        self._add(stats.mean_cache_length * counted if counted else 0.0,
                  stats.dense_mean_cache_length * counted if counted else 0.0, counted, stats, stats.chunks)
        return logits

    def add_generation(self, record, slot_bytes: int) -> None:
        """A generated answer's cache figures (a KVRecord of task_decode.continue_rows) added to `totals`:
        every token predicted on the compressed cache counts the slots it attended (the metered cache after
        each fed token) against the dense cache's (its bytes over `slot_bytes`, one slot's bytes)."""
        attended, dense = record.cache_lengths[1:], record.dense_kv_bytes[1:]
        self._add(float(sum(attended)), sum(dense) / max(1, slot_bytes), len(attended), record, record.forwards)

    def _add(self, cache: float, dense: float, tokens: int, record, forwards: int) -> None:
        acc = self.totals
        acc["cache"] += cache
        acc["dense"] += dense
        acc["tokens"] += tokens
        acc["peak"] = max(acc["peak"], record.peak_kv_bytes)
        acc["dense_peak"] = max(acc["dense_peak"], record.dense_kv_bytes_peak)
        acc["compressions"] += record.compressions
        acc["forwards"] += forwards
