"""The param-matched presets (configs/compare/*_small.yaml) really are matched.

Each preset's model is built as the YAML says, at the PTB word vocabulary (10,000). Counts:
  embedding      token (+ position) tables: what `parameter_counts()` calls embedding
  head           the untied output projection (vocab x d_model, + bias for ResNet-BK)
  non_embedding  everything but the tables (head included), as `parameter_counts()` reports it
  core           non_embedding - head: the blocks, where the families actually differ
Every family has an untied head of the same shape, so matching the non-embedding count alone would
be satisfied by the 1.28M head whatever the blocks are; the core is matched too.
`pytest -s tests/test_presets.py` prints the table that docs/comparison.md quotes.
"""

import importlib
import statistics
from pathlib import Path

import pytest
import yaml
from torch import nn

PRESETS = Path(__file__).resolve().parent.parent / "configs" / "compare"
FAMILIES = ("bk", "mamba", "transformer")
PTB_WORD_VOCAB = 10_000
TOLERANCE = 0.05


def build(family: str):
    config = yaml.safe_load((PRESETS / f"{family}_small.yaml").read_text())
    module, _, name = config["model"]["class_path"].rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    return cls(**config["model"]["init_args"], vocab_size=PTB_WORD_VOCAB), config


def counts(model) -> dict:
    c = dict(model.parameter_counts())
    tables = {id(m.weight) for m in model.net.modules() if isinstance(m, nn.Embedding)}
    head = {id(p): p.numel() for m in model.net.modules()
            if isinstance(m, nn.Linear) and m.out_features == PTB_WORD_VOCAB
            for p in m.parameters() if id(p) not in tables}
    c["head"] = sum(head.values())
    c["core"] = c["non_embedding"] - c["head"]
    return c


@pytest.fixture(scope="module")
def table():
    rows = {family: counts(build(family)[0]) for family in FAMILIES}
    print(f"\n{'preset':<20}{'total':>12}{'embedding':>12}{'non_embedding':>15}{'head':>12}{'core':>12}")
    for family, c in rows.items():
        print(f"{family + '_small':<20}{c['total']:>12,}{c['embedding']:>12,}{c['non_embedding']:>15,}"
              f"{c['head']:>12,}{c['core']:>12,}")
    return rows


@pytest.mark.parametrize("key", ["non_embedding", "core"])
def test_presets_match_within_5_percent(table, key):
    mean = statistics.mean(c[key] for c in table.values())
    for family, c in table.items():
        assert abs(c[key] - mean) <= TOLERANCE * mean, (family, key, c[key], mean)


def test_core_budget_and_identical_vocab_parameters(table):
    for family, c in table.items():
        assert 400_000 <= c["core"] <= 900_000, (family, c["core"])
        # same token table and an untied head of the same shape (BK adds a 10k bias and a 128x128
        # learned position table): the families differ in their blocks, not in what the vocabulary costs
        assert c["head"] >= PTB_WORD_VOCAB * 128 and c["embedding"] >= PTB_WORD_VOCAB * 128, family
        assert c["total"] == c["embedding"] + c["non_embedding"]


def test_presets_share_one_recipe():
    configs = {family: build(family)[1] for family in FAMILIES}
    recipe_keys = ("learning_rate", "weight_decay", "betas", "warmup_steps", "min_lr_ratio")
    reference = configs["transformer"]
    for family, config in configs.items():
        assert config["data"] == reference["data"], family
        assert config["trainer"] == reference["trainer"], family
        assert config["seed_everything"] == reference["seed_everything"] and config["bits"] == reference["bits"]
        init = config["model"]["init_args"]
        assert init["d_model"] == 128, family
        assert {k: init[k] for k in recipe_keys} == {k: reference["model"]["init_args"][k] for k in recipe_keys}
    data = reference["data"]["init_args"]
    assert (data["source"], data["tokenizer"], data["seq_len"], data["batch_size"]) == ("ptb", "word", 128, 16)
    assert reference["trainer"]["max_epochs"] == 1
