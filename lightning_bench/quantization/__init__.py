"""`--bits` -> how a model is trained and evaluated.

32 / 16: a Lightning precision (`precision.precision_for_bits`).
8 / 4:   quantization-aware training of the Linear weights during fit (`fake_quant`), real
         bitsandbytes low-bit modules for validate/test and for pretrained HF models (`export`),
         model size measured from the stored tensors (`size_breakdown`).

`QuantizationCallback` is the one piece the CLI needs for 8 / 4 (with precision "32-true"):

    fit:            setup("fit") builds the network if needed and turns QAT on (the latent
                    weights stay fp32 Parameters; checkpoints keep plain `weight` keys). Every
                    validation during the fit, and the final one `ResultsRecorder.finish_fit` may
                    run, evaluates the fake-quant model.
    validate/test:  after Lightning restored any checkpoint (on_validation_start / on_test_start),
                    the network is exported in place to Linear8bitLt / Linear4bit(nf4) and evaluated
                    with them. A pretrained HF model without a network yet is loaded directly in
                    low bit (`load_pretrained_lowbit`, BitsAndBytesConfig first).
    callback.size(pl_module) -> size_breakdown of the low-bit model (of an exported copy while the
                    network is still fake-quant), for the record's model_size_mb.
    callback.report          -> dict describing what was done (plan / export path / layers kept fp32 /
                    `kernel`: the forward the low-bit layers ran, `kernel_calls`: calls per kernel).

On CPU the bitsandbytes modules get a fast forward (`cpu_lowbit`): their class is swapped in place to
a subclass computing the same function from the same stored tensors (int8: exact W8A8 vector-wise,
integer accumulation in an fp32 GEMM; nf4: table dequantization + fp32 GEMM). Off CPU, in train mode
or for other settings the subclass runs bitsandbytes' forward. QuantizationCallback(cpu_kernel=
"bitsandbytes") (or LB_CPU_KERNEL=bitsandbytes) keeps bitsandbytes' forward for parity checks.

What is specific to a model family (layers kept fp32, activations to fake-quantize, loading a
checkpoint directly in low bit) comes from the model: `quantizable_layers()`, `load_quantized()`.
"""

from __future__ import annotations

from lightning_bench.quantization.callback import QuantizationCallback
from lightning_bench.quantization.cpu_lowbit import (CPU_KERNELS, kernel_counts, kernel_name, set_cpu_kernel,
                                                     use_bitsandbytes_kernels, use_cpu_kernels, uses_cpu_kernels)
from lightning_bench.quantization.export import (ExportReport, adamw8bit, dequantized_weight,
                                                 export_lowbit, exported_size, is_exported, load_pretrained_lowbit,
                                                 size_breakdown)
from lightning_bench.quantization.fake_quant import (DEFAULT_SKIP_MODULES, NF4_BLOCKSIZE, NF4_CODE, SUPPORTED_BITS,
                                                     ActivationRange, FakeQuantWeight, QuantizableLayers, QuantPlan,
                                                     activation_quant_bits, attach_activation_quant,
                                                     detach_activation_quant, fake_quant_weight,
                                                     fixed_range_fake_quant, int8_fake_quant, int8_quantize, is_qat,
                                                     nf4_fake_quant, nf4_quantize, plan_quantization, prepare_qat,
                                                     remove_qat)

__all__ = [
    "QuantizationCallback", "SUPPORTED_BITS", "DEFAULT_SKIP_MODULES", "NF4_BLOCKSIZE", "NF4_CODE",
    # QAT
    "QuantPlan", "plan_quantization", "prepare_qat", "remove_qat", "is_qat", "FakeQuantWeight",
    "fake_quant_weight", "int8_quantize", "int8_fake_quant", "nf4_quantize", "nf4_fake_quant",
    "fixed_range_fake_quant", "QuantizableLayers", "ActivationRange", "attach_activation_quant",
    "detach_activation_quant", "activation_quant_bits",
    # low-bit modules, size, optimizer
    "ExportReport", "export_lowbit", "exported_size", "is_exported", "dequantized_weight",
    "load_pretrained_lowbit", "size_breakdown", "adamw8bit",
    # fast CPU forward of the low-bit modules
    "CPU_KERNELS", "use_cpu_kernels", "use_bitsandbytes_kernels", "uses_cpu_kernels", "set_cpu_kernel",
    "kernel_name", "kernel_counts",
]
