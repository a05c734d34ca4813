"""`lightning_bench generation`: KV-cache eviction methods on language generation (teacher-forced).

    lightning_bench generation --model.pretrained DIR|HUB_ID --methods dense h2o cab --ratios 0.5 0.9 \
        --context_length 1024 --continuation_length 64 --num_samples 10 --seeds 42 43 \
        --data wikitext2=../shared/data/wikitext-2 --name quick_test \
        [--results_dir benchmark_results/generation] [--interval 1] [--rounding ceil] [--rerotate true] \
        [--method_params.h2o.recent_ratio 0.2] [--accelerator auto|cpu|cuda] [--model.dtype float32] [--threads N]
        [--config FILE] [--print_config]

Per cell (method, ratio, context length C, seed): `--num_samples` windows of C + N tokens of the test
split (data.py), each prefilled densely, compressed, and its reference continuation teacher-forced on
the pruned cache (data.py). The grid runs on core/runner.py: one checksummed file per cell,
`{method}_s{ratio}_ctx{C}_seed{seed}.json`, in `{results_dir}/{name}/` (a finished cell is skipped, one
made under another protocol or over other windows refused). aggregated_results.json and
significance_tests.json are recomputed from every cell file of the folder (report.py).
"""

from __future__ import annotations

import functools
import math
import re
import shlex
from pathlib import Path

import torch

from lightning_bench.errors import PROG, ConfigError
from lightning_bench.experiments.core.aggregate import describe
from lightning_bench.experiments.core.config import check_name, parse_command
from lightning_bench.experiments.core.runner import Work, device_of, run_grid, sayer
from lightning_bench.experiments.core.store import CellStore
from lightning_bench.experiments.generation.config import GenerationConfig
from lightning_bench.experiments.generation.data import load_test_text, measure_cell, sample_starts
from lightning_bench.experiments.generation.report import METRICS, write_summaries
from lightning_bench.profiling.memory import CallPeakMemory
from lightning_bench.results.io import check_output
from lightning_bench.results.meta import run_meta

COMMAND = "generation"
CELL_FILE = re.compile(r"^[a-z0-9_]+_s[0-9.e+-]+_ctx\d+_seed-?\d+\.json$")
REFUSAL = ("was made under another protocol (model, data, continuation length, samples, interval, method "
           "parameters or device); use another --name")


def _protocol(config: dict, data: dict, method: str) -> dict:
    """What must be equal for a cell file to be reused."""
    out = {"model": config["model"], "data_sha256": data["sha256"], "tokenizer": data["tokenizer"]["identity"],
           "continuation_length": config["continuation_length"], "num_samples": config["num_samples"],
           "interval": config["interval"], "rerotate": config["rerotate"],
           "method_params": config["method_params"].get(method, {}), "device": config["device_type"]}
    if config["rounding"] != "ceil":  # cells made before --rounding existed keep their fingerprint
        out["rounding"] = config["rounding"]
    return out


def _load(cfg: GenerationConfig):
    """(module, tokenizer, test text), the lengths checked against the model and the data."""
    from lightning_bench.data.tokenization import build_tokenizer
    from lightning_bench.models import HFLanguageModel

    module = HFLanguageModel(cfg.model.pretrained, dtype=cfg.model.dtype, revision=cfg.model.revision)
    longest = max(cfg.context_length) + cfg.continuation_length
    if module.max_seq_len is not None and longest > module.max_seq_len:
        raise ConfigError(f"context + continuation = {max(cfg.context_length)} + {cfg.continuation_length} = "
                          f"{longest} tokens is longer than the model's max context ({module.max_seq_len}); "
                          "lower --context_length or --continuation_length")
    tokenizer = build_tokenizer(module.tokenizer_source["name"], **module.tokenizer_source["kwargs"])
    text = load_test_text(cfg.data, tokenizer)
    if longest > len(text.stream):
        raise ConfigError(f"context + continuation = {longest} tokens is longer than the data ({text.name}'s "
                          f"test split: {len(text.stream)} tokens); lower --context_length or --continuation_length")
    return module, tokenizer, text


def main(argv: list[str]) -> int:
    cfg = parse_command(COMMAND, GenerationConfig, list(argv), description=GenerationConfig.__doc__).config
    check_output("--results_dir", cfg.results_dir)  # before any model loads
    if cfg.name is not None:
        check_output("--name", Path(cfg.results_dir) / check_name("--name", cfg.name))
    device = device_of(cfg.accelerator)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    module, tokenizer, text = _load(cfg)
    stream, data = text.stream, text.provenance
    starts = {(ctx, seed): drawn for ctx in cfg.context_length
              for seed, drawn in sample_starts(len(stream), ctx + cfg.continuation_length, cfg.num_samples,
                                               cfg.seeds).items()}
    name = check_name("--name", cfg.name or f"{module.model_name}_{text.name}")
    check_output("--name", Path(cfg.results_dir) / name)  # a derived name may be too long
    store = CellStore(Path(cfg.results_dir) / name, CELL_FILE, REFUSAL)
    memory = CallPeakMemory(device)
    config = {"command": COMMAND, "model": {"pretrained": cfg.model.pretrained, "dtype": cfg.model.dtype,
                                            "revision": cfg.model.revision, "max_position_embeddings": module.max_seq_len},
              "methods": cfg.methods, "sparsity": cfg.ratios, "context_lengths": cfg.context_length,
              "continuation_length": cfg.continuation_length, "num_samples": cfg.num_samples, "seeds": cfg.seeds,
              "data": cfg.data, "interval": cfg.interval, "rounding": cfg.rounding, "rerotate": cfg.rerotate,
              "method_params": cfg.method_params, "device": str(device), "device_type": device.type, "batch_size": 1,
              "threads": torch.get_num_threads(), "memory_kind": memory.kind, "experiment_name": name,
              "results_dir": cfg.results_dir}
    command = shlex.join([PROG, COMMAND, *argv])
    grid = cfg.cells()
    say = sayer(COMMAND, grid)

    def same_windows(work: Work, record: dict) -> None:
        """A cell drawn under other --seeds (or the earlier per-seed rule) holds other windows."""
        if [x["start"] for x in record["samples"]] != starts[(work.cell.context_length, work.cell.seed)]:
            raise ConfigError(f"{store.path(work.cell)} holds other windows than --seeds "
                              f"{' '.join(map(str, cfg.seeds))} draw (seeds take consecutive blocks of one "
                              "permutation: append new seeds at the end); use another --name")

    # built on the first cell computed (a process with nothing to compute never builds it), then reused
    network = functools.cache(lambda: module.build_network(tokenizer.vocab_size).to(device).eval())
    warmed: set = set()

    def measure(cell) -> dict:
        method, samples = measure_cell(network(), cell, cfg, stream, starts[(cell.context_length, cell.seed)],
                                       warmed, memory)
        summary = {m: describe([s[m] for s in samples])["mean"] for m in METRICS}
        say(cell, f"ppl {math.exp(summary['nll']):.3f}  decode {summary['decode_tokens_per_s'] or 0:.1f} tok/s  "
                  f"cache {summary['avg_cache_length']:.0f} slots  kv {summary['kv_bytes_peak'] / 2**20:.2f} MiB "
                  f"({sum(s['seconds'] for s in samples):.1f} s)")
        return {"method": cell.method, "sparsity": cell.sparsity, "context_length": cell.context_length,
                "continuation_length": cfg.continuation_length, "seed": cell.seed, "method_params": method.describe(),
                "num_samples": len(samples), "summary": summary, "samples": samples, "config": config,
                "meta": run_meta(seed=cell.seed, extra={"command": command, "data": data})}

    works = [Work(cell, _protocol(config, data, cell.method), cell.key) for cell in grid]
    if run_grid(works, store, lambda todo: [measure(work.cell) for work in todo], say, check=same_windows,
                executor=cfg.executor_for(functools.partial(main, argv)), shard=cfg.shard_slice) is None:
        return 0  # cells other shards still owe, or a Ray worker building its grid
    write_summaries(store, config, data, memory.kind, run_meta(seed=cfg.seeds, extra={"command": command, "data": data}))
    return 0
