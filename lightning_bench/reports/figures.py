"""A report's figures and tables as plain data, rendered afterwards.

Every figure is built first as a `Figure` (its series' numbers, labels and provenance) and only then drawn,
so the tests read back what a figure shows rather than its pixels, and a page can print the same numbers.
"""

from __future__ import annotations

import io
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

FEW_EXAMPLES = 10  # a bootstrap CI over fewer examples than this is too unstable to read without a warning


@dataclass
class Series:
    """One line, point set or bar group."""

    label: str
    x: list
    y: list
    low: Optional[list] = None  # error bar bounds (e.g. a bootstrap CI), as long as y
    high: Optional[list] = None
    dashed: bool = False  # a reference, e.g. the dense line
    points: bool = False  # markers only, never joined (per-seed values, significance marks)
    marker: str = "o"
    labels: Optional[list] = None  # text written beside each point (e.g. its bits), as long as x


@dataclass
class Figure:
    name: str  # file-safe, unique in the report
    title: str
    xlabel: str
    ylabel: str
    series: list[Series]
    provenance: str  # what produced it: command, model, data (+ sha256), protocol, n, versions
    source: str  # the record file it was read from
    warning: str = ""  # drawn on the figure too: "one point", "CI from fewer than 10 examples (n=4)"
    heatmap: Optional[dict] = None  # {"rows": [...], "cols": [...], "values": [[...]]}; None: series
    scatter: bool = False  # points without lines (a Pareto figure: no order between the cells)
    bars: bool = False  # one bar per x (categories, e.g. tasks); `points` series are drawn over them
    log_x: bool = False  # a logarithmic x axis, ticked at the x values drawn (e.g. sequence lengths)


@dataclass
class Table:
    name: str
    title: str
    columns: list[str]
    rows: list[list]
    provenance: str
    source: str


def warnings_of(series: list[Series], ci_examples: Optional[int] = None) -> str:
    """The figure's warnings: a single measurement (a dashed reference counts once, however long it is
    drawn), and error bars from a bootstrap over fewer than FEW_EXAMPLES examples."""
    measured = sum(1 if s.dashed else len(s.x) for s in series)
    found = ["one point"] if measured == 1 else []
    if ci_examples is not None and ci_examples < FEW_EXAMPLES:
        found.append(f"CI from fewer than {FEW_EXAMPLES} examples (n={ci_examples})")
    return "; ".join(found)


def write_bytes_atomic(path: Path, data: bytes) -> Path:
    """A temporary file beside `path`, then one rename: a reader never sees half a figure."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _draw_series(ax, figure: Figure) -> None:
    for s in figure.series:
        style = {"linestyle": "--" if s.dashed else ("none" if figure.scatter or s.points else "-"),
                 "marker": None if s.dashed else s.marker, "label": s.label}
        if figure.bars and not s.points:
            ax.bar(s.x, s.y, label=s.label, alpha=0.8)
        elif s.low is not None and s.high is not None:
            below = [y - lo if _finite(lo) else 0 for y, lo in zip(s.y, s.low)]
            above = [hi - y if _finite(hi) else 0 for y, hi in zip(s.y, s.high)]
            ax.errorbar(s.x, s.y, yerr=[below, above], capsize=3, **style)
        else:
            ax.plot(s.x, s.y, **style)
        for x, y, text in zip(s.x, s.y, s.labels or []):
            ax.annotate(str(text), (x, y), textcoords="offset points", xytext=(4, 4), fontsize="small")
    if figure.series:
        ax.legend(fontsize="small")


def _log_x(ax, figure: Figure) -> None:
    """A log x axis whose ticks are the x values drawn (a few): 512, 1024, ... rather than powers of ten."""
    from matplotlib.ticker import NullFormatter

    ax.set_xscale("log")
    xs = sorted({x for s in figure.series for x in s.x if _finite(x) and x > 0})
    if 0 < len(xs) <= 12:
        ax.set_xticks(xs, [format(x, "g") for x in xs])
        ax.xaxis.set_minor_formatter(NullFormatter())


def _draw_heatmap(fig, ax, heatmap: dict) -> None:
    import numpy as np

    values = np.array([[np.nan if v is None else v for v in row] for row in heatmap["values"]], dtype=float)
    image = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(heatmap["cols"])), [str(c) for c in heatmap["cols"]], fontsize="small", rotation=90)
    ax.set_yticks(range(len(heatmap["rows"])), [str(r) for r in heatmap["rows"]], fontsize="small")
    fig.colorbar(image, ax=ax)


def render(figure: Figure, folder: Path, formats: tuple[str, ...] = ("png", "svg")) -> list[Path]:
    """`folder/NAME.png` (and `.svg`, or whatever else `formats` names), the warning printed on the axes. Drawn on an Agg canvas of
    its own (no pyplot): no global backend state, nothing opened on a display."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure as Canvas

    fig = Canvas(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if figure.heatmap is not None:
        _draw_heatmap(fig, ax, figure.heatmap)
    else:
        _draw_series(ax, figure)
        if figure.log_x:
            _log_x(ax, figure)
        ax.grid(alpha=0.3)
    ax.set(title=figure.title, xlabel=figure.xlabel, ylabel=figure.ylabel)
    if figure.warning:
        ax.text(0.01, 0.99, figure.warning, transform=ax.transAxes, ha="left", va="top", color="firebrick",
                fontsize="small", bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "firebrick"})
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        buffer = io.BytesIO()
        fig.savefig(buffer, format=fmt, dpi=100, metadata={"Date": None} if fmt == "svg" else None)
        written.append(write_bytes_atomic(folder / f"{figure.name}.{fmt}", buffer.getvalue()))
    return written
