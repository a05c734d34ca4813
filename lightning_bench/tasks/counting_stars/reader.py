"""Counting-Stars rows, from the benchmark's release files or `counting_stars_generate`'s, as
{id, context, question, counts, distractors (reasoning), answers, length, context_size, star_depths}.

Release files (Counting_Stars_EN_multi-evidence-retrieval-<task>_128000_32_32.jsonl): one JSON object a line
with `question` (the context with its stars, then `retrieval_question`), `retrieval_question` (four newlines
and the question), `reference_counting_results` (the counts, in context order) and `context_size`. The wrong
counts a reasoning row's scorer also needs are not a field there; they are read from the row's own
correction sentences. Generated rows hold context / question / counts / distractors directly.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from lightning_bench.errors import ConfigError
from lightning_bench.tasks.counting_stars.definitions import PIECES_PER_TOKEN, QUESTIONS, SEPARATOR
from lightning_bench.tasks.generative_readers import Reader, json_rows, no_reference

EXPECTED = ("Counting-Stars JSON lines: the release files' question, retrieval_question, "
            "reference_counting_results (or counting_stars_generate's context, question, counts)")
# the reasoning sentence's two counts (wrong, then corrected), as the benchmark writes it
CORRECTION = re.compile(r"counted (\d+) ★, but found that a mistake had been made, so the counting was done again, "
                        r"and this time (\d+) ★ was counted correctly")


def _counts(task, where: str, values) -> list[int]:
    if not isinstance(values, list) or not values or not all(isinstance(v, int) and not isinstance(v, bool)
                                                               for v in values):
        raise no_reference(task.name, where, "counts (a list of integers: reference_counting_results)")
    return values


def _release_row(task, row: dict, where: str) -> dict:
    """A release-file row split into context and question, as the template joins them again."""
    full, asked = row.get("question"), row.get("retrieval_question")
    if not isinstance(full, str) or not isinstance(asked, str) or not full.endswith(asked):
        raise ConfigError(f"{task.name}: {where}: `question` does not end with `retrieval_question`; expected "
                          f"{EXPECTED}")
    context, question = full[:-len(asked)], asked[len(SEPARATOR):] if asked.startswith(SEPARATOR) else asked.strip()
    counts = _counts(task, where, row.get("reference_counting_results"))
    corrections = [(int(w), int(a)) for w, a in CORRECTION.findall(context)]
    if task.short_name == "reasoning":
        if [a for _, a in corrections] != counts:
            raise ConfigError(f"{task.name}: {where}: its correction sentences do not give the counts "
                              "reference_counting_results lists; is it a searching file?")
        out = {"context": context, "question": question, "counts": counts, "distractors": [w for w, _ in corrections]}
    elif corrections:
        raise ConfigError(f"{task.name}: {where} holds correction sentences: a reasoning file; read it as "
                          "counting_stars/reasoning")
    else:
        out = {"context": context, "question": question, "counts": counts}
    size = row.get("context_size")
    if isinstance(size, int) and size > 0:  # the nominal length, as the benchmark's plots label it (pieces / 0.8)
        out.update(context_size=size, length=round(size / PIECES_PER_TOKEN))
    return out


def _row(task, row: dict, where: str, position: int) -> dict:
    if not isinstance(row, dict):
        raise ConfigError(f"{task.name}: {where} is not a JSON object; expected {EXPECTED}")
    if row.get("task") not in (None, task.short_name):
        raise ConfigError(f"{task.name}: {where} is a {row['task']} row; name counting_stars/{row['task']} for it")
    if "retrieval_question" in row:
        out = _release_row(task, row, where)
    else:
        missing = [k for k in ("context", "question", "counts") if k not in row]
        if missing:
            raise ConfigError(f"{task.name}: {where} has no {', '.join(missing)}; expected {EXPECTED}")
        out = {k: row[k] for k in ("context", "question", "distractors", "context_size", "length", "star_depths",
                                   "max_new_tokens") if k in row}
        out["counts"] = _counts(task, where, row["counts"])
    if task.short_name == "reasoning" and len(out.get("distractors") or ()) != len(out["counts"]):
        raise ConfigError(f"{task.name}: {where}: a reasoning row needs one wrong count per count (`distractors`)")
    if out["question"] != QUESTIONS[task.short_name]:  # another language or version: scored, but said
        out["question_differs"] = True
    out["answers"] = [json.dumps({"little_penguin": out["counts"]})]
    return {"id": str(row.get("id", position)), **out}


def _file_rows(task, path: Path, start: int = 0) -> list[dict]:
    return _rows(task, json_rows(task.name, path, EXPECTED), str(path), start)


def _rows(task, raw: list[dict], where: str, start: int = 0) -> list[dict]:
    return [_row(task, row, f"{where} row {i}", start + i) for i, row in enumerate(raw)]


READERS = {"counting_stars": Reader(_file_rows, _rows)}
FORMAT_FILES = {"counting_stars": EXPECTED}
