"""`lightning_bench report`: figures and tables of some result records, in one report folder.

    lightning_bench report PATH... [-o DIR]

PATH: record files or folders searched for them (reports/records.py decides what a record is). DIR
(default `report`) is new or empty: report.md, report.html (self-contained), figures/NAME.png and .svg
(`--svg false`: PNG only), tables/NAME.csv. What each figure shows: docs/results.md ("Reports").
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from lightning_bench.errors import ConfigError
from lightning_bench.reports import records
from lightning_bench.reports.builders import sweep_items, trainer_items
from lightning_bench.reports.cost_builders import quantization_items, scaling_items
from lightning_bench.reports.downstream_builders import Cell, downstream_items, length_items
from lightning_bench.reports.experiment_builders import (generation_items, models_items,
                                                         multi_dataset_items, task_items)
from lightning_bench.reports.figures import Figure, Table, render

COMMAND = "report"
BUILT = {records.trainer_rows: "trainer", records.sweep_rows: "sweep", records.downstream_rows: "downstream",
         records.task_rows: "task", records.generation_rows: "generation",
         records.multi_dataset_rows: "multi_dataset", records.scaling_rows: "scaling"}
DAMAGED = (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError)


@dataclass
class ReportConfig:
    """Figures and tables of result records, written to one report folder.

    The words before the first option are record files or folders, the same as --paths."""

    paths: list[str] = field(default_factory=list)
    """record files, or folders searched with their subfolders"""
    output: str = "report"
    """the report folder (-o): new, or empty (nothing in it is ever replaced)"""
    svg: bool = True
    """also write each figure as SVG beside its PNG (false: PNG only, e.g. a report kept in a repository)"""
    wandb: bool = False
    """also log the report as one W&B run (job type `report`): each figure an image, each table a W&B Table;
    offline unless logged in"""
    wandb_dir: str = "wandb_logs"
    """where W&B writes its run (`wandb sync DIR/wandb/offline-run-*` uploads an offline one)"""


def as_options(argv: list[str]) -> list[str]:
    words = next((i for i, arg in enumerate(argv) if arg.startswith("-")), len(argv))
    rest = ["--output" if arg == "-o" else arg for arg in argv[words:]]
    return (["--paths", *argv[:words]] if words else []) + rest


def check_paths(cfg: ReportConfig) -> tuple[Path, list[Path]]:
    """Before anything is read: the report folder is new or empty and writable, every PATH exists."""
    from lightning_bench.results.io import check_output

    out = Path(cfg.output)
    if out.resolve() == Path.cwd().resolve():  # it is renamed into place, and the working folder cannot be
        raise ConfigError(f"{COMMAND}: -o {out}: the current folder; name a new folder (e.g. -o report)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"{COMMAND}: -o {out}: exists and is not an empty folder; name a new folder "
                          "(a report never replaces files)")
    check_output("-o", out)
    if not cfg.paths:
        raise ConfigError(f"{COMMAND}: name record files or folders, e.g. `lightning_bench report "
                          "benchmark_results -o report`")
    for path in cfg.paths:
        if not os.path.exists(path):
            raise ConfigError(f"{COMMAND}: {path}: no such file or folder")
    return out, [Path(p) for p in cfg.paths]


def files_of(paths: list[Path]) -> list[Path]:
    """Every file once: a file named, or a folder's records less the cells its results file covers
    (a link to a run's file and the file itself are one file)."""
    found = {}
    for path in paths:
        for file in ([path] if path.is_file() else [f for f in records.json_files(path) if not records.covered(f)]):
            found.setdefault(os.path.realpath(file), file)
    return list(found.values())


@dataclass
class Gathered:
    sections: list = field(default_factory=list)  # (heading, items)
    skipped: list = field(default_factory=list)  # unknown or unreadable
    not_yet: list = field(default_factory=list)  # known records with no figures yet (a generation's seed cells)


def _grid_of(path: Path) -> Path:
    """The grid a loose cell file belongs to: `{grid}/cells/x.json` -> `{grid}`."""
    return path.parent.parent if path.parent.name == "cells" else path.parent


def _significance(aggregated: Path):
    """The generation's significance_tests.json beside its aggregated_results.json, or None."""
    path = aggregated.parent / "significance_tests.json"
    try:
        return json.loads(path.read_text()), path
    except (OSError, ValueError):
        return None, None


def gather(files: list[Path]) -> Gathered:
    got, trainer, run_ids, grids, summaries = Gathered(), [], set(), {}, []
    for path in files:
        try:
            record = json.loads(path.read_text())
            reader = records.reader_of(record)
        except (OSError, ValueError):
            got.skipped.append(path)
            continue
        kind = BUILT.get(reader) or ("cell" if reader is not None and "primary_metric" in record else None)
        if reader is records.IGNORED:
            continue
        if kind == "generation" and "summary" in record:  # one seed's cell: aggregated_results.json has the figures
            got.not_yet.append(f"{path} (generation cell; figures come with aggregated_results.json)")
        elif kind is None:
            got.skipped.append(path)
        elif kind == "trainer" and record.get("run_id") not in run_ids:  # a copy made where links fail: once
            run_ids.add(record.get("run_id") or str(path))
            trainer.append((record, path))
        elif kind == "downstream":
            grids[path] = [Cell(c, _source=str(path), _meta=record.get("meta")) for c in record["cells"].values()]
        elif kind == "cell":
            grids.setdefault(_grid_of(path), []).append(Cell(record, _source=str(_grid_of(path))))
        elif kind == "sweep":
            _add(got, f"Sweep {path}", lambda: sweep_items(record, path), [path])
        elif kind == "scaling":
            _add(got, f"Scaling: time and memory per token ({path})", lambda: scaling_items(record, path), [path])
        elif kind == "task":
            _add(got, f"test --task {path}", lambda: task_items(record, path), [path])
        elif kind == "generation":
            significance, tests_path = _significance(path)
            _add(got, f"Generation {path.parent.name} ({path})",
                 lambda: generation_items(record, significance, path, tests_path), [path])
        elif kind == "multi_dataset" and _add(got, f"Multi-dataset {record.get('model_name')} ({path})",
                                              lambda: multi_dataset_items(record, path), [path]):
            summaries.append((record, path))
    for where, cells in grids.items():
        name = where.stem.removesuffix("_results") if where.suffix == ".json" else where.name
        _add(got, f"Downstream grid {name} ({where})", lambda: downstream_items(cells, name, str(where)), [where])
    if len(summaries) > 1:  # e.g. the transformer, bk and mamba summaries of one results folder
        _add(got, "Models compared (multi_dataset)", lambda: models_items(summaries), [])
    cells = [cell for grid in grids.values() for cell in grid]  # lengths come from different grids
    _add(got, "RULER by context length", lambda: length_items(cells, "ruler"), list(grids))
    if trainer:
        _add(got, "Fit / validate / test records", lambda: trainer_items(trainer), [p for _, p in trainer])
        _add(got, "Quantization", lambda: quantization_items(trainer), [p for _, p in trainer])  # runs at 2+ bits
    return got


def _add(got: Gathered, heading: str, build, paths: list[Path]) -> bool:
    """A section built from records that claim a known shape; one that is not that shape is skipped (False)."""
    try:
        items = build()
    except DAMAGED:
        got.skipped += paths
        return False
    if items:
        got.sections.append((heading, items))
    return True


def unique_names(sections) -> None:
    """Two records may give the same name (two sweeps over one dataset): later ones get `_2`, `_3`..."""
    seen = set()
    for _, items in sections:
        for item in items:
            kind, base, count = type(item), item.name, 1
            while (kind, item.name) in seen:
                count += 1
                item.name = f"{base}_{count}"
            seen.add((kind, item.name))


def write_csv(path: Path, table: Table) -> None:
    from lightning_bench.results.io import write_text_atomic

    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerows([table.columns, *table.rows])
    write_text_atomic(path, text.getvalue())


def write_report(out: Path, got: Gathered, inputs: list[Path], svg: bool = True) -> tuple[int, int]:
    from lightning_bench.reports.page import markdown, page_html
    from lightning_bench.results.io import write_text_atomic

    unique_names(got.sections)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    items = [item for _, section in got.sections for item in section]
    for item in items:
        if isinstance(item, Figure):
            render(item, out / "figures", ("png", "svg") if svg else ("png",))
        else:
            write_csv(out / "tables" / f"{item.name}.csv", item)
    header = [f"Inputs: {', '.join(map(str, inputs))}"]
    header += [f"Skipped (not a lightning_bench record, or unreadable): {', '.join(map(str, got.skipped))}"] \
        if got.skipped else []
    header += [f"Records without figures yet: {', '.join(got.not_yet)}"] if got.not_yet else []
    write_text_atomic(out / "report.md", markdown(got.sections, out, header, svg))
    write_text_atomic(out / "report.html", page_html(got.sections, out, header))
    figures = sum(isinstance(i, Figure) for i in items)
    return figures, len(items) - figures


def main(argv: list[str]) -> int:
    from lightning_bench.experiments.core.config import parse_command

    cfg = parse_command(COMMAND, ReportConfig, as_options(list(argv)), description=ReportConfig.__doc__).config
    out, inputs = check_paths(cfg)
    got = gather(files_of(inputs))
    if got.skipped:  # one line: how many, and the first few to look at
        names = ", ".join(map(str, got.skipped[:3])) + (", ..." if len(got.skipped) > 3 else "")
        print(f"skipped {len(got.skipped)} file{'s' * (len(got.skipped) != 1)} (not a lightning_bench record, "
              f"or unreadable): {names}")
    if not got.sections:
        raise ConfigError(f"{COMMAND}: no record with figures found in {', '.join(cfg.paths)} "
                          "(figures: sweep, downstream / long-context grids, fit/validate/test, test --task, generation, "
                          "multi_dataset, scaling)")
    # written whole into a hidden sibling, then renamed into place: a run stopped halfway leaves no half report
    # under the name asked for (the sibling's relative links are the same as the final folder's)
    partial = out.parent / f".{out.name}.partial-{os.getpid()}"
    try:
        figures, tables = write_report(partial, got, inputs, cfg.svg)
        os.replace(partial, out)  # onto a missing or empty folder (check_paths)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    print(f"wrote {out / 'report.html'} and {out / 'report.md'}: {figures} figures, {tables} tables")
    if cfg.wandb:
        log_wandb(cfg, out, got)
    return 0


def log_wandb(cfg: ReportConfig, out: Path, got: Gathered) -> None:
    """The written report as one W&B run: every figure's PNG as an image (its provenance the caption), every
    table as a W&B Table, under `report/<name>`; grouped by the report folder's name."""
    from lightning_bench.logging_setup import wandb_logger
    from lightning_bench.reports.wandb_log import log_items

    logger = wandb_logger(project="lightning_bench", save_dir=cfg.wandb_dir, name=f"report-{out.name}",
                          group=out.name, job_type="report")
    logger.log_hyperparams({"inputs": list(cfg.paths), "report": str(out)})
    log_items(logger, (item for _, section in got.sections for item in section),
              lambda figure: out / "figures" / f"{figure.name}.png", "report")
    logger.experiment.finish()
