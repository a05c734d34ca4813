"""A report's figures and tables in a W&B run: each figure's PNG an image captioned with its provenance,
each table a W&B Table. Shared by `report --wandb` (report.py) and `downstream --wandb`, whose run gets the
grid's figures through `log_downstream`, handed to the experiment by cli.py (experiments sit below reports
and do not import them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable

from lightning_bench.reports.downstream_builders import Cell, downstream_items
from lightning_bench.reports.figures import Figure, render


def log_items(logger, items: Iterable, png_of: Callable[[Figure], Path], prefix: str) -> None:
    """Every figure under `{prefix}/{name}` as its PNG (`png_of(figure)`) with its provenance as the caption,
    every table under `{prefix}/{name}` as a W&B Table."""
    for item in items:
        if isinstance(item, Figure):
            logger.log_image(f"{prefix}/{item.name}", images=[str(png_of(item))], caption=[item.provenance])
        else:
            logger.log_table(f"{prefix}/{item.name}", columns=list(item.columns),
                             data=[[cell_value(v) for v in row] for row in item.rows])


def cell_value(value):
    """A table cell as W&B Tables take it: a blank (a missing figure) is None, since a Table types each
    column by its first value and a column of numbers refuses an empty string; anything not a number or
    text as its text."""
    if value == "" or value is None:
        return None
    return value if isinstance(value, (int, float, str)) else str(value)


def log_downstream(logger, results_path: Path) -> None:
    """The figures and tables `lightning_bench report` makes of a downstream grid's `{name}_results.json`,
    under `downstream/<name>`. The PNGs are drawn into the run's own folder (`figures/`, beside the `files/`
    W&B uploads), which outlives the call, so a W&B set to link media rather than copy them still finds them."""
    results_path = Path(results_path)
    record = json.loads(results_path.read_text())
    cells = [Cell(c, _source=str(results_path), _meta=record.get("meta")) for c in record["cells"].values()]
    items = downstream_items(cells, results_path.stem.removesuffix("_results"), str(results_path))
    folder = Path(logger.experiment.dir).parent / "figures"
    log_items(logger, items, lambda figure: render(figure, folder)[0], "downstream")


def written_records(trainer) -> list[Path]:
    """The record files a fit / validate / test wrote (ResultsRecorder's; DownstreamRecorder's for --task)."""
    paths = []
    for callback in getattr(trainer, "callbacks", []):
        written = getattr(callback, "written", None)
        if isinstance(written, dict):
            paths += [Path(p) for p in written.values()]
        elif written:  # a --task run writes the merged view and its own file: the figures are of this run
            own = Path(written).with_name(f"{Path(written).stem}_{getattr(callback, 'run_id', '')}.json")
            paths.append(own if own.is_file() else Path(written))
    return paths


def log_records(trainer) -> None:
    """Into the W&B run of a fit / validate / test (`--wandb true`): the figures and tables `lightning_bench
    report` makes of the records it wrote (the record table, a fit's loss curves from its CSV log when it has
    one, a --task run's scores), under `record/<name>`. Without a W&B logger: nothing."""
    from lightning.pytorch.loggers import WandbLogger

    from lightning_bench.reports import records
    from lightning_bench.reports.builders import trainer_items
    from lightning_bench.reports.experiment_builders import task_items

    logger = next((lg for lg in getattr(trainer, "loggers", []) if isinstance(lg, WandbLogger)), None)
    paths = written_records(trainer)
    if logger is None or not paths:
        return
    items, trainer_records = [], []
    for path in paths:
        record = json.loads(path.read_text())
        reader = records.reader_of(record)
        if reader is records.task_rows:
            items += task_items(record, path)
        elif reader is records.trainer_rows:
            trainer_records.append((record, path))
    items = trainer_items(trainer_records) + items
    folder = Path(logger.experiment.dir).parent / "figures"
    log_items(logger, items, lambda figure: render(figure, folder)[0], "record")
