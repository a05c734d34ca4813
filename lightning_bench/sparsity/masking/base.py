"""What every masker sees and returns: a `MaskContext` (one chunk of query rows of one layer's attention call)
and the `Masker` base class.

Shapes, for B batch rows, Hkv KV heads, G query heads per KV head (GQA; query head h = kv * G + g, the order of
transformers' repeat_kv), c query rows of the chunk and S key slots:

- scores      (B, Hkv, G, c, S) float32: scale * q.k (softcapped if the model has one), -inf where not visible
- visible     (B, Hkv|1, G|1, c, S) bool: the keys each query may see (causal, not padding or filler)
- key_rank    (B, 1, 1, 1, S) long: a key's rank among its row's valid slots (its true position when nothing
              was evicted; -1 for padding / filler slots)
- query_rank  (B, 1, 1, c, 1) long: the rank of the query's own slot, so it sees ranks 0..query_rank
- queries     (B, Hkv, G, c, D) float32 post-RoPE, unscaled; keys (B, Hkv, S, D) float32 post-RoPE
- mask        (B, Hkv, G, c, S) float32 in [0, 1]: the entries the maskers before this one added (1 = kept
              for sure, p in (0, 1) = sampled with inclusion probability p)

A masker returns the entries it adds, same shape as `mask`, values in [0, 1] (0 = none); the stack adds them
to `mask` and clamps to [0, 1]. A masker must not add entries outside `visible`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch

from lightning_bench.sparsity.parameters import Parameterised

MASK32 = 0xFFFFFFFF


@dataclass
class MaskContext:
    scores: torch.Tensor
    visible: torch.Tensor
    key_rank: torch.Tensor
    query_rank: torch.Tensor
    queries: torch.Tensor
    keys: torch.Tensor
    mask: torch.Tensor
    layer_idx: int
    seed: int = 0  # the stack's seed: every sampling masker draws from (seed, layer, head, query position, ...)

    @property
    def n_visible(self) -> torch.Tensor:
        """(B, 1, 1, c, 1) long: the keys each query row sees (n_t)."""
        return self.query_rank + 1

    @property
    def free(self) -> torch.Tensor:
        """(B, Hkv, G, c, S) bool: visible keys no earlier masker has kept."""
        return self.visible & (self.mask == 0)

    def size(self, value: Union[int, float], of: Optional[torch.Tensor] = None) -> torch.Tensor:
        """A masker's size per query row, (B, 1, 1, c, 1) long: a float is that fraction of the row's visible keys
        (`of`, default n_t), floored; an int is a token count."""
        if isinstance(value, float):
            total = self.n_visible if of is None else of
            # 1e-9: 0.29 * 100 is 28.999999999999996 in binary floating point; the intended 29 keys are kept
            return torch.floor(total.double() * value + 1e-9).long()
        return torch.full_like(self.query_rank, int(value))

    def head_index(self) -> torch.Tensor:
        """(1, Hkv, G, 1, 1) long: the query head h = kv * G + g of each entry."""
        _, Hkv, G = self.scores.shape[:3]
        return torch.arange(Hkv * G, device=self.scores.device).view(1, Hkv, G, 1, 1)

    def uniform(self, *counters: Union[int, torch.Tensor]) -> torch.Tensor:
        """Uniform floats in [0, 1), a pure function of (stack seed, layer, *counters): counter-based, so the draws
        of a row do not depend on the batch it is in, the chunking of its queries or what ran before. Pass
        tensors that broadcast (e.g. `head_index()`, `query_rank`, a draw index)."""
        return uniform(self.seed, self.layer_idx, *counters, device=self.scores.device)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (the 'lowbias32' finaliser: xor-shift, multiply, xor-shift, multiply, xor-shift),
    kept in int64 with the low 32 bits masked, so it is the same on every device."""
    x = x & MASK32
    x = (x ^ (x >> 16)) * 0x7FEB352D & MASK32
    x = (x ^ (x >> 15)) * 0x846CA68B & MASK32
    return x ^ (x >> 16)


def uniform(*counters: Union[int, torch.Tensor], device=None) -> torch.Tensor:
    """Uniform floats in [0, 1) (float64, 32 random bits) from integer counters that broadcast together."""
    h = torch.zeros((), dtype=torch.int64, device=device)
    for counter in counters:
        counter = torch.as_tensor(counter, dtype=torch.int64, device=device)
        h = _mix(h * 0x9E3779B1 + counter + 0x632BE5AB)
    return _mix(h).double() / 2.0 ** 32


class Masker(Parameterised):
    """Base class: a dataclass whose fields are its parameters (`parameters.param`, with ranges for a tuner); it
    sets `name` and implements `entries`. `sampling` maskers (at most one per stack) add probabilities < 1."""

    name = ""
    sampling = False
    needs_weights: Optional[str] = None  # a learned masker names its weight file here (the extension point)

    def entries(self, ctx: MaskContext) -> torch.Tensor:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"masker": self.name, **self.params()}
