"""`lightning_bench downstream`: every KV-cache method on generative downstream tasks, one mechanism.

    lightning_bench downstream --config configs/downstream/quick_test.yaml
    lightning_bench downstream --model.pretrained PATH --tasks cnn_dailymail xsum --methods dense h2o cab_v4 \
        --sparsity 0.5 0.7 0.9 --max_samples 100 [--protocols query_aware query_agnostic interval]

Per cell (task, method, sparsity or token budget, protocol, seed) every example is prefilled, its cache
compressed by the method to the budget, and the answer generated on the pruned cache
(sparsity/task_decode.py); only the importance function differs between methods. The prefill does
not depend on the method, so each example is prefilled once per task, protocol and seed and every cell
of that group continues a copy of it (same tokens as separate runs, tested). The prompts, stops,
chat template and scores are those of `lightning_bench test --task` (prompts.py, scoring.py). One
checksummed file per cell in `{results_dir}/{name}/cells/`: a finished cell is reused, a damaged one
recomputed, one made under other settings refused. `{name}_results.json` and `{name}_summary.txt`
are rebuilt from the cell files at the end (report.py), so a resumed run writes what an uninterrupted
one would. docs/downstream.md has the protocol.
"""

from __future__ import annotations

import re
import shlex
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import torch

from lightning_bench.errors import PROG, ConfigError
from lightning_bench.data.downstream.prompted import check_window
from lightning_bench.data.tasks import default_max_length, get_task
from lightning_bench.experiments.core.config import check_name, parse_command
from lightning_bench.experiments.core.store import CellFolder, claim
from lightning_bench.experiments.downstream.config import DownstreamConfig
from lightning_bench.experiments.downstream.progress import GroupProgress, group_name
from lightning_bench.experiments.downstream.prompts import TaskPrompts, build_prompts, shortest_context
from lightning_bench.experiments.downstream.report import log_wandb, write_report
from lightning_bench.experiments.downstream.scoring import per_example, predictions, primary_metric, score_cell
from lightning_bench.experiments.generation.command import _device
from lightning_bench.profiling.memory import CallPeakMemory
from lightning_bench.results.io import check_output
from lightning_bench.results.meta import run_meta

COMMAND = "downstream"
CELL_FILE = re.compile(r"^[A-Za-z0-9_.-]+__[a-z0-9_]+_[sb][0-9.e+-]+_[a-z_]+_seed-?\d+\.json$")


def _protocol(config: dict, prompts: TaskPrompts, method: str, method_params: dict) -> dict:
    """What must be equal for a cell file to be reused. The task's prompt version is named once its template
    has changed (`<task>@2` on), so cells written under version 1 keep the fingerprint they were made with and
    a changed template never reuses them."""
    out = {"model": config["model"], "data": prompts.source, "max_length": config["max_length"],
           "max_new_tokens": prompts.max_new_tokens, "sampling": {k: v for k, v in prompts.sampling.items() if k != "seed"},
           "chat_template": prompts.chat_template, "examples": len(prompts.samples),
           "interval": config["interval"], "method_params": method_params, "device": config["device_type"]}
    version = get_task(prompts.task).template_version
    if not version.endswith("@1"):
        out["prompt_version"] = version
    return out


def _model_record(cfg: DownstreamConfig, quantization) -> dict:
    """The model as the cells' fingerprint and the results name it; `bits` only when not 32, so the cells
    of full-precision runs keep the fingerprint they were written with."""
    out = {"pretrained": cfg.model.pretrained, "dtype": cfg.weights_dtype(), "revision": cfg.model.revision}
    if cfg.bits != 32:
        out["bits"] = cfg.bits
    if quantization is not None:
        out["quantization"] = quantization.as_dict()  # path, scheme, kernel, layers kept fp32, size
    return out


def _check_budgets(cfg: DownstreamConfig, prompts: dict[str, TaskPrompts]) -> None:
    for task, p in prompts.items():
        for protocol in cfg.protocols:
            shortest = shortest_context(p, protocol)
            for b in cfg.budget_tokens:
                if b > shortest:
                    what = "context" if protocol == "query_agnostic" else "prompt"
                    raise ConfigError(f"--budget_tokens {b} is larger than the shortest {what} of {task} under "
                                      f"{protocol} ({shortest} tokens); lower it")


def _sample_row(sample, pred: dict, draws: list, peak_mb: float) -> dict:
    first = draws[0]
    return {"id": sample.request.row.get("id"), **pred, "answers": list(sample.request.request.answers),
            "context_tokens": first.context_tokens, "question_tokens": first.question_tokens,
            "truncated_tokens": sample.truncated,
            "original_prompt_tokens": first.context_tokens + first.question_tokens + sample.truncated,
            "compressed_tokens": first.compressed_tokens,
            "kept_tokens": first.kept_tokens, "cache_length_final": first.cache_length_final,
            "kv_bytes_peak": max(d.kv_bytes_peak for d in draws),
            "dense_kv_bytes_peak": max(d.dense_kv_bytes_peak for d in draws),
            "compressions": first.compressions, "stopped": first.stopped,
            "decoded_tokens": sum(max(0, len(d.tokens) - 1) for d in draws),  # after each prefill's first
            "prefill_seconds": sum(d.prefill_seconds for d in draws),
            "decode_seconds": sum(d.decode_seconds for d in draws), "peak_memory_mb": peak_mb}


def _cell_record(cell, pairs: list, rows: list, method_record: dict, memory) -> dict:
    metrics, per_sample = score_cell(cell.task, pairs)
    for row, scores in zip(rows, per_sample):
        row["scores"] = scores
    decode_tokens = sum(r["decoded_tokens"] for r in rows)
    decode_s = sum(r["decode_seconds"] for r in rows)
    kept = sum(r["kept_tokens"] for r in rows) / max(1, sum(r["compressed_tokens"] for r in rows))
    return {"task": cell.task, "method": cell.method, "budget_kind": cell.budget_kind, "level": cell.level,
            "compression_protocol": cell.protocol, "seed": cell.seed, "method_params": method_record,
            "primary_metric": primary_metric(cell.task), "metrics": metrics,
            "primary_per_example": per_example(cell.task, per_sample),
            "cache": {"kept_fraction_of_compressed": kept,
                      "kv_bytes_peak_mean": sum(r["kv_bytes_peak"] for r in rows) / len(rows),
                      "dense_kv_bytes_peak_mean": sum(r["dense_kv_bytes_peak"] for r in rows) / len(rows),
                      "cache_length_final_mean": sum(r["cache_length_final"] for r in rows) / len(rows)},
            "timing": {"prefill_seconds": sum(r["prefill_seconds"] for r in rows), "decode_seconds": decode_s,
                       "decode_tokens_per_s": decode_tokens / decode_s if decode_s > 0 else None,
                       "peak_memory_mb": max(r["peak_memory_mb"] for r in rows), "memory_kind": memory.kind,
                       "prefill": "one dense prefill per example, shared by the cells of its task, protocol and "
                                  "seed; each cell's prefill_seconds counts it whole plus its own compression"},
            "num_examples": len(rows), "samples": rows}


def run_group(net, group: list, cfg, prompts: TaskPrompts, tokenizer, params_of, memory,
              progress: Optional[GroupProgress] = None) -> list[dict]:
    """The cells of one task, protocol and seed, scored as `test --task` scores them.

    Every example is prefilled ONCE (sparsity/task_decode.prefill_prompt, recording the statistics of
    every method of the group) and continued by each cell's method and budget on a copy of it: the
    prefill does not depend on the method, and the tokens are those of separate runs
    (tests/test_task_decode.py), while a long context is prefilled once instead of once per cell.
    With `progress`, each example's rows are saved as it ends and a stopped group resumes after them."""
    from lightning_bench.sparsity.task_decode import continue_prompt, prefill_prompt

    head = group[0]
    protocol = "query_aware" if head.protocol == "interval" else head.protocol
    interval = cfg.interval if head.protocol == "interval" else 0
    sampling = prompts.sampling
    device = next(net.parameters()).device
    methods = list(dict.fromkeys(cell.method for cell in group))
    method_params = {cell.method: params_of(cell) for cell in group}
    pairs = {cell.key: [] for cell in group}
    rows = {cell.key: [] for cell in group}
    described = {}
    saved = progress.load() if progress is not None else None
    if saved is not None:  # rows of the examples a stopped run finished
        for key, cell_saved in saved["cells"].items():
            rows[key], described[key] = cell_saved["rows"], cell_saved["method"]
            pairs[key] = [(prompts.samples[i].request, pred) for i, pred in enumerate(cell_saved["predictions"])]
        print(f"{PROG} {COMMAND}: {head.task} / {head.protocol} / seed {head.seed}: resuming after example "
              f"{saved['examples']} of {len(prompts.samples)} ({progress.path})", flush=True)
    for index, sample in enumerate(prompts.samples):
        if saved is not None and index < saved["examples"]:
            continue
        with memory:
            shared = prefill_prompt(net, torch.tensor([sample.context_ids], device=device),
                                    torch.tensor([sample.question_ids], device=device) if sample.question_ids else None,
                                    protocol, methods, method_params=method_params)
        prefill_peak = memory.peak_mb
        for cell in group:
            draws, texts = [], []
            with memory:
                for draw in range(sampling["samples"]):
                    gen = None
                    if sampling["temperature"] > 0:  # each draw its own generator: reruns and resumes draw the same
                        gen = torch.Generator(device="cpu").manual_seed(cell.seed * 1_000_003 + index * 1009 + draw)
                    out = continue_prompt(
                        net, shared, cell.method, sparsity=cell.sparsity, budget_tokens=cell.budget_tokens,
                        interval=interval, max_new_tokens=sample.max_new_tokens, stop_ids=prompts.stop_ids,
                        stop_strings=prompts.stop_strings, tokenizer=tokenizer, temperature=sampling["temperature"],
                        top_p=sampling["top_p"], generator=gen, method_params=method_params[cell.method])
                    new = out.tokens[:-1] if out.tokens and out.tokens[-1] in prompts.stop_ids else out.tokens
                    draws.append(out)
                    texts.append(tokenizer.decode(new))
            described[cell.key] = draws[0].method
            pred = predictions(sample.request, texts, draws[0].tokens)
            pairs[cell.key].append((sample.request, pred))
            rows[cell.key].append(_sample_row(sample, pred, draws, max(prefill_peak, memory.peak_mb)))
        del shared
        if progress is not None:
            progress.save(index + 1, {key: {"rows": rows[key], "predictions": [pred for _, pred in pairs[key]],
                                            "method": described.get(key, {})} for key in pairs})
    return [_cell_record(cell, pairs[cell.key], rows[cell.key], described.get(cell.key, {}), memory)
            for cell in group]


def _groups(grid: list) -> list[list]:
    """The cells sharing a prefill (task, protocol, seed), in grid order."""
    out: dict[tuple, list] = {}
    for cell in grid:
        out.setdefault((cell.task, cell.protocol, cell.seed), []).append(cell)
    return list(out.values())


@dataclass
class _Run:
    """What the groups of one driver call share."""

    net: torch.nn.Module
    cfg: DownstreamConfig
    prompts: dict[str, TaskPrompts]
    tokenizer: object
    memory: CallPeakMemory
    folder: Path
    cells: CellFolder
    params: Callable
    protocol_of: Callable
    meta_extra: dict  # the command line and the data provenance, in every cell's meta
    position: dict[str, int]  # cell key -> its place in the grid, for the log
    done_before: set[str] = field(default_factory=set)  # cells finished before this call started

    def say(self, cell, text: str) -> None:
        print(f"{PROG} {COMMAND}: [{self.position[cell.key]}/{len(self.position)}] {cell.key}: {text}", flush=True)

    def finished(self, cell) -> Optional[dict]:
        """The cell's record if a run finished it (None for a damaged file, set aside); a record made under
        other settings is refused: it would be mixed with this call's cells."""
        record = self.cells.verified(cell)
        if record is not None and record.get("protocol") != self.protocol_of(cell):
            raise ConfigError(f"{self.cells.path(cell)} was made under other settings (model, data, lengths, "
                              "sampling, chat template, interval, method parameters or device); use another --name")
        return record

    def group(self, group: list) -> dict[str, dict]:
        """The records of one group (task, protocol, seed), with its lock held: those a run finished (this
        one before, or another meanwhile), and the others computed now."""
        records = {cell.key: self.finished(cell) for cell in group}
        for cell in group:
            if records[cell.key] is not None:
                who = "done before" if cell.key in self.done_before else "done by another run"
                self.say(cell, f"{who} ({self.cells.path(cell)})")
        todo = [cell for cell in group if records[cell.key] is None]
        if todo:
            records.update(self.compute(todo))
        return records

    def compute(self, todo: list) -> dict[str, dict]:
        start = time.perf_counter()
        torch.manual_seed(todo[0].seed)
        progress = GroupProgress(self.folder / "partial", todo, self.protocol_of)
        made = run_group(self.net, todo, self.cfg, self.prompts[todo[0].task], self.tokenizer, self.params,
                         self.memory, progress)
        seconds = time.perf_counter() - start
        records = {}
        for cell, result in zip(todo, made):
            record = {**result, "protocol": self.protocol_of(cell),
                      "meta": run_meta(seed=cell.seed, extra=self.meta_extra)}
            self.cells.write(cell, record, checksum=True)
            records[cell.key] = record
            m = record["metrics"].get(record["primary_metric"])
            self.say(cell, f"{record['primary_metric']} {m if m is None else round(m, 2)}  kept "
                           f"{record['cache']['kept_fraction_of_compressed']:.2f} of the compressed tokens")
        progress.clear()
        print(f"{PROG} {COMMAND}: {len(todo)} cells of {_group_label(todo[0])} in {seconds:.1f} s (one prefill per "
              "example)", flush=True)
        return records


def _group_label(cell) -> str:
    return f"{cell.task} / {cell.protocol} / seed {cell.seed}"


def _network(cfg: DownstreamConfig, module, tokenizer, device: torch.device):
    """(the network on `device`, the quantization record or None)."""
    from lightning_bench.sparsity.decode import resolve_network

    quantization = None
    if cfg.bits in (8, 4):  # bitsandbytes low-bit Linear layers straight from the checkpoint, as `test --bits`
        quantization = module.load_quantized(cfg.bits, tokenizer.vocab_size)
        net = module.net.to(device).eval()
    else:
        net = module.build_network(tokenizer.vocab_size).to(device).eval()
    resolve_network(net)  # a model without a KV cache: one line, before any cell runs
    return net, quantization


def _check_outputs(cfg: DownstreamConfig) -> Path:
    """The experiment folder, checked before any model loads."""
    check_output("--results_dir", cfg.results_dir)
    return check_output("--name", Path(cfg.results_dir) / check_name("--name", cfg.name))


def main(argv: list[str]) -> int:
    from lightning_bench.data.tokenization import build_tokenizer
    from lightning_bench.models import HFLanguageModel

    parsed = parse_command(COMMAND, DownstreamConfig, list(argv), description=DownstreamConfig.__doc__)
    cfg = parsed.config
    folder = _check_outputs(cfg)
    device = _device(cfg.device)
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    module = HFLanguageModel(cfg.model.pretrained, dtype=cfg.weights_dtype(), revision=cfg.model.revision)
    limit = module.max_seq_len
    if cfg.max_context is not None and cfg.max_length is None:
        check_window(cfg.max_context, limit, "--max_context", "--max_length")
    max_length = cfg.max_length or cfg.max_context or default_max_length(cfg.tasks, limit)
    if limit is not None and max_length > limit:
        raise ConfigError(f"--max_length {max_length} is longer than the model's context ({limit}); lower it")
    source = module.tokenizer_source
    tokenizer = build_tokenizer(source["name"], **source.get("kwargs", {}))
    prompts, provenance = build_prompts(cfg, tokenizer, max_length)
    _check_budgets(cfg, prompts)
    net, quantization = _network(cfg, module, tokenizer, device)

    config = {"command": COMMAND, **parsed.resolved, "tasks": cfg.tasks, "max_length": max_length,
              "model": _model_record(cfg, quantization),
              "device": str(device), "device_type": device.type, "threads": torch.get_num_threads(), "batch_size": 1}
    command = shlex.join([PROG, COMMAND, *argv])

    def params(cell) -> dict:
        out = dict(cfg.method_params.get(cell.method, {}))
        if cell.method == "random":
            out.setdefault("seed", cell.seed)
        return out

    grid = cfg.cells()
    run = _Run(net, cfg, prompts, tokenizer, CallPeakMemory(device), folder,
               CellFolder(folder / "cells", CELL_FILE, "use another --name"), params,
               lambda cell: _protocol(config, prompts[cell.task], cell.method, params(cell)),
               {"command": command, "data": provenance}, {cell.key: i for i, cell in enumerate(grid, 1)})
    # before anything runs: a cell made under other settings is refused, a damaged one set aside
    run.done_before = {cell.key for cell in grid if run.finished(cell) is not None}
    records = {}
    groups = _groups(grid)
    for group in [g for g in groups if all(c.key in run.done_before for c in g)]:
        records.update(run.group(group))  # finished before this run: read, without waiting for a lock
    claimed = claim([g for g in groups if not all(c.key in run.done_before for c in g)],
                    lambda group: run.cells.lock(group_name(group[0])),
                    lambda group, text: print(f"{PROG} {COMMAND}: {_group_label(group[0])}: {text}", flush=True))
    with closing(claimed):  # two runs into one folder: each group is computed by one of them, reused by the other
        for group in claimed:
            records.update(run.group(group))
    meta = run_meta(seed=cfg.seeds, extra={"command": command, "data": provenance})
    results_path, summary_path = write_report(folder, cfg.name, config, meta, grid, records)
    print(f"{PROG} {COMMAND}: wrote {results_path} and {summary_path}")
    print(summary_path.read_text())
    if cfg.wandb:
        log_wandb(cfg, cfg.name, config, grid, records)
    return 0
