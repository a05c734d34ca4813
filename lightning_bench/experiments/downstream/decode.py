"""Decoding one downstream group: the cells of a task, protocol and seed share each example's prefill
(sparsity/task_decode.prefill_prompt) and continue it with their own method and budget, as rows of a
batch (continue_rows); their records are scored as `lightning_bench test --task` scores them."""

from __future__ import annotations

import dataclasses
import functools
from typing import Optional

import torch

from lightning_bench.errors import PROG
from lightning_bench.experiments.core.store import Progress
from lightning_bench.experiments.downstream.setup import TaskPrompts
from lightning_bench.experiments.downstream.scoring import per_example, predictions, primary_metric, score_cell

def _sample_row(sample, pred: dict, draws: list, peak_mb: float) -> dict:
    first = draws[0]
    depth = {"depth": sample.request.row["depth"]} if sample.request.row.get("depth") is not None else {}
    return {"id": sample.request.row.get("id"), **depth, **pred, "answers": list(sample.request.request.answers),
            "context_tokens": first.context_tokens, "question_tokens": first.question_tokens,
            "cue_tokens": first.cue_tokens, "truncated_tokens": sample.truncated,
            "original_prompt_tokens": first.context_tokens + first.question_tokens + first.cue_tokens + sample.truncated,
            "compressed_tokens": first.compressed_tokens,
            "kept_tokens": first.kept_tokens, "cache_length_final": first.cache_length_final,
            "kv_bytes_peak": max(d.kv_bytes_peak for d in draws),
            "dense_kv_bytes_peak": max(d.dense_kv_bytes_peak for d in draws),
            "compressions": first.compressions, "stopped": first.stopped,
            **_attention_row(draws),
            "decoded_tokens": sum(max(0, len(d.tokens) - 1) for d in draws),  # after each prefill's first
            "prefill_seconds": sum(d.prefill_seconds for d in draws),
            "decode_seconds": sum(d.decode_seconds for d in draws), "peak_memory_mb": peak_mb}


def _attention_row(draws: list) -> dict:
    """A row decoded through a masker stack: its density / attention-error sums per layer (all draws) and figures."""
    from lightning_bench.sparsity.masking.stack import add_sums, attention_figures

    sums: dict = {}
    for draw in draws:
        add_sums(sums, draw.figures.get("attention_sums", {}))
    if not sums:
        return {}
    figures = attention_figures(sums)
    return {"density": figures["density"], "attention_error": figures["attention_error"],
            "attention_sums": {str(layer): values for layer, values in sums.items()}}


def _attention_cell(rows: list) -> dict:
    """The cell's density and attention error per layer, pooled over its rows' sums (not a mean of row means)."""
    from lightning_bench.sparsity.masking.stack import add_sums, attention_figures

    sums: dict = {}
    for row in rows:
        add_sums(sums, row.get("attention_sums", {}))
    return {"attention": attention_figures(sums)} if sums else {}


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
            **_attention_cell(rows), "num_examples": len(rows), "samples": rows}


def _arguments(cell, draw: int, index: int, sample, prompts: TaskPrompts, tokenizer, method_params: dict,
               rounding: str, masked: dict) -> dict:
    """How one draw of one cell continues an example's prefill (`task_decode.continuation`'s arguments); a masker
    stack's cell continues with its method object (`masked`), shared by the cell's rows."""
    from lightning_bench.sparsity.sampling import draw_generator

    sampling = prompts.sampling
    return dict(method=masked.get(cell.method, cell.method), sparsity=cell.sparsity, budget_tokens=cell.budget_tokens,
                max_new_tokens=sample.max_new_tokens, stop_ids=prompts.stop_ids, stop_strings=prompts.stop_strings,
                tokenizer=tokenizer, temperature=sampling["temperature"], top_p=sampling["top_p"],
                generator=draw_generator(cell.seed, index, draw, sampling["temperature"]),  # reruns draw the same
                method_params=method_params.get(cell.method), rounding=rounding)


def run_group(net, group: list, cfg, prompts: TaskPrompts, tokenizer, params_of, memory,
              progress: Optional[Progress] = None) -> list[dict]:
    """The cells of one task, protocol and seed, scored as `test --task` scores them.

    Every example is prefilled ONCE (sparsity/task_decode.prefill_prompt, recording the statistics of
    every method of the group) and continued by each cell's method and budget: the prefill does not
    depend on the method, and the tokens are those of separate runs (tests/test_task_decode.py), while a
    long context is prefilled once instead of once per cell. The continuations of every cell and draw of
    `cfg.batch_examples` examples decode together as rows of shared batches (task_decode.continue_prompts,
    at most cfg.max_batch_rows rows; under the `interval` protocol one batch per kind of statistics the
    methods read), with the tokens of one row at a time (tests/test_batched_continuation.py).
    With `progress`, the rows are saved as each batch of examples ends and a stopped group resumes after them."""
    from lightning_bench.models.hf import end_of_turn_ids
    from lightning_bench.sparsity import task_decode

    # a generation also ends at the model's own end ids (a chat model's end of turn), as kvpress's pipeline
    prompts = dataclasses.replace(prompts, stop_ids=prompts.stop_ids | end_of_turn_ids(net))
    head = group[0]
    protocol = "query_aware" if head.protocol == "interval" else head.protocol
    interval = cfg.interval if head.protocol == "interval" else 0
    draws = range(prompts.sampling["samples"])
    device = next(net.parameters()).device
    from lightning_bench.sparsity.masking.method import MaskedAttention

    masked = {cell.method: MaskedAttention(cell.method, cfg.attention_sparsity[cell.method]) for cell in group
              if cell.method in cfg.attention_sparsity}
    methods = list(dict.fromkeys(masked.get(cell.method, cell.method) for cell in group))
    method_params = {cell.method: params_of(cell) for cell in group if cell.method not in masked}
    pairs = {cell.key: [] for cell in group}
    rows = {cell.key: [] for cell in group}
    described = {}
    saved = progress.load() if progress is not None else None
    if saved is not None:  # rows of the examples a stopped run finished
        for key, cell_saved in saved["cells"].items():
            rows[key], described[key] = cell_saved["rows"], cell_saved["method"]
            pairs[key] = [(prompts.samples[i].request, pred) for i, pred in enumerate(cell_saved["predictions"])]
        print(f"{PROG} downstream: {head.task} / {head.protocol} / seed {head.seed}: resuming after example "
              f"{saved['examples']} of {len(prompts.samples)} ({progress.path})", flush=True)
    first = saved["examples"] if saved is not None else 0
    for begin in range(first, len(prompts.samples), cfg.batch_examples):
        indices = range(begin, min(begin + cfg.batch_examples, len(prompts.samples)))
        work = []
        with memory:  # the examples' prefills, then every cell and draw of them as rows of shared batches
            for index in indices:
                sample = prompts.samples[index]
                arguments = functools.partial(_arguments, index=index, sample=sample, prompts=prompts,
                                              tokenizer=tokenizer, method_params=method_params, rounding=cfg.rounding,
                                              masked=masked)
                context, question, cue = (torch.tensor([ids], dtype=torch.long, device=device)
                                          for ids in sample.parts[protocol])
                shared = task_decode.prefill_prompt(net, context, question, protocol, methods,
                                                    method_params=method_params, cue_ids=cue)
                work.append((shared, [task_decode.continuation(**arguments(cell, draw)) for cell in group
                                      for draw in draws]))
            records = task_decode.continue_prompts(work, cfg.max_batch_rows, interval,
                                                   attention_error=cfg.attention_error, meter_every=cfg.meter_every)
        del work
        for index, example_records in zip(indices, records):
            sample = prompts.samples[index]
            for c, cell in enumerate(group):
                cell_draws = example_records[c * len(draws):(c + 1) * len(draws)]
                texts = [tokenizer.decode(d.tokens[:-1] if d.tokens and d.tokens[-1] in prompts.stop_ids else d.tokens)
                         for d in cell_draws]
                described[cell.key] = cell_draws[0].method
                pred = predictions(sample.request, texts, cell_draws[0].tokens)
                pairs[cell.key].append((sample.request, pred))
                rows[cell.key].append(_sample_row(sample, pred, cell_draws, memory.peak_mb))
        if progress is not None:
            progress.save(indices[-1] + 1, {key: {"rows": rows[key], "predictions": [pred for _, pred in pairs[key]],
                                                  "method": described.get(key, {})} for key in pairs})
    return [_cell_record(cell, pairs[cell.key], rows[cell.key], described.get(cell.key, {}), memory)
            for cell in group]
