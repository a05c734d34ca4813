"""`--bits` -> what Lightning should run with.

32 is fp32. 16 is bf16 wherever the hardware has it (CPU always can), else fp16:
  fit:                  mixed precision (autocast; fp32 master weights, so updates are not lost to
                        bf16 rounding; fp16 adds loss scaling);
  test/validate/predict: bf16 *weights* ("bf16-true"): nothing is trained, so the fp32 copy would
                        only cost memory and the autocast casts of every weight on every call.
  Whether the CPU has native bf16 matrix units (AVX512-BF16 / AMX) decides how fast bf16 is there;
  without them oneDNN emulates bf16 and it is several times SLOWER than fp32. The note says which,
  and `bf16_support()` gives it for the record.
8 and 4 run fp32 arithmetic around quantized weights: fake-quant (QAT) during fit, real low-bit
modules for evaluation (lightning_bench.quantization).
"""

from __future__ import annotations

import torch

from lightning_bench.errors import ConfigError
# a torch query the model also records (its evaluation path): defined in the layer below, re-exported here
from lightning_bench.models.capabilities import bf16_support

SUPPORTED_BITS = (32, 16, 8, 4)
EVAL_SUBCOMMANDS = ("test", "validate", "predict")


def precision_for_bits(bits: int, accelerator: str = "auto", subcommand: str = "fit") -> tuple[str, str]:
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
    support = bf16_support(on_cuda)
    if on_cuda and not support["native_bf16"]:
        return "16-mixed", "fp16 mixed precision with loss scaling (this GPU has no bf16)"
    where = "CUDA" if on_cuda else "CPU"
    speed = "" if support["native_bf16"] else (
        f"; WARNING: this CPU ({support['cpu_capability']}) has no native bf16 (no AVX512-BF16/AMX): bf16 matmuls "
        "are emulated and run several times slower than --bits 32")
    if subcommand in EVAL_SUBCOMMANDS:
        return "bf16-true", (f"bf16 weights and activations on {where} (evaluation only: no fp32 master copy; "
                             f"log-probabilities in fp32){speed}")
    return "bf16-mixed", f"bf16 mixed precision (autocast on {where}; fp32 weights){speed}"
