"""Running one sweep cell: one streaming evaluation of a dataset split with windows of the cell's
context length, each window read as a stream on a KV cache compressed by the method
(`SparsityCallback` -> `streaming_logits`), through the ordinary LMDataModule protocols; and what the
sweep writes beside the figures (each dataset's protocol) and prints (the sparsity table)."""

from __future__ import annotations

import contextlib
import logging
import math
import time
import warnings
from typing import Optional

from lightning_bench.errors import ConfigError
from lightning_bench.experiments.core.grid import sparsity_key
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
    targets, each later one `stride` more (data/windows.token_windows)."""
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
        stack = cfg.attention_sparsity.get(cell.method)
        evicts = cell.method != "dense" and stack is None
        callback = SparsityCallback(attention_sparsity=stack) if stack is not None else \
            SparsityCallback(cell.method, ratio=cell.sparsity if evicts else None, chunk_size=streaming.chunk_size,
                             interval=streaming.interval, rerotate=streaming.rerotate,
                             method_params=cfg.method_params.get(cell.method), rounding=streaming.rounding)
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
        if stack is not None:  # the whole cache, every query through the stack: its density and attention error
            sparsity = {**sparsity, "mean_cache_length": None, "dense_mean_cache_length": None, "cache_fraction": None,
                        "peak_kv_bytes": None, "dense_peak_kv_bytes": None, "compressions": 0}
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
            "method_params": cfg.resolved_params(cell.method),
        }
        if stack is not None:
            figures.update({k: sparsity[k] for k in ("density", "attention_error", "density_per_layer",
                                                     "attention_error_per_layer")})
        return figures, dm


def describe_protocol(dm, cfg: SweepConfig, dataset: str) -> dict:
    """The DataModule's protocol with what the sweep adds: per-cell windows, the subset, the streaming."""
    spec = cfg.data[dataset]
    # window and stride follow each cell's context length; `units` would describe the whole evaluated text
    described = {k: v for k, v in dm.protocol(spec.split).items() if k not in ("window", "stride", "units")}
    described["window"] = "the cell's context_length"
    if dm.hparams.eval_protocol == "token_windows":
        described["stride"] = dm.hparams.eval_stride or "the cell's context_length (disjoint windows)"
    described["subset"] = (f"the first windows covering max_tokens={spec.max_tokens} targets, in whole "
                           f"batches of {cfg.eval_batch_size}") if spec.max_tokens else \
        "every window of the evaluated text"
    streaming = cfg.streaming
    described["streaming"] = {
        "chunk_size": streaming.chunk_size, "interval": streaming.interval, "rerotate": streaming.rerotate,
        "rounding": streaming.rounding,
        "definition": "each window read as a stream from its start: chunks of chunk_size tokens attend to the "
                      "compressed cache of the chunks before and causally to each other; the cache is compressed "
                      "to rounding((1 - sparsity) * tokens seen) after every interval-th chunk"}
    return described


def markdown_table(doc: dict, dataset: str) -> str:
    """Sparsity sweep of one dataset: PPL (mean cache size) per method and level."""
    methods = doc["results"].get(dataset, {})
    levels = (doc["config"].get("sparsity_sweep") or {}).get("sparsity_levels") or []
    length = (doc["config"].get("sparsity_sweep") or {}).get("context_length")
    dense = methods.get("dense", {}).get("sparsity_sweep", {}).get("0.0")
    head = "| method | " + " | ".join(f"sparsity {s:g}: PPL (mean cache)" for s in levels) + " |"
    lines = [f"{dataset}, context length {length}" + (f", dense mean cache {dense['dense_mean_cache_size']:.1f}"
                                                     if dense else ""), "", head, "|---" * (len(levels) + 1) + "|"]
    for method, sweeps in methods.items():
        row = []
        for s in levels:
            found = sweeps.get("sparsity_sweep", {}).get(sparsity_key(s))
            if found is None and method == "dense" and dense is not None:
                row.append("= sparsity 0")
            else:
                row.append("-" if found is None else f"{found['perplexity']:.2f} (density {found['density']:.3f})"
                           if found.get("density") is not None else
                           f"{found['perplexity']:.2f} ({found['mean_cache_size']:.1f})")
        lines.append(f"| {method} | " + " | ".join(row) + " |")
    return "\n".join(lines)
