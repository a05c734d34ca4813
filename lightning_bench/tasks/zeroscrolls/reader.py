"""ZeroSCROLLS file readers (issue 16): READERS maps a format name to a reader object with read(task, paths)
and from_hub(task, split, rows).

"zeroscrolls": the rows of one task's split as released (tau/zero_scrolls' <task>.zip holds
<split>.jsonl; the hub's tau/zero_scrolls configs hold the same rows): id, pid, input (the whole
canonical prompt: instruction, document, query, response header), output, document_start_index,
document_end_index, query_start_index, query_end_index, truncation_seperator (sic) and, for musique,
space_digest and book_sum_sort, inner_docs_start_indices. Only the small validation split has outputs;
the test split's are hidden (scored by the leaderboard), so reading it is a one-line error.

A row with several references comes as several lines with the same id (NarrativeQA, Qasper, SQuALITY):
they become one row with `outputs` (the list of references, in file order). The index fields cut `input`
into `prefix` (the instruction and the document's header), `document` (what the model may lose the middle
of), `query` (the question, '' for gov_report and summ_screen_fd) and `response_header` (what follows the
query: "Answer:", "Summary:", ...). The references each metric needs are checked here, so a malformed one
is a one-line error naming the row, not a crash in the scorer.
"""

from __future__ import annotations

import re
from pathlib import Path

from lightning_bench.tasks.generative_readers import Reader, json_rows, need, no_reference
from lightning_bench.errors import ConfigError

EXPECTED = ("ZeroSCROLLS' <task>/<split>.jsonl (from tau/zero_scrolls' <task>.zip): JSON lines of {id, pid, "
            "input, output, document_start_index, document_end_index, query_start_index, query_end_index, "
            "truncation_seperator}")
FORMAT_FILES = {"zeroscrolls": EXPECTED}  # what a missing file should have been
INDEX_FIELDS = ("document_start_index", "document_end_index", "query_start_index", "query_end_index")


# the patterns the official metrics read a reference with (tasks/zeroscrolls/scorer.py parses the
# predictions the same way; kept apart so the reader does not import the scorer)
_LETTER = re.compile(r"\b[A-D]\b")
_PERCENTAGE = re.compile(r"\d+\.?\d*%")


def _check_reference(task, where: str, output: str) -> None:
    name = task.short_name
    if name == "quality" and not _LETTER.search(output):
        raise ConfigError(f"{task.name}: {where}: reference {output[:60]!r} names no option letter A-D")
    if name == "space_digest" and not _PERCENTAGE.search(output):
        raise ConfigError(f"{task.name}: {where}: reference {output[:60]!r} holds no percentage")
    if name == "book_sum_sort":
        ids = [int(p) for p in re.sub(r"[^0-9\s,]", "", output).replace(",", " ").split()]
        if not ids or sorted(ids) != list(range(1, len(ids) + 1)):
            raise ConfigError(f"{task.name}: {where}: reference {output[:60]!r} is not an order of the summary "
                              "IDs 1..n")


def _rows(task, raw: list[dict], where: str, start: int = 0) -> list[dict]:
    by_id: dict[str, dict] = {}
    for i, row in enumerate(raw):
        at = f"{where} row {i}"
        need(task.name, at, row, ("id", "input", "output") + INDEX_FIELDS, EXPECTED)
        text, output = row["input"], row["output"]
        if not isinstance(text, str):
            raise ConfigError(f"{task.name}: {at}: input is a {type(text).__name__}, not a string; expected {EXPECTED}")
        if output is None or (isinstance(output, str) and not output.strip()):
            raise no_reference(task.name, f"{at} (the test split hides its outputs; read the validation split)",
                               "reference output")
        if not isinstance(output, str):
            raise ConfigError(f"{task.name}: {at}: output is a {type(output).__name__}, not a string")
        idx = [row[k] for k in INDEX_FIELDS]
        ds, de, qs, qe = idx
        if (any(isinstance(v, bool) or not isinstance(v, int) for v in idx) or not 0 <= ds <= de <= len(text)
                or not 0 <= qs <= qe <= len(text) or (qs < qe and qs < de)):
            raise ConfigError(f"{task.name}: {at}: the index fields {dict(zip(INDEX_FIELDS, idx))} do not cut its "
                              f"{len(text)}-character input into a document and then a query; expected {EXPECTED}")
        _check_reference(task, at, output)
        key = str(row["id"])
        if key in by_id:  # another reference of the same input
            if by_id[key]["input"] != text:
                raise ConfigError(f"{task.name}: {at}: id {key!r} was read before with a different input")
            by_id[key]["outputs"].append(output)
            continue
        by_id[key] = {"id": key, "pid": row.get("pid"), "input": text, "outputs": [output],
                      "prefix": text[:ds], "document": text[ds:de], "query": text[qs:qe],
                      # a task without a query (gov_report) may put its empty query anywhere
                      "response_header": text[max(qe, de):], "document_start_index": ds, "document_end_index": de,
                      "query_start_index": qs, "query_end_index": qe,
                      "truncation_seperator": row.get("truncation_seperator", ""),
                      "inner_docs_start_indices": list(row.get("inner_docs_start_indices") or [])}
    return list(by_id.values())


def _file_rows(task, path: Path, start: int = 0) -> list[dict]:
    return _rows(task, json_rows(task.name, path, EXPECTED), str(path), start)


def _merge_repeats(rows: list[dict]) -> list[dict]:
    """One row per id over all files too (a reference may come from a second file)."""
    merged: dict[str, dict] = {}
    for row in rows:
        if row["id"] in merged:
            merged[row["id"]]["outputs"].extend(row["outputs"])
        else:
            merged[row["id"]] = row
    return list(merged.values())


READERS = {"zeroscrolls": Reader(_file_rows, _rows, finish=_merge_repeats)}
