"""A float64 evaluation sum that is the same number however many processes computed it.

torchmetrics' SumMetric adds each rank's partial sum: two processes add the batches in another order
than one (other last digits), and a batch that a padding sampler repeats counts twice. `KeyedSum` keeps
each batch's value with a key (the batch's first window index, data/sharding.py), gathers every rank's
(key, value) pairs with torchmetrics' own sync, drops repeated keys and adds the values in key order: one
process and N processes add the same float64 numbers in the same order. It is a torchmetrics Metric, so
Lightning moves, resets and syncs it as it does any other.
"""

from __future__ import annotations

import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat


class KeyedSum(Metric):
    full_state_update = False

    def __init__(self):
        super().__init__()
        self.add_state("keys", default=[], dist_reduce_fx="cat")
        self.add_state("values", default=[], dist_reduce_fx="cat")
        self.set_dtype(torch.float64)  # keys too: exact integers below 2**53

    def update(self, key: int, value: torch.Tensor) -> None:
        self.keys.append(torch.tensor([float(key)], dtype=torch.float64, device=self.device))
        self.values.append(value.detach().reshape(1).to(torch.float64))

    def compute(self) -> torch.Tensor:
        if isinstance(self.keys, list) and not self.keys:  # nothing scored (after a reset, or no batch)
            return torch.zeros((), dtype=torch.float64, device=self.device)
        keys, values = dim_zero_cat(self.keys).double(), dim_zero_cat(self.values).double()
        keys, order = torch.sort(keys, stable=True)
        values = values[order]
        first = torch.ones_like(keys, dtype=torch.bool)
        first[1:] = keys[1:] != keys[:-1]  # a key seen twice is an item a sampler repeated: counted once
        return values[first].sum()  # NaN kept: a diverged model's NaN must reach the caller
