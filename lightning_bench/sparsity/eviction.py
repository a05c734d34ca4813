"""`StreamingEviction`: KV-cache eviction attached to a LanguageModule for a block of evaluation.

    eviction = StreamingEviction.build("h2o", ratio=0.9, chunk_size=16)
    with eviction.applied(model):          # model.active_eviction is `eviction` inside, None after
        logits = model.lm_forward(ids).logits   # the streaming logits (streaming.streaming_logits)
    eviction.totals                          # cache figures summed over the forwards run inside

As a kvpress press is applied: entering sets the module's declared `active_eviction` attribute, which
its `lm_forward` dispatches on; leaving (also on an exception) always clears it. Nothing of the module
is replaced, so code that needs the dense network (e.g. HF `generate`) asks `active_eviction is None`.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Optional

import torch

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity.methods import Method
from lightning_bench.sparsity.streaming import check_streaming_args, streaming_logits


def new_totals() -> dict:
    """Sums over forwards: cache slots / dense slots attended x tokens, counted tokens, peak KV bytes
    (evicted and dense), compressions, chunk forwards."""
    return {"cache": 0.0, "dense": 0.0, "tokens": 0, "peak": 0, "dense_peak": 0, "compressions": 0, "forwards": 0}


@dataclass
class StreamingEviction:
    """Streaming evaluation of a module's forward under `method` (arguments: see SparsityCallback)."""

    method: Method
    ratio: Optional[float]
    budget_tokens: Optional[int] = None
    chunk_size: int = 1
    interval: int = 1
    rerotate: bool = False
    rounding: str = "ceil"  # of the ratio's budget (cache.budget)
    totals: dict = field(default_factory=new_totals)
    # (B, T) bool: the tokens the next forwards count in the cache figures (None: every token)
    scored: Optional[torch.Tensor] = None

    @classmethod
    def build(cls, method="dense", ratio: Optional[float] = None, budget_tokens: Optional[int] = None,
              chunk_size: int = 1, interval: int = 1, rerotate: bool = False,
              method_params: Optional[dict] = None, rounding: str = "ceil") -> "StreamingEviction":
        """Checked arguments (one-line ConfigErrors); `method` is a registry name or a Method."""
        built, ratio = check_streaming_args(method, ratio, budget_tokens, chunk_size, interval, method_params,
                                            rounding)
        return cls(built, ratio, budget_tokens, chunk_size, interval, bool(rerotate), rounding)

    def settings(self) -> dict:
        return {**self.method.describe(), "ratio": self.ratio, "budget_tokens": self.budget_tokens,
                "rounding": self.rounding, "chunk_size": self.chunk_size, "interval": self.interval, "rerotate": self.rerotate}

    @contextmanager
    def applied(self, module) -> Iterator["StreamingEviction"]:
        """Route `module.lm_forward` through this eviction inside the block."""
        if not hasattr(module, "active_eviction"):
            raise ConfigError(f"KV-cache eviction applies to LanguageModules, not {type(module).__name__}")
        if not module.supports_kv_cache:
            raise ConfigError(f"{type(module).__name__} has no KV cache to evict from; KV-cache sparsity needs an "
                              "attention model (--model transformer or --model hf)")
        if module.active_eviction is not None:
            raise RuntimeError("a KV-cache eviction is already applied to this module")
        module.active_eviction = self
        try:
            yield self
        finally:
            module.active_eviction = None

    def logits(self, module, input_ids: torch.Tensor, logits_to_keep: Optional[torch.Tensor] = None) -> torch.Tensor:
        """What `module.lm_forward` returns under this eviction; adds the forward's figures to `totals`."""
        scored = self.scored if self.scored is not None and self.scored.shape == input_ids.shape else None
        logits, stats = streaming_logits(module.net, input_ids, None, self.method, sparsity=self.ratio,
                                         budget_tokens=self.budget_tokens, chunk_size=self.chunk_size,
                                         interval=self.interval, rerotate=self.rerotate,
                                         logits_to_keep=logits_to_keep, scored=scored, rounding=self.rounding)
        acc = self.totals
        acc["cache"] += stats.mean_cache_length * stats.counted_tokens if stats.counted_tokens else 0.0
        acc["dense"] += stats.dense_mean_cache_length * stats.counted_tokens if stats.counted_tokens else 0.0
        acc["tokens"] += stats.counted_tokens
        acc["peak"] = max(acc["peak"], stats.peak_kv_bytes)
        acc["dense_peak"] = max(acc["dense_peak"], stats.dense_kv_bytes)
        acc["compressions"] += stats.compressions
        acc["forwards"] += stats.chunks
        return logits
