"""Measuring one sample: prefill C tokens, compress, teacher-force the N reference tokens
(`sparsity.generate_with_eviction`), with forward timings and the call's peak memory."""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path
from typing import Optional

import torch

from lightning_bench.profiling.monitors import peak_memory


class ForwardTimer:
    """Start time and duration of every forward of `net` (hooks); a generate call's first is the prefill."""

    def __init__(self, net, device: torch.device):
        self.net, self.sync = net, device.type == "cuda"
        self.starts: list[float] = []
        self.calls: list[float] = []

    def _now(self) -> float:
        if self.sync:
            torch.cuda.synchronize()
        return time.perf_counter()

    def __enter__(self):
        def pre(*_):
            self.starts.append(self._now())

        def post(*_):
            self.calls.append(self._now() - self.starts[-1])

        self._handles = [self.net.register_forward_pre_hook(pre), self.net.register_forward_hook(post)]
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()


def _proc_status_mb(field: str) -> Optional[float]:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class SamplePeakMemory:
    """Peak memory of one sample's call, and its increase over the level just before it.

    CUDA: the allocator's peak since a reset before the call (`profiling.monitors.peak_memory`). CPU:
    the process's peak RSS (VmHWM), reset before each call through /proc/self/clear_refs where the
    kernel allows it; elsewhere the whole process's peak (`profiling.monitors.peak_memory`, not reset).
    The per-call reset is what a benchmark of many calls in one process needs and what profiling/'s
    callbacks do not offer yet; it could move there."""

    RESETTABLE_RSS = "cpu_peak_rss (VmHWM, reset before each sample via /proc/self/clear_refs)"

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


def run_sample(net, stream: torch.Tensor, start: int, context_length: int, continuation_length: int,
               method, sparsity: float, interval: int, rerotate: bool, device: torch.device,
               memory: SamplePeakMemory) -> dict:
    """One window: prefill, compress, teacher-force the reference continuation; its measurements."""
    from lightning_bench.sparsity import generate_with_eviction

    window = stream[start:start + context_length + continuation_length].long()
    ids, reference = window[None, :context_length], window[None, context_length:]
    kwargs = {"sparsity": sparsity} if method.evicts else {}
    with ForwardTimer(net, device) as timer, memory:
        res = generate_with_eviction(net, ids, None, method, interval=interval, rerotate=rerotate,
                                     reference_continuation=reference, **kwargs)
    n = continuation_length
    nll = res.nll[0].double()
    prefill_s = timer.calls[0]
    decode_s = res.seconds - prefill_s
    steps = slice(1, None) if n > 1 else slice(0, None)  # the decoding steps, on the pruned cache
    cache, kv, dense = res.cache_lengths[steps], res.kv_bytes[steps], res.dense_kv_bytes[steps]
    return {
        "start": start,
        "nll": float(nll.mean()),
        "ppl": math.exp(float(nll.mean())),
        "decode_tokens_per_s": (n - 1) / decode_s if n > 1 and decode_s > 0 else None,
        "tokens_per_s": n / res.seconds,
        "seconds": res.seconds,
        "prefill_seconds": prefill_s,
        "peak_memory_mb": memory.peak_mb,
        "peak_memory_increase_mb": memory.increase_mb,
        "avg_cache_length": statistics.fmean(cache),
        "final_cache_length": res.cache_lengths[-1],
        "kv_bytes_peak": max(kv),
        "kv_bytes_mean": statistics.fmean(kv),
        "dense_kv_bytes_peak": max(dense),
        "kv_fraction": max(kv) / max(dense),
        "compressions": res.compressions,
        "token_nll": res.nll[0].tolist(),
    }
