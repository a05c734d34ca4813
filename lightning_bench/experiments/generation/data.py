"""The generation benchmark's text and its samples.

The test split is read through `LMDataModule` (the same sources, document handling and tokenized
cache as every evaluation) with the model's own tokenizer, as one token stream without special
tokens. Which windows of that stream are the samples is decided by `sample_starts` alone (each window
at most once across all seeds, so every sample is its own observation in the statistics).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from lightning_bench.errors import ConfigError, unknown_name
from lightning_bench.experiments.core.config import check_name

DATA_SYNONYMS = {"wikitext": "wikitext2"}  # the reference driver's name


@dataclass
class TestText:
    name: str  # the dataset's name (the alias, or NAME of NAME=DIR)
    stream: torch.Tensor  # the test split's tokens, int32
    provenance: dict  # what every record's meta.data says about it


def _datamodule(spec: str):
    """(name, source as the user gave it, LMDataModule) for `wikitext2` / `ptb` / NAME=DIR|FILE."""
    from lightning_bench.data import DATA_ALIASES, LMDataModule

    if "=" in spec:
        name, path = spec.split("=", 1)
        check_name(f"dataset name in {spec!r}:", name)
        if not Path(path).exists():
            raise ConfigError(f"dataset {name!r}: {path!r} does not exist")
        return name, path, LMDataModule(source="text", path=path, name=name)
    alias = DATA_SYNONYMS.get(spec, spec)
    if alias not in DATA_ALIASES or alias == "text":
        raise unknown_name("dataset", spec, [*(a for a in DATA_ALIASES if a != "text"), "NAME=DIR"])
    return alias, alias, LMDataModule(source=alias)


def load_test_text(spec: str, tokenizer) -> TestText:
    """The test split of `--data`, tokenized by `tokenizer` (the model's) as one stream."""

    name, source, dm = _datamodule(spec)
    dm.tokenizer = tokenizer  # the model's tokenizer, not one LMDataModule would build from a train split
    try:
        dm.setup("test")
    except ConfigError as err:
        if "=" not in spec:  # a hub alias, offline
            raise ConfigError(f"{str(err).split(';')[0]}; offline, give a local copy: --data {name}=DIR "
                              "(e.g. wikitext2=../shared/data/wikitext-2)") from err
        raise ConfigError(f"dataset {name!r}: no test split in {source!r} (test.txt, wiki.test.tokens, ...)") from err
    split = dm.splits["test"]
    stream = dm.token_stream("test")
    return TestText(name, stream, {
        "name": name, "source": source, "split": "test", "origin": split.origin, "sha256": split.sha256,
        "tokenizer": tokenizer.describe(), "stream_tokens": len(stream),
        "stream_sha256": hashlib.sha256(stream.numpy().tobytes()).hexdigest()})


def sample_starts(n_tokens: int, window: int, num_samples: int, seeds: list[int]) -> dict[int, list[int]]:
    """{seed: sorted start offsets of its `num_samples` windows}: the stream is cut into non-overlapping
    windows k * window, ONE `torch.randperm` of them seeded with the first seed orders them, and the
    i-th seed of `seeds` takes the i-th block of `num_samples`. No window is drawn twice across seeds,
    so every sample of an experiment is its own observation (pooled std, paired t-tests); the first
    seed's windows are those a per-seed draw gave, and appending seeds leaves earlier ones unchanged.
    They depend on (seeds, window) only: every method and sparsity of a (seed, C) sees the same samples."""
    n_windows, needed = n_tokens // window, num_samples * len(seeds)
    if n_windows < needed:
        raise ConfigError(f"the test split has {n_tokens} tokens: {n_windows} non-overlapping windows of "
                          f"context + continuation = {window} tokens, fewer than --num_samples {num_samples} x "
                          f"{len(seeds)} seeds = {needed} (no window is drawn twice); lower --num_samples, the "
                          "number of seeds, --context_length or --continuation_length")
    order = torch.randperm(n_windows, generator=torch.Generator().manual_seed(seeds[0]))
    return {seed: sorted(int(k) * window for k in order[i * num_samples:(i + 1) * num_samples])
            for i, seed in enumerate(seeds)}
