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
Several processes may run one grid into it (`--shard i/N`, `--executor ray`): the file ends the same.
"""

from __future__ import annotations

import functools
import hashlib
import shlex
from dataclasses import asdict
from pathlib import Path

from lightning_bench.errors import PROG
from lightning_bench.experiments.core.config import parse_command
from lightning_bench.experiments.core.execution import recorded_argv
from lightning_bench.experiments.core.runner import Work, run_grid, sayer
from lightning_bench.experiments.sweep import store
from lightning_bench.experiments.sweep.config import SweepConfig, check_has_kv_cache, settings_fingerprint
from lightning_bench.experiments.sweep.streaming_eval import CellRunner, SweepStopped, describe_protocol, markdown_table
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
              "overrides": recorded_argv(argv)}  # as given (config files included), less how the grid ran
    with store.CellDocument(output, settings_fingerprint(resolved), resolved["datasets"]) as results:
        return _run_cells(cfg, results, config, list(argv))


def _run_cells(cfg: SweepConfig, results, config: dict, argv: list[str]) -> int:
    """Every cell of the grid not yet in the results file, the file rewritten after each."""
    doc, output, grid = results.doc, results.file, cfg.cells()
    command = shlex.join([PROG, COMMAND, *argv])
    data, protocols = {}, {}  # what this run measured of each dataset, kept in the document's meta
    runner, measured_now, last = CellRunner(cfg), set(), []
    say = sayer(COMMAND, grid)

    def written(cell, measured) -> None:
        """After each cell is placed (under the document's lock, the document as every run left it): what it
        measured of its dataset, then the summary fields; the document is saved."""
        if measured is not None:
            store.refuse_changed_text(doc, cell.dataset, measured["data"], output)
            data[cell.dataset], protocols[cell.dataset] = measured["data"], measured["protocol"]
            measured_now.add(cell.group)
        meta, done = doc.get("meta", {}), sum(store.finished(doc, c) is not None for c in grid)
        results.save(config=config, grid=cfg.grid(), fingerprint=results.fingerprint,
                     dataset_specs={**doc.get("dataset_specs", {}), **config["datasets"]},
                     cells_done=done, cells_total=len(grid), complete=done == len(grid),
                     results=store.in_grid_order(doc["results"], grid),
                     meta=run_meta(seed=cfg.seeds[0], extra={
                         "command": command, "data": {**meta.get("data", {}), **data},
                         "evaluation_protocol": {**meta.get("evaluation_protocol", {}), **protocols},
                         "metric": METRIC}))

    def compute(works: list[Work]) -> list[dict]:
        """One evaluation for the group's cells (two where a (length, ratio) is on both axes); what it measured
        of the dataset goes with the records to the process writing the document (store.MEASURED)."""
        cell = works[0].cell
        if runner.sigterm:  # Lightning caught it during the cell before, which is written
            raise SweepStopped(f"received SIGTERM: stopped after {last[-1]}")
        last.append(f"[{grid.index(cell) + 1}/{len(grid)}] {cell.label}")
        figures, dm = runner.run(cell)
        kept = f"density {figures['density']:.3f}, attention error {figures['attention_error']:.4f}" \
            if figures.get("density") is not None else \
            f"mean cache {figures['mean_cache_size']:.1f} of {figures['dense_mean_cache_size']:.1f}"
        say(cell, f"ppl {figures['perplexity']:.3f}, {kept}, {figures['tokens']} tokens, {figures['seconds']:.1f} s")
        for work in works[1:]:
            say(work.cell, f"the same cell as {cell.sweep}/{cell.point}")
        measured = {"data": dm.provenance(), "protocol": describe_protocol(dm, cfg, cell.dataset)}
        return [{**figures, store.MEASURED: measured} for _ in works]

    works = [Work(cell, {"method_params": cfg.resolved_params(cell.method)}, cell.group) for cell in grid]
    results.on_write = written
    try:
        records = run_grid(works, results, compute, say, executor=cfg.executor_for(functools.partial(main, argv)),
                           shard=cfg.shard_slice)
    except SweepStopped as stop:
        print(f"{PROG} {COMMAND}: {stop}; the same command resumes", flush=True)
        return 143
    if runner.sigterm:
        print(f"{PROG} {COMMAND}: received SIGTERM: stopped after {last[-1]}; the same command resumes", flush=True)
        return 143
    if records is None:  # cells other shards still owe, or a Ray worker building its grid
        return 0
    done = sum(store.finished(doc, c) is not None for c in grid)
    print(f"{PROG} {COMMAND}: {output}: {len(measured_now)} cells run now, {done}/{len(grid)} of this grid done")
    if cfg.sparsity_sweep:
        for dataset in cfg.data:
            print(markdown_table(doc, dataset))
    return 0
