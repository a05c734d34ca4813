"""What a model declares to the packages above it, in types those packages import from here.

models/ is the bottom layer (tests/test_package_boundaries.py): it imports nothing from profiling/,
quantization/, sparsity/ or evaluation/. A model family states what the others need to know about its
network with the plain values below, and the package that acts on them reads them:

- `AnalyticFlops` (profiling/flops.py): work inside a module that the FLOP counter cannot see, with the
  formula (the scans' formulas are in models/scan_flops.py);
- `QuantizableLayers` / `ActivationRange` (quantization/fake_quant.py, export.py): Linear layers that must
  stay fp32 and the bounded activations to fake-quantize;
- `bf16_support` (quantization/precision.py, and the evaluation path a LanguageModule records): whether this
  device computes bf16 natively. A plain torch query, so it lives in the lowest layer that uses it.

What a model *cannot* do without a package above it (load a checkpoint in low bit, build bitsandbytes'
8-bit AdamW) is passed in by the caller that has that package: `LanguageModule.load_quantized(..., loader=)`
and `use_8bit_optimizer(optimizer=)` (see models/base.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import torch
from torch import nn


class AnalyticFlops(NamedTuple):
    """Work inside `module` that the counter cannot see, as its model declares it.

    `forward_flops(module, args, kwargs)` gives one call's forward FLOPs. `whole_module=False`: they are
    added as they are (e.g. the BK scan's elementwise work). `whole_module=True`: they are the module's
    whole cost in counter conventions, and what the counter saw inside the call is subtracted (e.g.
    the Mamba mixer, whose projections the counter sees on one path and not on another).
    """

    module: nn.Module
    kind: str
    forward_flops: Callable[[nn.Module, tuple, dict], int]
    whole_module: bool = False


@dataclass(frozen=True)
class ActivationRange:
    """Fake-quantize the output (`where="output"`) or the first input (`"input"`) of the module called
    `name` in the network on the fixed range [-limit, limit]."""

    name: str
    where: str
    limit: float


@dataclass
class QuantizableLayers:
    """What a model family tells quantization about its network: `keep_fp32` Linear layers (name ->
    why: e.g. a parent module reads the weight directly, which a packed low-bit weight cannot serve)
    and `activations` to fake-quantize."""

    keep_fp32: dict[str, str] = field(default_factory=dict)
    activations: list[ActivationRange] = field(default_factory=list)


def bf16_support(on_cuda: bool = False) -> dict:
    """Whether this device computes bf16 matmuls natively (else emulated, slower than fp32 on CPU)."""
    if on_cuda:
        return {"device": "cuda", "native_bf16": bool(torch.cuda.is_bf16_supported())}
    amx = bool(torch.cpu._is_amx_tile_supported())
    avx512_bf16 = bool(torch.cpu._is_avx512_bf16_supported())
    return {"device": "cpu", "native_bf16": amx or avx512_bf16, "amx": amx, "avx512_bf16": avx512_bf16,
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}
