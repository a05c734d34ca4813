"""LooGLE (Li et al., 2023; bigai-nlco/LooGLE) rows, one request per question.

The original files (LooGLE-testdata/*.jsonl, and the hub's first layout) hold one document a line:
`{input, title, qa_pairs, output}`, `qa_pairs` being a list of `{Q, A, S}` (question, answer, evidence;
longdep_qa adds `type`) written as a Python literal string, as LooGLE's prediction scripts `eval` it, or
"none" for the summarization task, whose gold is `output`. Each question becomes one row (the document
repeated); a summarization document is one row. The hub's current layout (bigai-nlco/LooGLE, configs
shortdep_qa, longdep_qa, shortdep_cloze, summarization) is already one question a row,
`{context, title, question, answer, ...}`; both are read.

Rows: `id` (position of the request), `doc` (the document's position in its file), `title`, `context`
(the document), `question` ("" for summarization), `answers` ([the gold answer]), `evidence` (S) where
given, `type` (longdep_qa). Cloze rows add `masks`: {"<mask-0>": entity, ...} as LooGLE's scorer compares
them (a list of entities, as the hub gives them, is numbered <mask-0>, <mask-1>, ...); their `answers`
hold that dict as a JSON string. qa_pairs are parsed with `ast.literal_eval` (the same literals, never
executed). Every problem is a one-line ConfigError naming the file and row.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from lightning_bench.tasks.generative_readers import Reader, json_rows, no_reference
from lightning_bench.errors import ConfigError

EXPECTED = ("LooGLE's JSON lines (input, title, qa_pairs as a list of {Q, A, S}, output), "
            "or the hub's rows (context, question, answer)")
NONE = ("none", "None", "", None)


def _literal(value, task, where: str, what: str):
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise ConfigError(f"{task.name}: {where}: {what} is not a Python/JSON literal; expected {EXPECTED}") from None


def masks_of(value, task, where: str) -> dict[str, str]:
    """A cloze answer as LooGLE's scorer holds it: {"<mask-n>": entity}."""
    value = _literal(value, task, where, "the cloze answer")
    if isinstance(value, (list, tuple)):
        value = {f"<mask-{i}>": v for i, v in enumerate(value)}
    if not isinstance(value, dict) or not value or not all(isinstance(v, str) for v in value.values()):
        raise ConfigError(f"{task.name}: {where}: the cloze answer {str(value)[:80]!r} is not a non-empty "
                          "{'<mask-n>': entity} mapping; expected " + EXPECTED)
    return {str(k): v for k, v in value.items()}


def _request(task, where: str, context: str, title, question: str, answer, extra: dict) -> dict:
    row = {"context": context, "title": "" if title is None else str(title), "question": question, **extra}
    if task.short_name == "shortdep_cloze":
        masks = masks_of(answer, task, where)
        return {**row, "answers": [json.dumps(masks, ensure_ascii=False)], "masks": masks}
    if isinstance(answer, (int, float)) and not isinstance(answer, bool):
        answer = str(answer)  # a longdep_qa option number written as a number
    if not isinstance(answer, str) or not answer.strip():
        raise no_reference(task.name, where, "answer")
    return {**row, "answers": [answer]}


def _document_rows(task, row: dict, here: str, doc: int) -> list[dict]:
    if not isinstance(row["input"], str) or not row["input"].strip():
        raise ConfigError(f"{task.name}: {here} has an empty input document; expected {EXPECTED}")
    if task.short_name == "longdep_summarization":
        return [_request(task, here, row["input"], row.get("title"), "", row.get("output"), {"doc": doc})]
    if row.get("qa_pairs") in NONE:
        return []  # a document without questions asks nothing of a QA task
    pairs = _literal(row["qa_pairs"], task, here, "qa_pairs")
    if not isinstance(pairs, list):
        raise ConfigError(f"{task.name}: {here}: qa_pairs is a {type(pairs).__name__}, not a list of "
                          f"{{Q, A, S}}; expected {EXPECTED}")
    out = []
    for q, pair in enumerate(pairs):
        at = f"{here} question {q}"
        if not isinstance(pair, dict) or "Q" not in pair or "A" not in pair:
            raise ConfigError(f"{task.name}: {at} has no Q or A; expected {EXPECTED}")
        extra = {"doc": doc, **({"evidence": pair["S"]} if "S" in pair else {}),
                 **({"type": pair["type"]} if "type" in pair else {})}
        out.append(_request(task, at, row["input"], row.get("title"), str(pair["Q"]), pair["A"], extra))
    return out


def _rows(task, raw: list[dict], where: str, start: int = 0) -> list[dict]:
    out: list[dict] = []
    for i, row in enumerate(raw):
        here = f"{where} row {i}"
        if "input" in row:  # one document a row (the original files)
            found = _document_rows(task, row, here, i)
        elif "context" in row and ("answer" in row or "output" in row):  # one question a row (the hub now)
            answer = row["answer"] if "answer" in row else row["output"]
            question = "" if row.get("question") in NONE else str(row["question"])
            extra = {"doc": row.get("doc_id", i), **({"evidence": row["evidence"]} if "evidence" in row else {})}
            found = [_request(task, here, row["context"], row.get("title"), question, answer, extra)]
        else:
            raise ConfigError(f"{task.name}: {here} has neither input nor context; expected {EXPECTED}")
        for r in found:
            r["id"] = str(start + len(out))
            out.append(r)
    if not out:
        raise ConfigError(f"{task.name}: {where} holds no questions for {task.short_name}; expected {EXPECTED}")
    return out


def _file_rows(task, path: Path, start: int = 0) -> list[dict]:
    return _rows(task, json_rows(task.name, path, EXPECTED), str(path), start)


READERS = {"loogle": Reader(_file_rows, _rows)}
FORMAT_FILES = {"loogle": "LooGLE-testdata/<task>.jsonl (input, title, qa_pairs, output; one document a line)"}
