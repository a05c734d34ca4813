"""Summarization: CNN/DailyMail, XSum and Multi-News. Rows: {"id", "document", "summary"}.

cnn_dailymail (CNN_DAILYMAIL):
- the raw `.story` files (article paragraphs, then "@highlight" blocks); a path may also be a folder of
  them, or a url list of the official split (url_lists/all_{train,val,test}.txt): its stories are the
  `<sha1 of the url>.story` files in cnn_stories/, dailymail_stories/, cnn/stories/ or dailymail/stories/
  beside url_lists/ (a listed story that is missing is an error naming where it was looked for).
  A story is read as abisee/cnn_dailymail 3.0.0 builds its rows, so local and hub rows are the same:
  lines stripped, " ." added to a line without end punctuation, the article's non-empty lines joined by
  spaces, `summary` = the highlights one per line joined with "\n" (ROUGE-Lsum's sentence split);
  id = the file stem (the url's sha1, the hub's id).
- the hub layout {article, highlights, id} as rows, JSON lines, a JSON list / {"data": [...]}, or CSV.
A story or row without highlights has no reference: a one-line error.

xsum (XSUM): the hub layout {document, summary, id} (JSON lines, a list, {"data": [...]}), and H2O's
XSum prompt files ({article, summary_gt, ...}; `article` = "###\nArticle: <document>\n\nSummarize the
above article in 1 sentence.\n"): the document is the text after the last "###\nArticle:" up to the
closing "Summarize the above article in N sentence(s)." line, stripped. The wrapper (and, in k-shot
files, the in-context examples before the last "###\nArticle:") is dropped so our own template applies;
H2O's documents have their line breaks collapsed to spaces, unlike the hub's. A row without an id gets
its row number (0-based, counted over the files read) as id.

multi_news (MULTI_NEWS): the hub layout {document, summary} (source documents separated by "|||||"),
and the original line files: `<split>.src` (one example a line, documents separated by "|||||", line
breaks written as "NEWLINE_CHAR") with its `<split>.tgt` beside it (either may be named; summaries start
with "– "), read as the hub builds its rows (NEWLINE_CHAR -> "\n"), except that the summary's leading "– "
is removed from file and hub rows alike (the hub keeps it).
`document` = the source documents, stripped, joined with a blank line; `documents` lists them;
id = the row number (0-based, counted over the files read).
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
from pathlib import Path

from lightning_bench.tasks.file_readers import no_rows
from lightning_bench.tasks.generative_readers import Reader, json_rows, missing, need, no_reference, text_of
from lightning_bench.errors import ConfigError, MissingData

# -- CNN/DailyMail --------------------------------------------------------------------------------------
CNN_EXPECTED = ("CNN/DailyMail .story files (a folder of them, or a url list of the official split) or rows "
                "with article, highlights, id")
END_TOKENS = (".", "!", "?", "...", "'", "`", '"', "\u2019", "\u201d", ")")  # as the hub builder has them
STORY_DIRS = ("cnn_stories", "dailymail_stories", "cnn/stories", "dailymail/stories")


def story(text: str) -> tuple[str, list[str]]:
    """(article, highlights) of one .story file, as abisee/cnn_dailymail 3.0.0 reads it."""
    # split as Python iterates a text file (universal newlines only, as the hub builder reads it):
    # str.splitlines() would also break at \u2028, \x85, \x0c ... inside a line
    lines = [line.strip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    lines = [line if not line or "@highlight" in line or line[-1] in END_TOKENS else line + " ." for line in lines]
    article, highlights, next_is_highlight = [], [], False
    for line in lines:
        if not line:
            continue
        if line.startswith("@highlight"):
            next_is_highlight = True
        elif next_is_highlight:
            highlights.append(line)
        else:
            article.append(line)
    return " ".join(article), highlights


def _story_row(task: str, path: Path) -> dict:
    article, highlights = story(text_of(task, path, "a CNN/DailyMail .story file"))
    if not highlights:
        raise no_reference(task, str(path), "@highlight lines")
    return {"id": path.stem, "document": article, "summary": "\n".join(highlights)}


def _url_list_rows(task: str, path: Path) -> list[dict]:
    urls = [u.strip() for u in text_of(task, path, "a CNN/DailyMail url list").splitlines() if u.strip()]
    if not all(u.startswith("http") for u in urls):
        raise ConfigError(f"{task}: {path} is not a url list (one http url a line); expected {CNN_EXPECTED}")
    root = path.parent.parent if path.parent.name == "url_lists" else path.parent
    dirs = [root / d for d in STORY_DIRS if (root / d).is_dir()]
    rows = []
    for url in urls:
        name = hashlib.sha1(url.encode()).hexdigest() + ".story"
        found = [d / name for d in dirs if (d / name).is_file()]
        if not found:
            raise MissingData(f"{task}: story {name} of {url} (listed in {path}) not found in "
                              f"{', '.join(str(root / d) for d in STORY_DIRS)}; put the .story files there")
        rows.append(_story_row(task, found[0]))
    return rows


def _cnn_file_rows(task, path: Path, start: int = 0) -> list[dict]:
    name = task.name
    if path.is_dir():
        stories = sorted(path.glob("*.story"))
        if not stories:
            raise ConfigError(f"{name}: {path} holds no .story files; expected {CNN_EXPECTED}")
        return [_story_row(name, p) for p in stories]
    if path.suffix == ".story":
        return [_story_row(name, path)]
    if path.suffix == ".txt":
        return _url_list_rows(name, path)
    if path.suffix == ".csv":
        rows = list(csv.DictReader(io.StringIO(text_of(name, path, CNN_EXPECTED), newline="")))
        if not rows:
            raise no_rows(name, path)
        return _cnn_rows(task, rows, str(path))
    return _cnn_rows(task, json_rows(name, path, CNN_EXPECTED), str(path))


def _cnn_rows(task, rows: list[dict], where: str) -> list[dict]:
    out = []
    for n, row in enumerate(rows):
        need(task.name, f"{where} row {n}", row, ("article", "highlights", "id"), CNN_EXPECTED)
        if not str(row["highlights"]).strip():
            raise no_reference(task.name, f"{where} row {n}", "highlights")
        out.append({"id": str(row["id"]), "document": row["article"], "summary": row["highlights"]})
    return out


CNN_DAILYMAIL = Reader(_cnn_file_rows, _cnn_rows, reads_folders=True)

# -- XSum ----------------------------------------------------------------------------------------------
XSUM_EXPECTED = "XSum rows with document, summary (id optional) or H2O's XSum prompts with article, summary_gt"
H2O_ARTICLE = "###\nArticle:"
H2O_INSTRUCTION = re.compile(r"\s*Summarize the above article in \d+ sentences?\.\s*$")


def h2o_document(prompt: str) -> str | None:
    """The plain document inside H2O's XSum prompt (None when `prompt` is not one)."""
    if H2O_ARTICLE not in prompt:
        return None
    body = prompt.rsplit(H2O_ARTICLE, 1)[1]
    match = H2O_INSTRUCTION.search(body)
    return body[:match.start()].strip() if match else None


def _xsum_rows(task, rows: list[dict], where: str, start: int = 0) -> list[dict]:
    out = []
    for n, row in enumerate(rows):
        here = f"{where} row {n}"
        if "summary_gt" in row:  # H2O's prompt file
            need(task.name, here, row, ("article",), XSUM_EXPECTED)
            document, summary = h2o_document(row["article"]), row["summary_gt"]
            if document is None:
                raise ConfigError(f"{task.name}: {here}: 'article' is not H2O's XSum prompt ('###\\nArticle: "
                                  "<document>\\n\\nSummarize the above article in 1 sentence.')")
        else:
            need(task.name, here, row, ("document", "summary"), XSUM_EXPECTED)
            document, summary = row["document"], row["summary"]
        if not str(summary).strip():
            raise no_reference(task.name, here, "summary")
        out.append({"id": str(row.get("id", start + n)), "document": document, "summary": summary})
    return out


XSUM = Reader(lambda task, path, start=0: _xsum_rows(task, json_rows(task.name, path, XSUM_EXPECTED), str(path), start),
              _xsum_rows)

# -- Multi-News ----------------------------------------------------------------------------------------
NEWS_EXPECTED = ('Multi-News rows with document ("|||||" between the source documents), summary, or the '
                 "original <split>.src with its <split>.tgt")
SEPARATOR = "|||||"


def news_summary(text: str) -> str:
    """The summary without the "– " that opens every Multi-News target (the hub's rows keep it: its
    builder strips "- ", a hyphen, since datasets#4320 nothing), so file and hub rows are the same."""
    return re.sub(r"^\u2013\s*", "", str(text).strip())


def _news_row(n: int, document: str, summary: str) -> dict:
    documents = [d.strip() for d in document.split(SEPARATOR) if d.strip()]
    return {"id": str(n), "document": "\n\n".join(documents), "documents": documents, "summary": news_summary(summary)}


def _news_rows(task, rows: list[dict], where: str, start: int = 0) -> list[dict]:
    out = []
    for n, row in enumerate(rows):
        need(task.name, f"{where} row {n}", row, ("document", "summary"), NEWS_EXPECTED)
        if not news_summary(row["summary"]):
            raise no_reference(task.name, f"{where} row {n}", "summary")
        out.append(_news_row(start + n, row["document"], row["summary"]) | ({"id": str(row["id"])} if "id" in row else {}))
    return out


def _line_files(task: str, path: Path, start: int) -> list[dict]:
    """The rows of an original `.src` / `.tgt` pair (`path` is either)."""
    is_src = ".src" in path.name
    other = path.with_name(path.name.replace(".src", ".tgt") if is_src else path.name.replace(".tgt", ".src"))
    src, tgt = (path, other) if is_src else (other, path)
    if not other.is_file():
        raise missing(task, other, f"the Multi-News {'targets' if is_src else 'sources'} matching {path}")
    sources = text_of(task, src, NEWS_EXPECTED).splitlines()
    targets = text_of(task, tgt, NEWS_EXPECTED).splitlines()
    if len(sources) != len(targets):
        raise ConfigError(f"{task}: {src} has {len(sources)} lines, {tgt} {len(targets)}; expected one summary "
                          "a source line")
    rows = []
    for n, (s, t) in enumerate(zip(sources, targets)):
        summary = news_summary(t)
        if not summary:
            raise no_reference(task, f"{tgt} line {n + 1}", "summary")
        rows.append(_news_row(start + n, s.strip().replace("NEWLINE_CHAR", "\n"), summary))
    return rows


def _news_file_rows(task, path: Path, start: int = 0) -> list[dict]:
    if path.suffix not in (".json", ".jsonl", ".gz") and (".src" in path.name or ".tgt" in path.name):
        return _line_files(task.name, path, start)
    return _news_rows(task, json_rows(task.name, path, NEWS_EXPECTED), str(path), start)


MULTI_NEWS = Reader(_news_file_rows, _news_rows)
