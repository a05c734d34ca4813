"""Attention statistics for the eviction scores, from an attention function registered with transformers.

`lb_capture` is registered in transformers' `AttentionInterface` (and a matching entry in its
`AttentionMaskInterface`). While `capturing(net, recorder)` is active the model runs with
`config._attn_implementation = "lb_capture"`; the function computes its output with the
implementation the model was loaded with (eager, sdpa, flash, ...), so outputs and logits are exactly
those of an uncaptured run, and additionally computes the softmax attention probabilities (float32,
in query chunks so memory stays bounded) to update per-layer statistics. After the block the original
implementation is restored. Nothing here depends on eager-only model code or `output_attentions`.

Statistics, per layer, aligned with the KV-cache slots (last dimension = cache length S), per KV head
(GQA: the query heads of a KV group are combined):

- ``cum``     (B, Hkv, S): attention received by each key, summed over every (non-padding) query
                           seen so far and over the query heads of the key's KV group (H2O).
- ``window``  (B, Hkv, W, S): attention rows of the last W queries, summed over the group's heads
                           (SnapKV's observation window; TOVA uses the last row).
- ``frc``     (B, Hkv, S): 2-hop attention received, R_j = sum_k c_k A_kj, with A the group-mean
                           attention graph and c its column sums (the redundancy term of cab_v3).
                           Accumulated for calls with more than one query (prefill / chunks) only.

The eviction mechanism (cache.py) gathers these along S with the same indices as the cache.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterable, Optional

import torch

CAPTURE_NAME = "lb_capture"
STAT_NAMES = ("cum", "window", "frc")
_CHUNK_ELEMENTS = 1 << 24  # float32 elements of one chunk of attention probabilities (64 MiB)

# (recorder, inner attention implementation) of the innermost active `capturing` block
_ACTIVE: list[tuple["AttentionRecorder", str]] = []


class AttentionRecorder:
    """Per-layer attention statistics for the stats in `needs` (a subset of STAT_NAMES).

    Args:
        needs: which statistics to keep.
        window: number of most recent query rows kept in ``window`` (>= 1 when "window" is needed).
    Set `query_valid` (B, q) bool before a forward whose queries include padding: padding queries
    contribute nothing.
    """

    def __init__(self, needs: Iterable[str], window: int = 0):
        self.needs = frozenset(needs)
        unknown = self.needs - set(STAT_NAMES)
        if unknown:
            raise ValueError(f"unknown statistics {sorted(unknown)}; valid: {', '.join(STAT_NAMES)}")
        self.window = int(window)
        if "window" in self.needs and self.window < 1:
            raise ValueError("the window statistic needs window >= 1")
        self.layers: dict[int, dict[str, torch.Tensor]] = {}
        self.query_valid: Optional[torch.Tensor] = None

    def reset(self) -> None:
        self.layers.clear()
        self.query_valid = None

    def length(self, layer_idx: int) -> int:
        stats = self.layers.get(layer_idx)
        if not stats:
            return 0
        return next(iter(stats.values())).shape[-1]

    # ---- updates ------------------------------------------------------------------------
    def observe(self, layer_idx: int, query: torch.Tensor, key: torch.Tensor, attention_mask,
                scaling: Optional[float], softcap: Optional[float] = None) -> None:
        """Add the attention of `query` (B, Hq, q, D) over `key` (B, Hkv, S, D) under `attention_mask`.

        The last q keys are the ones this call appended to the cache; the first S - q must be the
        slots the statistics already describe.
        """
        B, Hq, q, D = query.shape
        Hkv, S = key.shape[1], key.shape[2]
        if Hq % Hkv:
            raise ValueError(f"{Hq} query heads cannot be grouped over {Hkv} KV heads")
        G = Hq // Hkv
        old = self.layers.get(layer_idx, {})
        S_old = self.length(layer_idx) if old else 0
        if S_old != S - q:
            raise RuntimeError(f"layer {layer_idx}: statistics describe {S_old} cache slots but the cache has "
                               f"{S - q} before this call; evict through EvictionState so both stay aligned")
        scale = query.shape[-1] ** -0.5 if scaling is None else scaling
        qvalid = self.query_valid
        if qvalid is not None:
            qvalid = qvalid[:, -q:].to(device=query.device, dtype=torch.bool)

        new: dict[str, torch.Tensor] = {}
        cum_call = torch.zeros(B, Hkv, S, dtype=torch.float32, device=query.device)
        rows = []  # the last `window` query rows of this call
        keep_rows = self.window if "window" in self.needs else 0
        for lo, hi, probs in _probability_chunks(query, key, attention_mask, scale, softcap, qvalid):
            grouped = probs.sum(2)  # (B, Hkv, c, S): summed over the group's query heads
            cum_call += grouped.sum(2)
            if keep_rows and hi > q - keep_rows:
                rows.append(grouped[:, :, max(0, q - keep_rows - lo):])
        if "cum" in self.needs or "frc" in self.needs:
            prev = old.get("cum")
            new["cum"] = cum_call if prev is None else _pad_slots(prev, S) + cum_call
        if keep_rows:
            prev = old.get("window")
            window = torch.cat(rows, dim=2)
            if prev is not None:
                window = torch.cat([_pad_slots(prev, S), window], dim=2)
            new["window"] = window[:, :, -keep_rows:].contiguous()
        if "frc" in self.needs:
            prev = old.get("frc")
            frc = torch.zeros(B, Hkv, S, dtype=torch.float32, device=query.device) if prev is None \
                else _pad_slots(prev, S)
            if q > 1:
                c_mean = new["cum"][:, :, S - q:] / G  # column sums of the group-mean graph at the call's tokens
                for lo, hi, probs in _probability_chunks(query, key, attention_mask, scale, softcap, qvalid):
                    graph = probs.mean(2)  # (B, Hkv, c, S): group-mean attention graph
                    frc += torch.einsum("bhc,bhcs->bhs", c_mean[:, :, lo:hi], graph)
            new["frc"] = frc
        self.layers[layer_idx] = {k: v for k, v in new.items() if k in self.needs}

    def gather(self, layer_idx: int, index: torch.Tensor) -> None:
        """Keep the slots `index` (B, Hkv, S_new) of every statistic of `layer_idx` (cache compression)."""
        stats = self.layers.get(layer_idx)
        if not stats:
            return
        for name, value in stats.items():
            idx = index.to(value.device)
            if value.dim() == 4:
                idx = idx.unsqueeze(2).expand(-1, -1, value.shape[2], -1)
            stats[name] = value.gather(-1, idx)

    def stats(self, layer_idx: int) -> dict[str, torch.Tensor]:
        return self.layers.get(layer_idx, {})


def _pad_slots(value: torch.Tensor, S: int) -> torch.Tensor:
    extra = S - value.shape[-1]
    if extra == 0:
        return value
    return torch.nn.functional.pad(value, (0, extra))


def _mask_bias(attention_mask, B: int, q: int, S: int, lo: int, hi: int, device) -> Optional[torch.Tensor]:
    """Additive float32 bias for query rows lo:hi, shape (B, 1 | Hq, hi - lo, S); -inf where masked.

    Accepts every mask form transformers hands an attention function: None (causal, queries aligned
    to the end of the keys), a 4D bool mask (True = attend), a 4D additive float mask (entries at the
    dtype's minimum count as masked) or a 2D key-padding mask (flash-attention style, plus causality).
    """
    rows = torch.arange(lo, hi, device=device) + (S - q)
    causal = torch.arange(S, device=device)[None, :] <= rows[:, None]  # (c, S)
    if attention_mask is None:
        allowed = causal[None, None]
        return torch.zeros(allowed.shape, device=device).masked_fill(~allowed, float("-inf"))
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"lb_capture cannot read a {type(attention_mask).__name__} attention mask (flex attention); "
                        "load the model with sdpa or eager attention")
    mask = attention_mask.to(device)
    if mask.dim() == 2:  # (B, S) key padding, 1 = keep
        allowed = mask.bool()[:, None, None, :S] & causal[None, None]
        return torch.zeros(allowed.shape, device=device).masked_fill(~allowed, float("-inf"))
    mask = mask[..., :S]
    if mask.shape[-2] > 1:  # one row per query (a single row broadcasts)
        mask = mask[..., mask.shape[-2] - q + lo: mask.shape[-2] - q + hi, :]
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, device=device).masked_fill(~mask, float("-inf"))
    floor = torch.finfo(mask.dtype).min / 2
    return mask.float().masked_fill(mask <= floor, float("-inf"))


def _probability_chunks(query, key, attention_mask, scale: float, softcap, qvalid):
    """Yield (lo, hi, probs) with probs (B, Hkv, G, hi - lo, S) float32 softmax attention; rows of
    padding queries and fully masked rows are zero."""
    B, Hq, q, D = query.shape
    Hkv, S = key.shape[1], key.shape[2]
    G = Hq // Hkv
    qg = query.reshape(B, Hkv, G, q, D).float()
    kf = key.float()
    step = max(1, _CHUNK_ELEMENTS // max(1, B * Hq * S))
    for lo in range(0, q, step):
        hi = min(q, lo + step)
        scores = torch.einsum("bhgqd,bhsd->bhgqs", qg[:, :, :, lo:hi], kf) * scale
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        bias = _mask_bias(attention_mask, B, q, S, lo, hi, query.device)
        if bias is not None:
            if bias.shape[1] == Hq and Hq > 1:
                bias = bias.reshape(bias.shape[0], Hkv, G, hi - lo, S)
            else:
                bias = bias.unsqueeze(2)
            scores = scores + bias
        probs = torch.softmax(scores, dim=-1).nan_to_num_(0.0)
        if qvalid is not None:
            probs = probs * qvalid[:, None, None, lo:hi, None]
        yield lo, hi, probs


# ---- the registered attention function ----------------------------------------------------
def _inner_function(module, inner: str):
    if inner == "eager":
        fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
        return fn if fn is not None else _eager_attention
    from transformers import AttentionInterface

    return AttentionInterface().get_interface(inner, _eager_attention)


def _eager_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Plain softmax attention (used only when a model module has no eager_attention_forward)."""
    G = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(G, dim=1)
    value = value.repeat_interleave(G, dim=1)
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    weights = torch.matmul(query, key.transpose(2, 3)) * scale
    if attention_mask is not None:
        weights = weights + attention_mask[..., : key.shape[-2]]
    weights = torch.softmax(weights.float(), dim=-1).to(query.dtype)
    out = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return out, weights


def capture_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """The `lb_capture` attention function: the original implementation's output, plus statistics."""
    recorder, inner = _ACTIVE[-1] if _ACTIVE else (None, "sdpa")
    out = _inner_function(module, inner)(module, query, key, value, attention_mask, dropout=dropout,
                                         scaling=scaling, **kwargs)
    if recorder is not None:
        with torch.no_grad():
            recorder.observe(module.layer_idx, query.detach(), key.detach(), attention_mask, scaling,
                             kwargs.get("softcap"))
    return out


def _capture_mask(*args, **kwargs):
    """Mask factory for `lb_capture`: the mask the wrapped implementation expects."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    inner = _ACTIVE[-1][1] if _ACTIVE else "sdpa"
    return ALL_MASK_ATTENTION_FUNCTIONS[inner](*args, **kwargs)


_REGISTERED = False


def register() -> str:
    """Register `lb_capture` with transformers (idempotent); returns its name."""
    global _REGISTERED
    if not _REGISTERED:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface

        AttentionInterface.register(CAPTURE_NAME, capture_attention)
        AttentionMaskInterface.register(CAPTURE_NAME, _capture_mask)
        _REGISTERED = True
    return CAPTURE_NAME


def _supported_inner(name: Optional[str]) -> str:
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    if name in (None, CAPTURE_NAME, "flex_attention") or name not in ALL_MASK_ATTENTION_FUNCTIONS:
        return "sdpa"  # same mathematics; flex's BlockMask cannot be read back
    return name


def _set_implementation(net, name: str) -> None:
    if hasattr(net, "set_attn_implementation"):
        net.set_attn_implementation(name)
    else:
        net.config._attn_implementation = name


@contextlib.contextmanager
def capturing(net, recorder: Optional[AttentionRecorder]):
    """Run `net` (a transformers PreTrainedModel) with `lb_capture` feeding `recorder`; restore after.

    With recorder None this is a no-op, so callers can write `with capturing(net, maybe_recorder):`.
    """
    if recorder is None:
        yield net
        return
    register()
    original = net.config._attn_implementation
    inner = _ACTIVE[-1][1] if original == CAPTURE_NAME and _ACTIVE else _supported_inner(original)
    _ACTIVE.append((recorder, inner))
    try:
        _set_implementation(net, CAPTURE_NAME)
        if net.config._attn_implementation != CAPTURE_NAME:
            from lightning_bench.errors import ConfigError

            raise ConfigError(f"{type(net).__name__} cannot switch its attention implementation (transformers' "
                              "AttentionInterface), so attention-based sparsity methods cannot score it")
        yield net
    finally:
        _ACTIVE.pop()
        _set_implementation(net, original)
