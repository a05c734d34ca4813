"""CPU kernels for the bitsandbytes low-bit modules: same stored tensors, same function, less time.

bitsandbytes 0.50 on a CPU without AVX-512 runs Linear8bitLt through its generic backend: per call it
casts the input to fp16, quantizes it row-wise, converts the int8 codes of input *and* weight to fp32,
multiplies them with an fp32 matmul, converts the product to int32 and back, and rescales, with
several Python-level dispatches (torch.ops, autograd.Function, a logging call) per layer. Linear4bit
(nf4) dequantizes the whole weight with a C kernel and calls F.linear. `use_cpu_kernels(net)` swaps
the class of every Linear8bitLt / Linear4bit(nf4) of `net` in place to a subclass whose forward does
the same arithmetic with fewer passes (same Parameters, same state_dict, same size):

  CPUInt8Linear (Linear8bitLt, threshold 0, eval mode): W8A8 vector-wise exactly as bitsandbytes
      defines it: each input row rounded to fp16, scaled by 127 / its absmax and rounded to int8
      codes; int8 weight codes (one absmax SCB per output row); the code products accumulated
      exactly (an fp32 GEMM over integer-valued operands: every partial sum is an integer below 2^24
      for in_features <= 1040, which no rounding can touch; above, a partial sum beyond 2^24, which
      needs most products near 127^2, is rounded as in bitsandbytes' own CPU kernel), then
      out = (acc * (row_absmax * SCB)) * c + bias, in bitsandbytes' order, with its CPU constant
      c = 6.200124e-05 (bitsandbytes' CPU backend literal; its CUDA kernel uses 6.200012e-05 = 1/127^2).
      The output is bit-equal to bitsandbytes' CPU forward; the order matters: a W8A8 network's next
      activation codes flip on one-ulp differences, and on SmolLM2 a different multiplication order
      moved logits by up to 5 and perplexity by 0.4%. Kernel name: "cpu_int8_exact_sgemm".
      On AVX-512 CPUs bitsandbytes itself runs torch._int_mm (VNNI / AMX int8), so int8 modules keep
      bitsandbytes' forward there (`int8_kernel_applies`).
  CPUNF4Linear (Linear4bit nf4, no double quantization, fp32 compute): the weight dequantized per
      call through a 256-entry table of code pairs (one gather per packed byte, one multiply by the
      block absmax: the same fp32 products as bitsandbytes' dequantize_4bit), then F.linear. No
      fp32 copy of the weight stays resident. Kernel name: "cpu_nf4_lut_sgemm".

Why not an int8 GEMM: on CPUs without AVX512-VNNI / AMX (this project's 2-core AVX2 machine)
torch._int_mm falls back to scalar code (15-30x slower than fp32 here); fbgemm's u8 x s8 kernels
(vpmaddubsw) saturate int16 pair sums for 8-bit activations unless the activations are split into
two 7-bit halves (twice the work), which made them no faster than MKL's fp32 GEMM on these shapes
(benchmarks/lowbit_eval_speed.py --kernels). The fp32 GEMM over the codes is exact and as fast as
fp32 itself; what remains is the quantization of the activations (a few elementwise passes).

The fast forward runs only where it computes what bitsandbytes would: input on CPU, eval mode
(bitsandbytes dequantizes the weight in train mode), no gradient needed, threshold 0, fp32 input
(other dtypes, CUDA, training, outlier thresholds and nf4 with double quantization or another
compute dtype go to the bitsandbytes forward unchanged). `use_bitsandbytes_kernels(net)` swaps the
classes back (parity checks); `kernel_counts()` counts the calls each path served.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from lightning_bench.quantization.bnb import import_bitsandbytes

CPU_KERNELS = ("auto", "bitsandbytes")
CPU_KERNEL_ENV = "LB_CPU_KERNEL"  # QuantizationCallback's default cpu_kernel when set
INT8_KERNEL = "cpu_int8_exact_sgemm"
NF4_KERNEL = "cpu_nf4_lut_sgemm"
BNB_KERNEL = "bitsandbytes"
# bitsandbytes.backends.default.ops int8_mm_dequant: out = A_i32 * (row * col) * 6.200124e-05 (+ bias)
BNB_CPU_DEQUANT_CONST = 6.200124e-05

_calls: Counter = Counter()  # kernel name -> forward calls served (cheap; read by the callback)


def kernel_counts() -> dict:
    """Forward calls served so far by each kernel path (process-wide)."""
    return dict(_calls)


def _bnb_classes():
    bnb = import_bitsandbytes()
    return bnb.nn.Linear8bitLt, bnb.nn.Linear4bit


# ---- int8 ------------------------------------------------------------------------------------------
def int8_rowwise_codes(x2d: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes as fp32 (M, K), row absmax fp32 (M, 1)) exactly as bitsandbytes' int8_vectorwise_quant
    makes them from x.to(float16): absmax of the fp16 row; round(x16 * (127 / absmax)), where
    `127 / absmax` is evaluated as torch evaluates a scalar divided by a tensor (reciprocal, then * 127).

    fp16 rounding is monotonic and symmetric, so max|fp16(x)| = fp16(max|x|): the absmax is taken on
    the fp32 input and rounded once. An all-zero row gets codes 0 (bitsandbytes: 0 * inf)."""
    absmax = x2d.abs().amax(dim=1, keepdim=True).to(torch.float16).float()
    inv = absmax.reciprocal().mul_(127.0)  # bitsandbytes' `127.0 / row_stats` is reciprocal * 127 in torch
    inv.masked_fill_(absmax == 0, 0.0)
    codes = torch.mul(x2d.to(torch.float16), inv)  # fp16 * fp32 -> fp32, as bitsandbytes computes it
    return codes.round_(), absmax


def _evaluates_on_cpu(module: nn.Module, x: torch.Tensor) -> bool:
    """The common condition of both fast forwards: fp32 CPU input in eval mode, no gradient needed."""
    return (x.device.type == "cpu" and x.dtype == torch.float32 and x.numel() > 0 and not module.training
            and not (torch.is_grad_enabled() and (x.requires_grad or (module.bias is not None
                                                                       and module.bias.requires_grad))))


def int8_kernel_applies() -> bool:
    """Whether the int8 kernel beats bitsandbytes here: not on AVX-512 CPUs, where bitsandbytes' CPU
    backend multiplies with torch._int_mm (VNNI / AMX int8 instructions, exact int32 accumulation)."""
    return torch.backends.cpu.get_cpu_capability() != "AVX512"


class CPUInt8Linear:
    """Mixin over bitsandbytes' Linear8bitLt (`cpu_lowbit.Linear8bitLt`, swapped in by `use_cpu_kernels`):
    a fast exact W8A8 forward on CPU. Every other behaviour (state_dict, .to(), CUDA) is Linear8bitLt's."""

    kernel = INT8_KERNEL

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel={self.kernel} on CPU"

    def _fast_ok(self, x: torch.Tensor) -> bool:
        return (_evaluates_on_cpu(self, x) and self.state.threshold == 0.0 and not self.state.has_fp16_weights
                and self.weight.dtype == torch.int8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._fast_ok(x):
            _calls[BNB_KERNEL] += 1
            return super().forward(x)
        _calls[INT8_KERNEL] += 1
        scb = getattr(self.weight, "SCB", None)
        if scb is None:
            scb = self.state.SCB
        shape = x.shape
        codes, absmax = int8_rowwise_codes(x.reshape(-1, shape[-1]))
        acc = F.linear(codes, self.weight.float())  # integer-valued: the exact int32 accumulation
        # the scales in bitsandbytes' order, (acc * (row * col)) * c + bias: bit-equal outputs, so a
        # W8A8 network (whose activation codes flip on one-ulp differences) gives the same logits
        acc.mul_(absmax * scb.float().view(1, -1)).mul_(BNB_CPU_DEQUANT_CONST)
        if self.bias is not None:
            acc.add_(self.bias.float())
        return acc.reshape(*shape[:-1], acc.shape[-1])


# ---- nf4 -------------------------------------------------------------------------------------------
_PAIR_TABLES: dict = {}


def _pair_table(code: torch.Tensor) -> torch.Tensor:
    """(256, 2) fp32: byte b -> (code[b >> 4], code[b & 15]) (bitsandbytes packs the first of two
    consecutive weights in the high nibble)."""
    key = (code.device, tuple(code.float().tolist()))
    table = _PAIR_TABLES.get(key)
    if table is None:
        b = torch.arange(256, device=code.device)
        table = torch.stack([code.float()[b >> 4], code.float()[b & 15]], dim=1).contiguous()
        _PAIR_TABLES[key] = table
    return table


def nf4_dequantize_lut(packed: torch.Tensor, absmax: torch.Tensor, code: torch.Tensor, shape,
                       blocksize: int) -> torch.Tensor:
    """fp32 weight of `shape` from bitsandbytes' packed nf4 bytes: one table gather per byte and one
    multiply by the block absmax (the same fp32 product bitsandbytes' dequantize_4bit computes).
    Needs numel % blocksize == 0 (export only makes such layers)."""
    values = F.embedding(packed.reshape(-1).to(torch.int32), _pair_table(code))  # (n/2, 2)
    return values.view(-1, blocksize).mul_(absmax.float().unsqueeze(1)).view(shape)


class CPUNF4Linear:
    """Mixin over bitsandbytes' Linear4bit nf4 (`cpu_lowbit.Linear4bit`, swapped in by `use_cpu_kernels`):
    the CPU forward dequantizes through a pair table and calls F.linear. Everything else is Linear4bit's."""

    kernel = NF4_KERNEL

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel={self.kernel} on CPU"

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        """Linear4bit's own state_dict loads back (bitsandbytes 0.50 leaves its quant-state keys unexpected):
        the packed codes and bias as usual, the quant state (absmax, map, shape, blocksize) rebuilt."""
        quant_keys = [k for k in state_dict if k.startswith(prefix + "weight.")]
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        if not quant_keys or getattr(self.weight, "quant_state", None) is None:
            return
        from bitsandbytes.functional import QuantState

        state = QuantState.from_dict({k[len(prefix) + len("weight."):]: state_dict[k] for k in quant_keys},
                                     device=self.weight.device)
        if tuple(state.shape) != tuple(self.weight.quant_state.shape):
            error_msgs.append(f"{prefix}weight: quant state of shape {tuple(state.shape)}, "
                              f"not {tuple(self.weight.quant_state.shape)}")
            return
        self.weight.quant_state = state
        if getattr(self, "quant_state", None) is not None:
            self.quant_state = state
        for key in quant_keys:
            if key in unexpected_keys:
                unexpected_keys.remove(key)

    def _fast_ok(self, x: torch.Tensor) -> bool:
        state = getattr(self.weight, "quant_state", None)
        return (state is not None and _evaluates_on_cpu(self, x)
                and not getattr(self, "support_avx512bf16_for_cpu", False)
                and self.compute_dtype in (None, torch.float32) and not state.nested
                and state.quant_type == "nf4" and not getattr(state, "packing_format_for_cpu", False)
                and self.weight.dtype == torch.uint8 and len(state.shape) == 2
                and (state.shape[0] * state.shape[1]) % state.blocksize == 0 and state.blocksize % 2 == 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._fast_ok(x):
            _calls[BNB_KERNEL] += 1
            return super().forward(x)
        _calls[NF4_KERNEL] += 1
        state = self.weight.quant_state
        weight = nf4_dequantize_lut(self.weight.data, state.absmax, state.code, tuple(state.shape), state.blocksize)
        bias = self.bias.float() if self.bias is not None else None
        return F.linear(x, weight, bias)


# ---- swapping --------------------------------------------------------------------------------------
_CLASSES: dict = {}


def _fast_classes() -> dict:
    """{bitsandbytes class: its fast subclass}, built once (bitsandbytes is imported lazily)."""
    if not _CLASSES:
        int8_cls, nf4_cls = _bnb_classes()
        for mixin, base in ((CPUInt8Linear, int8_cls), (CPUNF4Linear, nf4_cls)):
            # same class name as bitsandbytes' (code that checks type names keeps working); this module's
            # path and extra_repr's `kernel=` tell them apart
            _CLASSES[base] = type(base.__name__, (mixin, base), {"__module__": __name__, "__qualname__": base.__name__,
                                                                "_lb_bnb_base": base})
    return _CLASSES


_FAST_CLASS_NAMES = ("Linear8bitLt", "Linear4bit")


def __getattr__(name: str):  # Linear8bitLt / Linear4bit of this module: attributes, so pickle finds them
    # only those two names build the classes: Python's import system probes other names (`from
    # ... import x` asks for `__path__`), and an fp32 run must not import bitsandbytes for that
    if name in _FAST_CLASS_NAMES:
        for cls in _fast_classes().values():
            if cls.__name__ == name:
                return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _fits(module: nn.Module) -> bool:
    int8_cls, nf4_cls = _bnb_classes()
    if type(module) is int8_cls:
        return int8_kernel_applies()
    if type(module) is nf4_cls:
        state = getattr(module.weight, "quant_state", None)
        return state is not None and state.quant_type == "nf4"
    return False


def use_cpu_kernels(net: nn.Module) -> list[str]:
    """Swap every plain Linear8bitLt / Linear4bit(nf4) of `net` to its fast-CPU subclass, in place (same
    tensors, hooks and state_dict). The forward still defers to bitsandbytes off CPU. Returns the names."""
    swapped = []
    classes = _fast_classes()
    for name, module in net.named_modules():
        if _fits(module):
            module.__class__ = classes[type(module)]
            swapped.append(name)
    return swapped


def use_bitsandbytes_kernels(net: nn.Module) -> list[str]:
    """Undo `use_cpu_kernels`: the modules are plain bitsandbytes classes again."""
    restored = []
    for name, module in net.named_modules():
        base = getattr(type(module), "_lb_bnb_base", None)
        if base is not None and isinstance(module, (CPUInt8Linear, CPUNF4Linear)):
            module.__class__ = base
            restored.append(name)
    return restored


def uses_cpu_kernels(module: nn.Module) -> bool:
    return isinstance(module, (CPUInt8Linear, CPUNF4Linear))


def set_cpu_kernel(net: nn.Module, cpu_kernel: str) -> list[str]:
    """Apply `cpu_kernel` ("auto": fast CPU subclasses; "bitsandbytes": bitsandbytes' own forward) to `net`."""
    if cpu_kernel not in CPU_KERNELS:
        from lightning_bench.errors import ConfigError

        raise ConfigError(f"unknown cpu_kernel {cpu_kernel!r}; valid: {', '.join(CPU_KERNELS)}")
    return use_cpu_kernels(net) if cpu_kernel == "auto" else use_bitsandbytes_kernels(net)


def kernel_name(net: nn.Module, device: Optional[torch.device] = None) -> Optional[str]:
    """The kernel the low-bit layers of `net` run on `device` (default: where their weights are):
    INT8_KERNEL / NF4_KERNEL on CPU after `use_cpu_kernels`, else "bitsandbytes" (None: no low-bit layer)."""
    from lightning_bench.quantization.fake_quant import is_lowbit

    names = set()
    for module in net.modules():
        if not is_lowbit(module):
            continue
        dev = torch.device(device) if device is not None else module.weight.device
        names.add(module.kernel if uses_cpu_kernels(module) and dev.type == "cpu" else BNB_KERNEL)
    if not names:
        return None
    return names.pop() if len(names) == 1 else "+".join(sorted(names))
