"""SuperGLUE tasks from the JSON-lines files SuperGLUE distributes (<Task>/val.jsonl), one object a line:

- BoolQ: question, passage, idx, label (true/false).
- CB: premise, hypothesis, idx, label (entailment/contradiction/neutral).   RTE: same, entailment/not_entailment.
- COPA: premise, choice1, choice2, question (cause/effect), idx, label (0/1).
- MultiRC: idx, passage{text, questions[{question, idx, answers[{text, idx, label 0/1}]}]}.
- ReCoRD: idx, source, passage{text ("@highlight" lines mark the summary bullets), entities[{start, end}]
  (inclusive end)}, qas[{query (with "@placeholder"), idx, answers[{start, end, text}]}]. The original
  ReCoRD JSON ({"data": [...]} with string "id"s instead of idx) is read too.
- WiC: word, sentence1, sentence2, start1/end1/start2/end2, idx, label (true/false).
- WSC: text, target{span1_index, span1_text, span2_index, span2_text}, idx, label (true/false).
- AX-b (broad-coverage diagnostics, AX-b/AX-b.jsonl): sentence1, sentence2, idx, label (entailment/not_entailment).
- AX-g (Winogender diagnostics, AX-g/AX-g.jsonl): premise, hypothesis, idx, pair_id, label (as AX-b).

The fields each task keeps and its label names are the task's definition (tasks/superglue/
definitions.py). Rows as `datasets` gives them for aps/super_glue (flat; MultiRC/ReCoRD `idx` a dict; labels ints) are
accepted as well, and the output follows that format, so hub and local rows are identical: ReCoRD
keeps the passage text as is and lists the unique entities and answers sorted, as the HF builder does.
"""

from __future__ import annotations

import json
from pathlib import Path

from lightning_bench.tasks.file_readers import (json_lines, no_labels, no_rows, read_text, rows_of_files,
                                                     to_label)
from lightning_bench.errors import ConfigError


def read(task, paths: list[Path]) -> list[dict]:
    return rows_of_files(task.name, paths, lambda _, path: _file_rows(task, path),
                         lambda _, rows, source: from_rows(task, rows, source))


def from_hub(task, split: str, rows: list[dict]) -> list[dict]:
    return from_rows(task, rows, f"hub split {split!r}")


def from_rows(task, rows: list[dict], source: str) -> list[dict]:
    """Normalise original (nested) or HF-flat rows of one SuperGLUE task."""
    out = []
    for n, row in enumerate(rows, 1):
        passage, where = row.get("passage"), f"{source} row {n}"
        if isinstance(passage, dict) and "questions" in passage:  # original MultiRC: one row per answer option
            out += _multirc(task, row, where)
        elif isinstance(passage, dict) and task.source.label_names is None:  # original ReCoRD: one row per query
            out += _record(task, row, where)
        else:
            out.append(_flat(task, row, where))
    return out


def _file_rows(task, path: Path) -> list[dict]:
    text = read_text(task.name, path)
    if text.lstrip().startswith("{"):  # the original ReCoRD JSON is one object {"data": [...]}
        try:
            return json.loads(text)["data"]
        except (json.JSONDecodeError, KeyError, TypeError):
            pass  # JSON lines after all
    rows = json_lines(task.name, path, text, _expected(task))
    if not rows:
        raise no_rows(task.name, path)
    return rows


def _expected(task) -> str:
    fields = task.source.file_fields or ", ".join([*task.source.columns, "idx", "label"])
    return f"SuperGLUE {task.title} JSON lines (fields {fields})"


def _missing(task, where: str) -> ConfigError:
    return ConfigError(f"{task.name}: {where} does not match {_expected(task)}; pass the task's own file with "
                       "--data.paths")


def _flat(task, row: dict, where: str) -> dict:
    row = row | row.get("target", {})  # WSC nests its spans under "target"
    fields, names = list(task.source.columns), task.source.label_names
    if not all(f in row for f in fields) or "idx" not in row:
        raise _missing(task, where)
    idx = row["idx"]
    out = {"id": "-".join(str(v) for v in idx.values()) if isinstance(idx, dict) else str(idx)}
    out |= {f: row[f] for f in fields}
    if isinstance(idx, dict) and "question" in idx:  # MultiRC: the options of one question share an id
        out["question_id"] = f"{idx['paragraph']}-{idx['question']}"
    if names is None:  # ReCoRD: no label, the answers are the gold
        if not row["answers"]:
            raise no_labels(task.name, where)
        return out | {"entities": list(row["entities"]), "answers": list(row["answers"])}
    return out | {"label": to_label(task.name, where, row.get(task.source.label_column), names)}


def _multirc(task, row: dict, where: str) -> list[dict]:
    p = row["passage"]
    if "idx" not in row:
        raise _missing(task, where)
    return [{"id": f"{row['idx']}-{q['idx']}-{a['idx']}", "paragraph": p["text"], "question": q["question"],
             "answer": a["text"], "question_id": f"{row['idx']}-{q['idx']}",
             "label": to_label(task.name, where, a.get("label"), task.source.label_names)}
            for q in p["questions"] for a in q["answers"]]


def _record(task, row: dict, where: str) -> list[dict]:
    p = row["passage"]
    if "entities" not in p or "qas" not in row:
        raise _missing(task, where)
    text = p["text"]
    entities = sorted({text[e["start"]:e["end"] + 1] for e in p["entities"]})  # end is inclusive
    out = []
    for qa in row["qas"]:
        if not qa.get("answers"):
            raise no_labels(task.name, where)
        qid = f"{row['idx']}-{qa['idx']}" if "idx" in qa else qa["id"]
        out.append({"id": qid, "passage": text, "query": qa["query"], "entities": entities,
                    "answers": sorted({a["text"] for a in qa["answers"]})})
    return out
