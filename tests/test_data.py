"""Data: the classic word-level rules, local/hub/offline sources, document cutting, the token cache."""

import json

import pytest
import torch

from lightning_bench.data import LMDataModule
from lightning_bench.data.sources import load_split, split_documents
from lightning_bench.data.tokenization import HFTokenizer, WordTokenizer
from lightning_bench.errors import ConfigError
from tests.helpers import tiny_data


def test_word_tokenizer_follows_the_classic_protocol():
    tok = WordTokenizer.from_text("a b a\nc a")
    assert tok.vocab[:2] == ["a", "<eos>"]  # most frequent first (a: 3, <eos>: 2)
    ids = tok.encode("a z\n")  # unseen word -> <unk>; every line (also the empty last one) ends in <eos>
    assert [tok.vocab[i] for i in ids] == ["a", "<unk>", "<eos>", "<eos>"]


def test_gpt2_tokenizer_offline_matches_known_ids():
    tok = HFTokenizer("gpt2")
    assert tok.encode("Hello world") == [15496, 995]  # GPT-2's ids, as on the hub
    assert tok.vocab_size == 50257 and tok.prefix_id == 50256


def test_wikitext_articles_are_documents(tiny_corpus):
    docs = split_documents((tiny_corpus / "train.txt").read_text(), "auto")
    assert [d.splitlines()[0] for d in docs] == [" = Alpha = ", " = Beta = ", " = Gamma = ", " = Delta = "]
    assert split_documents("x\n\ny\nz", "lines") == ["x", "y", "z"]
    assert split_documents("x\n\ny\nz", "blank_lines") == ["x", "y\nz"]


def test_offline_ptb_is_the_mikolov_split():
    valid = load_split("ptb", "validation")
    tok = WordTokenizer.from_text(load_split("ptb", "train").text)
    assert tok.vocab_size == 10000  # the classic PTB vocabulary
    assert len(tok.encode(valid.text)) == 73760  # 70390 words + 3370 <eos>, the published count


def test_hub_loader_reads_a_local_dataset_folder(tmp_path):
    # load_dataset(<folder>) is the same call the hub path makes; a folder needs no network
    folder = tmp_path / "hub_like"
    folder.mkdir()
    for split, n in (("train", 3), ("validation", 2), ("test", 2)):
        rows = [{"text": f" {split} line {i} ."} for i in range(n)]
        (folder / f"{split}.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    split = load_split("wikitext2", "validation", use_hub=True, hub_id=str(folder), hub_config=None)
    assert split.text == " validation line 0 .\n validation line 1 ." and split.origin.startswith("hf:")


def test_unreachable_hub_is_a_clear_error(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConfigError, match="cannot load 'allenai/c4'.*offline, use --data ptb"):
        load_split("c4", "validation")


def test_tokenized_splits_are_cached(tiny_corpus, tmp_path):
    first = tiny_data(tiny_corpus, cache_dir=str(tmp_path / "c"))
    first.setup("fit")
    first.train_dataloader()
    assert first.cache_hits == {"train/stream": False}
    second = tiny_data(tiny_corpus, cache_dir=str(tmp_path / "c"))
    second.setup("fit")
    batch = next(iter(second.train_dataloader()))
    assert second.cache_hits == {"train/stream": True}
    assert torch.equal(batch["labels"][:, :-1], batch["input_ids"][:, 1:])  # labels are the next tokens


def test_held_out_validation_when_no_validation_file(tiny_corpus):
    dm = LMDataModule(source="text", train_path=str(tiny_corpus / "train.txt"), tokenizer="word", seq_len=8,
                      val_fraction=0.2)
    dm.setup("fit")
    train, val = dm.splits["train"], dm.splits["validation"]
    assert train.text + "\n" + val.text == (tiny_corpus / "train.txt").read_text()
    assert "held out" in val.origin


def test_eval_subset_is_recorded(tiny_corpus):
    dm = tiny_data(tiny_corpus, eval_max_documents=1)
    dm.setup("test")
    units = dm.eval_units("test")
    assert units["bytes"] < len((tiny_corpus / "test.txt").read_bytes())
    assert "first 1 of 2 documents" in dm.provenance()["splits"]["test"]["evaluated_origin"]
