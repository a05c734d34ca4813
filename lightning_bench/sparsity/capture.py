"""Attention statistics for the eviction scores, from an attention function registered with transformers.

`lb_capture` is registered in transformers' `AttentionInterface` (and a matching entry in its
`AttentionMaskInterface`). While `capturing(net, recorder)` is active the model runs with
`config._attn_implementation = "lb_capture"`; the function computes its output with the
implementation the model was loaded with (eager, sdpa, flash, ...), so outputs and logits are exactly
those of an uncaptured run, and additionally computes the softmax attention probabilities (float32)
of the query rows the method needs. After the block the original implementation is restored. Nothing
here depends on eager-only model code or `output_attentions`.

Each method DECLARES the statistic it needs (`Needs`, methods.py), and the recorder computes only
that, so a method pays only for what it reads:

- nothing (knorm, streaming_llm, random, local_strided, cab_v4): no recorder, the model runs its own
  fast attention untouched;
- ``window`` (B, Hq, W, S): the attention rows of the last W queries, per QUERY head (snapkv: its
  observation window; tova: W = 1, the last query). Only those W rows are computed (as kvpress and the
  SnapKV reference code do), so the cost is W / q of a full attention map;
- ``cum`` (B, Hkv, S): attention received by each key, summed over every (non-padding) query seen so
  far and over the query heads of the key's KV group (h2o, cab). Every row is needed here; the rows
  are computed in query chunks, each over the keys it can see (causal: about half the full square);
- ``frc`` (B, Hkv, S): 2-hop attention received, R_j = sum_k c_k A_kj, with A the group-mean attention
  graph of the call and c its column sums (cab_v3). It comes from the SAME pass as ``cum``: the chunks
  are visited from the last query to the first, and since a query only sees earlier keys, c_k is
  complete once the chunk holding query k has been added, just before its rows A_k are needed.
  Accumulated over calls of more than one query only (prefill, chunks); decoded tokens add to cum.

The queries of a call are the last q positions of the keys and attend causally (every call prefill /
extend make); a mask may only hide padding keys besides. Statistics are aligned with the KV-cache slots
(last dimension S); the eviction mechanism (cache.py) gathers them with the same indices as the cache.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from dataclasses import dataclass
from typing import Optional

import torch

from lightning_bench.errors import ConfigError

CAPTURE_NAME = "lb_capture"
# float32 scores of one chunk of query rows (32 MiB): a chunk computes the keys up to its last row, so smaller
# chunks waste less of the causal triangle (~ chunk / 2 rows each), larger ones run fewer, bigger kernels
CHUNK_ELEMENTS = 1 << 23

# (recorder, inner attention implementation, masker stack) of the innermost active `capturing` block
_ACTIVE: list[tuple] = []


@dataclass(frozen=True)
class Needs:
    """The attention statistic a method reads; the recorder computes only that (see the module docstring).

    window: query rows kept in ``window`` (0 = none); cumulative: ``cum``; two_hop: ``frc`` (and ``cum``)."""

    window: int = 0
    cumulative: bool = False
    two_hop: bool = False

    def __bool__(self) -> bool:
        return bool(self.window or self.cumulative or self.two_hop)

    def names(self) -> tuple[str, ...]:
        return tuple(n for n, on in (("window", self.window), ("cum", self.cumulative or self.two_hop),
                                     ("frc", self.two_hop)) if on)


class AttentionRecorder:
    """Per-layer attention statistics for `needs` (a `Needs`).

    Set `query_valid` (B, q) bool before a forward whose queries include padding: padding queries
    contribute nothing.
    """

    def __init__(self, needs: Needs):
        if not isinstance(needs, Needs):
            raise TypeError(f"AttentionRecorder takes a Needs, got {needs!r}")
        if needs.window < 0:
            raise ValueError(f"Needs.window counts query rows: >= 0, got {needs.window}")
        self.needs = needs
        self.layers: dict[int, dict[str, torch.Tensor]] = {}
        self.query_valid: Optional[torch.Tensor] = None

    @classmethod
    def for_method(cls, method) -> Optional["AttentionRecorder"]:
        """The recorder `method` needs, or None for a method that reads no attention (no capture at all)."""
        return cls(method.needs) if method.needs else None

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for stats in self.layers.values() for t in stats.values())

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
        old = self.layers.get(layer_idx, {})
        S_old = next(iter(old.values())).shape[-1] if old else 0
        if S_old != S - q:
            raise RuntimeError(f"layer {layer_idx}: statistics describe {S_old} cache slots but the cache has "
                               f"{S - q} before this call; evict through EvictionState so both stay aligned")
        scale = D ** -0.5 if scaling is None else scaling
        qvalid = self.query_valid
        if qvalid is not None:
            qvalid = qvalid[:, -q:].to(device=query.device, dtype=torch.bool)
            qvalid = None if bool(qvalid.all()) else qvalid
        attention = _Attention(query, key, attention_mask, scale, softcap, qvalid)
        new: dict[str, torch.Tensor] = {}
        if self.needs.window:
            new["window"] = self._window(attention, old.get("window"), S)
        if self.needs.cumulative or self.needs.two_hop:
            two_hop = self.needs.two_hop and q > 1
            cum, frc = attention.received(two_hop)
            prev = old.get("cum")
            new["cum"] = cum if prev is None else _pad_slots(prev, S) + cum
            if self.needs.two_hop:
                prev = old.get("frc")
                prev = torch.zeros_like(cum) if prev is None else _pad_slots(prev, S)
                new["frc"] = prev + frc if frc is not None else prev
        self.layers[layer_idx] = new

    def _window(self, attention: "_Attention", prev: Optional[torch.Tensor], S: int) -> torch.Tensor:
        """The last `needs.window` query rows, (B, Hq, W, S): this call's last rows after the earlier ones."""
        W, q = self.needs.window, attention.q
        lo = max(0, q - W)
        B, Hq = attention.query.shape[:2]
        rows = attention.probabilities(lo, q).reshape(B, Hq, q - lo, S)  # the last row sees every key
        if prev is not None and q < W:
            rows = torch.cat([_pad_slots(prev, S)[:, :, -(W - (q - lo)):], rows], dim=2)
        return rows.contiguous()

    def gather(self, layer_idx: int, index: torch.Tensor) -> None:
        """Keep the slots `index` (B, Hkv, S_new) of every statistic of `layer_idx` (cache compression)."""
        stats = self.layers.get(layer_idx, {})
        for name, value in stats.items():
            idx = index.to(value.device)
            if value.shape[1] != idx.shape[1]:  # per query head: the query heads of a group share its KV head
                idx = idx.repeat_interleave(value.shape[1] // idx.shape[1], dim=1)
            if value.dim() == 4:
                idx = idx.unsqueeze(2).expand(-1, -1, value.shape[2], -1)
            stats[name] = value.gather(-1, idx)

    def stats(self, layer_idx: int) -> dict[str, torch.Tensor]:
        return self.layers.get(layer_idx, {})


class RecorderFanOut:
    """Several recorders fed by one forward (a prefill shared by methods with different `Needs`): each
    observes the same calls it would observe alone, so each holds exactly its own statistics."""

    def __init__(self, recorders):
        self.recorders = list(recorders)
        self.query_valid: Optional[torch.Tensor] = None  # handed to each recorder for the call it observes

    def observe(self, *args, **kwargs) -> None:
        for recorder in self.recorders:
            recorder.query_valid = self.query_valid
            recorder.observe(*args, **kwargs)
            recorder.query_valid = None


def _pad_slots(value: torch.Tensor, S: int) -> torch.Tensor:
    return value if value.shape[-1] == S else torch.nn.functional.pad(value, (0, S - value.shape[-1]))


class _Attention:
    """Softmax attention probabilities (float32) of one call, row range by row range, each row over the keys
    it can see: query row i (0..q-1) sits at key position S - q + i and sees keys [0, S - q + i], minus the
    padding keys of `attention_mask`."""

    def __init__(self, query, key, attention_mask, scale: float, softcap, qvalid):
        B, Hq, self.q, D = query.shape
        self.Hkv, self.S = key.shape[1], key.shape[2]
        self.G = Hq // self.Hkv
        self.query = query
        # the scale is folded into the queries: q * D multiplications instead of q * S
        self.qg = (query.float() * scale).reshape(B, self.Hkv, self.G, self.q, D)
        self.keys_t = key.float().transpose(-1, -2)  # (B, Hkv, D, S)
        self.hidden = _hidden_keys(attention_mask, B, self.Hkv, self.G, self.S, query.device)
        self.softcap, self.qvalid = softcap, qvalid

    def probabilities(self, lo: int, hi: int, zero_padding_rows: bool = True) -> torch.Tensor:
        """(B, Hkv, G, hi - lo, end) for query rows lo:hi over keys [0, end), end = S - q + hi. Fully masked
        rows are zero, and so are the rows of padding queries unless `zero_padding_rows` is False."""
        B, Hkv, G, _, D = self.qg.shape
        c, end = hi - lo, self.S - self.q + hi
        rows = self.qg[:, :, :, lo:hi].reshape(B, Hkv, G * c, D)
        scores = torch.matmul(rows, self.keys_t[..., :end]).view(B, Hkv, G, c, end)
        if self.softcap is not None:
            scores = torch.tanh(scores / self.softcap) * self.softcap
        # causality hides only the chunk's own keys (the last c columns) above the diagonal
        above = torch.ones(c, c, dtype=torch.bool, device=scores.device).triu_(1)
        scores[..., end - c:].masked_fill_(above, float("-inf"))
        if self.hidden is not None:
            scores.masked_fill_(self.hidden[..., :end], float("-inf"))
        # fp32 statistics whatever the model's dtype (bf16 under --bits 16), as eager attention's softmax
        probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
        if self.hidden is not None:
            probs.nan_to_num_(0.0)  # a padding query may see nothing but padding
        if zero_padding_rows and self.qvalid is not None:
            probs.mul_(self.qvalid[:, None, None, lo:hi, None])
        return probs

    def received(self, two_hop: bool) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """(cum, frc) of this call, (B, Hkv, S) each (frc None unless two_hop), from ONE pass over the rows.

        Both are weighted column sums of the probabilities, so each chunk is reduced by one matrix product
        (rows weighted by 1 for cum and by c_i / G^2 for frc) instead of sums over strided dimensions."""
        B, Hkv, G, q, S = *self.qg.shape[:4], self.S
        cum = torch.zeros(B, Hkv, S, dtype=torch.float32, device=self.qg.device)
        frc = torch.zeros_like(cum) if two_hop else None
        step = max(1, CHUNK_ELEMENTS // max(1, B * Hkv * G * S))
        starts = range(0, q, step)
        for lo in reversed(starts) if two_hop else starts:  # last rows first: see the module docstring
            hi = min(q, lo + step)
            c, end = hi - lo, S - q + hi
            probs = self.probabilities(lo, hi, zero_padding_rows=False).view(B, Hkv, G * c, end)
            counted = torch.ones(B, 1, c, dtype=torch.float32, device=cum.device) if self.qvalid is None \
                else self.qvalid[:, None, lo:hi].float()  # padding queries weigh 0
            counted = counted.expand(B, Hkv, c).repeat(1, 1, G)  # rows are (query head, query) pairs
            if not two_hop:
                cum[..., :end] += torch.matmul(counted.unsqueeze(-2), probs).squeeze(-2)
                continue
            # column sums at this chunk's own tokens are complete once its own rows are added (causality)
            own = cum[..., end - c:end] + torch.matmul(counted.unsqueeze(-2), probs[..., end - c:]).squeeze(-2)
            weights = torch.stack([counted, counted * (own / G ** 2).repeat(1, 1, G)], dim=-2)  # (B, Hkv, 2, Gc)
            both = torch.matmul(weights, probs)  # (B, Hkv, 2, end)
            cum[..., :end] += both[:, :, 0]
            frc[..., :end] += both[:, :, 1]
        return cum, frc


def _hidden_keys(attention_mask, B: int, Hkv: int, G: int, S: int, device) -> Optional[torch.Tensor]:
    """(B, Hkv | 1, G | 1, 1, S) bool, True at the padding keys `attention_mask` hides, or None when it hides
    none beyond causality.

    Accepts every mask form transformers hands an attention function: None (causal), a 4D bool mask
    (True = attend), a 4D additive float mask (entries at the dtype's minimum count as masked) or a 2D
    key-padding mask (flash-attention style). With full attention (the only caches eviction supports) a
    mask is causality plus key padding, so its last row, the query that sees every key, holds the padding."""
    if attention_mask is None:
        return None
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"lb_capture cannot read a {type(attention_mask).__name__} attention mask (flex attention); "
                        "load the model with sdpa or eager attention")
    mask = attention_mask.to(device)
    if mask.dim() == 2:  # (B, S) key padding, 1 = keep
        allowed = mask[:, None, None, None, :S].bool()
    else:  # (B | 1, Hq | 1, rows, S)
        last = mask[:, :, -1:, :S]
        allowed = last if last.dtype == torch.bool else last > torch.finfo(last.dtype).min / 2
        heads = allowed.shape[1]
        allowed = allowed.reshape(allowed.shape[0], Hkv, G, 1, S) if heads == Hkv * G and heads > 1 \
            else allowed.unsqueeze(2)
    if bool(allowed.all()):
        return None
    return ~allowed.expand(B, *allowed.shape[1:])


# ---- the registered attention function ----------------------------------------------------
def _inner_function(module, inner: str):
    """The attention function the model was loaded with: eager is each model file's own function (not in
    transformers' AttentionInterface); a module without one falls back to sdpa, the same mathematics."""
    if inner == "eager":
        fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
        if fn is not None:
            return fn
        inner = "sdpa"
    from transformers import AttentionInterface

    return AttentionInterface()[inner]


def capture_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """The `lb_capture` attention function: the original implementation's output (or a masker stack's, which
    starts from it: masking.stack), plus statistics."""
    recorder, inner, masking = _ACTIVE[-1] if _ACTIVE else (None, "sdpa", None)
    out = _inner_function(module, inner)(module, query, key, value, attention_mask, dropout=dropout,
                                         scaling=scaling, **kwargs)
    if masking is not None and masking.applies(module.layer_idx):
        out = (masking.attend(module.layer_idx, query, key, value, attention_mask, scaling, kwargs.get("softcap"),
                              out[0]), None)
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


@functools.cache
def register() -> str:
    """Register `lb_capture` with transformers (once); returns its name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(CAPTURE_NAME, capture_attention)
    AttentionMaskInterface.register(CAPTURE_NAME, _capture_mask)
    return CAPTURE_NAME


def _supported_inner(name: Optional[str]) -> str:
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    supported = name not in (None, CAPTURE_NAME, "flex_attention") and name in ALL_MASK_ATTENTION_FUNCTIONS
    return name if supported else "sdpa"  # sdpa: the same mathematics; flex's BlockMask cannot be read back


def sliding_window(config) -> bool:
    """Whether some layer of `config` attends through a sliding window (Mistral, Qwen2 with use_sliding_window,
    Gemma 2/3's sliding layers)."""
    if "sliding_attention" in (getattr(config, "layer_types", None) or ()):
        return True
    return bool(getattr(config, "sliding_window", None)) and bool(getattr(config, "use_sliding_window", True))


def _set_implementation(net, name: str) -> None:
    if hasattr(net, "set_attn_implementation"):
        net.set_attn_implementation(name)
    else:
        net.config._attn_implementation = name


@contextlib.contextmanager
def capturing(net, recorder: Optional[AttentionRecorder], masking=None):
    """Run `net` (a transformers PreTrainedModel) with `lb_capture` feeding `recorder` and attending through
    `masking` (a masking.MaskerStack); restore after.

    With both None this is a no-op, so callers can write `with capturing(net, maybe_recorder):`.
    """
    if recorder is None and masking is None:
        yield net
        return
    register()
    if masking is not None and sliding_window(net.config):
        raise ConfigError(f"{type(net).__name__} has sliding-window attention layers: a masker stack reads each row's "
                          "visible keys from the mask's last query row, which a window hides from the others; use a "
                          "model with full attention")
    original = net.config._attn_implementation
    inner = _ACTIVE[-1][1] if original == CAPTURE_NAME and _ACTIVE else _supported_inner(original)
    _ACTIVE.append((recorder, inner, masking))
    try:
        _set_implementation(net, CAPTURE_NAME)
        if net.config._attn_implementation != CAPTURE_NAME:
            raise ConfigError(f"{type(net).__name__} cannot switch its attention implementation (transformers' "
                              "AttentionInterface), so attention-based sparsity methods cannot score it")
        yield net
    finally:
        _ACTIVE.pop()
        _set_implementation(net, original)
