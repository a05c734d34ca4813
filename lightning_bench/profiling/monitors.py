"""Memory and throughput callbacks.

MemoryCallback
    Peak memory of the run. CUDA: the caching allocator's peak ``torch.cuda.max_memory_allocated``
    (``peak_memory_mb``, kind ``"cuda_max_memory_allocated"``) and ``max_memory_reserved``
    (``peak_memory_reserved_mb``), since the callback's first ``setup`` reset the peak statistics.
    CPU: the process's peak resident set size, ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (KiB on
    Linux, bytes on macOS), kind ``"cpu_peak_rss_process"``: the whole process since it started
    (model building and data loading included; it cannot be reset). The kind strings are the ones
    ``results.recorder.peak_memory`` writes.

ThroughputCallback
    Wall-clock around every batch (``on_*_batch_start`` -> ``on_*_batch_end``; CUDA is synchronised
    at batch end), summed per stage (``train`` / ``val`` / ``test``): forward + backward + optimizer
    step for training, the evaluation step otherwise; data loading between batches is not included.
    Tokens = ``input_ids.numel()`` (every position fed to the model), samples = batch size. Excluded:
    sanity-check batches and the batch whose FLOPs were measured (the counter slows it down).
    ``mfu = flops_per_token * tokens_per_sec / peak`` with the stage's FLOPs per token (training: forward
    + backward; evaluation: the evaluation forward) and the device peak from Lightning's own table
    (``lightning.fabric.utilities.throughput.get_available_flops`` for the precision plugin's compute
    dtype, as Lightning's ThroughputMonitor does); ``None`` when the device is not in that table (CPU).
"""

from __future__ import annotations

import resource
import sys
import time
from typing import Any, Optional

import lightning as L
import torch

__all__ = ["MemoryCallback", "ThroughputCallback", "device_peak_flops", "log_metrics", "peak_memory",
           "STAGES"]

STAGES = ("train", "val", "test")


def log_metrics(trainer, metrics: dict) -> None:
    """Send numeric metrics to every Lightning logger (works from any hook, unlike LightningModule.log)."""
    clean = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if not clean or trainer is None:
        return
    for logger in trainer.loggers:
        logger.log_metrics(clean, step=trainer.global_step)


def _stage(trainer) -> Optional[str]:
    if trainer.sanity_checking:
        return None
    if trainer.training:
        return "train"
    if trainer.validating:
        return "val"
    if trainer.testing:
        return "test"
    return None


def _cuda_device(trainer) -> Optional[torch.device]:
    device = trainer.strategy.root_device
    return device if device.type == "cuda" else None


def peak_memory(device: Optional[torch.device] = None) -> dict:
    """{"peak_memory_mb", "peak_memory_kind", "peak_memory_reserved_mb"} now (reserved: CUDA only)."""
    if device is not None and device.type == "cuda":
        return {"peak_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20,
                "peak_memory_kind": "cuda_max_memory_allocated",
                "peak_memory_reserved_mb": torch.cuda.max_memory_reserved(device) / 2**20}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_mb = rss / 2**20 if sys.platform == "darwin" else rss / 1024
    return {"peak_memory_mb": rss_mb, "peak_memory_kind": "cpu_peak_rss_process", "peak_memory_reserved_mb": None}


def device_peak_flops(trainer) -> Optional[float]:
    """Peak FLOP/s of one device for the run's compute dtype from Lightning's table (None if unknown)."""
    try:
        from lightning.fabric.utilities.throughput import get_available_flops
        from lightning.pytorch.callbacks.throughput_monitor import _plugin_to_compute_dtype

        dtype = _plugin_to_compute_dtype(trainer.precision_plugin)
        flops = get_available_flops(trainer.strategy.root_device, dtype)
    except Exception:  # an unknown plugin / device: MFU is simply not reported
        return None
    return float(flops) if flops else None


class MemoryCallback(L.Callback):
    """Peak memory (see the module docstring); logs ``perf/peak_memory_mb`` at every epoch end."""

    def __init__(self):
        self.device: Optional[torch.device] = None
        self._reset = False

    def setup(self, trainer, pl_module, stage: str) -> None:
        self.device = _cuda_device(trainer)
        # once per callback: a later trainer.validate/test (e.g. the recorder's final validation of a
        # fit) must not wipe the fit's peak before its record is written
        if self.device is not None and not self._reset:
            torch.cuda.reset_peak_memory_stats(self.device)
            self._reset = True

    def summary(self) -> dict:
        return peak_memory(self.device)

    def _log(self, trainer) -> None:
        s = self.summary()
        log_metrics(trainer, {"perf/peak_memory_mb": s["peak_memory_mb"],
                              "perf/peak_memory_reserved_mb": s["peak_memory_reserved_mb"]})

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._log(trainer)

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._log(trainer)

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self._log(trainer)


class _StageMeter:
    __slots__ = ("seconds", "tokens", "samples", "batches")

    def __init__(self):
        self.seconds, self.tokens, self.samples, self.batches = 0.0, 0, 0, 0


def batch_counts(batch: Any) -> tuple[int, int]:
    """(tokens, samples) of an LM batch: {"input_ids": (B, T), ...}, (input_ids, ...) or a tensor."""
    if isinstance(batch, dict):
        ids = batch.get("input_ids")
    else:
        ids = batch[0] if isinstance(batch, (list, tuple)) and batch else batch
    if not isinstance(ids, torch.Tensor):
        return 0, 0
    return int(ids.numel()), int(ids.shape[0]) if ids.dim() > 1 else 1


def is_flop_source(callback) -> bool:
    """What ThroughputCallback needs of a FLOP counter (FlopsCallback has both)."""
    return callable(getattr(callback, "flops_per_token", None)) and \
        callable(getattr(callback, "measured_current_batch", None))


class ThroughputCallback(L.Callback):
    """Tokens/s, samples/s and MFU per stage (see the module docstring).

    Args:
        flops: the FLOP source (a FlopsCallback: ``flops_per_token(stage)`` for MFU and
            ``measured_current_batch(stage)``, the batch excluded from timing). Default: the first
            callback in ``trainer.callbacks`` that has both.
        peak_flops: device peak FLOP/s to use instead of Lightning's table (e.g. a measured CPU peak).
    """

    def __init__(self, flops=None, peak_flops: Optional[float] = None):
        self.flops = flops
        self.peak_flops_override = peak_flops
        self.peak_flops: Optional[float] = peak_flops
        self.meters: dict[str, _StageMeter] = {}
        self._t0: dict[str, float] = {}
        self._cuda: Optional[torch.device] = None

    def setup(self, trainer, pl_module, stage: str) -> None:
        self._cuda = _cuda_device(trainer)
        self.peak_flops = self.peak_flops_override or device_peak_flops(trainer)
        if self.flops is None:
            self.flops = next((c for c in trainer.callbacks if is_flop_source(c)), None)

    # ---- timing --------------------------------------------------------------------------------
    def _start(self, trainer) -> None:
        stage = _stage(trainer)
        if stage is not None:
            self._t0[stage] = time.perf_counter()

    def _end(self, trainer, batch) -> None:
        stage = _stage(trainer)
        t0 = self._t0.pop(stage, None) if stage is not None else None
        if t0 is None:
            return
        if self._cuda is not None:
            torch.cuda.synchronize(self._cuda)
        elapsed = time.perf_counter() - t0
        if self.flops is not None and self.flops.measured_current_batch(stage):
            return
        tokens, samples = batch_counts(batch)
        meter = self.meters.setdefault(stage, _StageMeter())
        meter.seconds += elapsed
        meter.tokens += tokens
        meter.samples += samples
        meter.batches += 1

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._end(trainer, batch)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self._start(trainer)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._end(trainer, batch)

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self._start(trainer)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._end(trainer, batch)

    # ---- results -------------------------------------------------------------------------------
    def stage_summary(self, stage: str) -> Optional[dict]:
        meter = self.meters.get(stage)
        if meter is None or meter.batches == 0 or meter.seconds <= 0:
            return None
        tokens_per_sec = meter.tokens / meter.seconds
        per_token = self.flops.flops_per_token(stage) if self.flops is not None else None
        mfu = per_token * tokens_per_sec / self.peak_flops if per_token and self.peak_flops else None
        return {"tokens_per_sec": tokens_per_sec, "samples_per_sec": meter.samples / meter.seconds, "mfu": mfu,
                "seconds": meter.seconds, "tokens": meter.tokens, "samples": meter.samples,
                "batches": meter.batches}

    def summary(self) -> dict:
        """tokens_per_sec / samples_per_sec / mfu of the main stage (train if it ran, else test, else
        val) and `per_stage`: {stage: {tokens_per_sec, samples_per_sec, mfu, seconds, tokens, samples,
        batches}}."""
        per_stage = {s: d for s in STAGES if (d := self.stage_summary(s)) is not None}
        main = next((per_stage[s] for s in ("train", "test", "val") if s in per_stage), {})
        return {"tokens_per_sec": main.get("tokens_per_sec"), "samples_per_sec": main.get("samples_per_sec"),
                "mfu": main.get("mfu"), "per_stage": per_stage}

    def _log(self, trainer, stage: str) -> None:
        s = self.stage_summary(stage)
        if s is not None:
            log_metrics(trainer, {f"perf/{stage}/{k}": s[k] for k in ("tokens_per_sec", "samples_per_sec", "mfu")
                                  if s[k] is not None})

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self._log(trainer, "train")

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self._log(trainer, "val")

    def on_test_epoch_end(self, trainer, pl_module) -> None:
        self._log(trainer, "test")
