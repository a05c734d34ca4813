"""`lightning_bench sweep`: streaming perplexity under KV-cache eviction, datasets x methods x sparsity x context.

    lightning_bench sweep --config configs/perplexity/quick_test.yaml [--output FILE] [--model.pretrained DIR]
                          [--methods '[dense, h2o]'] [--streaming.chunk_size 8] [--print_config] ...

Two sweeps per (dataset, method), as the earlier perplexity benchmark laid them out:
  sparsity_sweep        perplexity at each sparsity level, at one context length;
  context_length_sweep  perplexity at each context length, at one sparsity.
`dense` runs at sparsity 0 only (it never evicts); an evicting method at sparsity 0 never compresses
either, so its cells reproduce dense (a check, not a result). A (length, sparsity) pair on both axes
is measured once. Subset: `max_tokens` scores the first windows of the token stream until max_tokens
targets are covered, rounded up to whole batches of `eval_batch_size` windows; `eval_max_documents`
keeps the first N documents.

Resuming (sweep/store.py): re-running the command skips every cell already in the JSON, so a killed
sweep resumes where it stopped and a deleted cell is recomputed; the grid may grow between runs. A
file written with settings that change a cell's value is refused.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import asdict

import yaml

from lightning_bench.errors import PROG
from lightning_bench.experiments.core.config import parse_command
from lightning_bench.experiments.sweep import store
from lightning_bench.experiments.sweep.config import SweepConfig, check_has_kv_cache, settings_fingerprint
from lightning_bench.experiments.sweep.report import describe_protocol, markdown_table
from lightning_bench.experiments.sweep.runner import CellRunner, SweepStopped
from lightning_bench.results.io import check_output
from lightning_bench.results.meta import run_meta

COMMAND = "sweep"
METRIC = ("token perplexity exp(CE) of the scored tokens; bits_per_token = CE / ln 2; "
          "mean_cache_size = KV slots attended per scored token (itself included)")


def _say(message: str) -> None:
    print(f"{PROG} {COMMAND}: {message}", flush=True)


def _overrides(argv: list[str]) -> list[str]:
    """The command-line overrides of the preset, as `--key VALUE` with VALUE in JSON (for the record;
    --config is recorded as `preset`, --output as `output`)."""
    out, i = [], 0
    while i < len(argv):
        key, eq, value = argv[i][2:].partition("=")
        if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value, i = argv[i + 1], i + 1
        i += 1
        if key not in ("config", "output"):
            out.append(f"--{key} {json.dumps(yaml.safe_load(value) if value else True)}")
    return out


def main(argv: list[str]) -> int:
    parsed = parse_command(COMMAND, SweepConfig, list(argv), description=SweepConfig.__doc__)
    cfg, resolved = parsed.config, parsed.resolved
    preset = parsed.config_files[-1] if parsed.config_files else None
    cfg.name = cfg.name or (preset.stem if preset else COMMAND)
    output = check_output("--output", cfg.output or f"benchmark_results/perplexity/{cfg.name}.json", kind="file")
    check_has_kv_cache(resolved["model"])
    for section in ("sparsity_sweep", "context_length_sweep"):  # the checked values (floats, in order)
        resolved[section] = asdict(getattr(cfg, section)) if getattr(cfg, section) else None
    config = {**resolved, "name": cfg.name, "output": str(output), "preset": str(preset) if preset else None,
              "preset_sha256": hashlib.sha256(preset.read_bytes()).hexdigest() if preset else None,
              "overrides": _overrides(list(argv))}
    with store.open_results(output, settings_fingerprint(resolved), resolved["datasets"]) as results:
        return _run_cells(cfg, results, config, shlex.join([PROG, COMMAND, *argv]))


def _run_cells(cfg: SweepConfig, results, config: dict, command: str) -> int:
    """Every cell of the grid not yet in the results file, the file rewritten after each."""
    doc, output = results.doc, results.path
    specs = {**doc.get("dataset_specs", {}), **config["datasets"]}
    meta_data = dict(doc.get("meta", {}).get("data", {}))
    protocols = dict(doc.get("meta", {}).get("evaluation_protocol", {}))
    checked = set()
    cells = cfg.cells()
    runner = CellRunner(cfg)
    ran = 0
    for i, cell in enumerate(cells, 1):
        label = f"[{i}/{len(cells)}] {cell.label}"
        params = cfg.resolved_params(cell.method)
        store.refuse_other_params(doc, cell, params, output)
        if store.finished(doc, cell) is not None:
            _say(f"{label}: skipped (in {output})")
            continue
        same = store.twin(doc, cell, params)
        if same is not None:
            store.put(doc, cell, same[1])
            _say(f"{label}: the same cell as {same[0]}")
        else:
            try:
                figures, dm = runner.run(cell)
            except SweepStopped as stop:
                _say(f"{stop}; the same command resumes")
                return 143
            provenance = dm.provenance()
            if cell.dataset not in checked:
                store.refuse_changed_text(doc, cell.dataset, provenance, output)
                checked.add(cell.dataset)
            meta_data[cell.dataset] = provenance
            protocols[cell.dataset] = describe_protocol(dm, cfg, cell.dataset)
            store.put(doc, cell, figures)
            ran += 1
            _say(f"{label}: ppl {figures['perplexity']:.3f}, mean cache {figures['mean_cache_size']:.1f} of "
                 f"{figures['dense_mean_cache_size']:.1f}, {figures['tokens']} tokens, {figures['seconds']:.1f} s")
        done = sum(store.finished(doc, c) is not None for c in cells)
        results.save(config=config, grid=cfg.grid(), fingerprint=results.fingerprint, dataset_specs=specs,
                     cells_done=done, cells_total=len(cells), complete=done == len(cells),
                     meta=run_meta(seed=cfg.seed, extra={"command": command, "data": meta_data,
                                                         "evaluation_protocol": protocols, "metric": METRIC}))
        if runner.sigterm:
            _say(f"received SIGTERM: stopped after {label}; the same command resumes")
            return 143
    done = sum(store.finished(doc, c) is not None for c in cells)
    print(f"{PROG} {COMMAND}: {output}: {ran} cells run now, {done}/{len(cells)} of this grid done")
    if cfg.sparsity_sweep:
        for dataset in cfg.data:
            print(markdown_table(doc, dataset))
    return 0
