"""`--bits` -> what Lightning should run with.

32 is fp32; 16 is mixed precision, bf16 wherever the hardware has it (CPU autocast always does),
else fp16 with loss scaling. 8 and 4 run fp32 arithmetic around quantized weights: fake-quant (QAT)
during fit, real bitsandbytes modules for evaluation (lightning_bench.quantization).
"""

from __future__ import annotations

import torch

from lightning_bench.errors import ConfigError

SUPPORTED_BITS = (32, 16, 8, 4)


def precision_for_bits(bits: int, accelerator: str = "auto") -> tuple[str, str]:
    """(Lightning precision string, one-line explanation for the log and the record)."""
    if bits not in SUPPORTED_BITS:
        raise ConfigError(f"--bits {bits} is not supported; valid: {', '.join(map(str, SUPPORTED_BITS))}")
    if bits == 32:
        return "32-true", "fp32 weights and activations"
    if bits in (8, 4):
        kind = "int8 per-output-channel" if bits == 8 else "NF4, absmax per 64 weights"
        # Linear8bitLt is W8A8 at inference (LLM.int8()), while QAT trained weights only: say so
        module = ("Linear8bitLt (int8 per-output-channel weights, and int8 activations: each input row "
                  "quantized by its absmax at inference, LLM.int8() vector-wise)" if bits == 8
                  else "Linear4bit (nf4 weights; activations not quantized)")
        return "32-true", (f"{bits}-bit: fit = quantization-aware training of Linear weights ({kind} fake-quant, "
                           f"straight-through; fp32 latent weights); validate/test = bitsandbytes {module}")
    on_cuda = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    if not on_cuda or torch.cuda.is_bf16_supported():
        return "bf16-mixed", f"bf16 mixed precision (autocast on {'CUDA' if on_cuda else 'CPU'}; fp32 weights)"
    return "16-mixed", "fp16 mixed precision with loss scaling (this GPU has no bf16)"
