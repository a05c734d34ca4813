"""The sampling maskers: every entry they add is the key's inclusion probability p, so the stack's estimator
sum_{m>0} (e_j / m_j) v_j / sum_{m>0} (e_j / m_j) weighs a sampled key by 1/p (importance weights).

random_sampling(sampling_rate r)  floor(r * n_t) draws, uniform WITH replacement, over the n_t keys the query
        sees; a drawn key gets r (sparse-attention-hub's RandomSamplingMasker: r is the expected number of
        draws of a key, not its inclusion probability 1 - (1 - 1/n_t)^draws; with one value per row it cancels
        in the estimator anyway). Draw d of (layer, query head, query rank) is ctx.uniform(head, rank, d), so
        it is the key of rank floor(u * n_t).
magic_pig(lsh_k K, lsh_l L, center, seed)  MagicPIG (Chen et al. 2024, arXiv 2410.16179): SimHash LSH on the
        MIPS transform of Neyshabur & Srebro (arXiv 1410.5518). Per batch row and KV head, over the call's valid
        keys: centre queries and keys by the key mean (if `center`), M = max ||k||, q^ = (q/||q||, 0),
        k^ = (k/M, sqrt(M^2 - ||k||^2)/M), both unit vectors with q^.k^ = c = q.k / (||q|| M). One Gaussian
        projection R (D+1, K*L) per layer (torch.randn float32 from a CPU generator seeded `seed + layer`) gives
        L tables of K sign bits; a free key is kept when its code equals the query's in at least one table,
        with value p = collision_probability(c) = 1 - (1 - (1 - arccos(c)/pi)^K)^L, the exact probability of
        that event (a sign bit agrees with probability 1 - angle/pi), so sum_kept e/p is unbiased.
adaptive_sampling(base_rate_sampling r, epsilon, delta, init_offset, local_offset)  vAttention (Desai et al.
        2025, arXiv 2510.05688). Residual set R of a query row: the free keys of rank in
        [init_offset, n_t - local_offset), n_s = |R|. A base sample of b0 = min(n_s, max(2, floor(r n_s))) keys
        of R (without replacement) estimates sigma = std(e) (ddof 1) and the denominator
        D^ = sum_{m>0} e/m (what earlier maskers kept) + (n_s / b0) sum_base e, with e = exp(s - max_visible s).
        The budget b = clamp(floor((z sigma n_s / (epsilon D^))^2), b0, n_s), z = Phi^-1(1 - delta/2): the
        sample size at which the CLT puts |error| of the sampled part above epsilon D^ with probability delta
        (the guarantee as vAttention states it, two-sided; `one_sided=True` takes the hub's Phi^-1(1 - delta),
        with which |error| <= epsilon D^ holds only about 1 - 2 delta of the time). b keys of R are drawn without replacement, each with value b/n_s (its exact inclusion
        probability); the base sample itself is not kept (as in the hub). Defaults (0.05, 0.25, 0.25, 128,
        128) are the hub's benchmark/scripts/executor_example.py streaming + adaptive config.

Counter-based draws (base.MaskContext.uniform): a row's entries do not depend on its batch, its padding or
(random_sampling, adaptive_sampling) the chunking of a prefill's queries.

Where we deliberately differ from sparse-attention-hub (xAlg-ai/sparse-attention-hub, maskers/sampling):
- Sizes and ranges are per query row (n_t, the keys it sees), not the call's key count: in a prefill the hub
  samples every row over all keys, counts invisible ones in n_s and takes offsets from the call's length.
- magic_pig and adaptive_sampling add entries only on free keys (visible, not kept by an earlier masker); the
  hub's adaptive base sample and D^ also count keys earlier maskers kept (so those count twice in D^).
- adaptive_sampling draws without replacement and gives the exact inclusion probability b/n_s (the hub draws
  with replacement and still gives b/n_s, which overweights a key: `replacement=True` reproduces that); its
  base sample is without replacement too. n_s = 0 adds nothing (the hub makes the row dense when its range
  is < 2 keys), n_s = 1 keeps that key with 1.
- magic_pig recomputes the key mean, M and the key codes every call over each row's and head's own valid keys
  (the hub caches the first call's key mean and key codes per layer, padding included, and takes one M over
  the whole batch and every head). Its projection is drawn on the CPU (the same on every device) and shared
  by a layer's heads; `seed` defaults to 0 (the hub's 42). In a chunked prefill a later chunk's statistics
  cover more keys, so there (not in decoding) its entries depend on the chunking.
- MagicPIG's released code centres only the keys and keeps a key found in at least TWO tables; we keep the
  hub's reading (queries centred too, one table suffices), which the probability above is exact for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
import torch

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity.masking.base import MaskContext, Masker
from lightning_bench.sparsity.masking.fixed import Size, SizedMasker
from lightning_bench.sparsity.parameters import param

BASE_SALT, DRAW_SALT = 0x5A17, 0xD4A7  # adaptive_sampling: independent streams for the base sample and the draws
CODE_ELEMENTS = 1 << 24  # magic_pig: sign bits projected at once (64 MiB of float32)
CACHED_KEY_ELEMENTS = 1 << 22  # magic_pig: the largest k_hat a layer's key-signature cache holds (16 MiB)


def collision_probability(cos, K: int, L: int) -> torch.Tensor:
    """P(at least one of L tables of K SimHash bits agrees) for unit vectors at cosine `cos`:
    1 - (1 - (1 - arccos(cos)/pi)^K)^L, via log1p/expm1 so small probabilities keep their precision."""
    cos = torch.as_tensor(cos, dtype=torch.float64 if isinstance(cos, (int, float)) else None)
    one_table = (1.0 - torch.arccos(cos.clamp(-1.0, 1.0)) / math.pi) ** K
    return -torch.expm1(L * torch.log1p(-one_table))


def sample_budget(std, denominator, n_s, epsilon: float, delta: float, base, one_sided: bool = False) -> torch.Tensor:
    """vAttention's budget: clamp(floor((z std n_s / (epsilon D^))^2), base, n_s), z = Phi^-1(1 - delta/2)
    (Phi^-1(1 - delta) if `one_sided`)."""
    std, denominator, n_s, base = (torch.as_tensor(x, dtype=torch.float64) for x in (std, denominator, n_s, base))
    z = float(torch.special.ndtri(torch.tensor(1.0 - (delta if one_sided else delta / 2), dtype=torch.float64)))
    budget = torch.floor((z * std * n_s / (epsilon * denominator.clamp(min=1e-300))) ** 2)
    return torch.minimum(torch.maximum(budget, base), n_s).long()


def _smallest(u: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """bool, same shape as u: the `count` (broadcast over the last dim) smallest of each row; a stable sort breaks
    ties by slot, which is rank order, so the choice does not depend on padding."""
    order = torch.empty_like(u, dtype=torch.long)
    slots = torch.arange(u.shape[-1], device=u.device).expand_as(u)
    order.scatter_(-1, u.sort(dim=-1, stable=True).indices, slots)
    return order < count


def _exp_scores(ctx: MaskContext) -> torch.Tensor:
    top = ctx.scores.amax(-1, keepdim=True).nan_to_num(0.0, neginf=0.0)
    return torch.exp(ctx.scores - top).double()


@dataclass
class RandomSampling(Masker):
    name = "random_sampling"
    sampling = True
    sampling_rate: float = param(0.1, "draws per visible key (with replacement); each drawn key gets this value",
                                 low=0.0, high=1.0)

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 < self.sampling_rate <= 1.0:
            raise ConfigError(f"random_sampling parameter sampling_rate must be in (0, 1], got {self.sampling_rate}")

    def entries(self, ctx: MaskContext) -> torch.Tensor:
        out = torch.zeros_like(ctx.mask)
        count = ctx.size(self.sampling_rate)  # (B, 1, 1, c, 1)
        most = int(count.max())
        if most <= 0:
            return out
        draw = torch.arange(most, device=out.device)
        rank = torch.floor(ctx.uniform(ctx.head_index(), ctx.query_rank, draw) * ctx.n_visible).long()
        # valid slots are in rank order but may sit anywhere (padding, filler): map rank -> slot per batch row
        B, S = out.shape[0], out.shape[-1]
        key_rank = ctx.key_rank.reshape(B, S)
        slot_of = torch.zeros(B, S + 1, dtype=torch.long, device=out.device)
        slot_of.scatter_(1, torch.where(key_rank >= 0, key_rank, S), torch.arange(S, device=out.device).expand(B, S))
        slot = slot_of.gather(1, rank.clamp(0, S).reshape(B, -1)).view(rank.shape)
        hits = out.scatter_add_(-1, slot, (draw < count).float().expand_as(slot))
        return torch.where((hits > 0) & ctx.visible, self.sampling_rate, 0.0)


@dataclass
class MagicPig(Masker):
    name = "magic_pig"
    sampling = True
    lsh_k: int = param(8, "sign bits per LSH table (K)", low=1, high=32)
    lsh_l: int = param(75, "LSH tables (L); a key colliding in one of them is kept", low=1, high=256)
    center: bool = param(True, "subtract the key mean from queries and keys before hashing", choices=(True, False))
    seed: int = param(0, "seed of the projections (layer l uses seed + l)")
    stats_block: int = param(128, "positions between updates of the key mean and M (causal; see entries)", low=1)

    def __post_init__(self):
        super().__post_init__()
        self._projections = {}  # (layer, D + 1, device) -> R: drawn once, reused by every call
        self._key_codes = {}  # layer -> (k_hat, its codes) of the last call: see _key_codes_of

    def projection(self, layer_idx: int, dim: int, device) -> torch.Tensor:
        key = (layer_idx, dim, str(device))
        if key not in self._projections:
            generator = torch.Generator("cpu").manual_seed(self.seed + layer_idx)
            R = torch.randn(dim, self.lsh_k * self.lsh_l, generator=generator, dtype=torch.float32)
            self._projections[key] = R.to(device)
        return self._projections[key]

    def _codes(self, x: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
        """(..., L) int64: each table's K sign bits of x @ R packed into one integer, a block of tables at a time
        so a long call's keys never hold all K * L projections at once."""
        K, flat = self.lsh_k, x.reshape(-1, x.shape[-1])
        step = max(1, CODE_ELEMENTS // max(1, flat.shape[0] * K))
        shifts = torch.arange(K, device=x.device)
        codes = [((flat @ R[:, t * K:(t + step) * K] > 0).view(flat.shape[0], -1, K).long() << shifts).sum(-1)
                 for t in range(0, self.lsh_l, step)]
        return torch.cat(codes, -1).view(*x.shape[:-1], self.lsh_l)

    def cached_keys(self, layer_idx: int) -> int:
        """How many keys' signatures the layer's cache holds (0: none)."""
        cached = self._key_codes.get(layer_idx)
        return 0 if cached is None else cached[1].shape[2]

    def _key_codes_of(self, layer_idx: int, k_hat: torch.Tensor, R: torch.Tensor) -> torch.Tensor:
        """(B, Hkv, S, L) codes of the transformed keys, the key signatures cached as MagicPIG's: a decoding step
        hashes only the keys after those of the layer's last call, when that call's transformed keys are this
        call's first ones bit for bit (the same keys, key mean and M: the statistics change every stats_block
        positions, and the check also catches another example or batch). Hashing every key at each step was
        most of a decoding step's time at 4k keys (S * (D + 1) * K * L multiply-adds a KV head and layer). A layer
        keeps at most CACHED_KEY_ELEMENTS transformed keys (a copy, to check the next call against)."""
        cached = self._key_codes.get(layer_idx)
        done = 0
        if cached is not None:
            old_hat, old_codes = cached
            n = old_hat.shape[2]
            if old_hat.shape[:2] == k_hat.shape[:2] and old_hat.shape[3] == k_hat.shape[3] and n <= k_hat.shape[2] \
                    and torch.equal(old_hat, k_hat[:, :, :n]):
                done = n
        if done == k_hat.shape[2]:
            return cached[1]
        codes = self._codes(k_hat[:, :, done:], R)
        if done:
            codes = torch.cat([cached[1], codes], 2)
        if k_hat.numel() <= CACHED_KEY_ELEMENTS:  # what a layer keeps is bounded: longer caches hash every call
            self._key_codes[layer_idx] = (k_hat.clone(), codes)
        else:
            self._key_codes.pop(layer_idx, None)
        return codes

    def entries(self, ctx: MaskContext) -> torch.Tensor:
        """Per query row of rank t the transform's statistics (key mean, M) come from the keys of rank
        < s(t) = floor((t + 1) / stats_block) * stats_block, all visible to it: causal in a sparse prefill (a
        query never reads a later token's key, not even through the mean), the same whatever the chunking, and
        fixed for stats_block steps while decoding. A row with s(t) = 0 (its first stats_block - 1 positions)
        has no statistics yet and attends densely. Keys newer than the statistics hash with
        sqrt(max(0, M^2 - ||k||^2)) (the hub's frozen-transform rule)."""
        out = torch.zeros_like(ctx.mask)
        upto = (ctx.query_rank + 1) // self.stats_block * self.stats_block  # (B, 1, 1, c, 1)
        out = torch.where((upto == 0) & ctx.visible, 1.0, out)  # no statistics yet: dense rows
        for bound in sorted({int(b) for b in upto.unique().tolist() if b > 0}):
            rows = (upto == bound)
            out = torch.where(rows, self._entries_with_statistics(ctx, bound), out)
        return out

    def _entries_with_statistics(self, ctx: MaskContext, bound: int) -> torch.Tensor:
        keys, queries = ctx.keys, ctx.queries  # (B, Hkv, S, D), (B, Hkv, G, c, D)
        B, Hkv, S, D = keys.shape
        rank = ctx.key_rank.reshape(B, 1, S, 1)
        stats = ((rank >= 0) & (rank < bound)).float()
        if self.center:
            # in float64, so padding (a longer sum) does not move the mean by an ulp
            mean = ((keys.double() * stats).sum(2, keepdim=True) / stats.sum(2, keepdim=True).clamp(min=1.0)).float()
            keys, queries = keys - mean, queries - mean.unsqueeze(2)
        norm = keys.norm(dim=-1, keepdim=True)  # (B, Hkv, S, 1)
        M = (norm * stats).amax(2, keepdim=True)
        M = torch.where(M > 0, M, torch.ones_like(M))  # all keys equal the mean: they hash as (0, ..., 0, 1)
        k_hat = torch.cat([keys / M, (1.0 - (norm / M) ** 2).clamp(min=0.0).sqrt()], -1)
        q_norm = queries.norm(dim=-1, keepdim=True)
        q_unit = queries / torch.where(q_norm > 0, q_norm, torch.ones_like(q_norm))
        q_hat = torch.cat([q_unit, torch.zeros_like(q_unit[..., :1])], -1)
        cos = (q_unit @ (keys / M).transpose(-1, -2).unsqueeze(2)).clamp(-1.0, 1.0)  # (B, Hkv, G, c, S)
        R = self.projection(ctx.layer_idx, D + 1, keys.device)
        q_codes, k_codes = self._codes(q_hat, R), self._key_codes_of(ctx.layer_idx, k_hat, R).unsqueeze(2).unsqueeze(3)
        hit = torch.zeros_like(cos, dtype=torch.bool)
        for table in range(self.lsh_l):  # table by table: never a (c, S, L) tensor
            hit |= q_codes[..., table, None] == k_codes[..., table]
        p = collision_probability(cos, self.lsh_k, self.lsh_l)
        return torch.where(hit & ctx.free & (ctx.key_rank >= 0), p, 0.0).to(ctx.mask.dtype)


@dataclass
class AdaptiveSampling(SizedMasker):
    name = "adaptive_sampling"
    sampling = True
    sizes = ("init_offset", "local_offset")
    base_rate_sampling: float = param(0.05, "share of the residual keys in the base sample (at least 2)",
                                      low=0.001, high=1.0)
    epsilon: float = param(0.25, "relative error bound of the attention denominator", low=0.0, high=1.0)
    delta: float = param(0.25, "probability the bound may fail", low=0.0, high=1.0)
    init_offset: Size = param(128, "first keys left out of the residual (tokens, or a fraction of n_t)", low=0)
    local_offset: Size = param(128, "last keys left out of the residual (tokens, or a fraction of n_t)", low=0)
    replacement: bool = param(False, "draw the budget with replacement, value b/n_s (the hub's draws)",
                              choices=(True, False))
    one_sided: bool = param(False, "z = Phi^-1(1 - delta) as the hub, not Phi^-1(1 - delta/2)", choices=(True, False))

    def __post_init__(self):
        super().__post_init__()
        if not 0.0 < self.epsilon <= 1.0:
            raise ConfigError(f"adaptive_sampling parameter epsilon must be in (0, 1], got {self.epsilon}")
        if not 0.0 < self.delta < 1.0:
            raise ConfigError(f"adaptive_sampling parameter delta must be in (0, 1), got {self.delta}")

    def entries(self, ctx: MaskContext) -> torch.Tensor:
        rank, n_t = ctx.key_rank, ctx.n_visible
        residual = ctx.free & (rank >= ctx.size(self.init_offset)) & (rank < n_t - ctx.size(self.local_offset))
        n_s = residual.sum(-1, keepdim=True)  # (B, Hkv, G, c, 1)
        if int(n_s.max()) == 0:
            return torch.zeros_like(ctx.mask)
        head = ctx.head_index()
        base_count = torch.minimum(n_s, ctx.size(self.base_rate_sampling, of=n_s).clamp(min=2))
        base = residual & _smallest(self._uniform(ctx, head, BASE_SALT, residual), base_count)
        e = _exp_scores(ctx)
        b0 = base_count.clamp(min=1).double()
        base_e = torch.where(base, e, 0.0)
        mean = base_e.sum(-1, keepdim=True) / b0
        var = torch.where(base, (e - mean) ** 2, 0.0).sum(-1, keepdim=True) / (b0 - 1).clamp(min=1.0)
        kept = (ctx.mask > 0) & ctx.visible
        static = torch.where(kept, e / ctx.mask.double().clamp(min=1e-30), 0.0).sum(-1, keepdim=True)
        estimate = static + n_s / b0 * base_e.sum(-1, keepdim=True)
        budget = sample_budget(var.sqrt(), estimate, n_s, self.epsilon, self.delta, base_count, self.one_sided)
        value = (budget.double() / n_s.clamp(min=1)).to(ctx.mask.dtype)
        if self.replacement:
            return self._with_replacement(ctx, head, residual, n_s, budget, value)
        chosen = residual & _smallest(self._uniform(ctx, head, DRAW_SALT, residual), budget)
        return torch.where(chosen, value, 0.0)

    @staticmethod
    def _uniform(ctx, head, salt, residual) -> torch.Tensor:
        u = ctx.uniform(head, ctx.query_rank, ctx.key_rank, salt)
        return torch.where(residual, u, 2.0)  # outside R: after every key of R

    @staticmethod
    def _with_replacement(ctx, head, residual, n_s, budget, value) -> torch.Tensor:
        out = torch.zeros_like(ctx.mask)
        draw = torch.arange(int(budget.max()), device=out.device)
        member = torch.floor(ctx.uniform(head, ctx.query_rank, draw, DRAW_SALT) * n_s).long()  # j-th key of R
        slot = torch.searchsorted(residual.long().cumsum(-1), member + 1).clamp(max=out.shape[-1] - 1)
        hits = out.scatter_add_(-1, slot, (draw < budget).float().expand_as(slot))
        return torch.where((hits > 0) & residual, value, 0.0)
