"""A masker stack as a method of a grid (`downstream --attention_sparsity '{name: stack}'`): it evicts nothing, so
the engine keeps the whole cache, and the rows decoding under it attend through the stack (task_decode batches
them apart from other methods' rows: one stack per forward)."""

from __future__ import annotations

import torch

from lightning_bench.sparsity.masking.stack import MaskerStack
from lightning_bench.sparsity.methods import Method, Priority


class MaskedAttention(Method):
    evicts = False

    def __init__(self, name: str, stack):
        self.name = name
        self.stack = MaskerStack.parse(stack)

    def priority(self, view) -> Priority:  # never asked: nothing is evicted
        return Priority(torch.zeros(view.keys.shape[:3], device=view.keys.device))

    def describe(self) -> dict:
        return {"method": self.name, **self.stack.describe()}
