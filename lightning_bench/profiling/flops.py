"""FLOPs of one training (or evaluation) step, measured on a real batch.

What is counted
===============
The count is ``torch.utils.flop_counter.FlopCounterMode`` (or fvcore, as a cross-check) plus analytic
terms for the work those counters cannot see. Both counters only count matmul-like ops (mm, addmm,
bmm, baddbmm, convolution, scaled-dot-product attention); elementwise work (norms, activations,
softmax, RoPE, residual adds, the loss, the optimizer) is NOT counted for any family -- the usual
convention behind ``6 x params x tokens``. The exceptions are the token-mixing scans of ResNet-BK and
Mamba, which are nothing *but* elementwise work: without the analytic terms below their mixing would
cost zero FLOPs.

Conventions: one multiply-add = 2 FLOPs (the torch counter's ``2*m*n*k`` for a matmul); a real
add/sub/mul/div/sqrt/exp/softplus/silu = 1 FLOP per output element; comparisons (max, clamp),
copies, casts, concatenation and sign flips = 0. Complex arithmetic, in real FLOPs:
``mul = 6`` (4 mul + 2 add), ``add/sub = 2``, ``|z| = 4`` (2 mul, 1 add, 1 sqrt), ``complex / real =
2``, ``complex / complex = 11`` (multiply by the conjugate 6, ``|d|^2`` 3, two real divisions 2;
textbook count -- torch's Smith-style division does about as much).

Backward: the counted part is what the counter sees in the real backward pass (autograd's matmuls:
2 x forward for a Linear whose input needs a gradient; 2.5 x forward for attention, see below). The
analytic part of the backward is ``2 x`` its forward (the standard backward ~ 2 x forward rule; a
rough per-op count of the BK scan's autograd graph gives ~1.5-1.7 x, because its normalisation scale
is detached so its ``|.|``/max have no backward).

Counter fixes (the first two are ``counter_custom_mapping()``, FlopCounterMode's ``custom_mapping``):

* SDPA on CPU. The CPU kernel ``aten._scaled_dot_product_flash_attention_for_cpu`` and its backward
  ``aten._scaled_dot_product_flash_attention_for_cpu_backward`` (and the ``_fused_attention_overrideable``
  pair used by out-of-tree backends) have no formula in torch, so attention counted 0 on CPU. They get
  torch's own ``sdpa_flop_count`` / ``sdpa_backward_flop_count``, exactly what the CUDA flash /
  efficient / cuDNN ops use, so CPU and CUDA counts agree; the CUDA ops get the same formula with the
  key/value heads broadcast to the query heads (torch before 2.12 asserts equal heads, and a GQA model's
  bf16 evaluation on CUDA stopped there). Each attention call dispatches to exactly one of these ops:
  no double count.
  Convention (torch's): FULL, non-causal ``QK^T`` and ``AV`` with the query heads (GQA broadcast):
  forward ``4 * B * H_q * T_q * T_k * d_head`` (``= 4 * B * T^2 * d_model`` per layer for self-attention
  with ``H_q * d_head = d_model``, i.e. ``2*2*T*d_model`` per token per layer); backward 2.5 x that
  (scores recomputed + 4 gradient matmuls).
* Grouped convolution backward. torch's ``convolution_backward`` formula ignores ``groups`` in the
  weight-gradient term and overcounts it by a factor ``groups`` (``d_inner`` x for Mamba's depthwise
  conv1d: the backward conv counted 33 x its forward on a tiny Mamba). Replaced by the exact
  statement "each forward multiply-add appears once in grad_input and once in grad_weight":
  ``(grad_input? + grad_weight?) x forward conv count`` (identical to torch's for ``groups = 1``).
* Native kernels first. The counter decomposes every op it has no formula for; for ops that also
  have a real kernel (``silu_backward`` in the Llama MLP) that changed the measured step's numerics
  at the 1e-9 level. Those ops now run natively, so training with profiling on is bit-identical to
  training with it off (tested); see ``_NativeFirstRegistry``.

Analytic terms (forward; added by forward hooks on the modules while the counter runs)
======================================================================================
The model declares which of its modules need a term (``LanguageModule.analytic_flops()``, a list of
``AnalyticFlops``: module, kind, formula; models/capabilities.py). The formulas for the two scans,
ResNet-BK's resolvent-diagonal scan (``bk_scan``: ``B * (13N + 80 sum_s(N - s))`` per layer) and
transformers' Mamba selective scan (``mamba_selective_scan``: ``(6N + 6) B L d_inner`` per layer, as
the whole mixer minus what the counter saw), live with the models whose scans they count and are
derived there (models/scan_flops.py); they are re-exported here.

Transformer reference formula (used by the tests; not added to anything)
=========================================================================
Forward FLOPs of one step of a Llama-style decoder, B sequences of T tokens:

    F_fwd = 2 * B*T * P_mm  +  n_layer * 4 * B * T^2 * d_model

``P_mm`` = weights of every ``nn.Linear`` (q, k, v, o, gate, up, down per layer, and the LM head, tied
or not: the head is a real matmul): the non-embedding parameters that multiply in matmuls (norm
weights and biases excluded). The attention term is the counter's full (non-causal) QK^T + AV.
Per token: ``2 P_mm + 4 n_layer T d_model``. The torch counter reproduces it exactly (0.00%).

fvcore (``counter="fvcore"``)
=============================
fvcore traces the forward with ``torch.jit.trace`` and counts one multiply-add as ONE flop: its counts
are multiplied by 2 here. Its norm/upsample/pool handles are disabled (so it counts the same matmul-like
set as torch), ``aten::scaled_dot_product_attention`` gets the same formula as above, and since it
cannot trace a backward pass, its backward is the convention ``2 x forward``.
"""

from __future__ import annotations

import functools
import importlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils import flop_counter as _fc
from torch.utils.flop_counter import FlopCounterMode

# declared by the models (models/ is the layer below: tests/test_package_boundaries.py); re-exported here
from lightning_bench.models.capabilities import AnalyticFlops
from lightning_bench.models.scan_flops import (bk_scan_forward_flops, mamba_mixer_forward_flops,
                                               mamba_scan_forward_flops)

__all__ = [
    "AnalyticFlops",
    "COUNTERS",
    "FlopCount",
    "FlopSession",
    "StepFlops",
    "bk_scan_forward_flops",
    "counter_custom_mapping",
    "linear_weight_params",
    "mamba_mixer_forward_flops",
    "mamba_scan_forward_flops",
    "measure_flops",
    "transformer_forward_flops",
]

COUNTERS = ("torch", "fvcore")

# ---------------------------------------------------------------------------------------------
# reference formulas (the scans' formulas: models/scan_flops.py, imported above)
# ---------------------------------------------------------------------------------------------
def linear_weight_params(module: nn.Module) -> int:
    """Weights of every nn.Linear (each module once; a tied LM head counts: it is a real matmul)."""
    return sum(m.in_features * m.out_features for m in module.modules() if isinstance(m, nn.Linear))


def transformer_forward_flops(batch: int, seq_len: int, n_layer: int, d_model: int, matmul_params: int) -> int:
    """2 * tokens * P_mm + n_layer * 4 * B * T^2 * d_model (full, non-causal QK^T and AV)."""
    return 2 * batch * seq_len * matmul_params + n_layer * 4 * batch * seq_len ** 2 * d_model


# ---------------------------------------------------------------------------------------------
# counter formulas torch lacks
# ---------------------------------------------------------------------------------------------
def _query_heads(query_shape, *shapes) -> list[tuple]:
    """Key/value shapes broadcast to the query heads (GQA), as the kernels compute them: torch's formulas
    before 2.12 assert equal heads and stop a GQA model's first batch (SmolLM2 in bf16 on CUDA)."""
    return [(shape[0], query_shape[1], *shape[2:]) for shape in shapes]


def _sdpa_forward(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return _fc.sdpa_flop_count(query_shape, *_query_heads(query_shape, key_shape, value_shape))


def _sdpa_backward(grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return _fc.sdpa_backward_flop_count(grad_out_shape, query_shape,
                                        *_query_heads(query_shape, key_shape, value_shape))


def _conv_backward(grad_out_shape, x_shape, w_shape, _bias, _stride, _padding, _dilation, transposed,
                   _output_padding, _groups, output_mask, out_shape=None, **kwargs) -> int:
    forward = _fc.conv_flop_count(x_shape, w_shape, grad_out_shape, transposed=transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


def counter_custom_mapping() -> dict:
    """FlopCounterMode `custom_mapping`: SDPA formulas for the CPU / overrideable kernels (which torch
    lacks) and GQA-safe ones for the CUDA kernels (torch's own formula, key/value heads broadcast), and the
    groups-aware convolution backward."""
    aten = torch.ops.aten
    mapping: dict[Any, Callable] = {aten.convolution_backward: _conv_backward}
    for kernel in ("flash_attention_for_cpu", "fused_attention_overrideable", "flash_attention",
                   "efficient_attention", "cudnn_attention"):
        for name, formula in ((f"_scaled_dot_product_{kernel}", _sdpa_forward),
                              (f"_scaled_dot_product_{kernel}_backward", _sdpa_backward)):
            op = getattr(aten, name, None)
            if op is not None:
                mapping[op] = formula
    return mapping


# ---------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------
@dataclass
class FlopCount:
    """FLOPs of one pass: what the counter counted plus the analytic terms (by kind)."""

    counted: int = 0
    by_op: dict = field(default_factory=dict)  # counter's op name -> FLOPs
    analytic_terms: dict = field(default_factory=dict)  # kind -> FLOPs
    calls: dict = field(default_factory=dict)  # kind -> number of module calls that added a term

    @property
    def analytic(self) -> int:
        return int(sum(self.analytic_terms.values()))

    @property
    def total(self) -> int:
        return int(self.counted) + self.analytic


_TERM_FORMULAS = {
    "bk_scan": "B*(13N + 80*sum_s(N-s)) per layer, Hillis-Steele complex 2x2 scan",
    "mamba_selective_scan": "(6N+6)*B*L*d_inner per layer, discretisation + recurrence + D/gate",
}


@dataclass
class StepFlops:
    """FLOPs of one step: forward, backward (None for an evaluation step), tokens and samples in it."""

    forward: FlopCount
    backward: Optional[FlopCount]
    tokens: int
    samples: int
    counter: str = "torch"
    stage: str = "train"

    @property
    def forward_flops(self) -> int:
        return self.forward.total

    @property
    def backward_flops(self) -> Optional[int]:
        return None if self.backward is None else self.backward.total

    @property
    def total_flops(self) -> int:
        return self.forward_flops + (self.backward_flops or 0)

    @property
    def flops_per_token(self) -> Optional[float]:
        return self.total_flops / self.tokens if self.tokens else None

    @property
    def description(self) -> str:
        """The `flop_counter` string: the counter, then what was added analytically."""
        terms = [f"{kind} ({self.forward.calls.get(kind, 0)} calls: {_TERM_FORMULAS.get(kind, '?')})"
                 for kind in sorted(self.forward.analytic_terms)]
        base = ("torch.utils.flop_counter" if self.counter == "torch" else "fvcore (1 MAC = 2 flops)")
        text = f"{base} + analytic: {', '.join(terms) if terms else 'none'}"
        if self.backward is not None:
            text += ("; backward = counted + 2 x analytic forward" if self.counter == "torch"
                     else "; backward = 2 x forward (fvcore traces forward only)")
        if self.counter == "torch":
            text += "; custom formulas: CPU SDPA, grouped conv backward"
        text += f"; measured on the first {self.stage} batch"
        return text

    def summary(self) -> dict:
        return {"forward_flops": self.forward_flops, "backward_flops": self.backward_flops,
                "total_flops": self.total_flops, "flops_per_token": self.flops_per_token,
                "flop_counter": self.description}


# ---------------------------------------------------------------------------------------------
# analytic hooks
# ---------------------------------------------------------------------------------------------
def declared_analytic_flops(module: nn.Module) -> list[AnalyticFlops]:
    """What `module` (a LanguageModule; any other module declares nothing) says needs analytic terms."""
    declare = getattr(module, "analytic_flops", None)
    return list(declare()) if callable(declare) else []


class _AnalyticHooks:
    """Forward hooks adding the analytic terms. `seen()` returns the counter's running total, so a rule
    can subtract what the counter already counted inside the module (None: fvcore, resolved later)."""

    def __init__(self, root: nn.Module, seen: Optional[Callable[[], int]]):
        self.terms: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.pending: list[tuple[str, str, int]] = []  # (kind, module name, full) for fvcore
        self._seen = seen
        self._handles = []
        self._stack: dict[int, list[int]] = {}
        names = {id(m): name for name, m in root.named_modules()}
        for rule in declared_analytic_flops(root):
            module = rule.module
            self._handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._make_post(rule, names.get(id(module), "")),
                                                              with_kwargs=True))

    def _pre(self, module, args, kwargs):
        if self._seen is not None:
            self._stack.setdefault(id(module), []).append(self._seen())

    def _make_post(self, rule: AnalyticFlops, name: str):
        kind = rule.kind

        def post(module, args, kwargs, output):
            before = self._stack[id(module)].pop() if self._seen is not None else None
            flops = int(rule.forward_flops(module, args, kwargs))
            if not rule.whole_module:
                self._add(kind, flops)
            elif self._seen is None:
                self.pending.append((kind, name, flops))
                self.calls[kind] = self.calls.get(kind, 0) + 1
            else:
                self._add(kind, max(0, flops - (self._seen() - before)))
            return None
        return post

    def _add(self, kind: str, flops: int) -> None:
        self.terms[kind] = self.terms.get(kind, 0) + int(flops)
        self.calls[kind] = self.calls.get(kind, 0) + 1

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []


@functools.lru_cache(maxsize=None)
def _has_backend_kernel(name: str) -> bool:
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key) for key in ("CPU", "CUDA"))


class _NativeFirstRegistry(dict):
    """FlopCounterMode runs every op it has no formula for through its CompositeImplicit decomposition
    (it looks the OpOverload up in this packet-keyed dict, so that is every op). For ops that also have
    a real CPU/CUDA kernel (e.g. ``silu_backward``) the decomposition changes the measured step's
    numerics at the rounding level, so a run with profiling would not train bit-identically to one
    without. Such ops are reported as known here and run natively. Nothing countable is lost: the ops
    with both a kernel and a decomposition are elementwise helpers like ``silu_backward``, while the
    matmul-like composites (linear, matmul, einsum, the SDPA math path) have no backend kernel and still
    decompose into the mm/bmm the counter counts, as in torch."""

    def __contains__(self, key) -> bool:
        if dict.__contains__(self, key):
            return True
        return isinstance(key, torch._ops.OpOverload) and _has_backend_kernel(key.name())


class FlopSession:
    """Counts the FLOPs of whatever runs between `start()` and `stop()` (torch counter + analytic terms).

    `start()`/`stop()` may be called from different places (e.g. two Lightning hooks around a step);
    it is also a context manager. `analytic=False` skips the hooks (e.g. for a backward pass, whose
    analytic part is 2 x the forward's).
    """

    def __init__(self, module: Optional[nn.Module] = None, analytic: bool = True):
        self.module, self.analytic = module, analytic
        self._mode: Optional[FlopCounterMode] = None
        self._hooks: Optional[_AnalyticHooks] = None
        self.result: Optional[FlopCount] = None

    @property
    def active(self) -> bool:
        return self._mode is not None

    def start(self) -> "FlopSession":
        if self._mode is not None:
            raise RuntimeError("FlopSession already started")
        mode = FlopCounterMode(display=False, custom_mapping=counter_custom_mapping())
        mode.flop_registry = _NativeFirstRegistry(mode.flop_registry)
        if self.analytic and self.module is not None:
            self._hooks = _AnalyticHooks(self.module, seen=mode.get_total_flops)
        mode.__enter__()
        self._mode = mode
        return self

    def stop(self) -> FlopCount:
        mode, hooks = self._mode, self._hooks
        self._mode, self._hooks = None, None
        if mode is None:
            raise RuntimeError("FlopSession was not started")
        try:
            mode.__exit__(None, None, None)
        finally:
            if hooks is not None:
                hooks.remove()
        by_op = {str(op): int(n) for op, n in mode.get_flop_counts().get("Global", {}).items()}
        self.result = FlopCount(counted=int(mode.get_total_flops()), by_op=by_op,
                                analytic_terms=dict(hooks.terms) if hooks else {},
                                calls=dict(hooks.calls) if hooks else {})
        return self.result

    def abort(self) -> None:
        """Stop without a result (exception / a step that never reached backward)."""
        if self._mode is not None:
            try:
                self.stop()
            except Exception:  # the mode stack may already be unwound by the exception
                pass
            self.result = None

    def __enter__(self) -> "FlopSession":
        return self.start()

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.stop()
        else:
            self.abort()


def backward_from_forward(forward: FlopCount, counted_backward: FlopCount) -> FlopCount:
    """The backward pass: what the counter saw in it + 2 x the forward's analytic terms."""
    return FlopCount(counted=counted_backward.counted, by_op=counted_backward.by_op,
                     analytic_terms={k: 2 * v for k, v in forward.analytic_terms.items()},
                     calls=dict(forward.calls))


# ---------------------------------------------------------------------------------------------
# fvcore cross-check
# ---------------------------------------------------------------------------------------------
class _Forward(nn.Module):
    def __init__(self, module: nn.Module):
        super().__init__()
        self.m = module

    def forward(self, input_ids):
        return _logits(self.m, input_ids)


def _fvcore_sdpa(inputs, outputs):
    from fvcore.nn.jit_handles import get_shape

    q, k, v = (get_shape(inputs[i]) for i in range(3))
    return _fc.sdpa_flop_count(q, k, v) // 2  # fvcore unit: multiply-adds


_FVCORE_OPS = ("aten::addmm", "aten::bmm", "aten::_convolution", "aten::einsum", "aten::matmul", "aten::mm",
               "aten::linear")


def _fvcore_forward(module: nn.Module, input_ids: torch.Tensor) -> FlopCount:
    from fvcore.nn import FlopCountAnalysis

    wrapper = _Forward(module)
    hooks = _AnalyticHooks(module, seen=None)
    try:
        defaults = importlib.import_module("fvcore.nn.flop_count")._DEFAULT_SUPPORTED_OPS
        analysis = FlopCountAnalysis(wrapper, (input_ids,)).clear_op_handles()
        # the matmul-like set the torch counter counts (no norms / upsampling / pooling), plus SDPA
        analysis.set_op_handle(**{op: defaults[op] for op in _FVCORE_OPS if op in defaults})
        analysis.set_op_handle("aten::scaled_dot_product_attention", _fvcore_sdpa)
        analysis.unsupported_ops_warnings(False)
        analysis.uncalled_modules_warnings(False)
        analysis.tracer_warnings("none")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            macs = analysis.total()
        by_module = analysis.by_module()
        by_op = {op: 2 * int(n) for op, n in analysis.by_operator().items()}
    finally:
        hooks.remove()
    terms = dict(hooks.terms)
    for kind, name, full in hooks.pending:
        seen = 2 * int(by_module.get(f"m.{name}", 0))
        terms[kind] = terms.get(kind, 0) + max(0, full - seen)
    return FlopCount(counted=2 * int(macs), by_op=by_op, analytic_terms=terms, calls=dict(hooks.calls))


# ---------------------------------------------------------------------------------------------
# one-call measurement (an extra forward/backward; RNG, grads and modes untouched)
# ---------------------------------------------------------------------------------------------
def _logits(module: nn.Module, input_ids: torch.Tensor) -> torch.Tensor:
    if hasattr(module, "lm_forward"):
        return module.lm_forward(input_ids).logits
    out = module(input_ids)
    return getattr(out, "logits", out)


def _loss(module: nn.Module, input_ids: torch.Tensor, labels: Optional[torch.Tensor]) -> torch.Tensor:
    if hasattr(module, "lm_forward"):
        out = module.lm_forward(input_ids)
        logits, aux = out.logits, out.aux_loss
    else:
        logits, aux = _logits(module, input_ids), None
    if labels is None:
        loss = logits.float().mean()
    else:
        loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
    if aux is not None:
        loss = loss + getattr(module, "aux_loss_weight", 0.0) * aux
    return loss


def _batch_ids(batch) -> torch.Tensor:
    if isinstance(batch, dict):
        return batch["input_ids"]
    if isinstance(batch, (tuple, list)):
        return batch[0]
    return batch


def measure_flops(module: nn.Module, batch, backward: bool = True, counter: str = "torch",
                  stage: Optional[str] = None) -> StepFlops:
    """FLOPs of one step of `module` on `batch` ({"input_ids": (B, T), "labels": (B, T)} or a tensor).

    Runs one extra forward (and, with `backward`, the backward of the training loss via
    `torch.autograd.grad`, so no `.grad` is touched) with the RNG state forked, so the caller's run is
    unaffected. `counter="fvcore"` traces the forward with fvcore instead (backward = 2 x forward).
    """
    if counter not in COUNTERS:
        raise ValueError(f"counter must be one of {COUNTERS}, got {counter!r}")
    input_ids = _batch_ids(batch)
    labels = batch.get("labels") if isinstance(batch, dict) else None
    devices = [input_ids.device] if input_ids.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        if counter == "fvcore":
            with torch.no_grad():
                forward = _fvcore_forward(module, input_ids)
            bwd = None
            if backward:
                bwd = FlopCount(counted=2 * forward.counted, by_op={},
                                analytic_terms={k: 2 * v for k, v in forward.analytic_terms.items()},
                                calls=dict(forward.calls))
        elif backward:
            with FlopSession(module) as fwd_session:
                loss = _loss(module, input_ids, labels)
            forward = fwd_session.result
            params = [p for p in module.parameters() if p.requires_grad]
            with FlopSession(analytic=False) as bwd_session:
                torch.autograd.grad(loss, params, allow_unused=True)
            bwd = backward_from_forward(forward, bwd_session.result)
        else:
            with torch.no_grad(), FlopSession(module) as fwd_session:
                _logits(module, input_ids)
            forward, bwd = fwd_session.result, None
    return StepFlops(forward=forward, backward=bwd, tokens=int(input_ids.numel()),
                     samples=int(input_ids.shape[0]) if input_ids.dim() > 1 else 1, counter=counter,
                     stage=stage or ("train" if backward else "eval"))
