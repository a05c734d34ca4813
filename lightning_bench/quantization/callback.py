"""QuantizationCallback: what `--bits 8|4` adds to a run (see the package docstring)."""

from __future__ import annotations

from typing import Optional, Sequence

import lightning as L

from lightning_bench.errors import ConfigError
from lightning_bench.quantization.export import (EXPORT_METHODS, ExportReport, export_lowbit, exported_size,
                                                 is_exported, load_pretrained_lowbit, size_breakdown)
from lightning_bench.quantization.fake_quant import (DEFAULT_SKIP_MODULES, SUPPORTED_BITS, bk_activation_bits,
                                                     prepare_qat)


class QuantizationCallback(L.Callback):
    """Quantization-aware training during fit; real low-bit modules for validate/test (see module doc).

    Args:
        bits: 8 (int8 per-channel / Linear8bitLt) or 4 (NF4 block 64 / Linear4bit).
        skip_modules: Linear layers left in fp32, matched on whole dotted name segments
            (default: the output head "lm_head"; embeddings are never quantized).
        incompatible: 4-bit layers whose in_features is not a multiple of 64: "error" (ConfigError)
            or "skip" (keep them fp32). Layers narrower than 64 inputs are always kept fp32.
        act_bits: ResNet-BK potential v / features G fake-quant bits (None: not quantized).
        int8_threshold: Linear8bitLt outlier threshold (0.0: pure int8, no fp16 outlier columns).
        cpu_bf16_kernel: let Linear4bit use bitsandbytes' fused AVX512-BF16 CPU kernel (faster, bf16
            arithmetic, fails on some shapes); off = dequantize to fp32 and matmul.
        hf_method: how a pretrained HF model is loaded for evaluation ("auto", "bitsandbytes_config",
            "export"; see load_pretrained_lowbit).
        load_hf_lowbit: load a pretrained HF model for validate/test directly in low bit. Set it False
            when a checkpoint (fine-tuned weights) will be restored into it: then the fp32 network is
            built, the checkpoint restored, and the result exported (a low-bit network cannot take
            fp32 checkpoint weights; trying raises a ConfigError).
    """

    def __init__(self, bits: int, skip_modules: Sequence[str] = DEFAULT_SKIP_MODULES, incompatible: str = "error",
                 act_bits: Optional[int] = 8, int8_threshold: float = 0.0, cpu_bf16_kernel: bool = False,
                 hf_method: str = "auto", load_hf_lowbit: bool = True):
        if bits not in SUPPORTED_BITS:
            raise ConfigError(f"QuantizationCallback handles bits 8 or 4, not {bits}")
        if hf_method not in EXPORT_METHODS:
            raise ConfigError(f"unknown low-bit loading method {hf_method!r}; valid: {', '.join(EXPORT_METHODS)}")
        self.bits, self.skip_modules, self.incompatible = bits, tuple(skip_modules), incompatible
        self.act_bits, self.int8_threshold, self.cpu_bf16_kernel = act_bits, int8_threshold, cpu_bf16_kernel
        self.hf_method, self.load_hf_lowbit = hf_method, load_hf_lowbit
        self.report: dict = {"bits": bits}
        self._qat_fit = False  # a fit with QAT ran: validations keep evaluating the fake-quant model

    @property
    def _options(self) -> dict:
        return {"skip_modules": self.skip_modules, "incompatible": self.incompatible}

    # ---- fit -------------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage == "fit":
            pl_module.configure_model()  # idempotent: builds the network from the data's vocabulary
            plan = prepare_qat(pl_module.net, self.bits, act_bits=self.act_bits, **self._options)
            self.report.update(mode="qat", act_bits=self.act_bits if bk_activation_bits(pl_module.net) else None,
                               **plan.as_dict())
            self.report.pop("quantized", None)
            self._qat_fit = True
        elif pl_module.net is None and self.load_hf_lowbit and _is_hf(pl_module):
            self._load_hf(trainer, pl_module)

    def _load_hf(self, trainer, pl_module) -> None:
        from lightning_bench.models.hf import DTYPES

        name, kwargs = pl_module._location
        net, report = load_pretrained_lowbit(name, self.bits, method=self.hf_method,
                                             int8_threshold=self.int8_threshold,
                                             cpu_bf16_kernel=self.cpu_bf16_kernel,
                                             dtype=DTYPES[pl_module.hparams.dtype], **kwargs, **self._options)
        dm = getattr(trainer, "datamodule", None)
        vocab = getattr(dm, "vocab_size", None)
        if vocab is not None and vocab > net.get_input_embeddings().num_embeddings:
            raise ConfigError(f"the data's tokenizer has {vocab} tokens but the model only "
                              f"{net.get_input_embeddings().num_embeddings}; use --data.tokenizer auto")
        pl_module.net = net
        self._set_export_report(report)

    # ---- validate / test ---------------------------------------------------------------------
    def _export(self, trainer, pl_module) -> None:
        if trainer.state.fn == "fit" or pl_module.net is None or is_exported(pl_module.net):
            return
        if self._qat_fit and trainer.state.fn == "validate":
            return  # the final validation of a fit: same (fake-quant) model as the rest of its curve
        report = export_lowbit(pl_module.net, self.bits, act_bits=self.act_bits, int8_threshold=self.int8_threshold,
                               cpu_bf16_kernel=self.cpu_bf16_kernel, **self._options)
        self._set_export_report(report)

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
                             **self._options)


def _is_hf(pl_module) -> bool:
    from lightning_bench.models.hf import HFLanguageModel

    return isinstance(pl_module, HFLanguageModel)
