"""`lightning_bench predict`: per-token NLL of every evaluation window, saved next to the records."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from lightning_bench.results.naming import point_latest


class TokenNLLWriter(BasePredictionWriter):
    """Saves {"windows": [per-window (batch, seq) NLL tensors, NaN where a position is context only],
    "protocol": ...} to `{results_dir}/{run_name}_predict_{run_id}.pt` (atomically); `latest`, when given, is
    then pointed at it (results/naming.py)."""

    def __init__(self, path: str | Path, latest: Optional[str | Path] = None):
        super().__init__(write_interval="epoch")
        self.path, self.latest = Path(path), latest

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        if trainer.world_size > 1:
            predictions = self._every_rank(trainer, predictions)
        if not trainer.is_global_zero:
            return
        dm = trainer.datamodule
        payload = {"windows": predictions,
                   "protocol": dm.protocol("test") if hasattr(dm, "protocol") else None}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
        os.close(fd)
        torch.save(payload, tmp)
        os.replace(tmp, self.path)
        if self.latest is not None:
            point_latest(self.path, Path(self.latest))
        print(f"lightning_bench: wrote {self.path}")

    @staticmethod
    def _every_rank(trainer, predictions: list) -> list:
        """Under DDP rank r predicted batches r, r+N, r+2N, ... (data/sharding.BlockShardSampler): every
        rank's batches, back in the text's order, on every rank."""
        import torch.distributed as dist

        world = trainer.world_size
        gathered = [None] * world
        dist.all_gather_object(gathered, [p.cpu() for p in predictions])
        return [gathered[k % world][k // world] for k in range(sum(len(g) for g in gathered))]
