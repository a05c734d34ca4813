"""The generation benchmark's text, its samples, and the measure of one sample.

The test split is read through `LMDataModule` (the same sources, document handling and tokenized
cache as every evaluation) with the model's own tokenizer, as one token stream without special
tokens. Which windows of that stream are the samples is decided by `sample_starts` alone (each window
at most once across all seeds, so every sample is its own observation in the statistics).

Measuring one sample: prefill C tokens, compress, teacher-force the N reference tokens
(`sparsity.generate_with_eviction`), with its prefill and decode timings and the call's peak memory.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from dataclasses import dataclass

import torch

from lightning_bench.errors import ConfigError
from lightning_bench.profiling.memory import CallPeakMemory


@dataclass
class TestText:
    name: str  # the dataset's name (the alias, or NAME of NAME=DIR)
    stream: torch.Tensor  # the test split's tokens, int32
    provenance: dict  # what every record's meta.data says about it


def load_test_text(spec: str, tokenizer) -> TestText:
    """The test split of `--data`, tokenized by `tokenizer` (the model's) as one stream."""
    from lightning_bench.data import LMDataModule
    from lightning_bench.data.sources import named_corpus

    name, source, arguments = named_corpus(spec)
    dm = LMDataModule(**arguments)
    dm.tokenizer = tokenizer  # the model's tokenizer, not one LMDataModule would build from a train split
    try:
        dm.setup("test")
    except ConfigError as err:
        if "=" not in spec:  # a hub alias, offline
            raise ConfigError(f"{str(err).split(';')[0]}; offline, give a local copy: --data {name}=DIR "
                              "(e.g. wikitext2=../shared/data/wikitext-2)") from err
        raise ConfigError(f"dataset {name!r}: no test split in {source!r} (test.txt, wiki.test.tokens, ...)") from err
    split = dm.splits["test"]
    stream = dm.token_stream("test")
    return TestText(name, stream, {
        "name": name, "source": source, "split": "test", "origin": split.origin, "sha256": split.sha256,
        "tokenizer": tokenizer.describe(), "stream_tokens": len(stream),
        "stream_sha256": hashlib.sha256(stream.numpy().tobytes()).hexdigest()})


def sample_starts(n_tokens: int, window: int, num_samples: int, seeds: list[int]) -> dict[int, list[int]]:
    """{seed: sorted start offsets of its `num_samples` windows}: the stream is cut into non-overlapping
    windows k * window, ONE `torch.randperm` of them seeded with the first seed orders them, and the
    i-th seed of `seeds` takes the i-th block of `num_samples`. No window is drawn twice across seeds,
    so every sample of an experiment is its own observation (pooled std, paired t-tests); the first
    seed's windows are those a per-seed draw gave, and appending seeds leaves earlier ones unchanged.
    They depend on (seeds, window) only: every method and sparsity of a (seed, C) sees the same samples."""
    n_windows, needed = n_tokens // window, num_samples * len(seeds)
    if n_windows < needed:
        raise ConfigError(f"the test split has {n_tokens} tokens: {n_windows} non-overlapping windows of "
                          f"context + continuation = {window} tokens, fewer than --num_samples {num_samples} x "
                          f"{len(seeds)} seeds = {needed} (no window is drawn twice); lower --num_samples, the "
                          "number of seeds, --context_length or --continuation_length")
    order = torch.randperm(n_windows, generator=torch.Generator().manual_seed(seeds[0]))
    return {seed: sorted(int(k) * window for k in order[i * num_samples:(i + 1) * num_samples])
            for i, seed in enumerate(seeds)}


def measure_cell(net, cell, cfg, stream: torch.Tensor, starts: list[int], warmed: set, memory: CallPeakMemory):
    """(the method, one figure dict per window) of one cell (a generation Cell under a GenerationConfig)."""
    from lightning_bench.sparsity import make_method

    method_params = dict(cfg.method_params.get(cell.method, {}))
    if cell.method == "random":
        method_params.setdefault("seed", cell.seed)
    torch.manual_seed(cell.seed)
    decode = dict(interval=cfg.interval, rerotate=cfg.rerotate, rounding=cfg.rounding, memory=memory)
    if cell.method not in warmed:  # one untimed short call per method: lazy initialisation, thread pools
        run_sample(net, stream, 0, min(64, cell.context_length), min(4, cfg.continuation_length),
                   make_method(cell.method, **method_params), cell.sparsity, **decode)
        warmed.add(cell.method)
    method = make_method(cell.method, **method_params)
    return method, [run_sample(net, stream, start, cell.context_length, cfg.continuation_length, method,
                               cell.sparsity, **decode) for start in starts]


def run_sample(net, stream: torch.Tensor, start: int, context_length: int, continuation_length: int,
               method, sparsity: float, interval: int, rerotate: bool, memory: CallPeakMemory,
               rounding: str = "ceil") -> dict:
    """One window: prefill, compress, teacher-force the reference continuation; its measurements."""
    from lightning_bench.sparsity import generate_with_eviction

    window = stream[start:start + context_length + continuation_length].long()
    ids, reference = window[None, :context_length], window[None, context_length:]
    kwargs = {"sparsity": sparsity} if method.evicts else {}
    with memory:
        res = generate_with_eviction(net, ids, None, method, interval=interval, rerotate=rerotate,
                                     reference_continuation=reference, rounding=rounding, **kwargs)
    n = continuation_length
    nll = res.nll[0].double()
    prefill_s, decode_s = res.prefill_seconds, res.decode_seconds  # device-synced, by the KV engine
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
