"""A transformers DynamicLayer that appends into spare room instead of re-allocating the whole cache.

transformers' DynamicLayer appends a decoded token by `torch.cat([keys, new])`: every step copies the
whole cache of every layer. On a CPU at long contexts that copy is a large share of a decoding step
(SmolLM2-135M, 8,192 cached tokens, one thread: 368 ms a token with the copy, 252 ms without, logits
equal; benchmarks/kv_append.py, figures in docs/sparsity.md). `GrowingLayer` keeps each layer's keys and values in a buffer
with `SPARE` free slots after them and writes new tokens in place; `keys` / `values` are views of the
filled part, so everything that reads them (attention, eviction, kv_bytes) sees exactly the cached
tokens. Whatever assigns a new tensor to `keys` (an eviction's gather, transformers' crop or reorder)
is detected at the next append, which then moves the tensor into a fresh buffer: evicted memory is
still released. The values are those of DynamicLayer, bit for bit (tests/test_growing_layer.py).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

SPARE = 256  # free slots after a (re)allocation: a copy every 256 decoded tokens instead of every token


class GrowingLayer(DynamicLayer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._key_buffer = self._value_buffer = None

    @property
    def capacity(self) -> int:
        """Slots allocated (filled + spare); 0 before the first append."""
        return 0 if self._key_buffer is None else self._key_buffer.shape[-2]

    def _owns_current(self) -> bool:
        """Whether keys/values are still the views this layer made (not tensors assigned since)."""
        buf = self._key_buffer
        return (buf is not None and self.keys is not None and self.keys.dim() == 4
                and self.keys.data_ptr() == buf.data_ptr() and self.keys.shape[:2] == buf.shape[:2]
                and self.keys.stride() == buf.stride() and self.values.data_ptr() == self._value_buffer.data_ptr()
                and self.values.shape[-2] == self.keys.shape[-2])

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        held = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        new = key_states.shape[-2]
        if not self._owns_current() or held + new > self._key_buffer.shape[-2]:
            self._key_buffer = self._move(self.keys, key_states, held + new + SPARE)
            self._value_buffer = self._move(self.values, value_states, held + new + SPARE)
        self._key_buffer[:, :, held:held + new] = key_states
        self._value_buffer[:, :, held:held + new] = value_states
        self.keys = self._key_buffer[:, :, :held + new]
        self.values = self._value_buffer[:, :, :held + new]
        return self.keys, self.values

    def reserve(self, keys_like: torch.Tensor, values_like: torch.Tensor, batch: int, length: int):
        """Fresh buffers of `batch` rows and `length` slots plus SPARE, made the cache: their filled parts'
        views (keys, values), for the caller to fill in place (KVEngine.stack / select build a batch there
        instead of in a temporary that the next append would copy again)."""
        self._key_buffer = keys_like.new_empty(batch, keys_like.shape[1], length + SPARE, keys_like.shape[-1])
        self._value_buffer = values_like.new_empty(batch, values_like.shape[1], length + SPARE, values_like.shape[-1])
        self.keys, self.values = self._key_buffer[:, :, :length], self._value_buffer[:, :, :length]
        return self.keys, self.values

    @staticmethod
    def _move(current: torch.Tensor, new: torch.Tensor, capacity: int) -> torch.Tensor:
        buffer = new.new_empty(*new.shape[:2], capacity, new.shape[-1])
        if current.dim() == 4 and current.shape[-2]:
            buffer[:, :, :current.shape[-2]] = current
        return buffer


def growing_cache(config) -> DynamicCache:
    """A DynamicCache for `config` whose full-attention layers are GrowingLayers (others left as made)."""
    cache = DynamicCache(config=config)
    cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache
