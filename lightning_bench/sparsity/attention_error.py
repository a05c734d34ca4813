"""The attention error of eviction: each forward on compressed caches is compared, layer by layer and row by row,
with the attention of the same queries over the row's FULL cache at the same step (the dense prefill's keys and
values, which a compression leaves as they were, plus every token fed or decoded since, whose keys and values
the compressed run itself made). Per row and layer it adds up, over the forward's queries and query heads,

    kept     the cache slots each query attended (its row's valid slots, causal), the query head counted
    visible  the slots the full cache offers the same query
    error^2  ||o_compressed - o_full||^2        dense^2  ||o_full||^2

which masking.attention_figures turns into density and ||o - o_full||_F / ||o_full||_F, as for a masker stack.
The reference is one more attention per layer over the full cache, computed here row by row in float32 (the
full cache is not batched: it is the prompt's dense cache, shared by every row continuing that prompt, plus
each row's own new tokens). Under re-rotation the kept keys move to other positions than the full cache's, so
no reference is defined there (task_decode refuses the pair)."""

from __future__ import annotations

import torch


class FullCacheReference:
    """Attached to a batch as `KVEngine.masking` (the slot of the attention function that sees each call's output):
    `attend` returns the model's output unchanged and meters it. `rows[b]` names the row of batch row b (set
    before each forward: finished rows leave the batch); `add_row(row, prompt_cache)` registers a row's prefix."""

    def __init__(self):
        self.prefix: dict = {}  # row -> [(keys, values) (Hkv, P, D) of every layer]: the prompt's dense cache
        self.suffix: dict = {}  # row -> {layer: (keys, values) (Hkv, n, D)}: what the row fed and decoded since
        self.rows: list = []
        self.pending: dict = {}  # {layer: (4, B) sums per batch row} since `drain`
        self.metering = True  # False: a decoding step the meter skips (the new keys are still kept for later ones)

    def add_row(self, row, cache) -> None:
        self.prefix[row] = [(layer.keys[0], layer.values[0]) for layer in cache.layers]
        self.suffix[row] = {}

    def applies(self, layer_idx: int) -> bool:
        return True

    def drain(self) -> dict:
        pending, self.pending = self.pending, {}
        return pending

    @torch.no_grad()
    def attend(self, layer_idx: int, query, key, value, attention_mask, scaling, softcap,
               dense: torch.Tensor) -> torch.Tensor:
        from lightning_bench.sparsity.capture import _hidden_keys

        B, Hq, q, D = query.shape
        Hkv, S = key.shape[1], key.shape[2]
        G = Hq // Hkv
        scale = D ** -0.5 if scaling is None else scaling
        hidden = _hidden_keys(attention_mask, B, Hkv, G, S, query.device)
        held = torch.full((B,), S - q, dtype=torch.float64) if hidden is None \
            else (~hidden.reshape(B, -1, S)[:, 0, :S - q]).sum(-1).double().cpu()  # valid slots before the call
        sums = self.pending.setdefault(layer_idx, torch.zeros(4, B, dtype=torch.float64))
        causal = torch.arange(q, dtype=torch.float64)
        for b in range(B):
            row = self.rows[b]
            prefix_keys, prefix_values = self.prefix[row][layer_idx]
            old = self.suffix[row].get(layer_idx)
            new_keys, new_values = key[b, :, S - q:], value[b, :, S - q:]
            own_keys = new_keys if old is None else torch.cat([old[0], new_keys], dim=1)
            own_values = new_values if old is None else torch.cat([old[1], new_values], dim=1)
            self.suffix[row][layer_idx] = (own_keys, own_values)
            if not self.metering:
                continue
            rows = query[b].float().reshape(Hkv, G * q, D) * scale
            scores = torch.cat([rows @ prefix_keys.float().transpose(-1, -2),
                                rows @ own_keys.float().transpose(-1, -2)], dim=-1)  # (Hkv, G q, P + n)
            if softcap is not None:
                scores = torch.tanh(scores / softcap) * softcap
            n, P = own_keys.shape[1], prefix_keys.shape[1]
            above = torch.ones(q, q, dtype=torch.bool, device=scores.device).triu_(1)  # the call's own causality
            scores.view(Hkv, G, q, P + n)[..., P + n - q:].masked_fill_(above, float("-inf"))
            probs = torch.softmax(scores, dim=-1)
            full = probs[..., :P] @ prefix_values.float() + probs[..., P:] @ own_values.float()  # (Hkv, G q, D)
            full = full.reshape(Hq, q, D)
            out = dense[b].float().transpose(0, 1)  # (Hq, q, D)
            sums[0, b] += float(Hq * (held[b] * q + (causal + 1).sum()))
            sums[1, b] += float(Hq * ((P + n - q) * q + (causal + 1).sum()))
            sums[2, b] += float(((out - full) ** 2).double().sum())
            sums[3, b] += float((full ** 2).double().sum())
        return dense
