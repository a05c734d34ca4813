"""The language-modelling DataModule: corpora -> tokens -> training chunks and scoring windows.

Training uses contiguous fixed-length chunks of the train stream (reshuffled every epoch).
Validation and test use one of the two perplexity protocols of `data/windows.py`; every batch
carries `labels` with -100 on context-only positions, so the model just sums the loss.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from functools import cached_property
from pathlib import Path
from typing import Literal, Optional

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from lightning_bench.data.token_cache import cache_key, cached
from lightning_bench.data.sharding import eval_sampler, global_batch_part, processes
from lightning_bench.data.options import (DatasetName, Fraction, NonNegativeInt, PositiveInt,
                                          checked_arguments)
from lightning_bench.data.sources import DATA_ALIASES, SplitText, load_split
from lightning_bench.data.tokenization import build_tokenizer, checked_cache_dir
from lightning_bench.data.windows import IGNORE_INDEX, rolling_windows, token_windows
from lightning_bench.errors import ConfigError, unknown_name
from lightning_bench.results.io import check_output

PROTOCOLS = ("token_windows", "document_rolling")
STAGE_SPLIT = {"fit": "train", "validate": "validation", "test": "test", "predict": "test"}


class ChunkDataset(Dataset):
    """Chunk k: inputs stream[kL : kL+L], labels stream[kL+1 : kL+L+1] (the next token at each position)."""

    def __init__(self, stream: torch.Tensor, seq_len: int):
        self.stream, self.seq_len = stream, seq_len
        self.n_chunks = (len(stream) - 1) // seq_len
        if self.n_chunks < 1:
            raise ConfigError(f"the train split has {len(stream)} tokens, fewer than seq_len + 1 = "
                              f"{seq_len + 1}; lower --data.seq_len or use more data")

    def __len__(self):
        return self.n_chunks

    def __getitem__(self, k):
        x = self.stream[k * self.seq_len: (k + 1) * self.seq_len + 1].long()
        return {"input_ids": x[:-1], "labels": x[1:]}


class EpochSeededSampler(DistributedSampler):
    """A shuffle that depends only on (seed, epoch). `start` (set when a checkpoint is restored, see
    ResumableDataLoader) skips the first indices of the resumed epoch once. Lightning calls `set_epoch`.
    Under DDP (num_replicas > 1) each rank takes its part of every global batch of the one-process order
    (data/sharding.global_batch_part); `start` counts items of that order. A DistributedSampler, so that
    Lightning keeps it instead of dealing its items out again (which would change every global batch)."""

    def __init__(self, n: int, seed: int, num_replicas: int = 1, rank: int = 0, batch_size: int = 1):
        super().__init__(range(n), num_replicas=num_replicas, rank=rank, shuffle=False)  # only checks the rank
        self.n, self.seed, self.epoch, self.start, self.batch_size = n, seed, 0, 0, batch_size

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:  # a checkpoint taken at an epoch's end resumes at the next epoch's start
            self.start = 0
        self.epoch = epoch

    def __len__(self):
        return len(self._part(list(range(self.n))))

    def _part(self, order: list[int]) -> list[int]:
        return order if self.num_replicas == 1 else global_batch_part(order, self.batch_size, self.num_replicas,
                                                                      self.rank)

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        start, self.start = self.start, 0
        return iter(self._part(torch.randperm(self.n, generator=generator).tolist()[start:]))


class ResumableDataLoader(DataLoader):
    """The train loader, with its position (seed, epoch, samples already yielded) in the checkpoint
    (LMDataModule.state_dict), so a run killed mid-epoch resumes with the next batch instead of replaying
    the epoch's first ones. Counted here, not in the sampler: workers read the sampler ahead of training.
    Under DDP the position counts global batches (every rank's items), as one process would."""

    _epoch, _position = 0, 0

    def __iter__(self):
        # a generator: runs at the first batch, after Lightning's set_epoch (not at iter(), which
        # Lightning calls earlier), so a worker's prefetch never reads the previous epoch's order
        sampler = self.sampler
        self._epoch, self._position = getattr(sampler, "epoch", 0), getattr(sampler, "start", 0)
        for batch in super().__iter__():
            self._position += self.batch_size * getattr(sampler, "num_replicas", 1)  # items of the global order
            yield batch

    def state_dict(self) -> dict:
        if not isinstance(self.sampler, EpochSeededSampler):
            return {}
        return {"seed": self.sampler.seed, "epoch": self._epoch, "samples": min(self._position, self.sampler.n)}

    def load_state_dict(self, state: dict) -> None:
        if state and isinstance(self.sampler, EpochSeededSampler):
            self.sampler.seed, self.sampler.epoch, self.sampler.start = state["seed"], state["epoch"], state["samples"]
            self._epoch, self._position = state["epoch"], state["samples"]


class WindowDataset(Dataset):
    def __init__(self, windows):
        self.windows = list(windows)

    def __len__(self):
        return len(self.windows)

    def __getitem__(self, i):
        w = self.windows[i]  # its index orders the evaluation's sums under any number of processes
        return {"input_ids": torch.tensor(w.input_ids), "labels": torch.tensor(w.labels), "window_index": i}


def pad_collate(items, pad_id: int = 0):
    """Right-pad to the longest window; padded positions are never scored, and a causal model's
    outputs at real positions do not depend on what comes after them."""
    width = max(len(it["input_ids"]) for it in items)
    input_ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    labels = torch.full((len(items), width), IGNORE_INDEX, dtype=torch.long)
    for row, it in enumerate(items):
        n = len(it["input_ids"])
        input_ids[row, :n], labels[row, :n] = it["input_ids"], it["labels"]
    batch = {"input_ids": input_ids, "labels": labels}
    if "window_index" in items[0]:
        batch["window_index"] = torch.tensor([it["window_index"] for it in items])
    return batch


def count_words(text: str) -> int:
    return len(re.split(r"\s+", text))  # lm-evaluation-harness's word count, kept identical


class LMDataModule(L.LightningDataModule):
    """Language-modelling data for every model family.

    Args:
        source: corpus alias (ptb, wikitext2, wikitext103, c4, pile, pg19) or `text` for local files.
        name: the dataset's name in records and file names (default: the alias, or the folder name).
        path: for `text`, a folder with train/valid/test files or a single file.
        train_path / val_path / test_path: explicit files per split (override `path`).
        val_fraction: when there is no validation split, hold out this final fraction of the train
            text (cut at a line boundary) as validation.
        tokenizer: `word` (classic vocabulary from the train split), `gpt2` (offline BPE), any HF
            name or folder, or `auto` (the model's own tokenizer for pretrained models, else `word`).
        seq_len: training chunk length and evaluation window length.
        eval_protocol: `token_windows` (fixed windows over the split's token stream, `eval_stride`
            apart) or `document_rolling` (lm-eval's rolling windows per document).
        eval_stride: token_windows stride (default = seq_len: disjoint windows); < seq_len slides.
        rolling_context: document_rolling context_len (lm-eval default 1).
        document_split: how a split is cut into documents (auto, wikitext_articles, lines, blank_lines,
            whole), or `jsonl`: the file is JSON lines, one document per object (auto for `*.jsonl`).
        text_field: the field of each JSON-lines object that holds its document (default `text`).
        eval_max_documents: evaluate on the first N documents only (a subset, recorded as such).
        use_hub / hub_id / hub_config / max_documents: HF hub loading (needs network).
    """

    def __init__(
        self,
        source: str = "ptb",
        name: Optional[DatasetName] = None,
        path: Optional[str] = None,
        train_path: Optional[str] = None,
        val_path: Optional[str] = None,
        test_path: Optional[str] = None,
        val_fraction: Fraction = 0.05,
        tokenizer: str = "auto",
        seq_len: PositiveInt = 128,
        batch_size: PositiveInt = 16,
        eval_batch_size: Optional[PositiveInt] = None,
        eval_protocol: Literal["token_windows", "document_rolling"] = "token_windows",
        eval_stride: Optional[PositiveInt] = None,
        rolling_context: PositiveInt = 1,
        document_split: str = "auto",
        text_field: str = "text",
        eval_max_documents: Optional[PositiveInt] = None,
        use_hub: bool = False,
        hub_id: Optional[str] = None,
        hub_config: Optional[str] = None,
        max_documents: Optional[PositiveInt] = None,
        num_workers: NonNegativeInt = 0,
        cache_dir: Optional[str] = None,
    ):
        super().__init__()
        # the ranges are declared on the signature (jsonargparse checks them at parse time); built from
        # Python (a sweep's datasets, export_documents), the same ranges are checked here
        self.save_hyperparameters(checked_arguments(LMDataModule.__init__, locals()))
        hp = self.hparams  # plain numbers
        if source not in DATA_ALIASES:
            raise unknown_name("data", source, DATA_ALIASES)
        if eval_protocol not in PROTOCOLS:
            raise unknown_name("eval_protocol", eval_protocol, PROTOCOLS)
        stride = hp.seq_len if hp.eval_stride is None else hp.eval_stride
        if stride > hp.seq_len:
            raise ConfigError(f"--data.eval_stride must be in [1, seq_len={hp.seq_len}], got {stride}")
        if hp.eval_protocol == "document_rolling" and hp.rolling_context > hp.seq_len:
            raise ConfigError(f"--data.rolling_context must be in [1, seq_len={hp.seq_len}], got {hp.rolling_context}")
        self.source, self.seq_len, self.eval_stride = source, hp.seq_len, stride
        self.tokenizer_spec = tokenizer
        self.cache_dir = Path(cache_dir) if cache_dir else None  # None: $LB_CACHE_DIR/tokenized, read at setup
        self._cache_checked = False
        self.tokenizer = None
        self.splits: dict[str, SplitText] = {}
        self.cache_hits: dict[str, bool] = {}

    # ---- naming -----------------------------------------------------------------------------
    @property
    def dataset_name(self) -> str:
        if self.hparams.name:
            return self.hparams.name
        if self.source != "text":
            return self.source
        anchor = self.hparams.path or self.hparams.test_path or self.hparams.train_path or "text"
        p = Path(anchor)
        return (p.name if p.is_dir() else p.parent.name or p.stem) or "text"

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    # ---- loading ----------------------------------------------------------------------------
    def _split_path(self, split):
        return {"train": self.hparams.train_path, "validation": self.hparams.val_path,
                "test": self.hparams.test_path}[split]

    def _load(self, split: str) -> SplitText | None:
        if split not in self.splits:
            hp = self.hparams
            explicit = (hp.train_path, hp.val_path, hp.test_path)
            if self.source == "text" and hp.path is None and self._split_path(split) is None and any(explicit):
                self.splits[split] = None  # only other splits were given as files
                return None
            self.splits[split] = load_split(
                self.source, split, path=hp.path, split_path=self._split_path(split),
                document_split=hp.document_split, use_hub=hp.use_hub, hub_id=hp.hub_id,
                hub_config=hp.hub_config, max_documents=hp.max_documents, text_field=hp.text_field)
        return self.splits[split]

    def _resolve_tokenizer_spec(self) -> tuple[str, dict]:
        spec = self.tokenizer_spec
        if spec != "auto":
            return spec, {}
        model = self.trainer.lightning_module if self.trainer is not None else None
        source = getattr(model, "tokenizer_source", None)
        return (source["name"], source.get("kwargs", {})) if source else ("word", {})

    def setup(self, stage: str = "fit") -> None:
        self.tokenized_cache()  # an unwritable cache fails now, not after the text is loaded and tokenized
        if self.tokenizer is None:
            spec, kwargs = self._resolve_tokenizer_spec()
            train = self._load("train") if spec == "word" or stage == "fit" else None
            if (spec == "word" or stage == "fit") and train is None:
                raise ConfigError(f"no train split found for --data {self.source} "
                                  f"(path={self.hparams.path!r}); pass --data.train_path FILE")
            if stage == "fit" and self._validation_is_train():
                self.splits["validation"] = None  # never validate on the training text: hold out instead
            if stage == "fit" and self._load("validation") is None and self.hparams.val_fraction > 0:
                self._hold_out_validation()
            self.tokenizer = build_tokenizer(spec, train_text=train.text if train else None, **kwargs)
        needed = {"fit": ["train", "validation"], "validate": ["validation"], "test": ["test"],
                  "predict": ["test"]}[stage]
        for split in needed:
            if self._load(split) is None and split != "validation":
                raise ConfigError(f"no {split} split found for --data {self.source} (path={self.hparams.path!r}); "
                                  f"pass --data.{split}_path FILE")
        if stage == "validate" and self._load("validation") is None:
            raise ConfigError(f"no validation split for --data {self.source}; pass --data.val_path FILE")

    def _validation_is_train(self) -> bool:
        train, val = self._load("train"), self._load("validation")
        return train is not None and val is not None and train.sha256 == val.sha256

    def _hold_out_validation(self):
        """Cut the last `val_fraction` of the train text (at a line boundary) into a validation split."""
        train = self.splits["train"]
        if train.document_split == "jsonl":  # given as documents: hold out whole ones, never cut one in two
            from lightning_bench.data.sources import hold_out_documents

            self.splits["train"], self.splits["validation"] = hold_out_documents(train, self.hparams.val_fraction)
            return
        cut = train.text.rfind("\n", 0, int(len(train.text) * (1 - self.hparams.val_fraction)))
        if cut <= 0:
            raise ConfigError("the train split is too short to hold out validation; pass --data.val_path")
        from lightning_bench.data.sources import split_documents

        doc_split = self.hparams.document_split
        head, tail = train.text[:cut], train.text[cut + 1:]
        self.splits["train"] = SplitText(head, split_documents(head, doc_split),
                                         f"{train.origin}[:{cut} chars]")
        self.splits["validation"] = SplitText(tail, split_documents(tail, doc_split),
                                              f"{train.origin}[{cut + 1}: chars] (held out: last "
                                              f"{self.hparams.val_fraction:.0%} of train)")

    def _eval_text(self, split: str) -> SplitText:
        """The split, cut to its first `eval_max_documents` documents when a subset was asked for."""
        full = self._load(split)
        limit = self.hparams.eval_max_documents
        if limit is None or limit >= len(full.documents):
            return full
        end = 0
        for doc in full.documents[:limit]:
            end = full.text.index(doc, end) + len(doc)
        return SplitText(full.text[:end], full.documents[:limit],
                         f"{full.origin}[first {limit} of {len(full.documents)} documents]")

    def _tokens(self, split: str, kind: str):
        """kind 'stream': the split's text as one token tensor; 'documents': one tensor per document."""
        text = self._eval_text(split) if split != "train" else self._load(split)
        key = cache_key(origin=text.origin, sha256=text.sha256, tokenizer=self.tokenizer.identity, kind=kind,
                        n_docs=len(text.documents))
        if kind == "documents":  # the documents' own digest: a change in how they are cut is a new key
            key = cache_key(key=key, documents=text.documents_sha256)

        def compute():
            if kind == "stream":
                return torch.tensor(self.tokenizer.encode(text.text), dtype=torch.int32)
            return [torch.tensor(self.tokenizer.encode(d), dtype=torch.int32) for d in text.documents]

        value, hit = cached(self.tokenized_cache(), key, compute)
        # a split is read several times (loader, units, baseline): a hit only if no read had to tokenize it
        self.cache_hits[f"{split}/{kind}"] = self.cache_hits.get(f"{split}/{kind}", True) and hit
        return value

    def tokenized_cache(self) -> Path:
        """Where tokenized splits are cached (--data.cache_dir, else $LB_CACHE_DIR/tokenized), checked
        writable the first time it is asked for (setup asks; a command may ask earlier)."""
        if not self._cache_checked:
            self.cache_dir = (check_output("--data.cache_dir", self.cache_dir) if self.cache_dir is not None
                              else checked_cache_dir() / "tokenized")
            self._cache_checked = True
        return self.cache_dir

    def token_stream(self, split: str) -> torch.Tensor:
        """The split's text as one int32 token tensor (no special tokens), from the tokenized cache.
        Call after `setup`; benchmarks that draw their own windows (the generation benchmark) read it."""
        return self._tokens(split, "stream")

    # ---- dataloaders ------------------------------------------------------------------------
    def train_dataloader(self):
        chunks = ChunkDataset(self._tokens("train", "stream"), self.seq_len)
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0))  # set by seed_everything (--seed_everything)
        world, rank = processes(self)  # --data.batch_size is per process (Lightning's convention)
        sampler = EpochSeededSampler(len(chunks), seed, world, rank, self.hparams.batch_size)
        loader = ResumableDataLoader(chunks, batch_size=self.hparams.batch_size, sampler=sampler, drop_last=False,
                                     num_workers=self.hparams.num_workers)
        if self._train_position:  # restored from a checkpoint (load_state_dict): the resumed epoch starts there
            loader.load_state_dict(self._train_position)
            self._train_position = None
        self._train_loader = loader
        return loader

    # ---- resume: the train loader's position travels in the checkpoint ----------------------
    # Lightning saves a stateful train loader's state itself, but restores it only into a loader built after
    # the loops are restored; LanguageModule's configure_optimizers asks estimated_stepping_batches, which
    # builds the loader earlier. A DataModule's state is restored before any loader is built.
    _train_loader: Optional[ResumableDataLoader] = None
    _train_position: Optional[dict] = None

    def state_dict(self) -> dict:
        return {"train_loader": self._train_loader.state_dict()} if self._train_loader is not None else {}

    def load_state_dict(self, state: dict) -> None:
        self._train_position = state.get("train_loader")
        if self._train_loader is not None and self._train_position:  # built first (restore after setup)
            self._train_loader.load_state_dict(self._train_position)

    def _eval_loader(self, split: str, by_length: bool = True):
        """Batches of scoring windows. `by_length`: longest first, so each batch holds windows of
        similar length and little padding is computed (a sum over windows does not depend on their
        order); predict keeps the text's order, since it returns per-window outputs."""
        hp = self.hparams
        prefix = self.tokenizer.prefix_id
        if hp.eval_protocol == "token_windows":
            stream = self._tokens(split, "stream").tolist()
            windows = token_windows(stream, prefix, self.seq_len, self.eval_stride)
        else:
            docs = self._tokens(split, "documents")
            windows = (w for i, d in enumerate(docs)
                       for w in rolling_windows(d.tolist(), prefix, self.seq_len, hp.rolling_context, i))
        if by_length:
            windows = sorted(windows, key=lambda w: -len(w.input_ids))  # stable: ties keep text order
        dataset, batch_size = WindowDataset(windows), hp.eval_batch_size or hp.batch_size
        return DataLoader(dataset, batch_size=batch_size, collate_fn=pad_collate, num_workers=hp.num_workers,
                          sampler=eval_sampler(self, len(dataset), batch_size))

    def val_dataloader(self):
        if self._load("validation") is None:
            return []  # no validation split and --data.val_fraction 0: fit without validation
        return self._eval_loader("validation")

    def test_dataloader(self):
        return self._eval_loader("test")

    def predict_dataloader(self):
        return self._eval_loader("test", by_length=False)

    # ---- what the evaluation needs to turn summed NLL into every reported unit ----------------
    def eval_units(self, split: str) -> dict:
        """Tokens, words and UTF-8 bytes that the protocol scores on `split` (each exactly once)."""
        text = self._eval_text(split)
        if self.hparams.eval_protocol == "token_windows":
            n_tokens = len(self._tokens(split, "stream"))
            return {"tokens": n_tokens, "words": count_words(text.text), "bytes": len(text.text.encode())}
        docs = self._tokens(split, "documents")
        return {"tokens": sum(len(d) for d in docs), "words": sum(count_words(d) for d in text.documents),
                "bytes": sum(len(d.encode()) for d in text.documents)}

    def protocol(self, split: str) -> dict:
        hp = self.hparams
        described = {"name": hp.eval_protocol, "split": split, "window": self.seq_len,
                     "prefix_token_id": self.tokenizer.prefix_id, "units": self.eval_units(split),
                     "word_count": "len(re.split(r'\\s+', text)) as lm-evaluation-harness"}
        if hp.eval_protocol == "token_windows":
            described.update(stride=self.eval_stride, scope="the split's text tokenized as one stream, "
                             "prefixed by one start token; every token scored once")
        else:
            described.update(context=hp.rolling_context, scope="each document scored alone with "
                             "lm-eval loglikelihood_rolling windows; every token scored once")
        return described

    def unigram_perplexity(self, split: str) -> float | None:
        """Baseline: the train split's add-one-smoothed unigram distribution on `split`'s tokens."""
        if self.splits.get("train") is None:
            return None
        counts = self._unigram_counts
        total = sum(counts.values()) + self.vocab_size
        stream = self._tokens(split, "stream").tolist()
        nll = -sum(math.log((counts.get(t, 0) + 1) / total) for t in stream)
        return math.exp(nll / len(stream))

    @cached_property
    def _unigram_counts(self) -> Counter:
        return Counter(self._tokens("train", "stream").tolist())

    def provenance(self) -> dict:
        splits = {name: {"origin": s.origin, "sha256": s.sha256, "documents": len(s.documents)}
                  for name, s in self.splits.items() if s is not None}
        for name in ("validation", "test"):
            if name in splits and self.hparams.eval_max_documents:
                sub = self._eval_text(name)
                splits[name].update(evaluated_origin=sub.origin, evaluated_sha256=sub.sha256)
        return {"source": self.source, "dataset": self.dataset_name, "splits": splits,
                "tokenizer": self.tokenizer.describe() if self.tokenizer else None,
                "tokenized_cache_hits": dict(self.cache_hits)}
