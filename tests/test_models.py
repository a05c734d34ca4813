"""The shared LanguageModule recipe and the two model families of the foundation."""

from pathlib import Path
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


GGUF_MERGES = 300  # the first GPT-2 merges: "The cat sat on the mat." takes some of them


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> tuple[Path, Path]:
    """(FILE.gguf, folder): a 2-layer GQA Llama written as llama.cpp's converter writes a GGUF, as the
    SmolLM2 file is (Q4_1 linear layers, a Q8_0 embedding tied to the output, F32 norms, the Q and K rows
    permuted for llama.cpp's rotary layout, a byte-level BPE vocabulary with its merges and a control token
    in the metadata), and the folder of the same network and vocabulary (vocab.json + merges.txt, the
    dequantized weights in HF order), as ../shared/scripts/smollm2.sh makes one from the SmolLM2 file. A few
    hundred tokens instead of SmolLM2's 49152: reading those from a GGUF file is most of its 40 s load."""
    import json

    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType
    from gguf.quants import dequantize, quantize
    from transformers import LlamaConfig, LlamaForCausalLM

    from lightning_bench.data.tokenization import offline_gpt2_folder

    root = tmp_path_factory.mktemp("tiny_gguf")
    folder, path = root / "hf", root / "gguf" / "tiny-llama.Q4_1.gguf"  # apart: the file alone must be enough
    folder.mkdir()
    path.parent.mkdir()
    gpt2 = Path(offline_gpt2_folder(root / "cache"))
    merges = [m for m in (gpt2 / "merges.txt").read_text().splitlines() if not m.startswith("#")][:GGUF_MERGES]
    by_id = {i: t for t, i in json.loads((gpt2 / "vocab.json").read_text()).items()}
    tokens = [by_id[i] for i in range(256 + GGUF_MERGES)] + ["<|endoftext|>"]  # GPT-2's order: merge i is 256 + i
    eot = len(tokens) - 1
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (folder / "merges.txt").write_text("\n".join(["#version: 0.2", *merges]) + "\n")
    (folder / "tokenizer_config.json").write_text((gpt2 / "tokenizer_config.json").read_text())

    n_head, n_kv = 4, 2
    config = LlamaConfig(vocab_size=len(tokens), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=n_head, num_key_value_heads=n_kv, max_position_embeddings=256,
                         rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=True, initializer_range=0.2,
                         bos_token_id=eot, eos_token_id=eot)
    torch.manual_seed(0)
    reference = LlamaForCausalLM(config)  # wide init: attention and logits depend on the context
    state = {k: v.detach().numpy().astype(np.float32) for k, v in reference.state_dict().items()}
    rng = np.random.default_rng(0)
    for name in state:
        if name.endswith("norm.weight"):  # RMSNorm gains other than 1: a norm read wrong shows
            state[name] = 1 + 0.1 * rng.standard_normal(32, dtype=np.float32)

    def rotary_rows(w, heads):  # llama.cpp's convert_hf_to_gguf.py `permute`, which the loader undoes
        return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    writer = GGUFWriter(str(path), "llama")
    writer.add_name("tiny llama")
    writer.add_block_count(2)
    writer.add_context_length(256)
    writer.add_embedding_length(32)
    writer.add_feed_forward_length(64)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_kv)
    writer.add_rope_freq_base(10000.0)
    writer.add_rope_dimension_count(32 // n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(LlamaFileType.MOSTLY_Q4_1)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * eot + [3])  # 3: control
    writer.add_token_merges(merges)
    writer.add_bos_token_id(eot)
    writer.add_eos_token_id(eot)
    writer.add_add_bos_token(False)

    def put(gguf_name, hf_name, qtype, heads=None):
        """The tensor into the file (quantized row-wise, as llama.cpp does); the reference gets what the file
        holds, dequantized (rows are quantized independently, so permuting commutes with it)."""
        w = state[hf_name]
        if qtype == GGMLQuantizationType.F32:
            writer.add_tensor(gguf_name, w)
            return
        stored = quantize(rotary_rows(w, heads) if heads else w, qtype)
        writer.add_tensor(gguf_name, stored, raw_dtype=qtype)
        state[hf_name] = dequantize(quantize(w, qtype), qtype).reshape(w.shape)

    q4, f32 = GGMLQuantizationType.Q4_1, GGMLQuantizationType.F32
    put("token_embd.weight", "model.embed_tokens.weight", GGMLQuantizationType.Q8_0)
    put("output_norm.weight", "model.norm.weight", f32)
    for i in range(2):
        layer = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", f"{layer}input_layernorm.weight", f32)
        put(f"blk.{i}.ffn_norm.weight", f"{layer}post_attention_layernorm.weight", f32)
        put(f"blk.{i}.attn_q.weight", f"{layer}self_attn.q_proj.weight", q4, heads=n_head)
        put(f"blk.{i}.attn_k.weight", f"{layer}self_attn.k_proj.weight", q4, heads=n_kv)
        for gguf_part, hf_part in (("attn_v", "self_attn.v_proj"), ("attn_output", "self_attn.o_proj"),
                                   ("ffn_gate", "mlp.gate_proj"), ("ffn_up", "mlp.up_proj"),
                                   ("ffn_down", "mlp.down_proj")):
            put(f"blk.{i}.{gguf_part}.weight", f"{layer}{hf_part}.weight", q4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    state["lm_head.weight"] = state["model.embed_tokens.weight"]
    reference.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()})
    reference.save_pretrained(folder)
    return path, folder


def test_hf_model_loads_a_gguf_file(tiny_gguf):
    """`--model.pretrained FILE.gguf`: transformers dequantizes it; the folder of the same network must give
    the same logits, and the GGUF's own tokenizer (its metadata) is used."""
    from lightning_bench.data.tokenization import HFTokenizer

    path, folder_path = tiny_gguf
    gguf = HFLanguageModel(str(path))
    folder = HFLanguageModel(str(folder_path))
    assert gguf.tokenizer_source["kwargs"]["gguf_file"] == path.name
    tok = HFTokenizer(gguf.tokenizer_source["name"], **gguf.tokenizer_source["kwargs"])
    text = "The cat sat on the mat."
    ids = torch.tensor([[tok.prefix_id, *tok.encode(text)]])
    assert ids.tolist() == [[tok.prefix_id, *HFTokenizer(str(folder_path)).encode(text)]]
    assert ids.shape[1] - 1 < len(text.encode()) and tok.prefix_id == tok.vocab_size - 1  # the file's merges, its BOS
    gguf.net, folder.net = gguf.build_network(tok.vocab_size), folder.build_network(tok.vocab_size)
    with torch.no_grad():
        assert torch.allclose(gguf(ids), folder(ids), atol=1e-4)
    assert gguf.model_name == "hf-tiny-llama.Q4_1"
