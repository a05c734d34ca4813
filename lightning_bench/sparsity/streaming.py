"""Streaming evaluation under KV-cache eviction: `streaming_logits`.

A text is read the way a model serving a long stream reads it: in chunks of `chunk_size` tokens, on a
KV cache that is compressed as it grows. The tokens of chunk k attend to the compressed cache of
chunks 0..k-1 and, causally, to each other; after every `interval`-th chunk the cache is compressed
to the budget, (1 - sparsity) * n slots per row with n the tokens seen so far (rounded up, or down with
`rounding="floor"`), or a fixed `budget_tokens` (capped at n). So every token is scored on what survived of its past, and the
perplexity of the logits is the quality a method keeps at that cache size.

- chunk_size 1 is exact per-token streaming: the cache is compressed before every token.
- a larger chunk is faster (one forward per chunk) but its tokens see each other uncompressed, so the
  cache a token attends is up to chunk_size - 1 slots larger than the budget.
- sparsity 0 (or the dense method) never compresses: the logits are those of one dense forward.

Nothing here is a second mechanism: the first token goes through the core's `prefill`, every later
piece of text through `extend` (the decoding step, q tokens at a time), the attention statistics
through the same `AttentionRecorder`/`capturing`, and each compression through `EvictionState.compress`
with the method's importance function. Positions are true positions (0 at the first token) unless
`rerotate`, as in `generate_with_eviction`.

Note on cab_v3: its 2-hop term is accumulated over forwards of more than one query (capture.py), so
with chunk_size 1 it is never fed and cab_v3 ranks by attention received alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional, Union

import torch

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity.cache import budget, check_rounding, find_inv_freq
from lightning_bench.sparsity.capture import AttentionRecorder
from lightning_bench.sparsity.decode import check_budget, extend, prefill, resolve_network
from lightning_bench.sparsity.methods import Method, make_method


@dataclass
class StreamingStats:
    """What one `streaming_logits` call cost.

    cache_lengths: (T,) cache slots token t attended, itself included (a dense cache: t + 1). The same
        for every row (every row has seen the same number of tokens).
    mean_cache_length / dense_mean_cache_length: mean of cache_lengths / of t + 1 over the counted
        tokens (`scored`, default every non-padding token); `counted_tokens` of them.
    peak_kv_bytes: the most bytes of keys + values (all layers, all rows) held at any moment: after a
        chunk was appended, before it was compressed. dense_kv_bytes: what the dense cache holds after
        the whole text.
    compressions: compressions that evicted something. chunks: forwards run.
    """

    cache_lengths: torch.Tensor
    mean_cache_length: float
    dense_mean_cache_length: float
    counted_tokens: int
    peak_kv_bytes: int
    dense_kv_bytes: int
    compressions: int
    chunks: int
    seconds: float
    method: dict

    def summary(self) -> dict:
        return {**self.method, "mean_cache_length": self.mean_cache_length,
                "dense_mean_cache_length": self.dense_mean_cache_length, "counted_tokens": self.counted_tokens,
                "peak_kv_bytes": self.peak_kv_bytes, "dense_kv_bytes": self.dense_kv_bytes,
                "compressions": self.compressions, "chunks": self.chunks, "seconds": self.seconds}


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--sparsity.{name} must be a positive integer, got {value!r}")
    return value


def check_streaming_args(method: Union[str, Method], sparsity: Optional[float], budget_tokens: Optional[int],
                         chunk_size: int, interval: int = 1, method_params: Optional[dict] = None,
                         rounding: str = "ceil") -> tuple[Method, Optional[float]]:
    """(the Method, the sparsity to use) after checking every argument; one-line ConfigErrors otherwise."""
    built = make_method(method, **(method_params or {}))
    sparsity = check_budget(built, sparsity, budget_tokens)
    _positive_int("chunk_size", chunk_size)
    _positive_int("interval", interval)
    check_rounding(rounding)
    return built, sparsity


def _check_mask(input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor]) -> torch.Tensor:
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ConfigError(f"input_ids must be (batch, tokens) with at least one token, got {tuple(input_ids.shape)}")
    if attention_mask is None:
        return torch.ones_like(input_ids, dtype=torch.bool)
    if attention_mask.shape != input_ids.shape:
        raise ConfigError(f"attention_mask {tuple(attention_mask.shape)} does not match "
                          f"input_ids {tuple(input_ids.shape)}")
    mask = attention_mask.long()
    if bool(((mask != 0) & (mask != 1)).any()) or bool((mask[:, 1:] > mask[:, :-1]).any()):
        raise ConfigError("streaming takes right-padded rows (1s, then 0s): a row is a text read from its start")
    if bool((mask[:, 0] == 0).any()):
        raise ConfigError("a row of attention_mask has no tokens")
    return mask.bool()


@torch.no_grad()
def streaming_logits(net, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                     method: Union[str, Method] = "dense", sparsity: Optional[float] = None,
                     budget_tokens: Optional[int] = None, chunk_size: int = 1, method_params: Optional[dict] = None,
                     interval: int = 1, rerotate: bool = False, logits_to_keep: Optional[torch.Tensor] = None,
                     scored: Optional[torch.Tensor] = None, rounding: str = "ceil") -> tuple[torch.Tensor, StreamingStats]:
    """Logits of `input_ids` read as a stream on a KV cache compressed by `method` (see module docstring).

    Args:
        net: a transformers causal LM with a KV cache, or a LanguageModule whose `.net` is one.
        input_ids: (B, T). attention_mask: (B, T) right padding only (None = none). Padding is fed like
            text (it follows every real token of its row, so no real token sees it); its logits mean nothing.
        method / method_params: a registry name (methods.METHODS) and its parameters, or a Method.
        sparsity: fraction of the tokens seen so far that is evicted, in [0, 1). budget_tokens: keep a fixed
            number of tokens instead (a budget at or above the text length keeps everything). Exactly one
            of the two for an evicting method; neither for dense. rounding: "ceil" or "floor" of the
            ratio's budget (cache.budget).
        chunk_size: tokens per forward (1 = per-token streaming). interval: compress after every
            `interval`-th chunk. rerotate: re-rotate kept keys to contiguous positions at each compression.
        logits_to_keep: optional sorted 1-D positions; then only those logits are computed and returned
            (B, len(logits_to_keep), V), as `LanguageModule.lm_forward` does.
        scored: optional (B, T) bool, the tokens counted in the cache-length means (default: non-padding).
    Returns:
        (logits (B, T, V) in the model's dtype, StreamingStats).
    """
    start = time.perf_counter()
    net = resolve_network(net)
    method, sparsity = check_streaming_args(method, sparsity, budget_tokens, chunk_size, interval, method_params,
                                            rounding)
    mask = _check_mask(input_ids, attention_mask)
    B, T = input_ids.shape
    if scored is not None and scored.shape != input_ids.shape:
        raise ConfigError(f"scored {tuple(scored.shape)} does not match input_ids {tuple(input_ids.shape)}")
    keep_positions = None
    if logits_to_keep is not None:
        keep_positions = torch.as_tensor(logits_to_keep, dtype=torch.long).flatten().cpu()
        if len(keep_positions) and (keep_positions.min() < 0 or keep_positions.max() >= T
                                    or bool((keep_positions[1:] <= keep_positions[:-1]).any())):
            raise ConfigError(f"logits_to_keep must be increasing positions in [0, {T}), got {keep_positions.tolist()}")
    inv_freq = find_inv_freq(net) if rerotate else None
    if rerotate and inv_freq is None:
        raise ConfigError("--sparsity.rerotate needs a RoPE model; this one has no rotary embedding")

    device = next(net.parameters()).device
    input_ids = input_ids.to(device)
    recorder = AttentionRecorder.for_method(method)
    evicts = method.evicts and (budget_tokens is not None or sparsity > 0)
    cache_lengths = torch.empty(T, dtype=torch.long)
    pieces, peak, chunks, state = [], 0, 0, None
    was_training = net.training
    net.eval()
    try:
        for lo in range(0, T, chunk_size):
            hi = min(T, lo + chunk_size)
            if keep_positions is None:
                wanted = 0  # transformers: every position of the chunk
            else:
                wanted = keep_positions[(keep_positions >= lo) & (keep_positions < hi)] - lo
            if state is None:
                # the stream's first token starts the cache (prefill); the rest of the first chunk extends it
                state, first = prefill(net, input_ids[:, :1], torch.ones(B, 1, dtype=torch.long, device=device),
                                       recorder)
                if keep_positions is None or (len(wanted) and int(wanted[0]) == 0):
                    pieces.append(first[:, None])
                cached = 0
                if hi > 1:
                    rest = wanted if keep_positions is None else wanted[wanted > 0] - 1
                    pieces.append(extend(net, state, input_ids[:, 1:hi], recorder, rest.to(device)
                                         if isinstance(rest, torch.Tensor) else rest))
            else:
                cached = state.length
                pieces.append(extend(net, state, input_ids[:, lo:hi], recorder,
                                     wanted.to(device) if isinstance(wanted, torch.Tensor) else wanted))
            cache_lengths[lo:hi] = cached + torch.arange(1, hi - lo + 1)
            peak = max(peak, state.kv_bytes())
            chunks += 1
            if evicts and hi < T and chunks % interval == 0:
                state.compress(method, budget(state.seen, sparsity, budget_tokens, rounding), recorder, rerotate,
                               inv_freq)
    finally:
        net.train(was_training)
    logits = torch.cat(pieces, dim=1)

    counted = (mask if scored is None else scored.bool()).cpu()
    per_row = counted.sum(0).double()  # how many rows count position t
    n_counted = int(per_row.sum())
    dense_lengths = torch.arange(1, T + 1, dtype=torch.float64)
    mean = float((per_row * cache_lengths.double()).sum() / n_counted) if n_counted else float("nan")
    dense_mean = float((per_row * dense_lengths).sum() / n_counted) if n_counted else float("nan")
    per_slot = state.kv_bytes() // max(1, state.length)
    stats = StreamingStats(
        cache_lengths=cache_lengths, mean_cache_length=mean, dense_mean_cache_length=dense_mean,
        counted_tokens=n_counted, peak_kv_bytes=peak, dense_kv_bytes=per_slot * T,
        compressions=state.compressions, chunks=chunks, seconds=time.perf_counter() - start,
        method={**method.describe(), "sparsity": sparsity, "budget_tokens": budget_tokens, "rounding": rounding,
                "chunk_size": chunk_size, "interval": interval, "rerotate": rerotate})
    return logits, stats
