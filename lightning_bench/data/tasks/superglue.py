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

Rows as `datasets` gives them for aps/super_glue (flat; MultiRC/ReCoRD `idx` a dict; labels ints) are
accepted as well, and the output follows that format, so hub and local rows are identical: ReCoRD
keeps the passage text as is and lists the unique entities and answers sorted, as the HF builder does.
"""

from __future__ import annotations

import json
from pathlib import Path

from lightning_bench.data.tasks.files import json_lines, no_labels, no_rows, read_text, to_label, rows_of_files
from lightning_bench.errors import ConfigError

BOOL = ("False", "True")
# task -> (SuperGLUE folder name, fields copied as they are, label names)
LAYOUTS = {
    "boolq": ("BoolQ", ("question", "passage"), BOOL),
    "cb": ("CB", ("premise", "hypothesis"), ("entailment", "contradiction", "neutral")),
    "copa": ("COPA", ("premise", "choice1", "choice2", "question"), ("choice1", "choice2")),
    "multirc": ("MultiRC", ("paragraph", "question", "answer"), BOOL),
    "record": ("ReCoRD", ("passage", "query", "entities", "answers"), None),
    "rte": ("RTE", ("premise", "hypothesis"), ("entailment", "not_entailment")),
    "wic": ("WiC", ("word", "sentence1", "sentence2"), BOOL),
    "wsc": ("WSC", ("text", "span1_text", "span2_text", "span1_index", "span2_index"), BOOL),
}
# the original formats' fields, where LAYOUTS' flat fields do not say it
FORMATS = {"multirc": "idx, passage{text, questions[{question, idx, answers[{text, idx, label}]}]}",
           "record": "idx, passage{text, entities}, qas[{query, idx, answers}]",
           "wsc": "text, target{span1_index, span1_text, span2_index, span2_text}, idx, label"}


def read(task: str, paths: list[Path]) -> list[dict]:
    return rows_of_files(task, paths, _file_rows, from_rows)


def from_hub(task: str, split: str, rows: list[dict]) -> list[dict]:
    return from_rows(task, rows, f"hub split {split!r}")


def from_rows(task: str, rows: list[dict], source: str) -> list[dict]:
    """Normalise original (nested) or HF-flat rows of one SuperGLUE task."""
    sub = task.split("/")[1]
    out = []
    for n, row in enumerate(rows, 1):
        if sub in ("multirc", "record") and isinstance(row.get("passage"), dict):
            out += (_multirc if sub == "multirc" else _record)(task, row, f"{source} row {n}")
        else:
            out.append(_flat(task, sub, row, f"{source} row {n}"))
    return out


def _file_rows(task: str, path: Path) -> list[dict]:
    text = read_text(task, path)
    if text.lstrip().startswith("{") and task == "superglue/record":  # original ReCoRD JSON, one object
        try:
            return json.loads(text)["data"]
        except (json.JSONDecodeError, KeyError, TypeError):
            pass  # JSON lines after all
    rows = json_lines(task, path, text, _expected(task))
    if not rows:
        raise no_rows(task, path)
    return rows


def _expected(task: str) -> str:
    sub = task.split("/")[1]
    fields = FORMATS.get(sub) or ", ".join([*LAYOUTS[sub][1], "idx", "label"])
    return f"SuperGLUE {LAYOUTS[sub][0]} JSON lines (fields {fields})"


def _missing(task: str, where: str) -> ConfigError:
    return ConfigError(f"{task}: {where} does not match {_expected(task)}; pass the task's own file with --data.paths")


def _flat(task: str, sub: str, row: dict, where: str) -> dict:
    row = row | row.get("target", {})  # WSC nests its spans under "target"
    fields, names = LAYOUTS[sub][1], LAYOUTS[sub][2]
    if not all(f in row for f in fields) or "idx" not in row:
        raise _missing(task, where)
    idx = row["idx"]
    out = {"id": "-".join(str(v) for v in idx.values()) if isinstance(idx, dict) else str(idx)}
    out |= {f: row[f] for f in fields}
    if sub == "multirc":
        out["question_id"] = f"{idx['paragraph']}-{idx['question']}"
    if names is None:  # ReCoRD: no label, the answers are the gold
        if not row["answers"]:
            raise no_labels(task, where)
        return out | {"entities": list(row["entities"]), "answers": list(row["answers"])}
    return out | {"label": to_label(task, where, row.get("label"), names)}


def _multirc(task: str, row: dict, where: str) -> list[dict]:
    p = row["passage"]
    if "questions" not in p or "idx" not in row:
        raise _missing(task, where)
    return [{"id": f"{row['idx']}-{q['idx']}-{a['idx']}", "paragraph": p["text"], "question": q["question"],
             "answer": a["text"], "question_id": f"{row['idx']}-{q['idx']}",
             "label": to_label(task, where, a.get("label"), BOOL)}
            for q in p["questions"] for a in q["answers"]]


def _record(task: str, row: dict, where: str) -> list[dict]:
    p = row["passage"]
    if "entities" not in p or "qas" not in row:
        raise _missing(task, where)
    text = p["text"]
    entities = sorted({text[e["start"]:e["end"] + 1] for e in p["entities"]})  # end is inclusive
    out = []
    for qa in row["qas"]:
        if not qa.get("answers"):
            raise no_labels(task, where)
        qid = f"{row['idx']}-{qa['idx']}" if "idx" in qa else qa["id"]
        out.append({"id": qid, "passage": text, "query": qa["query"], "entities": entities,
                    "answers": sorted({a["text"] for a in qa["answers"]})})
    return out
