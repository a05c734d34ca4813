"""The eviction mechanism shared by every method: budget, physical eviction, positions, padding.

`EvictionState` wraps a transformers `DynamicCache` after prefill and keeps, next to it:

- `valid` (B, S): which cache slots hold real tokens. Left padding starts invalid; after an eviction,
  a row that keeps fewer slots than the longest row gets invalid "filler" slots. Because every
  layer and KV head of a row keeps the same number of slots and the kept slots are stored fillers
  first, then in position order, slot validity is the same for every layer and head, so ONE 2D
  attention mask (`valid` + the new tokens) describes the whole compressed cache. Padding is kept
  only as filler, i.e. only when the row has no other token left.
- per layer, `positions` (B, H, S): the true position of the token in each slot (0 = the row's first
  non-padding token) and `rope` (B, H, S): the RoPE position its key is rotated by (== positions
  unless `rerotate`).

Compression (`compress`): per row, `keep = min(budget, valid slots)`; per layer, the method scores the
slots (`methods.Priority`), the top `keep` per (row, KV head) are gathered into NEW, smaller key/value
tensors (the old ones are freed: memory really drops), and the attention statistics are gathered
with the same indices. Kept keys keep their RoPE rotation (original positions) and new tokens get
their true positions; with `rerotate`, kept keys are re-rotated to positions 0..keep-1 (in order) and
new tokens continue from keep.

Budget: `budget(n, sparsity, rounding=...)` keeps (1 - sparsity) * n slots, n = the row's tokens seen so
far (context + generated), so a re-compression keeps the same fraction of everything seen; rounded up
(`ceil`, the default here) or down (`floor`: int(n * (1 - sparsity)) in floats, exactly what kvpress and
most KV-compression libraries keep, one token fewer whenever the product is not whole); at least 1. Or a fixed number of
tokens (`budget_tokens`). Sparsity 0 keeps everything (the compression is then skipped, so it
reproduces dense exactly).
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity.methods import LayerView, Method, Priority


ROUNDINGS = ("ceil", "floor")


def budget(n_seen: torch.Tensor, sparsity: Optional[float] = None, budget_tokens: Optional[int] = None,
           rounding: str = "ceil") -> torch.Tensor:
    """Slots to keep per row (B,): (1 - sparsity) * n_seen rounded by `rounding` (at least 1), or
    `budget_tokens`; capped at n_seen. Under "ceil" a 1e-9 keeps float fuzz (0.3 * 10 = 3.0000000000000004)
    from moving a whole product up by one; "floor" is kvpress's int(n * (1 - ratio)) to the bit, fuzz
    included ((1 - 0.9) * 100 = 9.999999999999998 keeps 9), so its counts match kvpress's everywhere."""
    if (sparsity is None) == (budget_tokens is None):
        raise ConfigError("give exactly one of sparsity (a ratio in [0, 1)) and budget_tokens (a token count)")
    if sparsity is not None:
        check_sparsity(sparsity)
        round_to_int = math.ceil if check_rounding(rounding) == "ceil" else math.floor
        fuzz = -1e-9 if rounding == "ceil" else 0.0
        keep = [max(1, round_to_int((1.0 - sparsity) * int(n) + fuzz)) if n > 0 else 0 for n in n_seen.tolist()]
        return torch.tensor(keep, dtype=torch.long, device=n_seen.device).minimum(n_seen)
    return torch.full_like(n_seen, int(budget_tokens)).minimum(n_seen)


def check_rounding(rounding: str) -> str:
    if rounding not in ROUNDINGS:
        raise ConfigError(f"--sparsity.rounding must be one of {', '.join(ROUNDINGS)} (how the budget (1 - ratio) * n "
                          f"is rounded), got {rounding!r}")
    return rounding


def check_sparsity(sparsity: float) -> float:
    if isinstance(sparsity, bool) or not isinstance(sparsity, (int, float)) or not 0.0 <= sparsity < 1.0:
        raise ConfigError(f"--sparsity.ratio must be in [0, 1) (the fraction of the KV cache evicted), got {sparsity}")
    return float(sparsity)


def check_cache(cache) -> None:
    """Only plain (full-attention) DynamicLayers can be evicted physically."""
    from transformers.cache_utils import DynamicLayer

    from lightning_bench.sparsity.growing_layer import GrowingLayer

    for i, layer in enumerate(getattr(cache, "layers", [])):
        if type(layer) not in (DynamicLayer, GrowingLayer):
            raise ConfigError(f"KV-cache eviction supports full-attention dynamic caches only; layer {i} of this "
                              f"model caches with {type(layer).__name__}")


def rerotate_keys(keys: torch.Tensor, delta: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """Rotate RoPE keys (B, H, S, D) by `delta` (B, H, S) positions: R(p + delta) k = R(delta) R(p) k.

    Llama-style rotate-half RoPE on the first 2 * len(inv_freq) dimensions (partial rotary allowed)."""
    rot = 2 * inv_freq.shape[0]
    freqs = delta.to(torch.float32)[..., None] * inv_freq.to(device=keys.device, dtype=torch.float32)
    emb = torch.cat((freqs, freqs), dim=-1)
    k = keys[..., :rot].float()
    rotated_half = torch.cat((-k[..., rot // 2:], k[..., :rot // 2]), dim=-1)
    out = (k * emb.cos() + rotated_half * emb.sin()).to(keys.dtype)
    return out if rot == keys.shape[-1] else torch.cat((out, keys[..., rot:]), dim=-1)


def select_slots(priority: Priority, valid: torch.Tensor, positions: torch.Tensor, keep: torch.Tensor):
    """Indices (B, H, S_new) of the slots to keep and the new validity (B, S_new).

    Per (row, head): the `keep[b]` valid slots of highest (tier, score), stored in position order
    after `S_new - keep[b]` filler slots (S_new = max keep; fillers are marked invalid)."""
    B, H, S = positions.shape
    score = priority.score.float().expand(B, H, S)
    score = torch.nan_to_num(score, nan=float("-inf")).masked_fill(~valid[:, None, :], float("-inf"))
    tier = priority.tier
    tier = torch.zeros((B, H, S), dtype=torch.long, device=score.device) if tier is None \
        else tier.long().expand(B, H, S)
    tier = tier.masked_fill(~valid[:, None, :], -1)
    order = torch.argsort(score, dim=-1, descending=True, stable=True)
    order = order.gather(-1, torch.argsort(tier.gather(-1, order), dim=-1, descending=True, stable=True))
    S_new = int(keep.max())
    chosen = order[..., :S_new]
    kept = torch.arange(S_new, device=score.device)[None, None, :] < keep[:, None, None]
    sort_key = positions.gather(-1, chosen).masked_fill(~kept, -1)
    index = chosen.gather(-1, torch.argsort(sort_key, dim=-1, stable=True))
    new_valid = torch.arange(S_new, device=score.device)[None, :] >= (S_new - keep)[:, None]
    return index, new_valid


class EvictionState:
    """A DynamicCache after prefill plus the bookkeeping that eviction needs (see module docstring).

    Args:
        cache: the DynamicCache the prefill filled.
        attention_mask: (B, T) prefill mask (1 = token, 0 = left padding).
        positions: (B, T) position ids the prefill used (true positions of the tokens).
        group_size: query heads per KV head.
    """

    def __init__(self, cache, attention_mask: torch.Tensor, positions: torch.Tensor, group_size: int = 1):
        check_cache(cache)
        self.cache = cache
        self.valid = attention_mask.bool().clone()
        self.group_size = group_size
        self.positions, self.rope = [], []
        for layer in cache.layers:
            B, H, S, _ = layer.keys.shape
            if S != self.valid.shape[1]:
                raise ValueError(f"the cache holds {S} slots but the mask {self.valid.shape[1]}")
            pos = positions.to(layer.keys.device).long()[:, None, :].expand(B, H, S).contiguous()
            self.positions.append(pos)
            self.rope.append(pos)
        self.seen = self.valid.sum(-1)  # real tokens seen per row == the next token's true position
        self.next_rope = self.seen.clone()  # RoPE position of the next token
        self.compressions = 0

    # ---- inspection -------------------------------------------------------------------------
    @property
    def length(self) -> int:
        return self.valid.shape[1]

    @property
    def n_valid(self) -> torch.Tensor:
        return self.valid.sum(-1)

    def kv_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for layer in self.cache.layers for t in (layer.keys, layer.values))

    def layer_shapes(self) -> list[tuple[int, ...]]:
        return [tuple(layer.keys.shape) for layer in self.cache.layers]

    # ---- decoding -----------------------------------------------------------------------------
    def next_inputs(self, q: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        """(attention_mask (B, S + q), position_ids (B, q)) for the next q tokens of every row."""
        ones = torch.ones(self.valid.shape[0], q, dtype=self.valid.dtype, device=self.valid.device)
        steps = torch.arange(q, device=self.valid.device)[None, :]
        return torch.cat([self.valid, ones], dim=1).long(), self.next_rope[:, None] + steps

    def append(self, q: int = 1) -> None:
        """Record that the last forward appended q tokens (positions from `next_inputs`)."""
        B = self.valid.shape[0]
        steps = torch.arange(q, device=self.valid.device)[None, :]
        true_pos, rope_pos = self.seen[:, None] + steps, self.next_rope[:, None] + steps
        self.valid = torch.cat([self.valid, torch.ones(B, q, dtype=torch.bool, device=self.valid.device)], dim=1)
        for i, layer in enumerate(self.cache.layers):
            H = layer.keys.shape[1]
            if layer.keys.shape[2] != self.valid.shape[1]:
                raise RuntimeError(f"layer {i} holds {layer.keys.shape[2]} slots, expected {self.valid.shape[1]}")
            shared = self.rope[i] is self.positions[i]
            new_true = true_pos.to(layer.keys.device)[:, None].expand(B, H, q)
            self.positions[i] = torch.cat([self.positions[i], new_true], -1)
            self.rope[i] = self.positions[i] if shared else \
                torch.cat([self.rope[i], rope_pos.to(layer.keys.device)[:, None].expand(B, H, q)], -1)
        self.seen = self.seen + q
        self.next_rope = self.next_rope + q

    # ---- eviction ----------------------------------------------------------------------------
    def compress(self, method: Method, keep_budget: torch.Tensor, recorder=None, rerotate: bool = False,
                 inv_freq: Optional[torch.Tensor] = None) -> bool:
        """Evict down to `keep_budget` (B,) slots per row; returns False when nothing had to go."""
        if not method.evicts:
            return False
        n_valid = self.n_valid
        keep = keep_budget.to(n_valid.device).minimum(n_valid)
        S_new = int(keep.max())
        if S_new == self.length and bool((keep == n_valid).all()):
            return False  # identity: every slot stays where it is
        if rerotate and inv_freq is None:
            raise ConfigError("rerotate needs a RoPE model (no rotary embedding with inv_freq found)")
        new_valid = None
        for i, layer in enumerate(self.cache.layers):
            stats = recorder.stats(i) if recorder is not None else {}
            view = LayerView(layer_idx=i, keys=layer.keys, values=layer.values, positions=self.positions[i],
                             valid=self.valid, keep=keep, group_size=self.group_size, stats=stats, seen=self.seen)
            index, new_valid = select_slots(method.priority(view), self.valid, self.positions[i], keep)
            D = layer.keys.shape[-1]
            gather = index[..., None].expand(-1, -1, -1, D)
            keys = layer.keys.gather(2, gather)
            layer.values = layer.values.gather(2, index[..., None].expand(-1, -1, -1, layer.values.shape[-1]))
            shared = self.rope[i] is self.positions[i]
            positions = self.positions[i].gather(-1, index)
            rope = positions if shared else self.rope[i].gather(-1, index)
            if rerotate:
                target = (torch.arange(S_new, device=keys.device)[None, None, :] - (S_new - keep)[:, None, None])
                target = target.clamp(min=0)
                keys = rerotate_keys(keys, target - rope, inv_freq)
                rope = target.expand_as(rope).contiguous()
            layer.keys = keys
            self.positions[i], self.rope[i] = positions, rope
            if recorder is not None:
                recorder.gather(i, index)
        self.valid = new_valid
        if rerotate:
            self.next_rope = keep.clone()
        self.compressions += 1
        return True
