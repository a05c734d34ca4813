"""Running one sweep cell: one streaming evaluation of a dataset split with windows of the cell's
context length, each window read as a stream on a KV cache compressed by the method
(`SparsityCallback` -> `streaming_logits`), through the ordinary LMDataModule protocols."""

from __future__ import annotations

import contextlib
import logging
import math
import time
import warnings
from typing import Optional

from lightning_bench.errors import ConfigError
from lightning_bench.experiments.sweep.config import SPLIT_STAGE, Cell, SweepConfig


class SweepStopped(Exception):
    """SIGTERM arrived in the middle of a cell (Lightning stops its evaluation loop)."""


@contextlib.contextmanager
def quiet_lightning():
    """One Trainer per cell: keep Lightning's per-trainer banners and data-loader hints out of the log."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            warnings.filterwarnings("ignore", message=".*litlogger.*")
            warnings.filterwarnings("ignore", message=".*LeafSpec.*")  # lightning's _pytree, once per trainer
            yield
    finally:
        logger.setLevel(level)


def windows_for(max_tokens: Optional[int], window: int, stride: int) -> Optional[int]:
    """Token windows needed to score the first `max_tokens` targets: the first window scores `window`
    targets, each later one `stride` more (evaluation/windows.token_windows)."""
    if max_tokens is None:
        return None
    return 1 + max(0, math.ceil((max_tokens - window) / stride))


class CellRunner:
    """Builds the model once (on the first cell that runs) and one DataModule per (dataset, length)."""

    def __init__(self, cfg: SweepConfig):
        self.cfg = cfg
        self.module = None
        self.datamodules: dict = {}
        self.sigterm = False  # Lightning catches SIGTERM during a cell; the sweep stops after it

    def model(self):
        if self.module is None:
            import torch

            torch.manual_seed(self.cfg.seeds[0])  # models built from a config start from seeded random weights
            self.module = self.cfg.model()
        return self.module

    def datamodule(self, dataset: str, length: int):
        from lightning_bench.data import LMDataModule

        key = (dataset, length)
        if key not in self.datamodules:
            batch = self.cfg.eval_batch_size
            self.datamodules[key] = LMDataModule(**self.cfg.data[dataset].data, name=dataset, seq_len=length,
                                                 batch_size=batch, eval_batch_size=batch)
        return self.datamodules[key]

    def run(self, cell: Cell) -> tuple[dict, object]:
        """(the cell's figures, its DataModule) from one streaming evaluation."""
        import lightning as L

        from lightning_bench.sparsity.callback import SparsityCallback

        cfg, spec, streaming = self.cfg, self.cfg.data[cell.dataset], self.cfg.streaming
        module, dm = self.model(), self.datamodule(cell.dataset, cell.context_length)
        evicts = cell.method != "dense"
        callback = SparsityCallback(cell.method, ratio=cell.sparsity if evicts else None,
                                    chunk_size=streaming.chunk_size, interval=streaming.interval,
                                    rerotate=streaming.rerotate, method_params=cfg.method_params.get(cell.method),
                                    rounding=streaming.rounding)
        windows = windows_for(spec.max_tokens, cell.context_length, dm.eval_stride)
        batches = math.ceil(windows / cfg.eval_batch_size) if windows else 1.0
        stage = SPLIT_STAGE[spec.split]
        with quiet_lightning():
            trainer = L.Trainer(accelerator=cfg.accelerator, devices=1, logger=False, enable_progress_bar=False,
                                enable_model_summary=False, enable_checkpointing=False, callbacks=[callback],
                                limit_test_batches=batches, limit_val_batches=batches, num_sanity_val_steps=0)
            module.last_eval.pop(stage, None)
            start = time.perf_counter()
            try:
                (trainer.test if spec.split == "test" else trainer.validate)(module, datamodule=dm, verbose=False)
            except SystemExit as stop:  # Lightning's SIGTERMException (a SystemExit) between two batches
                if not trainer.received_sigterm:
                    raise
                raise SweepStopped(f"received SIGTERM during {cell.label}; that cell is not recorded") from stop
            seconds = time.perf_counter() - start
        self.sigterm = self.sigterm or trainer.received_sigterm
        metrics = module.last_eval.get(stage)
        if not metrics:
            raise ConfigError(f"{cell.label}: no token was scored (is the {spec.split} split empty?)")
        sparsity = callback.summary()
        figures = {
            "perplexity": metrics["ppl"], "bits_per_token": metrics["bits_per_token"], "cross_entropy": metrics["loss"],
            "tokens": metrics["scored_tokens"],
            "mean_cache_size": sparsity["mean_cache_length"],
            "dense_mean_cache_size": sparsity["dense_mean_cache_length"],
            "cache_fraction": sparsity["cache_fraction"],
            "peak_kv_bytes": sparsity["peak_kv_bytes"], "dense_peak_kv_bytes": sparsity["dense_peak_kv_bytes"],
            "compressions": sparsity["compressions"], "forwards": sparsity["forwards"],
            "seconds": seconds, "tokens_per_second": metrics["scored_tokens"] / seconds if seconds > 0 else None,
            # word/byte units exist only when the whole evaluated text was scored (no max_tokens cut)
            "word_perplexity": metrics.get("word_ppl"), "byte_perplexity": metrics.get("byte_ppl"),
            "context_length": cell.context_length, "sparsity": cell.sparsity if evicts else 0.0,
            "method_params": {k: v for k, v in callback.method.describe().items() if k != "method"},
        }
        return figures, dm
