"""The report's two pages: `report.md` (figures linked from figures/) and `report.html`, one file that
opens offline: its figures are embedded as base64 PNG, its tables are HTML tables."""

from __future__ import annotations

import base64
import html
import os
from pathlib import Path

from lightning_bench.reports.figures import Figure, Table

STYLE = ("body{font-family:sans-serif;max-width:60em;margin:auto;padding:1em}"
         "table{border-collapse:collapse;font-size:small}td,th{border:1px solid #ccc;padding:2px 6px}"
         ".provenance{color:#555;font-size:small}.warning{color:firebrick;font-weight:bold}img{max-width:100%}")


def link(source: str, folder: Path) -> str:
    """The source file as the page links it: relative to the report folder when there is a relative path
    (another drive on Windows has none), else absolute."""
    try:
        return Path(os.path.relpath(Path(source).resolve(), folder.resolve())).as_posix()
    except ValueError:
        return Path(source).resolve().as_posix()


def cell_text(value) -> str:
    return format(value, ".5g") if isinstance(value, float) else str(value)


def _markdown_table(table: Table) -> list[str]:
    def line(values):
        return "| " + " | ".join(cell_text(v).replace("|", "\\|") for v in values) + " |"

    return [line(table.columns), "|" + "---|" * len(table.columns), *(line(r) for r in table.rows)]


def markdown(sections: list[tuple[str, list]], folder: Path, header: list[str], svg: bool = True) -> str:
    out = ["# lightning_bench report", "", *header, ""]
    for heading, items in sections:
        out += [f"## {heading}", ""]
        for item in items:
            out += [f"### {item.title}", ""]
            if isinstance(item, Figure):
                out += [f"![{item.title}](figures/{item.name}.png)"
                        + (f" ([SVG](figures/{item.name}.svg))" if svg else ""), ""]
                out += [f"**Warning: {item.warning}**", ""] if item.warning else []
            else:
                out += [*_markdown_table(item), "", f"CSV: [tables/{item.name}.csv](tables/{item.name}.csv)", ""]
            out += [f"*{item.provenance}*", "", f"Source: [{item.source}]({link(item.source, folder)})", ""]
    return "\n".join(out)


def _html_table(table: Table) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(cell_text(v))}</td>" for v in row) + "</tr>"
                   for row in table.rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def page_html(sections: list[tuple[str, list]], folder: Path, header: list[str]) -> str:
    out = ["<!DOCTYPE html>", '<html><head><meta charset="utf-8"><title>lightning_bench report</title>',
           f"<style>{STYLE}</style></head><body>", "<h1>lightning_bench report</h1>",
           *(f"<p>{html.escape(line)}</p>" for line in header)]
    for heading, items in sections:
        out.append(f"<h2>{html.escape(heading)}</h2>")
        for item in items:
            out.append(f"<h3>{html.escape(item.title)}</h3>")
            if isinstance(item, Figure):
                png = base64.b64encode((folder / "figures" / f"{item.name}.png").read_bytes()).decode("ascii")
                out.append(f'<img src="data:image/png;base64,{png}" alt="{html.escape(item.title)}">')
                if item.warning:
                    out.append(f'<p class="warning">Warning: {html.escape(item.warning)}</p>')
            else:
                out.append(_html_table(item))
            out += [f'<p class="provenance">{html.escape(item.provenance)}</p>',
                    f'<p class="provenance">Source: <a href="{html.escape(link(item.source, folder))}">'
                    f"{html.escape(item.source)}</a></p>"]
    return "\n".join([*out, "</body></html>", ""])
