"""Real low-bit modules: export of (QAT-)trained networks, low-bit loading of pretrained HF models,
and model size measured from what is stored.

export_lowbit replaces each planned `nn.Linear` (see `fake_quant.plan_quantization`) in place with
  8 bits: bitsandbytes.nn.Linear8bitLt(has_fp16_weights=False, threshold=0.0): int8 weight + one
          fp32 scale (SCB = row absmax) per output row. NB: in eval mode bitsandbytes also quantizes
          the *input* row-wise to int8 (LLM.int8() with no outliers: W8A8), so its output differs
          slightly from the fake-quant (W8, fp32 activations) forward; in train mode it dequantizes
          the weight and the two agree to float rounding.
  4 bits: bitsandbytes.nn.Linear4bit(quant_type="nf4", compute_dtype=float32, no double quant):
          packed 4-bit codes + one fp32 absmax per 64 weights; it computes with exactly the weight
          the NF4 fake-quant trained. bitsandbytes' fused AVX512-BF16 CPU kernel is switched off by
          default (`cpu_bf16_kernel=False`): it computes in bf16 and crashes on some shapes.
The latent fp32 weight (the QAT parametrization is removed first) is what gets quantized, so a QAT
checkpoint, a plain fp32 checkpoint and a pretrained model all export the same way.

On CPU, bitsandbytes' own forwards are slow (generic Python backend); `cpu_kernel="auto"` (default)
swaps the modules, in place, to subclasses with a fast CPU forward computing the same function from
the same stored tensors (`cpu_lowbit`); `cpu_kernel="bitsandbytes"` keeps bitsandbytes' forward.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch
from torch import nn

from lightning_bench.errors import ConfigError
from lightning_bench.quantization.bnb import import_bitsandbytes
from lightning_bench.quantization.cpu_lowbit import CPU_KERNELS, kernel_name, set_cpu_kernel
from lightning_bench.quantization.fake_quant import (DEFAULT_SKIP_MODULES, NF4_BLOCKSIZE, QuantizableLayers,
                                                     QuantPlan, attach_activation_quant, check_bits,
                                                     fake_quant_weight, is_lowbit, plan_quantization, qat_bits,
                                                     remove_qat)

EXPORT_METHODS = ("auto", "bitsandbytes_config", "export")


@dataclass
class ExportReport:
    """What a low-bit model is and how it was made.

    path: "export" (export_lowbit on a network in memory), "bitsandbytes_config" (transformers
        quantized while loading, from_pretrained(quantization_config=BitsAndBytesConfig(...))) or
        "fp32_then_export" (an fp32 load followed by export_lowbit; `fallback_reason` says why).
    max_dequant_error: max |stored weight dequantized - fake-quant(latent weight)| over the exported
        layers (0.0 = the modules hold exactly what QAT trained; None when not checked).
    scheme: what the low-bit modules compute with, weights AND activations (`lowbit_scheme`).
    kernel: the forward the low-bit layers run where their weights are ("cpu_int8_exact_sgemm",
        "cpu_nf4_lut_sgemm" on CPU with cpu_kernel="auto"; "bitsandbytes" otherwise; cpu_lowbit).
    """

    bits: int
    path: str
    quantized: list[str] = field(default_factory=list)
    kept_fp32: dict[str, str] = field(default_factory=dict)
    act_bits: Optional[int] = None
    max_dequant_error: Optional[float] = None
    fallback_reason: Optional[str] = None
    size: dict = field(default_factory=dict)
    scheme: str = ""
    kernel: Optional[str] = None

    def as_dict(self) -> dict:
        return {"bits": self.bits, "path": self.path, "scheme": self.scheme, "kernel": self.kernel,
                "quantized_layers": len(self.quantized),
                "kept_fp32": dict(self.kept_fp32), "act_bits": self.act_bits,
                "max_dequant_error": self.max_dequant_error, "fallback_reason": self.fallback_reason,
                "size": dict(self.size)}


def lowbit_scheme(bits: int, int8_threshold: float = 0.0, cpu_bf16_kernel: bool = False) -> str:
    """One line for the record: what the bitsandbytes modules quantize at inference. Linear8bitLt is not
    weight-only: in eval mode it quantizes every input row to int8 as well (LLM.int8())."""
    if bits == 8:
        outliers = (f"input columns holding a value above {int8_threshold:g} stay fp16 (outlier decomposition)"
                    if int8_threshold > 0 else "threshold 0: no fp16 outlier columns")
        return ("bitsandbytes Linear8bitLt: int8 weights, one absmax scale per output row; at inference the "
                "activations are quantized too, each input row (token) to int8 by its own absmax on every "
                f"call (LLM.int8() vector-wise quantization: W8A8, int32 accumulation); {outliers}")
    return ("bitsandbytes Linear4bit nf4: 4-bit NormalFloat weights, one absmax per 64; dequantized for the "
            f"matmul, activations not quantized ({'bf16' if cpu_bf16_kernel else 'fp32'} arithmetic on CPU)")


# ---- one module ------------------------------------------------------------------------------------
def dequantized_weight(module: nn.Module) -> torch.Tensor:
    """The fp32 weight a Linear8bitLt / Linear4bit computes with (from its stored tensors)."""
    bnb = import_bitsandbytes()
    if isinstance(module, bnb.nn.Linear8bitLt):
        scb = module.weight.SCB if getattr(module.weight, "SCB", None) is not None else module.state.SCB
        return module.weight.data.float() * (scb.float() * (1.0 / 127.0)).unsqueeze(1)
    if isinstance(module, bnb.nn.Linear4bit):
        from bitsandbytes.functional import dequantize_4bit

        state = module.weight.quant_state
        if getattr(state, "packing_format_for_cpu", False):  # the fused CPU kernel's layout: undo it
            from bitsandbytes.functional import _convert_weight_packed_for_cpu_inverse

            module.weight.data, module.weight.quant_state = _convert_weight_packed_for_cpu_inverse(
                module.weight.data, state)
            state = module.weight.quant_state
        return dequantize_4bit(module.weight.data, state).float()
    raise TypeError(f"{type(module).__name__} is not a bitsandbytes low-bit Linear")


def _refuse_float_weight(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
    weight = state_dict.get(prefix + "weight")
    if weight is not None and weight.is_floating_point():
        raise ConfigError(f"cannot load full-precision weights into the exported low-bit layer {prefix[:-1]!r}; "
                          "restore checkpoints before exporting (QuantizationCallback(load_hf_lowbit=False) "
                          "for a checkpoint of a pretrained HF model)")


def _check_cpu_kernel(cpu_kernel: str) -> None:
    if cpu_kernel not in CPU_KERNELS:
        raise ConfigError(f"unknown cpu_kernel {cpu_kernel!r}; valid: {', '.join(CPU_KERNELS)}")


def int8_statistics_follow_weight(module: nn.Module, args=()) -> None:
    """Put an int8 layer's codes (CB) and row scales (SCB) where its weight is (a forward pre-hook).

    bitsandbytes keeps them as attributes of the weight Parameter and of `module.state`, beside the
    Parameter's data. `Linear8bitLt.to()` moves them, but only when called on the layer itself: a parent's
    `.to(device)` (what Lightning does to the whole model) runs `Module._apply`, which replaces only the
    Parameter's `.data`. A model quantized on the CPU and then moved to the GPU would otherwise meet its CPU
    scales in the CUDA matmul ("Expected a cuda device, but got: cpu")."""
    device = module.weight.device
    for holder in (module.weight, module.state):
        if getattr(holder, "CB", None) is not None and holder.CB.device != device:
            holder.CB = module.weight.data  # the codes are the weight's data itself
        if getattr(holder, "SCB", None) is not None and holder.SCB.device != device:
            holder.SCB = holder.SCB.to(device)


def _finish_lowbit(net: nn.Module, cpu_bf16_kernel: bool, cpu_kernel: str = "auto") -> None:
    """Settings every low-bit module of ours gets, whichever path made it (the fast CPU forward last:
    it keeps the module's tensors, hooks and state_dict)."""
    bnb = import_bitsandbytes()
    for module in net.modules():
        if isinstance(module, bnb.nn.Linear4bit):
            module.support_avx512bf16_for_cpu = cpu_bf16_kernel and getattr(module, "support_avx512bf16_for_cpu", False)
        if is_lowbit(module) and not getattr(module, "_lb_load_guard", False):
            module.register_load_state_dict_pre_hook(_refuse_float_weight)
            if isinstance(module, bnb.nn.Linear8bitLt):
                module.register_forward_pre_hook(int8_statistics_follow_weight)
            module._lb_load_guard = True
    set_cpu_kernel(net, "bitsandbytes" if cpu_bf16_kernel else cpu_kernel)


def _to_lowbit(linear: nn.Linear, bits: int, int8_threshold: float) -> nn.Module:
    bnb = import_bitsandbytes()
    weight = linear.weight.detach()
    device, has_bias = weight.device, linear.bias is not None
    if bits == 8:
        new = bnb.nn.Linear8bitLt(linear.in_features, linear.out_features, bias=has_bias,
                                  has_fp16_weights=False, threshold=int8_threshold, device="meta")
        # from the CPU: Int8Params quantizes only on a move *from* the CPU (a weight already on the GPU
        # would stay fp32, SCB unset); the codes are made on `device` by the move below
        new.weight = bnb.nn.Int8Params(weight.to("cpu", copy=True), requires_grad=False, has_fp16_weights=False)
    else:
        new = bnb.nn.Linear4bit(linear.in_features, linear.out_features, bias=has_bias, compute_dtype=torch.float32,
                                compress_statistics=False, quant_type="nf4", quant_storage=torch.uint8,
                                device="meta")
        new.weight = bnb.nn.Params4bit(weight.clone(), requires_grad=False, quant_type="nf4",
                                       blocksize=NF4_BLOCKSIZE, compress_statistics=False, module=new)
    if has_bias:
        new.bias = nn.Parameter(linear.bias.detach().clone(), requires_grad=linear.bias.requires_grad)
    new = new.to(device)  # quantizes the weight (bitsandbytes quantizes on the move to a device)
    new.train(linear.training)
    return new


# ---- whole networks --------------------------------------------------------------------------------
def export_lowbit(net: nn.Module, bits: int, *, skip_modules: Sequence[str] = DEFAULT_SKIP_MODULES,
                  incompatible: str = "error", act_bits: Optional[int] = 8, int8_threshold: float = 0.0,
                  cpu_bf16_kernel: bool = False, check: bool = True,
                  layers: Optional[QuantizableLayers] = None, cpu_kernel: str = "auto") -> ExportReport:
    """Replace the planned Linear layers of `net` (QAT or plain, on its current device) in place by
    bitsandbytes Linear8bitLt / Linear4bit(nf4) holding the latent weights; (re)attach the activation
    fake-quant `layers` declares at `act_bits` (None: none). `check` compares every stored weight,
    dequantized, with the fake-quant of the latent weight (report.max_dequant_error).
    `cpu_kernel`: "auto" (the fast CPU forward of `cpu_lowbit`, bitsandbytes off CPU) or "bitsandbytes".
    Raises ConfigError as `plan_quantization` does, or when `net` was QAT-trained at other bits.
    """
    check_bits(bits)
    _check_cpu_kernel(cpu_kernel)
    plan = plan_quantization(net, bits, skip_modules, incompatible, layers)
    modules = dict(net.named_modules())
    trained = {qat_bits(modules[n]) for n in plan.quantized} - {None}
    if trained - {bits}:
        raise ConfigError(f"the network was quantization-aware trained at {sorted(trained)[0]} bits; "
                          f"export it at those bits, not {bits}")
    remove_qat(net)
    max_err = 0.0 if check else None
    for name in plan.quantized:
        linear = modules.pop(name)  # dropped as we go: fp32 and low-bit copies never coexist in full
        new = _to_lowbit(linear, bits, int8_threshold)
        if check:
            expected = fake_quant_weight(linear.weight, bits).float()
            max_err = max(max_err, float((dequantized_weight(new) - expected).abs().max()))
        parent_name, _, child = name.rpartition(".")
        setattr(net.get_submodule(parent_name) if parent_name else net, child, new)
        del linear
    _finish_lowbit(net, cpu_bf16_kernel, cpu_kernel)
    ranges = layers.activations if layers is not None else []
    hooked = attach_activation_quant(net, ranges, act_bits) if act_bits is not None else 0
    return ExportReport(bits, "export", list(plan.quantized), dict(plan.kept_fp32), act_bits if hooked else None,
                        max_err, size=size_breakdown(net),
                        scheme=lowbit_scheme(bits, int8_threshold, cpu_bf16_kernel), kernel=kernel_name(net))


def exported_size(net: nn.Module, bits: int, **export_kwargs) -> dict:
    """size_breakdown of what `export_lowbit` would make of `net`, measured on a copy (`net` is untouched)."""
    return export_lowbit(copy.deepcopy(net), bits, check=False, **export_kwargs).size


def is_exported(net: nn.Module) -> bool:
    return any(is_lowbit(m) for m in net.modules())


# ---- pretrained HF models ---------------------------------------------------------------------------
def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:300]


def _bnb_config(bits: int, plan: QuantPlan, int8_threshold: float):
    from transformers import BitsAndBytesConfig

    keep = [re.escape(name) for name in plan.kept_fp32]  # transformers reads entries as regexes
    if bits == 8:
        return BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=int8_threshold, llm_int8_skip_modules=keep)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32,
                              bnb_4bit_use_double_quant=False, bnb_4bit_quant_storage=torch.uint8,
                              llm_int8_skip_modules=keep)


def _disagreement(net: nn.Module, plan: QuantPlan, bits: int, int8_threshold: float) -> Optional[str]:
    """Why a transformers-quantized model is not the model export_lowbit would make (None: it is)."""
    bnb = import_bitsandbytes()
    lowbit = {name: m for name, m in net.named_modules() if is_lowbit(m)}
    missing = [n for n in plan.quantized if n not in lowbit]
    if missing:
        return f"transformers left {missing[0]} unquantized"
    extra_kept = [n for n in plan.kept_fp32 if n in lowbit]
    if extra_kept:
        return f"transformers quantized {extra_kept[0]}, which must stay fp32 ({plan.kept_fp32[extra_kept[0]]})"
    for name, m in lowbit.items():
        if bits == 8 and not (isinstance(m, bnb.nn.Linear8bitLt) and m.state.threshold == int8_threshold):
            return f"{name} is not an int8 Linear8bitLt with threshold {int8_threshold}"
        if bits == 4:
            state = m.weight.quant_state if isinstance(m, bnb.nn.Linear4bit) else None
            if state is None or state.quant_type != "nf4" or state.blocksize != NF4_BLOCKSIZE or state.nested:
                return f"{name} is not an nf4 Linear4bit with block {NF4_BLOCKSIZE} and no double quantization"
            if m.in_features % NF4_BLOCKSIZE:
                return f"transformers quantized {name} (in_features {m.in_features}) to nf4"
    return None


def load_pretrained_lowbit(pretrained: str, bits: int, *, method: str = "auto",
                           skip_modules: Sequence[str] = DEFAULT_SKIP_MODULES, incompatible: str = "error",
                           int8_threshold: float = 0.0, cpu_bf16_kernel: bool = False,
                           describe_layers: Optional[Callable[[nn.Module], QuantizableLayers]] = None,
                           cpu_kernel: str = "auto", **from_pretrained_kwargs) -> tuple[nn.Module, ExportReport]:
    """Load a pretrained causal LM with low-bit Linear layers: (network, report); report.path says how.

    method="auto" first lets transformers quantize while loading (BitsAndBytesConfig, works on CPU
    with transformers 5.23 / bitsandbytes 0.50.2); if that raises, or produces a model other than the
    one export_lowbit would make (other layers, other settings), it loads fp32 and exports
    ("fp32_then_export", with `fallback_reason`). "bitsandbytes_config" / "export" force one path.
    `describe_layers(net)` gives the model family's QuantizableLayers of a network (its layers kept fp32).
    `from_pretrained_kwargs` go to AutoModelForCausalLM.from_pretrained (dtype, revision, ...).
    """
    check_bits(bits)
    _check_cpu_kernel(cpu_kernel)
    if method not in EXPORT_METHODS:
        raise ConfigError(f"unknown low-bit loading method {method!r}; valid: {', '.join(EXPORT_METHODS)}")
    from transformers import AutoConfig, AutoModelForCausalLM

    reason = None
    if method != "export":
        try:
            if "gguf_file" in from_pretrained_kwargs:
                raise ValueError("a GGUF checkpoint is dequantized by transformers; quantization_config does not apply")
            config_kwargs = {k: v for k, v in from_pretrained_kwargs.items() if k in ("revision", "trust_remote_code")}
            config = AutoConfig.from_pretrained(pretrained, **config_kwargs)
            with torch.device("meta"):
                skeleton = AutoModelForCausalLM.from_config(
                    config, trust_remote_code=from_pretrained_kwargs.get("trust_remote_code", False))
            layers = describe_layers(skeleton) if describe_layers is not None else None
            plan = plan_quantization(skeleton, bits, skip_modules, incompatible, layers)  # ConfigError: no path would do
            del skeleton
            net = AutoModelForCausalLM.from_pretrained(
                pretrained, quantization_config=_bnb_config(bits, plan, int8_threshold), **from_pretrained_kwargs)
            reason = _disagreement(net, plan, bits, int8_threshold)
            if reason is None:
                _finish_lowbit(net, cpu_bf16_kernel, cpu_kernel)
                lowbit = [name for name, m in net.named_modules() if is_lowbit(m)]
                return net, ExportReport(bits, "bitsandbytes_config", lowbit, dict(plan.kept_fp32),
                                         size=size_breakdown(net),
                                         scheme=lowbit_scheme(bits, int8_threshold, cpu_bf16_kernel),
                                         kernel=kernel_name(net))
            del net
        except ConfigError:
            raise
        except Exception as err:  # transformers / bitsandbytes refusing: fall back, say why
            reason = f"{type(err).__name__}: {_first_line(err)}"
        if method == "bitsandbytes_config":
            raise ConfigError(f"loading {pretrained!r} with BitsAndBytesConfig failed ({reason}); use method 'auto'")
    try:
        net = AutoModelForCausalLM.from_pretrained(pretrained, **from_pretrained_kwargs)
    except (OSError, ValueError) as err:
        raise ConfigError(f"cannot load pretrained model {pretrained!r}: {_first_line(err)}") from err
    report = export_lowbit(net, bits, skip_modules=skip_modules, incompatible=incompatible, act_bits=None,
                           int8_threshold=int8_threshold, cpu_bf16_kernel=cpu_bf16_kernel,
                           layers=describe_layers(net) if describe_layers is not None else None,
                           cpu_kernel=cpu_kernel)
    report.path, report.fallback_reason = "fp32_then_export", reason
    return net, report


# ---- size ---------------------------------------------------------------------------------------------
def size_breakdown(module: nn.Module) -> dict:
    """Model size from the tensors its state_dict stores (what a checkpoint holds), tied tensors once.

    total_mb = quantized_linear_mb + other_mb (MiB, 2^20 bytes).
    quantized_linear_mb: everything the bitsandbytes low-bit Linear layers store: int8 weight +
        fp32 SCB scale per row (+1-byte format tag) for int8; packed uint8 4-bit codes + fp32
        absmax per 64 weights + the 16-value quant_map + packed quant-state metadata for nf4; and
        their biases (fp32).
    fp32_equivalent_linear_mb: what those same layers (weight + bias) would weigh in fp32.
    other_mb: everything else (embeddings, norms, the output head, layers kept in fp32).
    ratio: quantized_linear_mb / fp32_equivalent_linear_mb (None without low-bit layers);
    total_ratio: total_mb / (other_mb + fp32_equivalent_linear_mb).
    A QAT network (fake-quant, not exported) stores fp32 weights, so it has no low-bit layers here.
    """
    lowbit_keys, fp32_equivalent, layers = set(), 0, 0
    for name, m in module.named_modules():
        if is_lowbit(m):
            layers += 1
            lowbit_keys.update(f"{name}.{k}" if name else k for k in m.state_dict(keep_vars=False))
            fp32_equivalent += 4 * (m.in_features * m.out_features + (m.out_features if m.bias is not None else 0))
    seen, quantized, other = set(), 0, 0
    for key, tensor in module.state_dict(keep_vars=False).items():
        ident = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tensor.numel(), tensor.dtype)
        if tensor.device.type != "meta" and ident in seen:
            continue
        seen.add(ident)
        nbytes = tensor.numel() * tensor.element_size()
        if key in lowbit_keys:
            quantized += nbytes
        else:
            other += nbytes
    mib = 2 ** 20
    return {"total_mb": (quantized + other) / mib, "quantized_linear_mb": quantized / mib,
            "fp32_equivalent_linear_mb": fp32_equivalent / mib, "other_mb": other / mib,
            "ratio": quantized / fp32_equivalent if fp32_equivalent else None,
            "total_ratio": (quantized + other) / (other + fp32_equivalent) if quantized + other else None,
            "quantized_layers": layers}


# ---- 8-bit optimizer ------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _adamw8bit_works(device: str) -> Optional[str]:
    """None if one AdamW8bit step on a 4096-element tensor (the smallest that gets 8-bit state) runs
    on `device` and moves the tensor; else why not."""
    try:
        bnb = import_bitsandbytes()
        p = nn.Parameter(torch.ones(4096, device=device))
        opt = bnb.optim.AdamW8bit([p], lr=1e-2)
        p.grad = torch.ones_like(p)
        opt.step()
        if not (torch.isfinite(p).all() and (p < 1).all()):
            return "the update is wrong"
        return None
    except Exception as err:
        return f"{type(err).__name__}: {_first_line(err)}"


def adamw8bit(params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
              weight_decay: float = 1e-2, **kwargs):
    """bitsandbytes.optim.AdamW8bit with torch.optim.AdamW's signature (same param groups, works
    with LR schedulers). Moments are stored in 8 bits, block-wise, for tensors of >= 4096 elements
    (bitsandbytes' min_8bit_size); smaller ones keep fp32 moments. Runs on CPU with bitsandbytes
    0.50.2; a ConfigError says so where it does not."""
    params = list(params)
    first = params[0]["params"][0] if params and isinstance(params[0], dict) else (params[0] if params else None)
    device = str(first.device) if first is not None else "cpu"
    why = _adamw8bit_works(device)
    if why is not None:
        raise ConfigError(f"the 8-bit AdamW optimizer does not work on {device} here ({why}); use the fp32 AdamW")
    return import_bitsandbytes().optim.AdamW8bit(params, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, **kwargs)
