"""Open-domain QA: NQ-open and TriviaQA. Rows: {"id", "question", "answers": [...], "context"}.

nq_open (NQ_OPEN): NQ-open's JSON lines {question, answer: [...]} (NQ-open.{train,dev}.jsonl; the
hub's google-research-datasets/nq_open rows are the same). id = the row's "id" where it has one, else
its row number (0-based, counted over the files read); context = None (closed book).

triviaqa (TRIVIAQA): the official JSON ({"Data": [{"Question", "QuestionId", "Answer": {"Value",
"Aliases", "NormalizedAliases", ...}, "EntityPages": [{"Filename", ...}], "SearchResults": [{"Filename",
...}]}], "Domain", ...}: qa/{web,wikipedia}-{train,dev}.json of triviaqa-rc, unfiltered-web-*.json of
triviaqa-unfiltered), and the hub's trivia_qa rows ({question, question_id, answer: {value, aliases,
normalized_aliases, ...}, entity_pages: {wiki_context: [...]}, search_results: {search_context: [...]}}).
`answers` = the Value, then the Aliases, stripped and each once; `normalized_aliases` as given (stripped).
The task's setting decides `context`: a hub config with "nocontext" or "unfiltered", or none at all,
gives None (closed book); "rc" gives the evidence documents, EntityPages then SearchResults in file
order, each stripped, joined with a blank line ("" for a question without any). Local evidence is read
from the evidence/ folder next to the qa/ folder (or beside the file): evidence/wikipedia/<Filename>
for EntityPages, evidence/web/<Filename> for SearchResults. A missing evidence file is an error naming
the path expected (the hub builder skips such files silently; a silently shorter context would not be
the benchmark). A question in two files (rc's web and wikipedia) keeps both rows: the second's id is
"<QuestionId>#2".
"""

from __future__ import annotations

from pathlib import Path

from lightning_bench.tasks.generative_readers import (Reader, json_rows, need, no_reference,
                                                                number_repeats, records, unique)
from lightning_bench.errors import ConfigError, MissingData

# -- NQ-open -------------------------------------------------------------------------------------------
NQ_EXPECTED = "NQ-open JSON lines with question, answer (a list of strings)"


def _nq_rows(task, rows: list[dict], where: str, start: int = 0) -> list[dict]:
    out = []
    for n, row in enumerate(rows):
        need(task.name, f"{where} row {n}", row, ("question", "answer"), NQ_EXPECTED)
        answers = unique([row["answer"]] if isinstance(row["answer"], str) else row["answer"])
        if not answers:
            raise no_reference(task.name, f"{where} row {n}", "answer")
        out.append({"id": str(row.get("id", start + n)), "question": row["question"], "answers": answers, "context": None})
    return out


NQ_OPEN = Reader(lambda task, path, start=0: _nq_rows(task, json_rows(task.name, path, NQ_EXPECTED), str(path), start),
                 _nq_rows)

# -- TriviaQA ------------------------------------------------------------------------------------------
TQA_EXPECTED = ('a TriviaQA JSON file ({"Data": [{"Question", "QuestionId", "Answer", "EntityPages", '
                '"SearchResults"}]}) or trivia_qa rows with question, question_id, answer')


def uses_evidence(task) -> bool:
    """Whether the task's setting reads the evidence documents (TriviaQA rc) or none (unfiltered, nocontext)."""
    config = (task.source.hub_config or "").lower()
    return config.startswith("rc") and "nocontext" not in config and "unfiltered" not in config


def _answers(task, answer: dict | None, where: str) -> tuple[list[str], list[str]]:
    answer = answer or {}
    value = answer.get("Value", answer.get("value"))
    aliases = answer.get("Aliases", answer.get("aliases")) or []
    answers = unique([value, *aliases] if value not in (None, "<unk>") else aliases)
    if not answers:  # the test files come without Answer; the hub writes "<unk>"
        raise no_reference(task.name, where, "answer")
    return answers, unique(answer.get("NormalizedAliases", answer.get("normalized_aliases")) or [])


def _row(qid, question: str, answers: tuple[list[str], list[str]], context) -> dict:
    return {"id": str(qid), "question": question.strip(), "answers": answers[0], "normalized_aliases": answers[1],
            "context": context}


def _evidence_root(task: str, path: Path) -> Path:
    for root in (path.parent.parent / "evidence", path.parent / "evidence"):
        if root.is_dir():
            return root
    raise MissingData(f"{task}: evidence folder {path.parent.parent / 'evidence'} not found (TriviaQA rc keeps "
                      f"evidence/ next to the qa/ folder of {path}); the rc setting needs it, unfiltered does not")


def _local_rows(task, path: Path, start: int = 0) -> list[dict]:
    rows = json_rows(task.name, path, TQA_EXPECTED, keys=("Data",))
    if "Question" not in rows[0]:  # the hub layout saved as JSON lines
        return _hub_rows(task, rows, str(path))
    root = _evidence_root(task.name, path) if uses_evidence(task) else None
    cache: dict[Path, str] = {}

    def document(folder: str, item: dict, where: str) -> str:
        if "Filename" not in item:
            raise ConfigError(f"{task.name}: {where}: an evidence entry has no Filename; expected {TQA_EXPECTED}")
        file = root / folder / item["Filename"]
        if file not in cache:
            if not file.is_file():
                raise MissingData(f"{task.name}: evidence file {file} not found ({where} names it); put TriviaQA "
                                  "rc's evidence/ folder next to qa/")
            try:
                cache[file] = file.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as err:
                raise ConfigError(f"{task.name}: evidence file {file} cannot be read ({type(err).__name__}); "
                                  "expected a UTF-8 text file") from None
        return cache[file]

    out = []
    for n, q in enumerate(rows):
        where = f"{path} question {n}"
        need(task.name, where, q, ("Question", "QuestionId"), TQA_EXPECTED)
        context = None
        if root is not None:
            docs = [document("wikipedia", p, where) for p in q.get("EntityPages", [])]
            docs += [document("web", r, where) for r in q.get("SearchResults", [])]
            context = "\n\n".join(docs)
        out.append(_row(q["QuestionId"], q["Question"], _answers(task, q.get("Answer"), where), context))
    return out


def _hub_rows(task, rows: list[dict], where: str) -> list[dict]:
    out = []
    for n, q in enumerate(rows):
        here = f"{where} row {n}"
        need(task.name, here, q, ("question", "question_id", "answer"), TQA_EXPECTED)
        context = None
        if uses_evidence(task):
            docs = [p.get("wiki_context", "") for p in records(q.get("entity_pages"))]
            docs += [r.get("search_context", "") for r in records(q.get("search_results"))]
            context = "\n\n".join(d.strip() for d in docs)
        out.append(_row(q["question_id"], q["question"], _answers(task, q["answer"], here), context))
    return out


TRIVIAQA = Reader(_local_rows, _hub_rows, number_repeats)
