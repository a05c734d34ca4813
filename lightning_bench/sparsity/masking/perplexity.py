"""Perplexity under a masker stack: every query of an evaluation window attends sparsely (one ordinary forward
under `capturing(net, None, masking=stack)`), the stack's meter adding up density and attention error. It is the
`evaluation` a LanguageModule delegates its logits to (models/base.py), as StreamingEviction is for eviction."""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from lightning_bench.sparsity.capture import capturing
from lightning_bench.sparsity.engine import resolve_network
from lightning_bench.sparsity.masking.stack import MaskerStack
from lightning_bench.sparsity.streaming import StreamingEviction


@dataclasses.dataclass
class QueryTimeSparsity:
    stack: MaskerStack
    forwards: int = 0

    @classmethod
    def build(cls, spec, **options) -> "QueryTimeSparsity":
        stack = MaskerStack.parse(spec, **options)
        stack.prefill_sparse = True  # perplexity: every query of a window is sparse
        return cls(stack)

    applied = StreamingEviction.applied  # the same attachment to the module (and to a task's evaluator)

    def scores(self, batch) -> bool:
        return False

    def settings(self) -> dict:
        return {"method": self.stack.name, **self.stack.describe()}

    def figures(self) -> dict:
        return {**self.stack.figures(), "forwards": self.forwards}

    def reset(self) -> None:
        """A new stage's figures start from nothing."""
        self.stack.reset()
        self.forwards = 0

    @torch.no_grad()
    def logits(self, module, input_ids: torch.Tensor, logits_to_keep: Optional[torch.Tensor] = None) -> torch.Tensor:
        net = resolve_network(module.net)
        with capturing(net, None, masking=self.stack):
            out = net(input_ids=input_ids, logits_to_keep=0 if logits_to_keep is None else logits_to_keep)
        self.stack.absorb()  # this forward's sums: the next batch may have another number of rows
        self.forwards += 1
        return out.logits
