"""KV-cache eviction methods: ONE importance function (plus an always-kept set) each.

Every method sees the same thing, a `LayerView` of one layer's cache (keys, values, true token
positions, slot validity, the number of slots each row keeps, and the attention statistic its
`needs` declares: `capture.Needs`, so the capture computes only that; a method that reads no attention
declares nothing and the model then runs its own attention untouched), and returns a `Priority`: per (batch, KV head, slot) a score (higher
= keep) and optionally an integer tier (a higher tier always wins over a lower one: that is how
sinks / recent windows are "always kept"). The shared mechanism (cache.py) keeps, per row and KV
head, the `keep` slots of highest (tier, score) and physically drops the rest; methods never
touch the cache. So the comparison is apple-to-apple: only the importance function differs.

Budget splits (h2o's recent part, local_strided's window, cab's three parts) are rounded half-up
per row from `keep`, the number of slots that row keeps.

Each method is a dataclass whose fields are its parameters, declared once with `param` (default,
description, valid range or choices): `make_method` checks them, `describe()` records them and
`param_specs()` hands them to a tuner. Scoring never reads anything but the fields and the view.

Names and definitions (`make_method(name, **params)`; `METHODS` lists them):

dense          keeps everything; never compresses.
random         uniform random scores from a seeded generator (`seed`), independent per layer/head.
streaming_llm  the first `n_sink` tokens (attention sinks) + the most recent ones (Xiao et al. 2023).
local_strided  a recent window (`local_ratio` of the budget) + every s-th older token, s chosen so the
               strided part fits the rest of the budget (Child et al. 2019's fixed pattern).
h2o            cumulative attention received (sum over all queries seen so far and the KV group's
               query heads); the budget is split between the most recent tokens (`recent_ratio`,
               default 0.5 as in Zhang et al. 2023's equal heavy/recent budgets) and heavy hitters.
observed_attention  kvpress's ObservedAttentionPress: the attention a key received, summed over the
               queries that saw it and divided by their number (n - position for a row that has seen
               n tokens), averaged over the KV group's query heads; no recent window.
knorm          keeps the keys with the LOWEST L2 norm (Devoto et al. 2024). Cached keys are
               post-RoPE; a rotation does not change a norm.
snapkv         observation window = the last `window` queries (their tokens are always kept). Per QUERY
               head, the attention each older key receives from the window (mean over the window's
               queries), pooled along the key axis (`pooling` avg [default, as the SnapKV reference
               code's SnapKVCluster and kvpress] or max; kernel `kernel`, stride 1, zero-padded: the
               window and padding slots count as 0), then averaged over the KV group's query heads
               (GQA) (Li et al. 2024). Declares the window statistic, `window` rows.
tova           the attention of the LAST query averaged over ALL query heads of the layer; the same
               tokens are evicted from every KV head (Oren et al. 2024; the official TOVACache does
               exactly this). The last token scores its own attention too, as in TOVACache (kvpress
               instead always keeps it). Declares the window statistic with one row. A per-KV-head
               variant is not kept: snapkv(window=1, kernel=1) scores per KV head from the same row.
cab_v3         "pure curvature". The CAB repositories (github.com/Js-Hwang1/FRC-CAB- and
               .../Bridge-Aware-KV-Cache-Eviction-for-Efficient-Long-Context-Transformers,
               kernels/frc_kernel_stable.py, "CAB V3": keep HIGH FRC) define an edge score on the
               (block) attention graph, FRC_ij = A_ij - lambda * (A @ A)_ij / N, with A the row-
               normalised attention, lambda = 0.5. We apply it at token level and turn it into a node
               (key) score by summing over the queries i that attend key j:
                   score_j = sum_i FRC_ij = c_j - lambda * R_j / N,
                   c_j = sum_i A_ij (attention received),   R_j = sum_i (A @ A)_ij = sum_k c_k A_kj,
               with A the attention graph averaged over the KV group's query heads, N the number of
               valid tokens of the row, and the highest scores kept (direct attention minus 2-hop
               redundancy). c is exact over every query seen; R is accumulated over calls with more
               than one query (the prefill), decoded tokens add to c only (R_j of a decoded key is 0):
               an O(S) approximation of our own, the repositories do not define decoding.
cab_v4         alpha * magnitude + (1 - alpha) * uniqueness (alpha 0.5), magnitude = key L2 norm,
               uniqueness = 1 - mean cosine similarity to the row's other valid keys (same KV head),
               each min-max normalised to [0, 1] over the row's valid keys.
cab            30% recent (`local_ratio`) + 50% importance (`importance_ratio`: h2o's cumulative
               attention, among the non-recent keys) + 20% bridges (`bridge_ratio`): our definition
               of a bridge is a key with the highest uniqueness (as in cab_v4) among those not already
               chosen -- a key unlike the others carries information nothing else in the cache does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity.capture import Needs
from lightning_bench.sparsity.parameters import Parameterised, build, param


@dataclass
class LayerView:
    """One layer's cache as a method sees it (B rows, H KV heads, S slots)."""

    layer_idx: int
    keys: torch.Tensor  # (B, H, S, D), post-RoPE as cached
    values: torch.Tensor  # (B, H, S, D)
    positions: torch.Tensor  # (B, H, S) true token positions (0 = the row's first non-padding token)
    valid: torch.Tensor  # (B, S) bool; padding / filler slots are False (same for every head and layer)
    keep: torch.Tensor  # (B,) slots each row keeps after this compression (<= its valid slots)
    group_size: int = 1  # query heads per KV head
    stats: dict = field(default_factory=dict)  # from capture.AttentionRecorder: what the method's `needs` declares
    seen: Optional[torch.Tensor] = None  # (B,) tokens each row has seen (the next token's true position)

    @property
    def n_valid(self) -> torch.Tensor:
        return self.valid.sum(-1)

    @property
    def rank(self) -> torch.Tensor:
        """(B, 1, S) index of each valid slot among the row's valid slots in position order.

        The mechanism keeps slots sorted by position (invalid ones first), so this is the recency
        order of every head at once."""
        return (self.valid.long().cumsum(-1) - 1).masked_fill(~self.valid, -1)[:, None, :]

    def recent(self, count: torch.Tensor) -> torch.Tensor:
        """(B, 1, S) bool: the `count` (B,) most recent valid slots of each row."""
        start = (self.n_valid - count)[:, None, None]
        return self.valid[:, None, :] & (self.rank >= start)

    def oldest(self, count: torch.Tensor) -> torch.Tensor:
        """(B, 1, S) bool: the `count` (B,) oldest valid slots of each row."""
        return self.valid[:, None, :] & (self.rank < count[:, None, None])


class Priority(NamedTuple):
    score: torch.Tensor  # (B, H, S) float, higher = keep
    tier: Optional[torch.Tensor] = None  # (B, H, S) or broadcastable int; higher tier always kept first


def split(keep: torch.Tensor, ratio: float) -> torch.Tensor:
    """round-half-up(ratio * keep), per row."""
    return torch.floor(keep.double() * ratio + 0.5).long().clamp(min=0).minimum(keep)


def _minmax(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Min-max normalise x (B, H, S) to [0, 1] over the valid slots of each (row, head); 0 if constant."""
    v = valid[:, None, :].expand_as(x)
    lo = x.masked_fill(~v, float("inf")).amin(-1, keepdim=True)
    hi = x.masked_fill(~v, float("-inf")).amax(-1, keepdim=True)
    span = hi - lo
    out = (x - lo) / torch.where(span > 0, span, torch.ones_like(span))
    return out.masked_fill(~v | ~(span > 0), 0.0)


def key_uniqueness(keys: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """1 - mean cosine similarity of each key to the OTHER valid keys of its (row, head), (B, H, S).

    O(S D): sum_i cos(k_i, k_j) over i != j = k^_j . (sum_i k^_i) - k^_j . k^_j."""
    v = valid[:, None, :, None].to(torch.float32)
    unit = F.normalize(keys.float(), dim=-1) * v
    total = (unit * unit.sum(2, keepdim=True)).sum(-1) - (unit * unit).sum(-1)
    others = (valid.sum(-1) - 1).clamp(min=1)[:, None, None].to(torch.float32)
    return 1.0 - total / others


def _stat(view: LayerView, name: str, method: str) -> torch.Tensor:
    stat = view.stats.get(name)
    if stat is None:
        raise RuntimeError(f"{method} needs the '{name}' attention statistic for layer {view.layer_idx}; "
                           "run the model under capture.capturing")
    return stat


class Method(Parameterised):
    """Base class: subclasses are dataclasses whose fields are their parameters (declared with `param`);
    they set `name`, declare `needs` and implement `priority`."""

    name = ""
    needs = Needs()  # the attention statistic `priority` reads (capture.Needs); none by default
    evicts = True

    def priority(self, view: LayerView) -> Priority:
        raise NotImplementedError

    def describe(self) -> dict:
        return {"method": self.name, **self.params()}


@dataclass
class Dense(Method):
    name = "dense"
    evicts = False

    def priority(self, view):
        return Priority(torch.zeros(view.keys.shape[:3], device=view.keys.device))


@dataclass
class RandomEviction(Method):
    name = "random"
    seed: int = param(0, "seed of the generator drawing the scores")

    def __post_init__(self):
        super().__post_init__()
        self._generator = torch.Generator().manual_seed(self.seed)

    def priority(self, view):
        score = torch.rand(view.keys.shape[:3], generator=self._generator)
        return Priority(score.to(view.keys.device))


@dataclass
class StreamingLLM(Method):
    name = "streaming_llm"
    n_sink: int = param(4, "first tokens always kept (attention sinks)", low=0)

    def priority(self, view):
        sinks = view.oldest(view.keep.clamp(max=self.n_sink))
        score = view.rank.float().expand(view.keys.shape[:3])
        return Priority(score, sinks.long())


@dataclass
class LocalStrided(Method):
    name = "local_strided"
    local_ratio: float = param(0.5, "share of the budget given to the recent window", low=0.0, high=1.0)

    def priority(self, view):
        window = split(view.keep, self.local_ratio)
        rest = view.keep - window
        older = view.n_valid - window
        stride = torch.where(rest > 0, -(-older // rest.clamp(min=1)), older + 1).clamp(min=1)
        local = view.recent(window)
        strided = view.valid[:, None, :] & ~local & (view.rank % stride[:, None, None] == 0) & (rest > 0)[:, None, None]
        tier = local.long() * 2 + strided.long()
        return Priority(view.rank.float().expand(view.keys.shape[:3]), tier)


@dataclass
class H2O(Method):
    name = "h2o"
    needs = Needs(cumulative=True)
    recent_ratio: float = param(0.5, "share of the budget kept for the most recent tokens (the rest: heavy hitters)",
                                low=0.0, high=1.0)

    def priority(self, view):
        recent = view.recent(split(view.keep, self.recent_ratio))
        return Priority(_stat(view, "cum", self.name), recent.long())


@dataclass
class ObservedAttention(Method):
    name = "observed_attention"
    needs = Needs(cumulative=True)

    def priority(self, view):
        if view.seen is None:
            raise RuntimeError("observed_attention needs the tokens each row has seen (LayerView.seen)")
        queries = (view.seen[:, None, None] - view.positions).clamp(min=1)  # the queries that saw each key
        return Priority(_stat(view, "cum", self.name) / (queries * view.group_size))


@dataclass
class KNorm(Method):
    name = "knorm"

    def priority(self, view):
        return Priority(-view.keys.float().norm(dim=-1))


@dataclass
class SnapKV(Method):
    name = "snapkv"
    window: int = param(32, "observation window: the last queries whose attention scores the keys", low=1)
    kernel: int = param(7, "pooling width along the keys (odd: centred on each key)", low=1, step=2)
    pooling: str = param("avg", "pooling along the keys: avg (the SnapKV reference code's default) or max",
                         choices=("avg", "max"))

    @property
    def needs(self) -> Needs:
        return Needs(window=self.window)

    def priority(self, view):
        rows = _stat(view, "window", self.name)[:, :, -self.window:]  # (B, Hq, w, S)
        window = rows.shape[2]
        observed = view.recent(view.n_valid.clamp(max=window))  # the observation window's own tokens
        votes = rows.mean(2).masked_fill(observed | ~view.valid[:, None, :], 0.0)  # (B, Hq, S)
        B, Hq, S = votes.shape
        pool = F.avg_pool1d if self.pooling == "avg" else F.max_pool1d
        pooled = pool(votes.reshape(B * Hq, 1, S), self.kernel, stride=1, padding=self.kernel // 2)
        score = pooled.reshape(B, Hq // view.group_size, view.group_size, S).mean(2)  # over the GQA group
        kept = view.recent(view.keep.clamp(max=window))  # always kept (the most recent if keep < window)
        return Priority(score, kept.long())


@dataclass
class TOVA(Method):
    name = "tova"
    needs = Needs(window=1)

    def priority(self, view):
        last = _stat(view, "window", self.name)[:, :, -1]  # (B, Hq, S): the last query, per query head
        score = last.mean(1, keepdim=True).expand(view.keys.shape[:3])  # all heads: one ranking for every KV head
        return Priority(score)


@dataclass
class CABV3(Method):
    name = "cab_v3"
    needs = Needs(cumulative=True, two_hop=True)
    lam: float = param(0.5, "weight of the 2-hop redundancy term subtracted from the attention received", low=0.0)

    def priority(self, view):
        c = _stat(view, "cum", self.name) / view.group_size
        r = _stat(view, "frc", self.name)
        n = view.n_valid.clamp(min=1)[:, None, None].to(r.dtype)
        return Priority(c - self.lam * r / n)


@dataclass
class CABV4(Method):
    name = "cab_v4"
    alpha: float = param(0.5, "weight of key magnitude against key uniqueness", low=0.0, high=1.0)

    def priority(self, view):
        magnitude = _minmax(view.keys.float().norm(dim=-1), view.valid)
        uniqueness = _minmax(key_uniqueness(view.keys, view.valid), view.valid)
        return Priority(self.alpha * magnitude + (1 - self.alpha) * uniqueness)


@dataclass
class CAB(Method):
    name = "cab"
    needs = Needs(cumulative=True)
    local_ratio: float = param(0.3, "share of the budget for the most recent tokens", low=0.0, high=1.0)
    importance_ratio: float = param(0.5, "share for the most attended older tokens", low=0.0, high=1.0)
    bridge_ratio: float = param(0.2, "share for the most unique remaining keys", low=0.0, high=1.0)

    def __post_init__(self):
        super().__post_init__()
        if not math.isclose(self.local_ratio + self.importance_ratio + self.bridge_ratio, 1.0, abs_tol=1e-6):
            raise ConfigError(f"cab's local_ratio + importance_ratio + bridge_ratio must sum to 1, got "
                              f"{self.local_ratio} + {self.importance_ratio} + {self.bridge_ratio}")

    def priority(self, view):
        n_local = split(view.keep, self.local_ratio)
        n_important = split(view.keep, self.importance_ratio).minimum(view.keep - n_local)
        local = view.recent(n_local).expand(view.keys.shape[:3])
        cum = _stat(view, "cum", self.name).masked_fill(local | ~view.valid[:, None, :], float("-inf"))
        order = torch.argsort(cum, dim=-1, descending=True, stable=True)
        rank = torch.argsort(order, dim=-1)
        important = (rank < n_important[:, None, None]) & ~local & view.valid[:, None, :]
        tier = local.long() * 2 + important.long()
        return Priority(key_uniqueness(view.keys, view.valid), tier)


METHODS: dict[str, type[Method]] = {m.name: m for m in (
    Dense, RandomEviction, StreamingLLM, LocalStrided, H2O, ObservedAttention, KNorm, SnapKV, TOVA, CABV3, CABV4,
    CAB)}


def make_method(name, **params) -> Method:
    """A method from its registry name (or a Method instance, returned as is) and its parameters."""
    if isinstance(name, Method):
        if params:
            raise ConfigError(f"parameters {sorted(params)} given with an already built method {name!r}")
        return name
    return build("sparsity method", METHODS, name, params)
