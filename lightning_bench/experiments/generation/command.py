"""`lightning_bench generation`: KV-cache eviction methods on language generation (teacher-forced).

    lightning_bench generation --model.pretrained DIR|HUB_ID --methods dense h2o cab --sparsity 0.5 0.9 \
        --context_length 1024 --continuation_length 64 --num_samples 10 --seeds 42 43 \
        --data wikitext2=../shared/data/wikitext-2 --experiment_name quick_test \
        [--results_dir benchmark_results/generation] [--interval 1] [--rerotate true] \
        [--method_params.h2o.recent_ratio 0.2] [--device auto|cpu|cuda] [--model.dtype float32] [--threads N]
        [--config FILE] [--print_config]

Per cell (method, sparsity, context length C, seed): `--num_samples` windows of C + N tokens of the test
split (data.py), each prefilled densely, compressed, and its reference continuation teacher-forced on
the pruned cache (measure.py). One file per cell, `{method}_s{sparsity}_ctx{C}_seed{seed}.json`, in
`{results_dir}/{experiment_name}/` (core.store.CellFolder): a cell whose file exists is skipped, one
made under another protocol is refused. aggregated_results.json and significance_tests.json are
recomputed from every cell file of the folder (report.py). docs/generation.md has the protocol.
"""

from __future__ import annotations

import math
import re
import shlex
from contextlib import closing
from pathlib import Path

import torch

from lightning_bench.errors import PROG, ConfigError
from lightning_bench.experiments.core.aggregate import STD_KIND, describe
from lightning_bench.experiments.core.config import check_name, parse_command
from lightning_bench.experiments.core.store import CellFolder, claim
from lightning_bench.experiments.generation.config import RENAMES, GenerationConfig, legacy_method_params
from lightning_bench.experiments.generation.data import load_test_text, sample_starts
from lightning_bench.experiments.generation.measure import run_sample
from lightning_bench.profiling.memory import CallPeakMemory
from lightning_bench.experiments.generation.report import METRICS, aggregate, print_table, significance
from lightning_bench.results.io import check_output, read_json, write_json_atomic
from lightning_bench.results.meta import run_meta

COMMAND = "generation"
CELL_FILE = re.compile(r"^[a-z0-9_]+_s[0-9.e+-]+_ctx\d+_seed-?\d+\.json$")
PROTOCOL_FIELDS = "model, data, continuation length, samples, interval, method parameters or device"


def _protocol(config: dict, data: dict, method: str) -> dict:
    """What must be equal for a cell file to be reused."""
    return {"model": config["model"], "data_sha256": data["sha256"], "tokenizer": data["tokenizer"]["identity"],
            "continuation_length": config["continuation_length"], "num_samples": config["num_samples"],
            "interval": config["interval"], "rerotate": config["rerotate"],
            "method_params": config["method_params"].get(method, {}), "device": config["device_type"]}


def _device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError as err:
        raise ConfigError(f"--device {spec!r} is not a device (cpu, cuda, cuda:N, auto)") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device here; use --device cpu")
    return device


def _refuse_other_cells(cells: CellFolder, grid: list, protocol_of, starts: dict, seeds: list) -> None:
    """Finished cells made under another protocol, or over other windows, would be silently mixed."""
    cells.refuse_other_protocols(grid, protocol_of, PROTOCOL_FIELDS)
    for cell in grid:  # a cell drawn under other --seeds (or the earlier per-seed rule) holds other windows
        if cells.done(cell) and [x["start"] for x in read_json(cells.path(cell))["samples"]] != starts[
                (cell.context_length, cell.seed)]:
            raise ConfigError(f"{cells.path(cell)} holds other windows than --seeds {' '.join(map(str, seeds))} "
                              "draw (seeds take consecutive blocks of one permutation: append new seeds at the "
                              "end); use another --experiment_name")


def _measure(net, cell, cfg: GenerationConfig, stream, starts: list[int], warmed: set, device, memory):
    """(the method, one figure dict per window) of one cell."""
    from lightning_bench.sparsity import make_method

    method_params = dict(cfg.method_params.get(cell.method, {}))
    if cell.method == "random":
        method_params.setdefault("seed", cell.seed)
    torch.manual_seed(cell.seed)
    if cell.method not in warmed:  # one untimed short call per method: lazy initialisation, thread pools
        run_sample(net, stream, 0, min(64, cell.context_length), min(4, cfg.continuation_length),
                   make_method(cell.method, **method_params), cell.sparsity, cfg.interval, cfg.rerotate, device, memory)
        warmed.add(cell.method)
    method = make_method(cell.method, **method_params)
    return method, [run_sample(net, stream, start, cell.context_length, cfg.continuation_length, method,
                               cell.sparsity, cfg.interval, cfg.rerotate, device, memory) for start in starts]


def main(argv: list[str]) -> int:
    from lightning_bench.data.tokenization import build_tokenizer
    from lightning_bench.models import HFLanguageModel

    cfg = parse_command(COMMAND, GenerationConfig, legacy_method_params(list(argv)),
                        description=GenerationConfig.__doc__, renames=RENAMES).config
    check_output("--results_dir", cfg.results_dir)  # before any model loads
    if cfg.experiment_name is not None:
        check_output("--experiment_name", Path(cfg.results_dir) / check_name("--experiment_name", cfg.experiment_name))
    device = _device(cfg.device)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    module = HFLanguageModel(cfg.model.pretrained, dtype=cfg.model.dtype, revision=cfg.model.revision)
    max_len = module.max_seq_len
    longest = max(cfg.context_length) + cfg.continuation_length
    if max_len is not None and longest > max_len:
        raise ConfigError(f"context + continuation = {max(cfg.context_length)} + {cfg.continuation_length} = "
                          f"{longest} tokens is longer than the model's max context ({max_len}); "
                          "lower --context_length or --continuation_length")
    source = module.tokenizer_source
    tokenizer = build_tokenizer(source["name"], **source["kwargs"])
    text = load_test_text(cfg.data, tokenizer)
    stream, data = text.stream, text.provenance
    if longest > len(stream):
        raise ConfigError(f"context + continuation = {longest} tokens is longer than the data ({text.name}'s "
                          f"test split: {len(stream)} tokens); lower --context_length or --continuation_length")
    starts = {(ctx, seed): drawn for ctx in cfg.context_length
              for seed, drawn in sample_starts(len(stream), ctx + cfg.continuation_length, cfg.num_samples,
                                               cfg.seeds).items()}

    name = check_name("--experiment_name", cfg.experiment_name or f"{module.model_name}_{text.name}")
    check_output("--experiment_name", Path(cfg.results_dir) / name)  # a derived name may be too long
    cells = CellFolder(Path(cfg.results_dir) / name, CELL_FILE, "use another --experiment_name")
    memory = CallPeakMemory(device)
    config = {"command": COMMAND, "model": {"pretrained": cfg.model.pretrained, "dtype": cfg.model.dtype,
                                            "revision": cfg.model.revision, "max_position_embeddings": max_len},
              "methods": cfg.methods, "sparsity": cfg.sparsity, "context_lengths": cfg.context_length,
              "continuation_length": cfg.continuation_length, "num_samples": cfg.num_samples, "seeds": cfg.seeds,
              "data": cfg.data, "interval": cfg.interval, "rerotate": cfg.rerotate, "method_params": cfg.method_params,
              "device": str(device), "device_type": device.type, "batch_size": 1, "threads": torch.get_num_threads(),
              "memory_kind": memory.kind, "experiment_name": name, "results_dir": cfg.results_dir}
    command = shlex.join([PROG, COMMAND, *argv])

    grid = cfg.cells()
    protocol_of = lambda cell: _protocol(config, data, cell.method)  # noqa: E731
    _refuse_other_cells(cells, grid, protocol_of, starts, cfg.seeds)
    position = {cell: i for i, cell in enumerate(grid, 1)}

    def say(cell, text: str) -> None:
        print(f"{PROG} {COMMAND}: [{position[cell]}/{len(grid)}] {cell.key}: {text}", flush=True)

    for cell in grid:
        if cells.done(cell):
            say(cell, f"skipped (exists: {cells.path(cell)})")
    net, warmed = None, set()
    claimed = claim([cell for cell in grid if not cells.done(cell)], lambda cell: cells.lock(cell.key), say)
    with closing(claimed):  # two runs into one folder: each cell is measured by one of them
        for cell in claimed:
            if cells.done(cell):  # measured by another run while this one waited for it
                _refuse_other_cells(cells, [cell], protocol_of, starts, cfg.seeds)
                say(cell, f"done by another run ({cells.path(cell)})")
                continue
            if net is None:
                net = module.build_network(tokenizer.vocab_size).to(device).eval()
            method, samples = _measure(net, cell, cfg, stream, starts[(cell.context_length, cell.seed)], warmed,
                                       device, memory)
            summary = {m: describe([s[m] for s in samples])["mean"] for m in METRICS}
            cells.write(cell, {"method": cell.method, "sparsity": cell.sparsity, "context_length": cell.context_length,
                               "continuation_length": cfg.continuation_length, "seed": cell.seed,
                               "method_params": method.describe(), "num_samples": len(samples),
                               "summary": summary, "samples": samples, "protocol": protocol_of(cell), "config": config,
                               "meta": run_meta(seed=cell.seed, extra={"command": command, "data": data})})
            say(cell, f"ppl {math.exp(summary['nll']):.3f}  decode {summary['decode_tokens_per_s'] or 0:.1f} tok/s  "
                      f"cache {summary['avg_cache_length']:.0f} slots  kv {summary['kv_bytes_peak'] / 2**20:.2f} MiB "
                      f"({sum(s['seconds'] for s in samples):.1f} s)")

    records = cells.records()
    for record in records:
        protocol = record.get("protocol", {})
        if protocol.get("data_sha256") != data["sha256"] or protocol.get("model") != config["model"]:
            raise ConfigError(f"{cells.folder} holds cells of another model or data ({record['method']} "
                              f"s{record['sparsity']} ctx{record['context_length']} seed{record['seed']}); "
                              "use another --experiment_name")
    meta = run_meta(seed=cfg.seeds, extra={"command": command, "data": data})
    aggregated = aggregate(records)
    write_json_atomic(cells.folder / "aggregated_results.json",
                      {"results": aggregated,
                       "statistics": "mean, std, min, max over every sample (a distinct window) of every seed",
                       "std_kind": STD_KIND, "memory_kind": memory.kind, "config": config, "meta": meta})
    write_json_atomic(cells.folder / "significance_tests.json",
                      {"test": "scipy.stats.ttest_rel, two-sided, paired by window (its start offset)",
                       "unit": "window of C + N tokens, drawn once across all seeds (n = windows per test)",
                       "metric": "per-sample mean NLL of the continuation (nats/token)",
                       "mean_difference": "mean(a - b): negative = a is better", "correction": None,
                       "tests": significance(records), "config": config, "meta": meta})
    print(f"{PROG} {COMMAND}: wrote {cells.folder}/aggregated_results.json and significance_tests.json")
    print_table(aggregated)
    return 0
