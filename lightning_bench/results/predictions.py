"""`lightning_bench predict`: per-token NLL of every evaluation window, saved next to the records."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch
from lightning.pytorch.callbacks import BasePredictionWriter


class TokenNLLWriter(BasePredictionWriter):
    """Saves {"windows": [per-window (batch, seq) NLL tensors, NaN where a position is context only],
    "protocol": ...} to `{results_dir}/{run_name}_predict.pt` (atomically)."""

    def __init__(self, path: str | Path):
        super().__init__(write_interval="epoch")
        self.path = Path(path)

    def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
        dm = trainer.datamodule
        payload = {"windows": predictions,
                   "protocol": dm.protocol("test") if hasattr(dm, "protocol") else None}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, suffix=".tmp")
        os.close(fd)
        torch.save(payload, tmp)
        os.replace(tmp, self.path)
        print(f"lightning_bench: wrote {self.path}")
