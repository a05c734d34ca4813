"""`--bits` -> what Lightning should run with.

32 is fp32; 16 is mixed precision, bf16 wherever the hardware has it (CPU autocast always does),
else fp16 with loss scaling. 8 and 4 (quantization-aware training, bitsandbytes modules) are the
quantization issue's work: until then they fail loudly instead of silently training in fp32.
"""

from __future__ import annotations

import torch

from lightning_bench.errors import ConfigError

SUPPORTED_BITS = (32, 16, 8, 4)
IMPLEMENTED_BITS = (32, 16)


def precision_for_bits(bits: int, accelerator: str = "auto") -> tuple[str, str]:
    """(Lightning precision string, one-line explanation for the log and the record)."""
    if bits not in SUPPORTED_BITS:
        raise ConfigError(f"--bits {bits} is not supported; valid: {', '.join(map(str, SUPPORTED_BITS))}")
    if bits not in IMPLEMENTED_BITS:
        raise ConfigError(f"--bits {bits} (low-bit quantization) is not implemented yet; use --bits 32 or 16")
    if bits == 32:
        return "32-true", "fp32 weights and activations"
    on_cuda = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    if not on_cuda or torch.cuda.is_bf16_supported():
        return "bf16-mixed", f"bf16 mixed precision (autocast on {'CUDA' if on_cuda else 'CPU'}; fp32 weights)"
    return "16-mixed", "fp16 mixed precision with loss scaling (this GPU has no bf16)"
