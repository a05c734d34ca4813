"""The shared LanguageModule recipe and the two model families of the foundation."""

from types import SimpleNamespace

import pytest
import torch

from lightning_bench.models.base import warmup_cosine
from lightning_bench.models.hf import HFLanguageModel
from tests.helpers import quiet_trainer, tiny_data, tiny_model


def test_no_weight_decay_on_norms_biases_embeddings():
    model = tiny_model(50, tie_embeddings=False)
    model.trainer = SimpleNamespace(estimated_stepping_batches=10)  # all the optimizer reads from it
    optimizer = model.configure_optimizers()["optimizer"]
    decay, no_decay = optimizer.param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    assert any("embed_tokens" in n for n in no_decay_names)
    assert any("norm" in n for n in no_decay_names)
    assert all("norm" not in names[id(p)] and "embed" not in names[id(p)] for p in decay["params"])
    assert any("lm_head" in names[id(p)] for p in decay["params"])  # the untied output matrix is decayed


def test_warmup_then_cosine_schedule():
    assert warmup_cosine(0, 10, 110, 0.1) == pytest.approx(0.1)
    assert warmup_cosine(9, 10, 110, 0.1) == pytest.approx(1.0)
    assert warmup_cosine(60, 10, 110, 0.1) == pytest.approx(0.1 + 0.9 * 0.5)  # halfway down the cosine
    assert warmup_cosine(110, 10, 110, 0.1) == pytest.approx(0.1)


def test_transformer_trains_below_unigram(tiny_corpus):
    torch.manual_seed(0)
    dm = tiny_data(tiny_corpus, batch_size=8)
    model = tiny_model(None, learning_rate=3e-3, warmup_steps=5)  # vocabulary taken from the data
    trainer = quiet_trainer(max_epochs=15)
    trainer.fit(model, datamodule=dm)
    # the fixture is a small grammar: a model that learned anything beats the unigram distribution
    assert model.last_eval["val"]["ppl"] < 0.5 * dm.unigram_perplexity("validation")
    assert model.net.config.num_key_value_heads == 2 and model.net.config.num_attention_heads == 4


@pytest.mark.smollm2
def test_hf_model_matches_transformers_own_loss(smollm2_dir, tiny_corpus):
    from transformers import AutoModelForCausalLM

    dm = tiny_data(tiny_corpus, tokenizer="auto", eval_protocol="document_rolling", seq_len=512,
                   eval_max_documents=1, batch_size=1)
    module = HFLanguageModel(str(smollm2_dir))
    quiet_trainer().test(module, datamodule=dm, verbose=False)
    ours = module.last_eval["test"]

    # one document shorter than the window = one window: the reference is HF's own shifted loss
    tok = dm.tokenizer
    ids = torch.tensor([[tok.prefix_id, *tok.encode(dm.splits["test"].documents[0])]])
    assert ids.shape[1] - 1 == ours["scored_tokens"] < 512
    reference = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    with torch.no_grad():
        loss = reference(input_ids=ids, labels=ids).loss.item()
    assert ours["loss"] == pytest.approx(loss, rel=1e-4)
    assert ours["ppl"] < 100  # a real pretrained LM on plain English, far from uniform (49152)
    assert module.max_seq_len == 8192 and module.model_name == "hf-smollm2-135m-instruct"


@pytest.mark.smollm2
def test_hf_model_loads_a_gguf_file(smollm2_gguf, smollm2_dir):
    """`--model.pretrained FILE.gguf`: transformers dequantizes it; the folder made from the same file
    by ../shared/scripts/smollm2.sh must give the same logits, and the GGUF's own tokenizer is used."""
    from lightning_bench.data.tokenization import HFTokenizer

    gguf = HFLanguageModel(str(smollm2_gguf))
    folder = HFLanguageModel(str(smollm2_dir))
    assert gguf.tokenizer_source["kwargs"]["gguf_file"] == smollm2_gguf.name
    tok = HFTokenizer(gguf.tokenizer_source["name"], **gguf.tokenizer_source["kwargs"])
    ids = torch.tensor([[tok.prefix_id, *tok.encode("The cat sat on the mat.")]])
    assert ids.tolist() == [[tok.prefix_id, *HFTokenizer(str(smollm2_dir)).encode("The cat sat on the mat.")]]
    gguf.net, folder.net = gguf.build_network(tok.vocab_size), folder.build_network(tok.vocab_size)
    with torch.no_grad():
        assert torch.allclose(gguf(ids), folder(ids), atol=1e-4)
    assert gguf.model_name == "hf-SmolLM2-135M-Instruct.Q4_1"
