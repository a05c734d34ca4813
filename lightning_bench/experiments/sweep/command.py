"""`lightning_bench sweep`: streaming perplexity under KV-cache eviction, datasets x methods x ratio x context.

    lightning_bench sweep --config configs/perplexity/quick_test.yaml [--results_dir DIR | --output FILE]
                          [--model.pretrained DIR] [--methods '[dense, h2o]'] [--streaming.chunk_size 8] ...

Two sweeps per (dataset, method), as the earlier perplexity benchmark laid them out:
  sparsity_sweep        perplexity at each ratio, at one context length;
  context_length_sweep  perplexity at each context length, at one ratio.
`dense` runs at ratio 0 only (it never evicts); an evicting method at ratio 0 never compresses
either, so its cells reproduce dense (a check, not a result). A (length, ratio) pair on both axes
is measured once. Subset: `max_tokens` scores the first windows of the token stream until max_tokens
targets are covered, rounded up to whole batches of `eval_batch_size` windows; `eval_max_documents`
keeps the first N documents.

The grid runs on core/runner.py over the sweep's one JSON (sweep/store.py): re-running the command skips
every cell already in it, so a killed sweep resumes where it stopped and a deleted cell is recomputed;
the grid may grow between runs. A file written with settings that change a cell's value is refused.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import asdict
from pathlib import Path

from lightning_bench.errors import PROG
from lightning_bench.experiments.core.config import parse_command
from lightning_bench.experiments.core.runner import Work, run_grid, sayer
from lightning_bench.experiments.sweep import store
from lightning_bench.experiments.sweep.config import SweepConfig, check_has_kv_cache, settings_fingerprint
from lightning_bench.experiments.sweep.runner import CellRunner, SweepStopped, describe_protocol, markdown_table
from lightning_bench.results.io import check_output
from lightning_bench.results.meta import run_meta

COMMAND = "sweep"
METRIC = ("token perplexity exp(CE) of the scored tokens; bits_per_token = CE / ln 2; "
          "mean_cache_size = KV slots attended per scored token (itself included)")


def main(argv: list[str]) -> int:
    parsed = parse_command(COMMAND, SweepConfig, list(argv), description=SweepConfig.__doc__)
    cfg, resolved = parsed.config, parsed.resolved
    preset = parsed.config_files[-1] if parsed.config_files else None
    cfg.name = cfg.name or (preset.stem if preset else COMMAND)
    output = (check_output("--output", cfg.output, kind="file") if cfg.output else
              check_output("--results_dir", Path(cfg.results_dir) / f"{cfg.name}.json", kind="file"))
    check_has_kv_cache(resolved["model"])
    for section in ("sparsity_sweep", "context_length_sweep"):  # the checked values (floats, in order)
        resolved[section] = asdict(getattr(cfg, section)) if getattr(cfg, section) else None
    config = {**resolved, "name": cfg.name, "output": str(output), "preset": str(preset) if preset else None,
              "preset_sha256": hashlib.sha256(preset.read_bytes()).hexdigest() if preset else None,
              "overrides": list(argv)}  # the command line as given (config files included)
    with store.CellDocument(output, settings_fingerprint(resolved), resolved["datasets"]) as results:
        return _run_cells(cfg, results, config, shlex.join([PROG, COMMAND, *argv]))


def _run_cells(cfg: SweepConfig, results, config: dict, command: str) -> int:
    """Every cell of the grid not yet in the results file, the file rewritten after each."""
    doc, output, grid = results.doc, results.file, cfg.cells()
    specs = {**doc.get("dataset_specs", {}), **config["datasets"]}
    meta_data = dict(doc.get("meta", {}).get("data", {}))
    protocols = dict(doc.get("meta", {}).get("evaluation_protocol", {}))
    runner, checked, ran, last = CellRunner(cfg), set(), [], []
    say = sayer(COMMAND, grid)

    def save() -> None:
        done = sum(store.finished(doc, c) is not None for c in grid)
        results.save(config=config, grid=cfg.grid(), fingerprint=results.fingerprint, dataset_specs=specs,
                     cells_done=done, cells_total=len(grid), complete=done == len(grid),
                     meta=run_meta(seed=cfg.seeds[0], extra={"command": command, "data": meta_data,
                                                             "evaluation_protocol": protocols, "metric": METRIC}))

    def compute(works: list[Work]) -> list[dict]:
        cell = works[0].cell
        if runner.sigterm:  # Lightning caught it during the cell before, which is written
            raise SweepStopped(f"received SIGTERM: stopped after {last[-1]}")
        last.append(f"[{grid.index(cell) + 1}/{len(grid)}] {cell.label}")
        same = store.twin(doc, cell, works[0].settings["method_params"])
        if same is not None:
            say(cell, f"the same cell as {same[0]}")
            return [same[1]]
        figures, dm = runner.run(cell)
        provenance = dm.provenance()
        if cell.dataset not in checked:
            store.refuse_changed_text(doc, cell.dataset, provenance, output)
            checked.add(cell.dataset)
        meta_data[cell.dataset] = provenance
        protocols[cell.dataset] = describe_protocol(dm, cfg, cell.dataset)
        ran.append(cell)
        kept = f"density {figures['density']:.3f}, attention error {figures['attention_error']:.4f}" \
            if figures.get("density") is not None else \
            f"mean cache {figures['mean_cache_size']:.1f} of {figures['dense_mean_cache_size']:.1f}"
        say(cell, f"ppl {figures['perplexity']:.3f}, {kept}, {figures['tokens']} tokens, {figures['seconds']:.1f} s")
        return [figures]

    works = [Work(cell, {"method_params": cfg.resolved_params(cell.method)}, cell.key) for cell in grid]
    results.on_write = save
    try:
        run_grid(works, results, compute, say)
    except SweepStopped as stop:
        print(f"{PROG} {COMMAND}: {stop}; the same command resumes", flush=True)
        return 143
    if runner.sigterm:
        print(f"{PROG} {COMMAND}: received SIGTERM: stopped after {last[-1]}; the same command resumes", flush=True)
        return 143
    done = sum(store.finished(doc, c) is not None for c in grid)
    print(f"{PROG} {COMMAND}: {output}: {len(ran)} cells run now, {done}/{len(grid)} of this grid done")
    if cfg.sparsity_sweep:
        for dataset in cfg.data:
            print(markdown_table(doc, dataset))
    return 0
