"""QuantizationCallback: what `--bits 8|4` adds to a run (see the package docstring)."""

from __future__ import annotations

import os
from typing import Optional, Sequence

import lightning as L

from lightning_bench.errors import ConfigError
from lightning_bench.quantization.cpu_lowbit import CPU_KERNEL_ENV, CPU_KERNELS, kernel_counts, kernel_name, set_cpu_kernel
from lightning_bench.quantization.export import (EXPORT_METHODS, ExportReport, export_lowbit, exported_size,
                                                 is_exported, load_pretrained_lowbit, size_breakdown)
from lightning_bench.quantization.fake_quant import (DEFAULT_SKIP_MODULES, SUPPORTED_BITS, activation_quant_bits,
                                                     prepare_qat)


class QuantizationCallback(L.Callback):
    """Quantization-aware training during fit; real low-bit modules for validate/test (see module doc).

    Args:
        bits: 8 (int8 per-channel weights / Linear8bitLt, which at inference also quantizes each
            input row to int8: W8A8) or 4 (NF4 block 64 / Linear4bit, weight-only).
        skip_modules: Linear layers left in fp32, matched on whole dotted name segments
            (default: the output head "lm_head"; embeddings are never quantized).
        incompatible: 4-bit layers whose in_features is not a multiple of 64: "error" (ConfigError)
            or "skip" (keep them fp32). Layers narrower than 64 inputs are always kept fp32.
        act_bits: fake-quant bits of the activations the model declares (ResNet-BK: potential v and
            features G; None: not quantized).
        int8_threshold: Linear8bitLt outlier threshold (0.0: pure int8, no fp16 outlier columns).
        cpu_bf16_kernel: let Linear4bit use bitsandbytes' fused AVX512-BF16 CPU kernel (faster, bf16
            arithmetic, fails on some shapes); off = dequantize to fp32 and matmul.
        hf_method: how a pretrained HF model is loaded for evaluation ("auto", "bitsandbytes_config",
            "export"; see load_pretrained_lowbit).
        cpu_kernel: which forward the low-bit modules run on CPU: "auto" (default: `cpu_lowbit`'s fast
            kernels, the same function from the same stored tensors; bitsandbytes' own forward off
            CPU) or "bitsandbytes" (bitsandbytes' forward everywhere, for parity checks); None (default):
            the environment variable LB_CPU_KERNEL, else "auto" (so `LB_CPU_KERNEL=bitsandbytes
            lightning_bench test --bits 8` forces bitsandbytes from the command line). The record's
            `quantization.kernel` names what ran and `quantization.kernel_calls` counts the calls.
        load_hf_lowbit: load a pretrained model (one whose `load_quantized` can) for validate/test
            directly in low bit. Set it False
            when a checkpoint (fine-tuned weights) will be restored into it: then the fp32 network is
            built, the checkpoint restored, and the result exported (a low-bit network cannot take
            fp32 checkpoint weights; trying raises a ConfigError).
    """

    record_keys = ("model_size_mb", "model_size", "quantization")  # what record_fields gives the run's record

    def __init__(self, bits: int, skip_modules: Sequence[str] = DEFAULT_SKIP_MODULES, incompatible: str = "error",
                 act_bits: Optional[int] = 8, int8_threshold: float = 0.0, cpu_bf16_kernel: bool = False,
                 hf_method: str = "auto", load_hf_lowbit: bool = True, cpu_kernel: Optional[str] = None):
        if bits not in SUPPORTED_BITS:
            raise ConfigError(f"QuantizationCallback handles bits 8 or 4, not {bits}")
        if hf_method not in EXPORT_METHODS:
            raise ConfigError(f"unknown low-bit loading method {hf_method!r}; valid: {', '.join(EXPORT_METHODS)}")
        self.bits, self.skip_modules, self.incompatible = bits, tuple(skip_modules), incompatible
        self.act_bits, self.int8_threshold, self.cpu_bf16_kernel = act_bits, int8_threshold, cpu_bf16_kernel
        if cpu_kernel is None:
            cpu_kernel = os.environ.get(CPU_KERNEL_ENV) or "auto"
        if cpu_kernel not in CPU_KERNELS:
            raise ConfigError(f"unknown cpu_kernel {cpu_kernel!r}; valid: {', '.join(CPU_KERNELS)}")
        self.hf_method, self.load_hf_lowbit, self.cpu_kernel = hf_method, load_hf_lowbit, cpu_kernel
        self.report: dict = {"bits": bits}
        self._calls_at_start: dict = {}
        self._qat_fit = False  # a fit with QAT ran: validations keep evaluating the fake-quant model

    def _options(self, pl_module) -> dict:
        return {"skip_modules": self.skip_modules, "incompatible": self.incompatible,
                "layers": pl_module.quantizable_layers()}

    # ---- fit -------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            pl_module.configure_model()  # idempotent: builds the network from the data's vocabulary
            plan = prepare_qat(pl_module.net, self.bits, act_bits=self.act_bits, **self._options(pl_module))
            self.report.update(mode="qat", act_bits=self.act_bits if activation_quant_bits(pl_module.net) else None,
                               **plan.as_dict())
            self.report.pop("quantized", None)
            self._qat_fit = True
        elif pl_module.net is None and self.load_hf_lowbit:
            vocab = getattr(getattr(trainer, "datamodule", None), "vocab_size", None)
            # the loader is passed in: models/ does not import quantization/ (LanguageModule.use_8bit_optimizer)
            report = pl_module.load_quantized(self.bits, vocab, loader=load_pretrained_lowbit, method=self.hf_method,
                                              int8_threshold=self.int8_threshold, cpu_bf16_kernel=self.cpu_bf16_kernel,
                                              skip_modules=self.skip_modules, incompatible=self.incompatible,
                                              cpu_kernel=self.cpu_kernel)
            if report is not None:
                self._set_export_report(report)

    # ---- validate / test ---------------------------------------------------------------------
    def _export(self, trainer, pl_module) -> None:
        if trainer.state.fn == "fit" or pl_module.net is None:
            return
        if is_exported(pl_module.net):  # loaded in low bit (setup) or exported by an earlier stage
            self._set_kernel(pl_module)
            return
        if self._qat_fit and trainer.state.fn == "validate":
            return  # the final validation of a fit: same (fake-quant) model as the rest of its curve
        report = export_lowbit(pl_module.net, self.bits, act_bits=self.act_bits, int8_threshold=self.int8_threshold,
                               cpu_bf16_kernel=self.cpu_bf16_kernel, cpu_kernel=self.cpu_kernel,
                               **self._options(pl_module))
        self._set_export_report(report)
        self._set_kernel(pl_module)

    def _set_kernel(self, pl_module) -> None:
        """(Re)apply the cpu_kernel choice (a network exported elsewhere too) and name the kernel for
        the device the evaluation runs on; start counting calls."""
        if not self.cpu_bf16_kernel:
            set_cpu_kernel(pl_module.net, self.cpu_kernel)
        self.report["kernel"] = kernel_name(pl_module.net, pl_module.device)
        self._calls_at_start = kernel_counts()

    def _set_export_report(self, report: ExportReport) -> None:
        info = report.as_dict()
        self.report.update(mode="lowbit", **{k: v for k, v in info.items() if k != "size"})

    def on_validation_start(self, trainer, pl_module) -> None:
        self._export(trainer, pl_module)

    def on_test_start(self, trainer, pl_module) -> None:
        self._export(trainer, pl_module)

    def on_predict_start(self, trainer, pl_module) -> None:
        self._export(trainer, pl_module)

    # ---- size --------------------------------------------------------------------------------
    def size(self, pl_module) -> Optional[dict]:
        """size_breakdown of the low-bit model: the network itself once exported, else an exported copy."""
        net = pl_module.net
        if net is None:
            return None
        if is_exported(net):
            return size_breakdown(net)
        return exported_size(net, self.bits, act_bits=self.act_bits, int8_threshold=self.int8_threshold,
                             **self._options(pl_module))

    def record_fields(self, trainer, pl_module) -> dict:
        """model_size_mb of the low-bit model, its breakdown and what was done (results/recorder.py)."""
        size = self.size(pl_module)
        if size is None:
            return {}
        if self.report.get("mode") == "lowbit":
            calls = {k: n - self._calls_at_start.get(k, 0) for k, n in kernel_counts().items()}
            self.report["kernel_calls"] = {k: n for k, n in calls.items() if n}
        return {"model_size_mb": size["total_mb"], "model_size": size, "quantization": self.report}
