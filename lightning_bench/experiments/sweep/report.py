"""What the sweep writes beside the figures (each dataset's protocol) and prints (the sparsity table)."""

from __future__ import annotations

from lightning_bench.experiments.core.grid import sparsity_key
from lightning_bench.experiments.sweep.config import SweepConfig


def describe_protocol(dm, cfg: SweepConfig, dataset: str) -> dict:
    """The DataModule's protocol with what the sweep adds: per-cell windows, the subset, the streaming."""
    spec = cfg.data[dataset]
    # window and stride follow each cell's context length; `units` would describe the whole evaluated text
    described = {k: v for k, v in dm.protocol(spec.split).items() if k not in ("window", "stride", "units")}
    described["window"] = "the cell's context_length"
    if dm.hparams.eval_protocol == "token_windows":
        described["stride"] = dm.hparams.eval_stride or "the cell's context_length (disjoint windows)"
    described["subset"] = (f"the first windows covering max_tokens={spec.max_tokens} targets, in whole "
                           f"batches of {cfg.eval_batch_size}") if spec.max_tokens else \
        "every window of the evaluated text"
    streaming = cfg.streaming
    described["streaming"] = {
        "chunk_size": streaming.chunk_size, "interval": streaming.interval, "rerotate": streaming.rerotate,
        "rounding": streaming.rounding,
        "definition": "each window read as a stream from its start: chunks of chunk_size tokens attend to the "
                      "compressed cache of the chunks before and causally to each other; the cache is compressed "
                      "to rounding((1 - sparsity) * tokens seen) after every interval-th chunk"}
    return described


def markdown_table(doc: dict, dataset: str) -> str:
    """Sparsity sweep of one dataset: PPL (mean cache size) per method and level."""
    methods = doc["results"].get(dataset, {})
    levels = (doc["config"].get("sparsity_sweep") or {}).get("sparsity_levels") or []
    length = (doc["config"].get("sparsity_sweep") or {}).get("context_length")
    dense = methods.get("dense", {}).get("sparsity_sweep", {}).get("0.0")
    head = "| method | " + " | ".join(f"sparsity {s:g}: PPL (mean cache)" for s in levels) + " |"
    lines = [f"{dataset}, context length {length}" + (f", dense mean cache {dense['dense_mean_cache_size']:.1f}"
                                                     if dense else ""), "", head, "|---" * (len(levels) + 1) + "|"]
    for method, sweeps in methods.items():
        row = []
        for s in levels:
            found = sweeps.get("sparsity_sweep", {}).get(sparsity_key(s))
            if found is None and method == "dense" and dense is not None:
                row.append("= sparsity 0")
            else:
                row.append("-" if found is None else f"{found['perplexity']:.2f} ({found['mean_cache_size']:.1f})")
        lines.append(f"| {method} | " + " | ".join(row) + " |")
    return "\n".join(lines)
