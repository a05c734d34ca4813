"""Quantization-aware training (QAT): fake-quantized Linear weights with a straight-through estimator.

During `fit --bits 8|4` each quantized `nn.Linear` keeps an fp32 *latent* weight that the optimizer
updates, and its forward uses `w + (q(w) - w).detach()`: the quantized weight forward, the identity
backward (STE). `q` is exactly what the bitsandbytes module that `export.export_lowbit` builds from
the latent weight will store, so the exported model computes with the weights QAT trained:

  8 bits: bitsandbytes' `Int8Params` rounding, i.e. symmetric per-output-channel int8: the weight is
          cast to fp16 (as bitsandbytes does before quantizing), each row gets one fp32 scale
          absmax/127, codes round(w * 127/absmax) in [-127, 127] (round half to even).
  4 bits: NF4 (bitsandbytes' 16-value NormalFloat codebook, `NF4_CODE`) with one fp32 absmax per
          block of 64 consecutive weights of the flattened (out, in) matrix, i.e. 64 along the
          input dimension; each value goes to the nearest code of w / absmax (ties to the lower
          code, like bitsandbytes' `quantize_4bit`). No double quantization of the absmax.

Which Linear layers are quantized is decided once, by `plan_quantization`, for both QAT and export:
every `nn.Linear` except those matching `skip_modules` (default: the output head `lm_head`, as
bitsandbytes/transformers do; embeddings are not Linear and stay fp32). 4-bit needs in_features to
be a multiple of the 64-weight block: bitsandbytes' CPU NF4 kernel dequantizes other shapes wrongly
(blocks that straddle rows; measured with bitsandbytes 0.50.2). A layer narrower than one block
(ResNet-BK's bk_out, Linear(2 -> d)) is kept in fp32; any other misfit is a ConfigError unless
`incompatible="skip"`.

What is specific to a model family comes from the model, as `QuantizableLayers` (models/capabilities.py,
`LanguageModule.quantizable_layers()`): Linear layers that must stay fp32 (e.g. Mamba's dt_proj,
whose weight the selective scan reads directly) and bounded activations to fake-quantize (symmetric
per tensor, fixed range, STE; e.g. ResNet-BK's potential v, output of every `v_proj`, range +-v_max,
and resolvent features G, input of every `bk_out`, range +-min(feature_clamp, 1/Im z), the bound
that holds: the reference's +-feature_clamp left G a tenth of the grid).
Activation hooks stay on the exported model too: they are part of the quantized model's definition,
not of its storage.

The parametrization changes a module's state_dict keys (`weight` -> `parametrizations.weight.original`);
`prepare_qat` adds hooks that save and load the latent weight under the plain `weight` key, so a QAT
checkpoint is an ordinary fp32 checkpoint (loadable with or without QAT, and exportable later).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import torch
from torch import nn
from torch.nn.utils import parametrize

from lightning_bench.errors import ConfigError
# what a model family declares (models/ is the layer below: tests/test_package_boundaries.py); re-exported here
from lightning_bench.models.capabilities import ActivationRange, QuantizableLayers

SUPPORTED_BITS = (8, 4)
DEFAULT_SKIP_MODULES: tuple[str, ...] = ("lm_head",)
INT8_MAX = 127
NF4_BLOCKSIZE = 64
# bitsandbytes.functional.get_4bit_type("nf4"), copied so that training does not need bitsandbytes;
# tests/test_quantization.py checks it equals bitsandbytes' own table bit for bit.
NF4_CODE = (
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
    -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
    0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
    0.7229568362236023, 1.0,
)
INCOMPATIBLE_POLICIES = ("error", "skip")

_PARAM_KEY = "parametrizations.weight.original"


def check_bits(bits: int) -> int:
    if bits not in SUPPORTED_BITS:
        raise ConfigError(f"low-bit quantization supports bits 8 or 4, not {bits}")
    return bits


# ---- weight quantizers (pure functions of a weight; no gradient) -------------------------------
def int8_quantize(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes int8 (out, in), absmax fp32 (out,)) exactly as bitsandbytes' Int8Params stores them.

    The dequantized weight is codes * absmax / 127; the per-row scale is absmax / 127.
    """
    w16 = weight.detach().reshape(weight.shape[0], -1).to(torch.float16)
    absmax = w16.abs().amax(dim=1).float()
    # fp16 * fp32 promotes to fp32, as in bitsandbytes' int8_vectorwise_quant; an all-zero row
    # (absmax 0) gets codes 0 here, where bitsandbytes would compute 0 * inf
    codes = torch.round(w16 * (INT8_MAX / absmax.clamp(min=torch.finfo(torch.float32).tiny)).unsqueeze(1))
    return codes.to(torch.int8), absmax


def int8_fake_quant(weight: torch.Tensor) -> torch.Tensor:
    """Symmetric per-output-channel int8 quantize-dequantize of a (out, in) weight (same dtype back)."""
    codes, absmax = int8_quantize(weight)
    deq = codes.float() * (absmax * (1.0 / INT8_MAX)).unsqueeze(1)
    return deq.reshape(weight.shape).to(weight.dtype)


def _nf4_tables(device) -> tuple[torch.Tensor, torch.Tensor]:
    code = torch.tensor(NF4_CODE, dtype=torch.float32, device=device)
    return code, (code[:-1] + code[1:]) / 2


def nf4_quantize(weight: torch.Tensor, blocksize: int = NF4_BLOCKSIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """(code indices uint8 in [0, 15], unpacked, shaped like the flattened weight; absmax fp32 per block).

    Blocks are `blocksize` consecutive elements of the flattened weight (bitsandbytes' layout; for a
    (out, in) weight with in % blocksize == 0 these are blocks along the input dimension). A last
    partial block is scaled by its own absmax, as bitsandbytes does.
    """
    flat = weight.detach().reshape(-1).float()
    n = flat.numel()
    full = n - n % blocksize
    code, midpoints = _nf4_tables(flat.device)
    blocks = flat[:full].view(-1, blocksize)
    absmax = blocks.abs().amax(dim=1)
    scaled = (blocks * (1.0 / absmax.clamp(min=1e-38)).unsqueeze(1)).clamp(-1, 1).reshape(-1)
    if full < n:  # bitsandbytes divides (not multiplies by the reciprocal) in the remainder block
        rest_max = flat[full:].abs().max()
        absmax = torch.cat([absmax, rest_max.unsqueeze(0)])
        scaled = torch.cat([scaled, (flat[full:] / rest_max.clamp(min=1e-38)).clamp(-1, 1)])
    return torch.bucketize(scaled, midpoints).to(torch.uint8), absmax


def nf4_dequantize(indices: torch.Tensor, absmax: torch.Tensor, shape, blocksize: int = NF4_BLOCKSIZE,
                   dtype=torch.float32) -> torch.Tensor:
    code, _ = _nf4_tables(indices.device)
    values = code[indices.long()]
    n = values.numel()
    scale = absmax.repeat_interleave(blocksize)[:n]
    return (values * scale).reshape(shape).to(dtype)


def nf4_fake_quant(weight: torch.Tensor, blocksize: int = NF4_BLOCKSIZE) -> torch.Tensor:
    """NF4 block-wise quantize-dequantize, equal to bitsandbytes' quantize_4bit/dequantize_4bit (nf4)."""
    indices, absmax = nf4_quantize(weight, blocksize)
    return nf4_dequantize(indices, absmax, weight.shape, blocksize, weight.dtype)


def fake_quant_weight(weight: torch.Tensor, bits: int) -> torch.Tensor:
    """The weight the `bits`-bit bitsandbytes module will compute with (no gradient)."""
    with torch.no_grad():
        return int8_fake_quant(weight) if check_bits(bits) == 8 else nf4_fake_quant(weight)


class FakeQuantWeight(nn.Module):
    """Weight parametrization: quantized forward, identity gradient (straight-through estimator)."""

    def __init__(self, bits: int):
        super().__init__()
        self.bits = check_bits(bits)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight + (fake_quant_weight(weight, self.bits) - weight).detach()

    def extra_repr(self) -> str:
        return f"bits={self.bits}, {'int8 per-channel' if self.bits == 8 else 'nf4 block 64'}"


def fixed_range_fake_quant(x: torch.Tensor, limit: float, bits: int) -> torch.Tensor:
    """Symmetric per-tensor fake-quant on the fixed range [-limit, limit] (2^(bits-1) - 1 levels a side).

    Values are clamped to the range first (zero gradient outside, as a clamp has), then rounded to
    the grid with a straight-through gradient.
    """
    step = limit / (2 ** (bits - 1) - 1)
    y = x.clamp(-limit, limit)
    return y + (torch.round(y / step) * step - y).detach()


# ---- which layers ------------------------------------------------------------------------------
@dataclass
class QuantPlan:
    """What `bits`-bit quantization does to a network: `quantized` Linear layers (module names) and
    `kept_fp32` Linear layers with the reason each stays in full precision."""

    bits: int
    quantized: list[str] = field(default_factory=list)
    kept_fp32: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"bits": self.bits, "quantized_layers": len(self.quantized), "quantized": list(self.quantized),
                "kept_fp32": dict(self.kept_fp32)}


def matches_skip(name: str, patterns: Iterable[str]) -> bool:
    """A skip entry matches whole dotted segments of a module name, anywhere in it: 'lm_head' matches
    'lm_head' and 'model.lm_head' (not 'lm_head2'); 'layers.0' matches 'model.layers.0.mlp.up_proj';
    a full name matches itself."""
    parts = name.split(".")
    for pattern in patterns:
        want = pattern.split(".")
        if any(parts[i:i + len(want)] == want for i in range(len(parts) - len(want) + 1)):
            return True
    return False


_LOWBIT_CLASS_NAMES = ("Linear8bitLt", "Linear4bit", "LinearNF4", "LinearFP4")


def is_lowbit(module: nn.Module) -> bool:
    """Whether `module` is a bitsandbytes low-bit Linear (or a subclass of one, such as the fast CPU
    classes of `cpu_lowbit`)."""
    return any(cls.__module__.startswith("bitsandbytes") and cls.__name__ in _LOWBIT_CLASS_NAMES
               for cls in type(module).__mro__)


def latent_weight(linear: nn.Linear) -> nn.Parameter:
    """The trained fp32 weight (the parametrization's `original` when QAT is on)."""
    if parametrize.is_parametrized(linear, "weight"):
        return linear.parametrizations.weight.original
    return linear.weight


def plan_quantization(net: nn.Module, bits: int, skip_modules: Sequence[str] = DEFAULT_SKIP_MODULES,
                      incompatible: str = "error", layers: Optional[QuantizableLayers] = None) -> QuantPlan:
    """Decide which Linear layers of `net` are quantized (shared by QAT, export and the HF loader);
    `layers.keep_fp32` (the model's declaration) stay fp32 in both, so what is trained is what is evaluated.

    Raises ConfigError for bits other than 8/4, an unknown `incompatible` policy, a Linear whose
    weight is tied to another module (keep it in skip_modules), or (4-bit, incompatible="error") a
    Linear whose in_features >= 64 is not a multiple of the 64-weight NF4 block.
    """
    check_bits(bits)
    if incompatible not in INCOMPATIBLE_POLICIES:
        raise ConfigError(f"unknown incompatible-layer policy {incompatible!r}; "
                          f"valid: {', '.join(INCOMPATIBLE_POLICIES)}")
    owners: dict[int, list[str]] = {}
    for name, param in net.named_parameters(remove_duplicate=False):
        owners.setdefault(id(param), []).append(name)
    plan = QuantPlan(bits)
    misfits = []
    keep_fp32 = layers.keep_fp32 if layers is not None else {}
    for name, module in net.named_modules():
        if not isinstance(module, nn.Linear) or is_lowbit(module):
            continue
        if matches_skip(name, skip_modules):
            plan.kept_fp32[name] = "skip_modules"
            continue
        if name in keep_fp32:
            plan.kept_fp32[name] = keep_fp32[name]
            continue
        weight_names = owners.get(id(latent_weight(module)), [])
        others = [n for n in weight_names if not n.startswith(f"{name}.") and n != name]
        if others:
            raise ConfigError(f"{name}.weight is tied to {others[0]}; add {name.split('.')[-1]!r} to the "
                              "quantization skip modules (a tied weight cannot be quantized for one module only)")
        if bits == 4 and module.in_features % NF4_BLOCKSIZE:
            if module.in_features < NF4_BLOCKSIZE:
                plan.kept_fp32[name] = f"in_features {module.in_features} < nf4 block {NF4_BLOCKSIZE}"
                continue
            if incompatible == "error":
                misfits.append(f"{name} (in_features {module.in_features})")
                continue
            plan.kept_fp32[name] = f"in_features {module.in_features} not a multiple of nf4 block {NF4_BLOCKSIZE}"
            continue
        plan.quantized.append(name)
    if misfits:
        raise ConfigError(f"4-bit NF4 needs in_features to be a multiple of {NF4_BLOCKSIZE} (bitsandbytes' CPU "
                          f"kernel mis-dequantizes other shapes): {', '.join(misfits[:3])}"
                          f"{f' and {len(misfits) - 3} more' if len(misfits) > 3 else ''}; use --bits 8, "
                          "add them to the skip modules, or keep such layers in fp32 (incompatible='skip')")
    return plan


# ---- QAT on / off --------------------------------------------------------------------------------
# Hooks are module-level functions / small classes found again by identity (not RemovableHandles):
# that survives deepcopy and pickling of the network.
def _save_plain_weight(module, state_dict, prefix, local_metadata) -> None:
    key = prefix + _PARAM_KEY
    if key in state_dict:  # rename, and put the weight first again as nn.Linear does (weight, bias)
        own = [k for k in state_dict if k.startswith(prefix)]  # this module's keys: the last ones saved
        items = [(k, state_dict.pop(k)) for k in own]
        for k, v in sorted(items, key=lambda item: item[0] != key):
            state_dict[prefix + "weight" if k == key else k] = v


def _load_plain_weight(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors) -> None:
    if prefix + "weight" in state_dict and prefix + _PARAM_KEY not in state_dict:
        state_dict[prefix + _PARAM_KEY] = state_dict.pop(prefix + "weight")


_HOOK_DICTS = ("_state_dict_hooks", "_load_state_dict_pre_hooks", "_forward_hooks", "_forward_hooks_with_kwargs",
               "_forward_hooks_always_called", "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs")


def _ours(hook) -> bool:
    hook = getattr(hook, "hook", hook)  # load_state_dict pre-hooks are wrapped
    return hook in (_save_plain_weight, _load_plain_weight) or isinstance(hook, (_QuantOutput, _QuantFirstInput))


def _remove_our_hooks(module: nn.Module, kinds: tuple[str, ...]) -> None:
    for kind in kinds:
        ids = [k for k, h in getattr(module, kind, {}).items() if _ours(h)]
        for k in ids:
            for name in _HOOK_DICTS:
                getattr(module, name, {}).pop(k, None)


def qat_bits(module: nn.Module) -> Optional[int]:
    """The bits of `module`'s fake-quant weight (None: not a QAT Linear)."""
    if isinstance(module, nn.Linear) and parametrize.is_parametrized(module, "weight"):
        for p in module.parametrizations.weight:
            if isinstance(p, FakeQuantWeight):
                return p.bits
    return None


def is_qat(net: nn.Module) -> bool:
    """Whether any Linear of `net` carries a fake-quant weight parametrization."""
    return any(qat_bits(m) is not None for m in net.modules())


def prepare_qat(net: nn.Module, bits: int, *, skip_modules: Sequence[str] = DEFAULT_SKIP_MODULES,
                incompatible: str = "error", act_bits: Optional[int] = 8,
                layers: Optional[QuantizableLayers] = None) -> QuantPlan:
    """Turn on quantization-aware training in place: fake-quantize the planned Linear weights (STE)
    and the activations `layers` declares at `act_bits` (None: leave them fp32).

    The Parameters stay the same objects (an optimizer built before keeps working); state_dict keys
    stay `...weight`. Calling it again with the same bits is a no-op; with other bits, a ConfigError.
    """
    plan = plan_quantization(net, bits, skip_modules, incompatible, layers)
    modules = dict(net.named_modules())
    for name in plan.quantized:
        linear = modules[name]
        current = qat_bits(linear)
        if current == bits:
            continue
        if current is not None:
            raise ConfigError(f"{name} is already fake-quantized at {current} bits, not {bits}")
        if parametrize.is_parametrized(linear, "weight"):
            raise ConfigError(f"{name}.weight already has a parametrization; cannot add fake quantization")
        parametrize.register_parametrization(linear, "weight", FakeQuantWeight(bits))
        linear.register_state_dict_post_hook(_save_plain_weight)
        linear.register_load_state_dict_pre_hook(_load_plain_weight)
    if act_bits is not None:
        attach_activation_quant(net, layers.activations if layers is not None else [], act_bits)
    return plan


def _unparametrize_weight(module: nn.Linear) -> None:
    """torch's remove_parametrizations(module, "weight", leave_parametrized=False), except that it does
    not delete the `weight` property from the module's class: a deepcopy of a parametrized module
    shares that generated class with the original, which torch's removal would break."""
    if len(module.parametrizations) > 1:  # other tensors parametrized too: the class must stay
        parametrize.remove_parametrizations(module, "weight", leave_parametrized=False)
        return
    original = module.parametrizations.weight.original
    del module._modules["parametrizations"]
    module.__class__ = module.__class__.__bases__[0]
    module.register_parameter("weight", original)


def remove_qat(net: nn.Module, *, activations: bool = True) -> list[str]:
    """Remove every fake-quant weight parametrization, keeping the latent fp32 weight (the same
    Parameter object), and (activations=True) the activation fake-quant hooks. Returns the names of
    the Linear layers restored."""
    restored = []
    for name, module in net.named_modules():
        if qat_bits(module) is not None:
            _unparametrize_weight(module)
            _remove_our_hooks(module, ("_state_dict_hooks", "_load_state_dict_pre_hooks"))
            restored.append(name)
    if activations:
        detach_activation_quant(net)
    return restored


# ---- activations -----------------------------------------------------------------------------------
class _QuantOutput:
    """Forward hook: fake-quantize the module's output on [-limit, limit]."""

    def __init__(self, limit: float, bits: int):
        self.limit, self.bits = limit, bits

    def __call__(self, module, args, output):
        return fixed_range_fake_quant(output, self.limit, self.bits)


class _QuantFirstInput(_QuantOutput):
    """Forward pre-hook: fake-quantize the module's first input on [-limit, limit]."""

    def __call__(self, module, args):
        return (fixed_range_fake_quant(args[0], self.limit, self.bits), *args[1:])


_HOOK_KIND = {"output": "_forward_hooks", "input": "_forward_pre_hooks"}


def attach_activation_quant(net: nn.Module, ranges: Sequence[ActivationRange], act_bits: int = 8) -> int:
    """Fake-quantize each declared activation of `net` at `act_bits`. Re-attaching replaces earlier
    hooks (call it again after swapping the modules, as export does). Returns the number of hooks."""
    if not 2 <= act_bits <= 16:
        raise ConfigError(f"activation bits must be between 2 and 16, not {act_bits}")
    for spec in ranges:
        if spec.where not in _HOOK_KIND:
            raise ValueError(f"ActivationRange.where must be 'output' or 'input', not {spec.where!r}")
        module = net.get_submodule(spec.name)
        _remove_our_hooks(module, (_HOOK_KIND[spec.where],))
        if spec.where == "output":
            module.register_forward_hook(_QuantOutput(float(spec.limit), act_bits))
        else:
            module.register_forward_pre_hook(_QuantFirstInput(float(spec.limit), act_bits))
    return len(ranges)


def activation_quant_bits(net: nn.Module) -> Optional[int]:
    """The activation bits attached by `attach_activation_quant` (None: none attached)."""
    for module in net.modules():
        for kind in _HOOK_KIND.values():
            for hook in getattr(module, kind).values():
                if isinstance(hook, _QuantOutput):
                    return hook.bits
    return None


def detach_activation_quant(net: nn.Module) -> None:
    for module in net.modules():
        _remove_our_hooks(module, tuple(_HOOK_KIND.values()))
