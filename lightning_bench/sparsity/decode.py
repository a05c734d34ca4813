"""Prefill, compress, decode on the pruned cache: `generate_with_eviction`.

One protocol for every method: the context is prefilled densely (the first continuation token is
predicted from the full context), the cache is compressed to the budget, then each decoding step
feeds one token with its TRUE position (or, with `rerotate`, the next contiguous one) and an
attention mask over the compressed cache, and the cache is re-compressed every `interval` steps.
Decoding is greedy, or teacher-forced on `reference_continuation`, whose per-token NLL is returned.
"""

from __future__ import annotations

import functools
import inspect
import math
import time
from dataclasses import dataclass, field
from typing import Optional, Union

import torch
import torch.nn.functional as F

from lightning_bench.errors import ConfigError
from lightning_bench.models.hf import config_has_kv_cache
from lightning_bench.sparsity.cache import EvictionState, budget, check_rounding, check_sparsity, find_inv_freq
from lightning_bench.sparsity.capture import AttentionRecorder, capturing
from lightning_bench.sparsity.methods import Method, make_method


@dataclass
class EvictionResult:
    """What one `generate_with_eviction` call produced (B rows, N continuation tokens).

    tokens: (B, N) generated (greedy) or the reference continuation.
    nll: (B, N) float32 negative log-likelihood (nats) of each token given everything before it.
    cache_lengths: N entries; cache slots (incl. filler/padding slots) attended when predicting token
        t, counting the token fed in that step; entry 0 is the dense prefill.
    kv_bytes: N entries; bytes of every layer's keys and values at the same moments.
    dense_kv_bytes: N entries; what a dense cache would hold at the same moments.
    keep: (B,) slots each row kept at the first compression (= its context length for dense).
    """

    tokens: torch.Tensor
    nll: torch.Tensor
    cache_lengths: list[int]
    kv_bytes: list[int]
    dense_kv_bytes: list[int]
    keep: torch.Tensor
    context_lengths: torch.Tensor
    compressions: int
    method: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def peak_kv_bytes(self) -> int:
        return max(self.kv_bytes[1:] or self.kv_bytes)

    def mean_nll(self) -> float:
        return float(self.nll.mean())

    def summary(self) -> dict:
        return {**self.method, "tokens": int(self.nll.numel()), "nll": self.mean_nll(),
                "ppl": math.exp(self.mean_nll()), "cache_len_final": self.cache_lengths[-1],
                "kv_bytes_final": self.kv_bytes[-1], "dense_kv_bytes_final": self.dense_kv_bytes[-1],
                "compressions": self.compressions, "seconds": self.seconds}


def resolve_network(net):
    """The transformers model of a LanguageModule (its `.net`) or `net` itself, checked for a KV cache."""
    from transformers import PreTrainedModel

    owner = type(net).__name__
    if not isinstance(net, PreTrainedModel) and isinstance(getattr(net, "net", None), torch.nn.Module):
        net = net.net

    config = getattr(net, "config", None)
    if not isinstance(net, PreTrainedModel) or config is None or not config_has_kv_cache(config):
        raise ConfigError(f"{owner} has no KV cache to evict from; KV-cache sparsity needs an attention model "
                          "(--model transformer or --model hf)")
    return net


def _check_inputs(input_ids, attention_mask):
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ConfigError(f"input_ids must be (batch, context) with a non-empty context, got {tuple(input_ids.shape)}")
    if attention_mask is None:
        return torch.ones_like(input_ids)
    if attention_mask.shape != input_ids.shape:
        raise ConfigError(f"attention_mask {tuple(attention_mask.shape)} does not match "
                          f"input_ids {tuple(input_ids.shape)}")
    mask = attention_mask.long()
    if bool((mask[:, 1:] < mask[:, :-1]).any()) or bool(((mask != 0) & (mask != 1)).any()):
        raise ConfigError("attention_mask must be left-padded (0s, then 1s, per row); pad prompts on the left")
    if bool((mask.sum(-1) == 0).any()):
        raise ConfigError("a row of attention_mask has no tokens")
    return mask


def check_budget(method: Method, sparsity: Optional[float], budget_tokens: Optional[int]) -> Optional[float]:
    """Check the budget arguments: exactly one of `sparsity` (a ratio in [0, 1)) and `budget_tokens` (a
    positive token count), or neither for a method that never evicts. Returns the sparsity to use: the
    given ratio, 0.0 for a non-evicting method given neither, None when `budget_tokens` is used."""
    if sparsity is None and budget_tokens is None:
        if method.evicts:
            raise ConfigError(f"method {method.name!r} needs --sparsity.ratio or --sparsity.budget_tokens")
        return 0.0
    if sparsity is not None and budget_tokens is not None:
        raise ConfigError("give either sparsity (a ratio) or budget_tokens (a token count), not both")
    if sparsity is not None:
        return check_sparsity(sparsity)
    if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or budget_tokens < 1:
        raise ConfigError(f"--sparsity.budget_tokens must be a positive integer, got {budget_tokens!r}")
    return None


def cache_argument(net, cache) -> dict:
    """The keyword argument that hands `cache` to `net`'s forward: `cache` since transformers 5.24 renamed
    it (the old name then warns on every call, and goes in 5.40), `past_key_values` before."""
    return {_cache_parameter(type(net)): cache}


@functools.lru_cache(maxsize=None)
def _cache_parameter(model_class: type) -> str:
    parameters = inspect.signature(model_class.forward).parameters  # through transformers' decorators
    return "cache" if "cache" in parameters else "past_key_values"


@torch.no_grad()
def prefill(net, input_ids: torch.Tensor, attention_mask: torch.Tensor,
            recorder: Optional[AttentionRecorder] = None) -> tuple[EvictionState, torch.Tensor]:
    """Dense prefill of a left-padded batch: (EvictionState over its DynamicCache, last-position logits (B, V)).

    Positions are true positions (0 at each row's first token), as transformers' generate uses."""
    from lightning_bench.sparsity.growing_layer import growing_cache

    config = net.config
    group = config.num_attention_heads // (getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    if recorder is not None:
        recorder.query_valid = attention_mask.bool()
    cache = growing_cache(config)
    with capturing(net, recorder):  # the model appends the context to `cache` in place
        out = net(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions,
                  **cache_argument(net, cache), use_cache=True, logits_to_keep=1)
    if recorder is not None:
        recorder.query_valid = None
    return EvictionState(cache, attention_mask, positions, group_size=group), out.logits[:, -1]


@torch.no_grad()
def extend(net, state: EvictionState, input_ids: torch.Tensor, recorder: Optional[AttentionRecorder] = None,
           logits_to_keep: Union[int, torch.Tensor] = 0) -> torch.Tensor:
    """Feed the next q tokens `input_ids` (B, q) of every row on the (compressed) cache of `state` and append
    them to it: they attend to the cache and causally to each other, at the positions `state.next_inputs`
    gives (true positions, or contiguous ones after a rerotation). Returns their logits (B, q', V), with
    transformers' `logits_to_keep` (0 = all q; a 1-D tensor = those of the q positions).

    The decoding step of `generate_with_eviction` (q = 1) and the chunk step of streaming evaluation."""
    q = input_ids.shape[1]
    mask, pos = state.next_inputs(q)
    with capturing(net, recorder):
        out = net(input_ids=input_ids, attention_mask=mask, position_ids=pos, **cache_argument(net, state.cache),
                  use_cache=True, logits_to_keep=logits_to_keep)
    state.append(q)
    return out.logits


@torch.no_grad()
def generate_with_eviction(net, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None,
                           method: Union[str, Method] = "dense", sparsity: Optional[float] = None,
                           budget_tokens: Optional[int] = None, interval: int = 1, max_new_tokens: int = 0,
                           rerotate: bool = False, reference_continuation: Optional[torch.Tensor] = None,
                           method_params: Optional[dict] = None, rounding: str = "ceil") -> EvictionResult:
    """Prefill `input_ids`, compress the KV cache with `method`, decode `max_new_tokens` tokens.

    Args:
        net: a transformers causal LM (or a LanguageModule whose `.net` is one).
        input_ids: (B, T) context; attention_mask: (B, T), left padding only (None = no padding).
        method: registry name (methods.METHODS) or a Method; method_params: its parameters.
        sparsity: fraction evicted, in [0, 1): each compression keeps (1 - sparsity) * n slots, n = the
            row's tokens seen so far, rounded by `rounding` ("ceil" or "floor", cache.budget).
            budget_tokens: keep a fixed number of tokens instead (<= the context length). Exactly one of
            the two (neither: dense).
        interval: re-compress every `interval` decoding steps (0: only after the prefill).
        max_new_tokens: tokens to decode greedily (ignored when `reference_continuation` is given).
        rerotate: re-rotate kept keys to contiguous positions after each compression.
        reference_continuation: (B, N) tokens to teacher-force; their per-token NLL is returned.
    """
    net = resolve_network(net)
    method = make_method(method, **(method_params or {}))
    attention_mask = _check_inputs(input_ids, attention_mask)
    sparsity = check_budget(method, sparsity, budget_tokens)
    check_rounding(rounding)
    context = int(attention_mask.sum(-1).max())
    if budget_tokens is not None:
        if budget_tokens > context:
            raise ConfigError(f"--sparsity.budget_tokens {budget_tokens} is larger than the context ({context} "
                              "tokens); lower it or use a longer context")
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0:
        raise ConfigError(f"--sparsity.interval must be an integer >= 0, got {interval!r}")
    if reference_continuation is not None:
        if reference_continuation.dim() != 2 or reference_continuation.shape[0] != input_ids.shape[0]:
            raise ConfigError(f"reference_continuation must be (batch, N) with batch {input_ids.shape[0]}, "
                              f"got {tuple(reference_continuation.shape)}")
        n_new = reference_continuation.shape[1]
    else:
        n_new = int(max_new_tokens)
    if n_new < 1:
        raise ConfigError("nothing to decode: give max_new_tokens >= 1 or a reference_continuation")
    inv_freq = find_inv_freq(net) if rerotate else None
    if rerotate and inv_freq is None:
        raise ConfigError("--sparsity.rerotate needs a RoPE model; this one has no rotary embedding")

    was_training = net.training
    net.eval()
    start = time.perf_counter()
    device = next(net.parameters()).device
    input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
    recorder = AttentionRecorder.for_method(method)
    try:
        state, logits = prefill(net, input_ids, attention_mask, recorder)
        per_token = state.kv_bytes() // max(1, state.length)
        B = input_ids.shape[0]
        tokens = torch.empty(B, n_new, dtype=torch.long, device=device)
        nll = torch.empty(B, n_new, dtype=torch.float32, device=device)
        cache_lengths, kv_bytes, dense_bytes = [state.length], [state.kv_bytes()], [state.kv_bytes()]
        keep0 = None
        for t in range(n_new):
            logp = F.log_softmax(logits.float(), dim=-1)
            tok = reference_continuation[:, t].to(device) if reference_continuation is not None else logp.argmax(-1)
            tokens[:, t] = tok
            nll[:, t] = -logp.gather(-1, tok[:, None])[:, 0]
            if t == n_new - 1:
                break
            if t == 0 or (interval and t % interval == 0):
                keep = budget(state.seen, sparsity, budget_tokens, rounding) if method.evicts else state.n_valid
                state.compress(method, keep, recorder, rerotate, inv_freq)
                if keep0 is None:
                    keep0 = state.n_valid.clone()
            logits = extend(net, state, tok[:, None], recorder)[:, -1]
            cache_lengths.append(state.length)
            kv_bytes.append(state.kv_bytes())
            dense_bytes.append(per_token * (input_ids.shape[1] + t + 1))
    finally:
        net.train(was_training)
    return EvictionResult(tokens=tokens.cpu(), nll=nll.cpu(), cache_lengths=cache_lengths, kv_bytes=kv_bytes,
                          dense_kv_bytes=dense_bytes,
                          keep=(keep0 if keep0 is not None else attention_mask.sum(-1)).cpu(),
                          context_lengths=attention_mask.sum(-1).cpu(), compressions=state.compressions,
                          method={**method.describe(), "sparsity": sparsity, "budget_tokens": budget_tokens,
                                  "rounding": rounding, "interval": interval, "rerotate": rerotate},
                          seconds=time.perf_counter() - start)
