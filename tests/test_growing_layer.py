"""GrowingLayer (sparsity/growing_layer.py): appending in place gives transformers' DynamicLayer's keys,
values and logits bit for bit, across buffer re-allocations, and a tensor assigned by an eviction is taken
over at the next append (its memory, not the old buffer's, is what the layer then holds)."""

import pytest
import torch
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM

from lightning_bench.sparsity import growing_layer
from lightning_bench.sparsity.engine import cache_argument
from lightning_bench.sparsity.growing_layer import GrowingLayer, growing_cache


@pytest.fixture(scope="module")
def tiny_llama():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=512)
    return LlamaForCausalLM(config).eval()


@torch.no_grad()
def _decode(net, cache, prompt: torch.Tensor, steps: int, evict_at: int = -1):
    """Greedy: prefill, then `steps` tokens; at step `evict_at` every layer keeps its even slots (an eviction's
    gather: new, smaller tensors assigned to keys/values). Returns (logits per step, final keys per layer)."""
    out = net(input_ids=prompt, **cache_argument(net, cache), use_cache=True)
    logits, length, token = [out.logits[0, -1]], prompt.shape[1], out.logits[0, -1].argmax().view(1, 1)
    position = prompt.shape[1]
    for step in range(steps):
        if step == evict_at:
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys[:, :, ::2].clone(), layer.values[:, :, ::2].clone()
            length = cache.layers[0].keys.shape[-2]
        mask = torch.ones(1, length + 1, dtype=torch.long)
        out = net(input_ids=token, attention_mask=mask, position_ids=torch.tensor([[position]]),
                  **cache_argument(net, cache), use_cache=True)
        logits.append(out.logits[0, -1])
        token, length, position = out.logits[0, -1].argmax().view(1, 1), length + 1, position + 1
    return logits, [layer.keys.clone() for layer in cache.layers]


@pytest.mark.parametrize("evict_at", [-1, 5])
def test_same_logits_and_keys_as_dynamic_layer_across_reallocations(tiny_llama, monkeypatch, evict_at):
    monkeypatch.setattr(growing_layer, "SPARE", 3)  # re-allocate every few tokens
    prompt = torch.randint(0, 97, (1, 20), generator=torch.Generator().manual_seed(1))
    reference, ref_keys = _decode(tiny_llama, DynamicCache(config=tiny_llama.config), prompt, 12, evict_at)
    cache = growing_cache(tiny_llama.config)
    assert all(type(layer) is GrowingLayer for layer in cache.layers)
    grown, keys = _decode(tiny_llama, cache, prompt, 12, evict_at)
    assert all(torch.equal(a, b) for a, b in zip(reference, grown))
    assert all(torch.equal(a, b) for a, b in zip(ref_keys, keys))


def test_appends_in_place_and_takes_over_an_assigned_tensor(monkeypatch):
    monkeypatch.setattr(growing_layer, "SPARE", 4)
    layer = GrowingLayer()
    k = torch.randn(1, 2, 10, 8)
    layer.update(k, k + 1)
    first = layer.keys.data_ptr()
    assert layer.capacity == 14
    step = torch.randn(1, 2, 1, 8)
    layer.update(step, step)
    assert layer.keys.data_ptr() == first and layer.capacity == 14  # written in place, no new buffer
    assert torch.equal(layer.keys, torch.cat([k, step], dim=-2))
    kept = layer.keys[:, :, :3].clone()  # what an eviction assigns
    layer.keys, layer.values = kept, kept.clone()
    layer.update(step, step)
    assert layer.keys.data_ptr() not in (first, kept.data_ptr()) and layer.capacity == 3 + 1 + 4
    assert torch.equal(layer.keys, torch.cat([kept, step], dim=-2)) and layer.get_seq_length() == 4
