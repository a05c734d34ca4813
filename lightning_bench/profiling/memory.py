"""Peak memory of one call (a benchmark sample) rather than of the whole run.

`CallPeakMemory` is the per-call counterpart of MemoryCallback: a benchmark that runs many calls in
one process (the generation benchmark's samples) needs each call's own peak, which the process-wide
figure of `monitors.peak_memory` cannot give on CPU.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import torch

from lightning_bench.profiling.monitors import peak_memory


def _proc_status_mb(field: str) -> Optional[float]:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class CallPeakMemory:
    """Peak memory of one call (`with memory: ...`), and its increase over the level just before it.

    CUDA: the allocator's peak since a reset before the call (`profiling.monitors.peak_memory`). CPU:
    the process's peak RSS (VmHWM), reset before each call through /proc/self/clear_refs where the
    kernel allows it; elsewhere the whole process's peak (`profiling.monitors.peak_memory`, not reset)."""

    RESETTABLE_RSS = "cpu_peak_rss (VmHWM, reset before each call via /proc/self/clear_refs)"

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.kind = ("cuda_max_memory_allocated" if self.cuda else self.RESETTABLE_RSS if self._reset_rss()
                     else "cpu_peak_rss_process (ru_maxrss: whole process, not reset)")

    @staticmethod
    def _reset_rss() -> bool:
        try:
            Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak RSS (VmHWM) to the current RSS
            return _proc_status_mb("VmHWM") is not None
        except OSError:
            return False

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.before_mb = torch.cuda.memory_allocated(self.device) / 2**20
        else:
            if self.kind == self.RESETTABLE_RSS:
                self._reset_rss()
            rss = _proc_status_mb("VmRSS")
            self.before_mb = rss if rss is not None else float("nan")
        return self

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize(self.device)
        if self.kind == self.RESETTABLE_RSS:
            self.peak_mb = _proc_status_mb("VmHWM")
        else:
            self.peak_mb = peak_memory(self.device if self.cuda else None)["peak_memory_mb"]
        self.increase_mb = self.peak_mb - self.before_mb
