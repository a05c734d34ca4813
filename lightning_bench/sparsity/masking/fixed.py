"""The deterministic maskers: every entry they add is 1.

sink(sink_size)        the keys of rank < n (StreamingLLM's attention sinks).
local(window_size)     the keys of rank in [t - w + 1, t] for the query of rank t (its own key included).
oracle_topk(heavy_size)  the k highest scores q.k among the keys no earlier masker kept (ties: torch.topk's
                       order): the quality upper bound at a density, it reads every score.
oracle_topp(top_p)     the smallest set of keys no earlier masker kept whose softmax mass, renormalised over
                       those keys (sparse-attention-hub's reading), reaches p; keys tied with the last one are
                       kept too, so the set does not depend on the sort's order.
quest(heavy_size, page_size)  Quest (Tang et al. 2024, arXiv 2406.10774): pages of `page_size` keys by rank,
                       per KV head the element-wise min and max of each page's keys; a page's score for a query
                       is sum_d max(q_d min_d, q_d max_d), an upper bound of its largest q.k; the top
                       max(1, ceil(k / page_size)) pages (the pages k tokens fill) with a visible key are kept
                       whole (their visible keys), the query's own page always among them (in a prefill its
                       bounds would include later keys; in decoding it is the page being filled).

A size is a token count (int) or a fraction of the query's visible keys (float in (0, 1], floored): per query
row, so every row of a prefill has the same density (sparse-attention-hub takes the fraction of the whole call's
keys, which leaves a prefill's early rows nearly dense).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import torch

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity.masking.base import MaskContext, Masker
from lightning_bench.sparsity.parameters import param

Size = Union[int, float]


def check_size(masker: str, name: str, value) -> None:
    """A size is an int token count >= 0 or a float fraction in (0, 1]: a density target of 0 or above 1 is one
    line naming the parameter."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{masker} parameter {name} must be a token count (int) or a fraction (float), got {value!r}")
    if isinstance(value, float) and not 0.0 < value <= 1.0:
        raise ConfigError(f"{masker} parameter {name} is a fraction of the keys: in (0, 1], got {value}")
    if isinstance(value, int) and value < 0:
        raise ConfigError(f"{masker} parameter {name} counts tokens: >= 0, got {value}")


class SizedMasker(Masker):
    sizes: tuple = ()  # the fields that are sizes

    def __post_init__(self):
        for name in self.sizes:
            check_size(self.name, name, getattr(self, name))
        super().__post_init__()


@dataclass
class Sink(SizedMasker):
    name = "sink"
    sizes = ("sink_size",)
    sink_size: Size = param(128, "the first keys kept (tokens, or a fraction of the visible keys)", low=0)

    def entries(self, ctx: MaskContext) -> torch.Tensor:
        keep = (ctx.key_rank >= 0) & (ctx.key_rank < ctx.size(self.sink_size))
        return (keep & ctx.visible).float().expand_as(ctx.mask)


@dataclass
class Local(SizedMasker):
    name = "local"
    sizes = ("window_size",)
    window_size: Size = param(128, "the most recent keys kept, the query's own included", low=0)

    def entries(self, ctx: MaskContext) -> torch.Tensor:
        keep = ctx.key_rank > ctx.query_rank - ctx.size(self.window_size)
        return (keep & ctx.visible).float().expand_as(ctx.mask)


@dataclass
class OracleTopK(SizedMasker):
    name = "oracle_topk"
    sizes = ("heavy_size",)
    heavy_size: Size = param(0.05, "keys of the highest scores kept", low=0)

    def entries(self, ctx: MaskContext) -> torch.Tensor:
        count = ctx.size(self.heavy_size)  # (B, 1, 1, c, 1)
        most = min(int(count.max()), ctx.scores.shape[-1])
        out = torch.zeros_like(ctx.mask)
        if most <= 0:
            return out
        top = ctx.scores.masked_fill(~ctx.free, float("-inf")).topk(most, dim=-1)
        order = torch.arange(most, device=out.device)
        take = (order < count) & torch.isfinite(top.values)
        return out.scatter_(-1, top.indices, take.float())


@dataclass
class OracleTopP(Masker):
    name = "oracle_topp"
    top_p: float = param(0.9, "softmax mass of the kept keys", low=0.0, high=1.0)

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"oracle_topp parameter top_p must be in (0, 1], got {self.top_p}")

    def entries(self, ctx: MaskContext) -> torch.Tensor:
        free = ctx.free
        probs = torch.softmax(ctx.scores.masked_fill(~free, float("-inf")), dim=-1).nan_to_num_(0.0)
        ordered = probs.sort(dim=-1, descending=True).values
        before = ordered.cumsum(-1) - ordered
        kept = (before < self.top_p) & (ordered > 0)
        threshold = ordered.masked_fill(~kept, float("inf")).amin(-1, keepdim=True)
        return (free & (probs >= threshold) & (probs > 0)).float()


@dataclass
class Quest(SizedMasker):
    name = "quest"
    sizes = ("heavy_size",)
    heavy_size: Size = param(0.1, "keys kept, in whole pages (at least one page)", low=0)
    page_size: int = param(16, "keys per page", low=1, high=4096)

    def entries(self, ctx: MaskContext) -> torch.Tensor:
        keys, rank = ctx.keys, ctx.key_rank.view(ctx.key_rank.shape[0], -1)  # (B, Hkv, S, D), (B, S)
        B, Hkv, S, D = keys.shape
        pages = int(rank.max()) // self.page_size + 1 if bool((rank >= 0).any()) else 1
        page_of = torch.where(rank >= 0, rank // self.page_size, pages)  # padding into a spare page
        index = page_of[:, None, :, None].expand(B, Hkv, S, D)
        low = keys.new_full((B, Hkv, pages + 1, D), float("inf")).scatter_reduce(2, index, keys, "amin")
        high = keys.new_full((B, Hkv, pages + 1, D), float("-inf")).scatter_reduce(2, index, keys, "amax")
        low, high = low[:, :, :pages], high[:, :, :pages]
        # sum_d max(q_d min_d, q_d max_d) = relu(q).max + (q - relu(q)).min (min <= max): two matrix products,
        # never a (rows, pages, D) tensor
        q = ctx.queries  # (B, Hkv, G, c, D) against (B, Hkv, pages, D)
        positive = q.clamp(min=0.0)
        score = positive @ high.unsqueeze(2).transpose(-1, -2) + (q - positive) @ low.unsqueeze(2).transpose(-1, -2)
        first_page = torch.arange(pages, device=keys.device) * self.page_size
        score = score.masked_fill(first_page > ctx.query_rank, float("-inf"))  # no visible key in the page yet
        # the query's own page holds keys after it in a prefill: its bounds would read them, so it is kept unscored
        score = score.masked_fill(first_page // self.page_size == ctx.query_rank // self.page_size, float("inf"))
        count = ((ctx.size(self.heavy_size) + self.page_size - 1) // self.page_size).clamp(min=1)
        most = min(int(count.max()), pages)
        top = score.topk(most, dim=-1)
        take = (torch.arange(most, device=keys.device) < count) & (top.values > float("-inf"))
        chosen = torch.zeros_like(score, dtype=torch.bool).scatter_(-1, top.indices, take)
        kept = chosen.gather(-1, page_of.clamp(max=pages - 1)[:, None, None, None, :].expand(*score.shape[:-1], S))
        return (kept & ctx.visible & (ctx.key_rank >= 0)).float()
