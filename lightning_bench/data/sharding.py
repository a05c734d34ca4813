"""Evaluation data under several processes (DDP): which items each rank scores.

torch's DistributedSampler, which Lightning puts into every loader under DDP, deals items out one by one
(rank r gets items r, r+N, ...) and pads the ranks to equal length by repeating items: a repeated window
would be scored twice, and each rank's batches hold other windows than one process's batches, so their
sums differ in the last digits. `BlockShardSampler` deals out whole batches instead (rank r gets batches
r, r+N, r+2N, ... of `block` consecutive items) and repeats nothing: every batch a rank scores is a batch
one process scores, bit for bit, and the evaluation's keyed sums (models/keyed_sum.py) add them in one
process's order. Lightning leaves a DistributedSampler that a loader already has in place.
"""

from __future__ import annotations

from typing import Optional

from torch.utils.data import DistributedSampler


class BlockShardSampler(DistributedSampler):
    def __init__(self, n: int, block: int, num_replicas: int, rank: int):
        # DistributedSampler's own state is unused (no shuffle, no padding); its init only checks the rank
        super().__init__(range(n), num_replicas=num_replicas, rank=rank, shuffle=False)
        self.n, self.block = n, block

    def _indices(self) -> list[int]:
        batches = range(self.rank, -(-self.n // self.block), self.num_replicas)
        return [i for b in batches for i in range(b * self.block, min((b + 1) * self.block, self.n))]

    def __iter__(self):
        return iter(self._indices())

    def __len__(self) -> int:
        return len(self._indices())


def processes(datamodule) -> tuple[int, int]:
    """(world size, this rank) of the Trainer a DataModule is attached to; (1, 0) outside one."""
    trainer = getattr(datamodule, "trainer", None)
    if trainer is None:
        return 1, 0
    return trainer.world_size, trainer.global_rank


def eval_sampler(datamodule, n: int, block: int) -> Optional[BlockShardSampler]:
    """The sampler of an evaluation loader of `n` items in batches of `block`: None in one process (the
    loader's own order), a BlockShardSampler for this rank under several."""
    world, rank = processes(datamodule)
    return BlockShardSampler(n, block, world, rank) if world > 1 else None


def global_batch_part(order: list[int], batch_size: int, num_replicas: int, rank: int) -> list[int]:
    """Training under DDP: this rank's items of a one-process `order` read in global batches of
    batch_size x num_replicas items. Rank r takes the r-th contiguous part of each global batch, so the
    ranks together take the step one process takes with the global batch. An epoch's last, smaller
    global batch is cut into near-equal parts (one batch per rank: every rank steps equally often, or
    DDP waits forever); with fewer items than ranks, items from the epoch's start fill it."""
    world_batch, out = batch_size * num_replicas, []
    for k in range(0, len(order), world_batch):
        chunk = order[k:k + world_batch]
        if len(chunk) < num_replicas:
            chunk += order[:num_replicas - len(chunk)]
        size, extra = divmod(len(chunk), num_replicas)
        low = rank * size + min(rank, extra)
        out += chunk[low:low + size + (rank < extra)]
    return out
