"""Measuring one sample: prefill C tokens, compress, teacher-force the N reference tokens
(`sparsity.generate_with_eviction`), with forward timings and the call's peak memory."""

from __future__ import annotations

import math
import statistics
import time

import torch

from lightning_bench.profiling.memory import CallPeakMemory


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


def measure_cell(net, cell, cfg, stream: torch.Tensor, starts: list[int], warmed: set, device: torch.device,
                 memory: CallPeakMemory):
    """(the method, one figure dict per window) of one cell (a generation Cell under a GenerationConfig)."""
    from lightning_bench.sparsity import make_method

    method_params = dict(cfg.method_params.get(cell.method, {}))
    if cell.method == "random":
        method_params.setdefault("seed", cell.seed)
    torch.manual_seed(cell.seed)
    decode = dict(interval=cfg.interval, rerotate=cfg.rerotate, rounding=cfg.rounding, device=device, memory=memory)
    if cell.method not in warmed:  # one untimed short call per method: lazy initialisation, thread pools
        run_sample(net, stream, 0, min(64, cell.context_length), min(4, cfg.continuation_length),
                   make_method(cell.method, **method_params), cell.sparsity, **decode)
        warmed.add(cell.method)
    method = make_method(cell.method, **method_params)
    return method, [run_sample(net, stream, start, cell.context_length, cfg.continuation_length, method,
                               cell.sparsity, **decode) for start in starts]


def run_sample(net, stream: torch.Tensor, start: int, context_length: int, continuation_length: int,
               method, sparsity: float, interval: int, rerotate: bool, device: torch.device,
               memory: CallPeakMemory, rounding: str = "ceil") -> dict:
    """One window: prefill, compress, teacher-force the reference continuation; its measurements."""
    from lightning_bench.sparsity import generate_with_eviction

    window = stream[start:start + context_length + continuation_length].long()
    ids, reference = window[None, :context_length], window[None, context_length:]
    kwargs = {"sparsity": sparsity} if method.evicts else {}
    with ForwardTimer(net, device) as timer, memory:
        res = generate_with_eviction(net, ids, None, method, interval=interval, rerotate=rerotate,
                                     reference_continuation=reference, rounding=rounding, **kwargs)
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
