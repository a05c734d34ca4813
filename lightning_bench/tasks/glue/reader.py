"""GLUE tasks from the TSV files GLUE distributes (column names are the files' own).

- CoLA (raw CoLA release and GLUE's CoLA/dev.tsv): no header; columns source, label (0/1),
  original judgement marker ("*", "?*" or empty), sentence.
- SST-2: header `sentence  label` (0/1).
- MRPC (msr_paraphrase_*.txt and GLUE's MRPC/dev.tsv): header `Quality  #1 ID  #2 ID  #1 String
  #2 String`, Quality 1 = paraphrase; the files start with a byte-order mark.
- QQP: header `id  qid1  qid2  question1  question2  is_duplicate`.
- STS-B: header `index genre filename year old_index source1 source2 sentence1 sentence2 score`
  (read by name: only sentence1, sentence2 and score are used).
- MNLI: header with sentence1, sentence2, gold_label (entailment/neutral/contradiction) among parse
  and annotator columns; the file name says matched or mismatched.
- QNLI: header `index  question  sentence  label` (entailment/not_entailment).
- RTE / WNLI: header `index  sentence1  sentence2  label` (RTE entailment/not_entailment, WNLI 0/1).

Which column holds which field, and the label names, are the task's definition
(tasks/glue/definitions.py, `Source.columns` / `label_column` / `label_names`); CoLA names its
columns by position. GLUE's test files have no label column; reading one is an error. Rows come out as the HF
`nyu-mll/glue` rows do: its field names, integer labels (STS-B a float) and `id` = the row's position
in the split (the hub's `idx`), counted per subset for MNLI.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from lightning_bench.tasks.file_readers import FIX_PATHS, NO_LABELS, no_labels, no_rows, read_text, to_label
from lightning_bench.errors import ConfigError

# CoLA's raw release (and GLUE's CoLA/dev.tsv) has no header: its definition names columns by position
POSITIONAL_WIDTH = 4
POSITIONAL_FORMAT = "no header and 4 columns: source, label 0/1, judgement marker, sentence"


def read(task, paths: list[Path]) -> list[dict]:
    """Rows of `task` (a TaskDefinition) from its TSV files, in the order given."""
    positional = isinstance(task.source.label_column, int)
    rows = []
    for path in paths:
        for row in (_positional(task, path) if positional else _with_header(task, path)):
            rows.append(row | _subset(task, path.name))
    return _numbered(rows)


def from_hub(task, split: str, rows: list[dict]) -> list[dict]:
    """Hub rows already carry the HF field names and integer labels; check the labels, set `id`."""
    fields, names = list(task.source.columns), task.source.label_names
    return _numbered([{f: row[f] for f in fields} | {"label": _label(task, f"hub split {split!r}", row["label"], names)}
                      | _subset(task, split) for row in rows])


def _subset(task, name: str) -> dict:
    """MNLI rows say which dev set they are from; train shares the matched genres."""
    if "validation_matched" not in task.source.hub_splits.get("validation", ()):
        return {}
    return {"subset": "mismatched" if "mismatched" in name else "matched"}


def _numbered(rows: list[dict]) -> list[dict]:
    """`id` = position in the split (the hub's `idx`); MNLI counts each subset on its own, as the hub does."""
    counts: dict[str | None, int] = {}
    out = []
    for row in rows:
        subset = row.get("subset")
        n = counts[subset] = counts.get(subset, -1) + 1
        out.append({"id": f"{subset}-{n}" if subset else str(n), **row})
    return out


def _tsv(task, path: Path) -> list[list[str]]:
    # QUOTE_NONE: GLUE sentences contain unbalanced '"' that csv would otherwise treat as quoting
    return list(csv.reader(io.StringIO(read_text(task.name, path)), delimiter="\t", quoting=csv.QUOTE_NONE))


def _positional(task, path: Path) -> list[dict]:
    name, names, label_at = task.name, task.source.label_names, task.source.label_column
    lines = _tsv(task, path)
    if lines[0] == ["index", "sentence"]:  # GLUE's CoLA test.tsv
        raise no_labels(name, str(path))
    if len(lines[0]) != POSITIONAL_WIDTH or lines[0][label_at] not in names:
        raise ConfigError(f"{name}: {path} is not a GLUE {task.title} TSV (expected {POSITIONAL_FORMAT}); "
                          f"pass {task.title}'s in_domain_dev.tsv/out_of_domain_dev.tsv with --data.paths")
    rows = []
    for n, line in enumerate(lines, 1):
        if len(line) != POSITIONAL_WIDTH:
            raise ConfigError(f"{name}: {path} line {n} has {len(line)} columns; expected {POSITIONAL_FORMAT}")
        rows.append({f: line[c] for f, c in task.source.columns.items()}
                    | {"label": to_label(name, f"{path} line {n}", line[label_at], names)})
    return rows


def _with_header(task, path: Path) -> list[dict]:
    name, fields, label_col, names = task.name, task.source.columns, task.source.label_column, task.source.label_names
    header, *lines = _tsv(task, path)
    if not set(fields.values()) <= set(header):
        expected = "<TAB>".join([*fields.values(), label_col])
        raise ConfigError(f"{name}: {path} is not a GLUE {task.title} TSV (expected a header with the columns "
                          f"'{expected}'); pass the task's own file with --data.paths")
    if label_col not in header:
        raise ConfigError(f"{name}: {path} has no '{label_col}' column: the split has no labels; {FIX_PATHS}")
    if not lines:
        raise no_rows(name, path)
    col = {c: i for i, c in enumerate(header)}
    rows = []
    for n, line in enumerate(lines, 2):
        if len(line) != len(header):
            raise ConfigError(f"{name}: {path} line {n} has {len(line)} columns, the header {len(header)}")
        label = _label(task, f"{path} line {n}", line[col[label_col]], names)
        rows.append({f: line[col[c]] for f, c in fields.items()} | {"label": label})
    return rows


def _label(task, where: str, value, names: tuple[str, ...] | None) -> int | float:
    if names is not None:
        return to_label(task.name, where, value, names)
    if value in NO_LABELS:
        raise no_labels(task.name, where)
    try:  # STS-B similarity score
        return float(value)
    except ValueError:
        raise ConfigError(f"{task.name}: {where}: score {value!r} is not a number (STS-B scores are 0-5)") from None
