"""Profiling callbacks: FLOPs per step, peak memory, throughput and MFU.

    from lightning_bench.profiling import ProfilingCallback
    prof = ProfilingCallback()                  # flops=True, memory=True, throughput=True, counter="torch"
    trainer = L.Trainer(callbacks=[prof, ...]); trainer.fit(model, datamodule=dm)
    prof.summary()   # {"forward_flops", "backward_flops", "total_flops", "flops_per_token", "flop_counter",
                     #  "tokens_per_sec", "samples_per_sec", "mfu", "peak_memory_mb", "peak_memory_kind",
                     #  "peak_memory_reserved_mb", "per_stage": {"train"|"val"|"test": {...}}}

The parts are also usable alone: FlopsCallback, MemoryCallback, ThroughputCallback (which finds a
FlopsCallback in trainer.callbacks for MFU and to skip the measured batch). Without a trainer:
`measure_flops(module, batch)` counts one step of a LanguageModule on a batch. Formulas: flops.py.
"""

from lightning_bench.profiling.callback import SUMMARY_KEYS, FlopsCallback, ProfilingCallback
from lightning_bench.profiling.flops import (AnalyticFlops, FlopCount, FlopSession, StepFlops, bk_scan_forward_flops,
                                             counter_custom_mapping, linear_weight_params, mamba_mixer_forward_flops,
                                             mamba_scan_forward_flops, measure_flops, transformer_forward_flops)
from lightning_bench.profiling.memory import CallPeakMemory
from lightning_bench.profiling.monitors import (MemoryCallback, ThroughputCallback, device_peak_flops,
                                                peak_memory)

__all__ = [
    "AnalyticFlops", "CallPeakMemory", "SUMMARY_KEYS", "FlopCount", "FlopSession", "FlopsCallback", "MemoryCallback", "ProfilingCallback",
    "StepFlops", "ThroughputCallback", "bk_scan_forward_flops", "counter_custom_mapping", "device_peak_flops",
    "linear_weight_params", "mamba_mixer_forward_flops", "mamba_scan_forward_flops", "measure_flops",
    "peak_memory", "transformer_forward_flops",
]
