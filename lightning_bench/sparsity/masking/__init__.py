"""Query-time sparse attention: the whole KV cache is kept, each query attends to the entries a stack of
maskers chooses (eviction, the other family, removes keys for good: methods.py, cache.py).

- base.py:    `MaskContext` (what a masker sees) and the `Masker` base class; counter-based uniforms.
- fixed.py:   sink, local, oracle_topk, oracle_topp, quest (entries of 1).
- sampled.py: random_sampling, magic_pig, adaptive_sampling (entries of their inclusion probability).
- stack.py:   `MaskerStack`: parsing, the importance-weighted attention of one call, density and error;
              `register_masker`, the extension point (learned maskers bring their weight file: `needs_weights`).

The stack runs inside `capture.lb_capture`, the attention function the eviction statistics already use, so a
stack, an eviction method's statistics and the model's own attention share one forward.
"""

from lightning_bench.sparsity.masking.base import MaskContext, Masker
from lightning_bench.sparsity.masking.stack import (MaskerStack, make_masker, register_masker, registry,
                                                   unregister_masker)

__all__ = ["MaskContext", "Masker", "MaskerStack", "make_masker", "register_masker", "registry", "unregister_masker"]
