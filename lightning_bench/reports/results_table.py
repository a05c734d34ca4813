"""`lightning_bench results`: every result record under some folders in one table, newest first.

    lightning_bench results [DIR ...] [--filter KEY=VALUE ...] [--csv FILE]

Which files are records, and how each gives its rows: reports/records.py. Columns and their meaning:
docs/results.md ("A table across runs").
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from lightning_bench.errors import ConfigError
from lightning_bench.reports.records import COLUMNS, collect

COMMAND = "results"
# the widest a column is printed (the path, last, is never cut); the CSV holds every value whole
WIDTHS = {"kind": 13, "model": 24, "data": 28, "protocol": 24, "bits": 4, "sparsity": 18, "metric": 16,
          "value": 10, "cost": 40, "date": 19, "revision": 16}


@dataclass
class ResultsTableConfig:
    """Every result record under some folders in one table, newest first.

    The words before the first option are folders, the same as --dirs (default: benchmark_results)."""

    dirs: list[str] = field(default_factory=lambda: ["benchmark_results"])
    """folders searched, with their subfolders, for records"""
    filter: list[str] = field(default_factory=list)
    """KEY=VALUE: keep the rows whose column KEY reads VALUE, whole; every one must match"""
    csv: Optional[str] = None
    """also write the table to this CSV file (a new file: an existing one is never replaced)"""

    def __post_init__(self):
        self.filters = {}
        for item in self.filter:
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"{COMMAND}: --filter {item!r}: expected KEY=VALUE, e.g. kind=test")
            if key not in COLUMNS:
                raise ConfigError(f"{COMMAND}: --filter {key!r} is no column; valid: {', '.join(COLUMNS)}")
            self.filters[key] = value


def as_options(argv: list[str]) -> list[str]:
    """`results A B --filter k=v --filter j=w` as the parser reads it: the words before the first option
    are `--dirs`, and every --filter value goes into one list (a list option given twice keeps the last)."""
    words = next((i for i, arg in enumerate(argv) if arg.startswith("-")), len(argv))
    out, filters, given, taking = (["--dirs", *argv[:words]] if words else []), [], False, False
    for arg in argv[words:]:
        taking = taking and not arg.startswith("-")
        if taking or arg.startswith("--filter="):
            filters.append(arg if taking else arg.split("=", 1)[1])
        elif arg == "--filter":
            given = taking = True
        else:
            out.append(arg)
    return out + (["--filter", *filters] if filters or given else [])


def check_paths(cfg: ResultsTableConfig) -> list[Path]:
    """Before anything is read: the CSV is a new file that can be written, and every folder exists."""
    if cfg.csv is not None:
        from lightning_bench.results.io import check_output

        if os.path.lexists(cfg.csv):
            raise ConfigError(f"{COMMAND}: --csv {cfg.csv} exists; name a new file (it is never replaced)")
        check_output("--csv", cfg.csv, kind="file")
    for folder in cfg.dirs:
        if not Path(folder).is_dir():
            raise ConfigError(f"{COMMAND}: {folder}: no such folder; name folders that hold records "
                              "(default: benchmark_results)")
    return [Path(folder) for folder in cfg.dirs]


def table(rows: list[dict]) -> str:
    """Fixed-width text: each column as wide as its longest value up to WIDTHS, a longer value cut with `…`."""
    widths = {c: min(WIDTHS.get(c, 10**6), max([len(c)] + [len(r[c]) for r in rows])) for c in COLUMNS}

    def line(values: dict) -> str:
        cut = {c: v if len(v) <= widths[c] else v[:widths[c] - 1] + "…" for c, v in values.items()}
        return "  ".join(cut[c] if c == "path" else cut[c].ljust(widths[c]) for c in COLUMNS)

    header = line({c: c for c in COLUMNS})
    return "\n".join([header, "-" * len(header), *(line(r) for r in rows)])


def write_csv(path: str, rows: list[dict]) -> None:
    from lightning_bench.results.io import write_text_atomic

    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(path, text.getvalue())


def main(argv: list[str]) -> int:
    from lightning_bench.experiments.core.config import parse_command

    cfg = parse_command(COMMAND, ResultsTableConfig, as_options(list(argv)),
                        description=ResultsTableConfig.__doc__).config
    folders = check_paths(cfg)
    rows, skipped = collect(folders)
    shown = [r.values for r in rows if all(r.values[k] == v for k, v in cfg.filters.items())]
    where = ", ".join(map(str, folders)) + (f" matching {' '.join(cfg.filter)}" if cfg.filter else "")
    print(table(shown) if shown else f"no records found under {where}")
    if cfg.csv is not None:
        write_csv(cfg.csv, shown)
    if skipped:  # one line: how many, and the first few to look at
        names = ", ".join(map(str, skipped[:3])) + (", ..." if len(skipped) > 3 else "")
        print(f"skipped {len(skipped)} file{'s' * (len(skipped) != 1)} (not a lightning_bench record, or "
              f"unreadable): {names}")
    return 0
