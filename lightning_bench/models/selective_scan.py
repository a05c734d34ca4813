"""A parallel selective scan for transformers' Mamba (v1) on CPU, and the mixer forward that uses it.

Why: without mamba-ssm's kernels (always the case on CPU), transformers' `MambaMixer` runs its
reference scan `mamba_selective_scan`, a Python loop over sequence positions that indexes one step
at a time. Its forward is tolerable, its backward is not: every `discrete_A[:, :, i]` /
`deltaB_u[:, :, i]` / `C[:, i]` index op backpropagates into a freshly zeroed full-size gradient, so
one backward costs O(L) full-tensor passes per layer (18-30 s measured for one training step of
configs/compare/mamba_small.yaml, d_model 128, 5 layers, at seq 128, batch 16, on 2 CPU cores).

What: the recurrence h_t = a_t * h_{t-1} + b_t is a diagonal linear recurrence, so

* `linear_scan` evaluates it with a Hillis-Steele doubling scan over the time axis (ceil(log2 L)
  vectorised steps; pairs compose as (a2*a1, a2*b1 + b2)), optionally in chunks along time (scan
  inside each chunk, carry the state across chunks sequentially) so the work and the temporaries
  stay bounded at long L. It is an autograd Function whose backward is the adjoint recurrence,
  itself one reverse scan: lam_t = g_t + a_{t+1} * lam_{t+1}, grad b_t = lam_t,
  grad a_t = lam_t * h_{t-1}. Only a and h are saved. The mixer lays the scan out time-major,
  so each chunk is one contiguous block.
* `fast_slow_forward(mixer, ...)` is transformers' `MambaMixer.forward` (the version installed:
  5.x, where the sequential path lives in the module function `mamba_selective_scan`, not in a
  `slow_forward` method) for the no-cache full-sequence case, line for line, with the scan swapped
  for `linear_scan`. Everything else (a cache = generation, extra kernel kwargs, mamba-ssm / hub
  kernels on an accelerator, torch.compile with transformers' own associative scan, mambapy) goes
  to transformers' original forward unchanged.
* `install_parallel_scan(model)` installs it per mixer instance; weights, config and state_dict
  keys are untouched, so checkpoints load either way.

The scan is exact up to float rounding (it reassociates the products and sums).
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import warnings
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn


def default_chunk_size(device: torch.device) -> int:
    """Scan chunk length when none is given: short on CPU, where a chunk's working set then stays in
    cache and the log2(chunk) doubling steps are few (16 measured fastest for the mamba_small preset,
    3-4x less scan time than one 128-long chunk), longer on accelerators (fewer kernel launches)."""
    return 16 if torch.device(device).type == "cpu" else 256


# ---- the scan ------------------------------------------------------------------------------------
def _scan_chunk_(a: torch.Tensor, b: torch.Tensor, a_tmp: torch.Tensor, b_tmp: torch.Tensor,
                 reverse: bool, need_a: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Hillis-Steele inclusive scan along dim 0, ping-ponging between (a, b) and (a_tmp, b_tmp).

    All four are contiguous work buffers of the same shape and are clobbered. Returns (A, B): the
    buffers holding the result, B_t = h_t from a zero state and A_t = the product of the a's of the
    segment (a_0..a_t forward, a_t..a_{n-1} reverse), valid only if `need_a`.
    """
    n = b.shape[0]
    step = 1
    while step < n:
        update_a = need_a or 2 * step < n  # the last step's products are only needed to carry a state
        if not reverse:  # t absorbs the segment ending at t - step: (a_t a_{t-s}, a_t b_{t-s} + b_t)
            torch.addcmul(b[step:], a[step:], b[:-step], out=b_tmp[step:])
            b_tmp[:step].copy_(b[:step])
            if update_a:
                torch.mul(a[step:], a[:-step], out=a_tmp[step:])
                a_tmp[:step].copy_(a[:step])
        else:  # t absorbs the segment starting at t + step
            torch.addcmul(b[:-step], a[:-step], b[step:], out=b_tmp[:-step])
            b_tmp[-step:].copy_(b[-step:])
            if update_a:
                torch.mul(a[:-step], a[step:], out=a_tmp[:-step])
                a_tmp[-step:].copy_(a[-step:])
        b, b_tmp = b_tmp, b
        if update_a:
            a, a_tmp = a_tmp, a
        step *= 2
    return a, b


def _copy_coefficients_(dst: torch.Tensor, a: torch.Tensor, start: int, stop: int, shift: int) -> None:
    """dst[i] = a[start + i + shift] for i < stop - start, 0 where that falls outside a."""
    lo, hi = start + shift, stop + shift
    src_lo, src_hi = max(lo, 0), min(hi, a.shape[0])
    dst[src_lo - lo:src_hi - lo].copy_(a[src_lo:src_hi])
    dst[:src_lo - lo].zero_()
    dst[src_hi - lo:].zero_()


@torch.no_grad()
def _scan(a: torch.Tensor, b: torch.Tensor, chunk_size: int, reverse: bool, shift: int = 0) -> torch.Tensor:
    """h along dim 0 from a zero state: h_t = c_t h_{t-1} + b_t (reverse: h_t = c_t h_{t+1} + b_t),
    where c_t = a_{t + shift} (0 outside a)."""
    length = b.shape[0]
    out = torch.empty(b.shape, dtype=b.dtype, device=b.device)
    if length == 0:
        return out
    chunk = length if chunk_size <= 0 else min(length, chunk_size)
    a_work, a_tmp, b_tmp = (torch.empty((chunk,) + tuple(b.shape[1:]), dtype=b.dtype, device=b.device)
                            for _ in range(3))
    starts = list(range(0, length, chunk))
    carry = None
    for start in reversed(starts) if reverse else starts:
        stop = min(start + chunk, length)
        n = stop - start
        b_out = out[start:stop]
        b_out.copy_(b[start:stop])
        a_in = a_work[:n]
        _copy_coefficients_(a_in, a, start, stop, shift)
        A, B = _scan_chunk_(a_in, b_out, a_tmp[:n], b_tmp[:n], reverse, need_a=carry is not None)
        if carry is not None:  # the state entering this chunk, decayed by the chunk's cumulative a
            B.addcmul_(A, carry.unsqueeze(0))
        if B.data_ptr() != b_out.data_ptr():
            b_out.copy_(B)
        carry = b_out[0] if reverse else b_out[-1]
    return out


def _neighbour_product(x: torch.Tensor, y: torch.Tensor, zero_first: bool) -> torch.Tensor:
    """z_t = x_t * y_{t-1}, z_0 = 0 (zero_first) or z_t = x_t * y_{t+1}, z_{L-1} = 0, along dim 0."""
    z = torch.empty(torch.broadcast_shapes(x.shape, y.shape), dtype=x.dtype, device=x.device)
    if zero_first:
        dst, xs, ys, edge = z[1:], x[1:], y[:-1], z[:1]
    else:
        dst, xs, ys, edge = z[:-1], x[:-1], y[1:], z[-1:]
    edge.zero_()
    if torch.is_grad_enabled() and (x.requires_grad or y.requires_grad):
        dst.copy_(xs * ys)  # differentiable (double backward)
    else:
        torch.mul(xs, ys, out=dst)
    return z


class LinearScan(torch.autograd.Function):
    """h = scan(c, b) along dim 0 with c_t = a_t, or, if `shifted`, the previous element's a in scan
    order (a_{t-1} forward, a_{t+1} reverse; 0 at the start). The backward is the adjoint recurrence,
    a scan the other way whose coefficients are the next element's: built from this Function, so
    double backward works too."""

    @staticmethod
    def forward(ctx, a, b, chunk_size, reverse, shifted):
        h = _scan(a, b, chunk_size, reverse, shift=(1 if reverse else -1) if shifted else 0)
        ctx.save_for_backward(a, h)
        ctx.chunk_size, ctx.reverse, ctx.shifted = chunk_size, reverse, shifted
        return h

    @staticmethod
    def backward(ctx, grad_h):
        a, h = ctx.saved_tensors
        # forward scan: lam_t = g_t + c_{t+1} lam_{t+1}, grad c_t = lam_t h_{t-1} (reverse: mirrored);
        # c_{t+1} is a_{t+1} (not shifted: the other way's "shifted") or a_t (shifted: "not shifted")
        lam = LinearScan.apply(a, grad_h, ctx.chunk_size, not ctx.reverse, not ctx.shifted)
        grad_a = None
        if ctx.needs_input_grad[0]:
            # grad a_t: lam_t h_{t-1} (not shifted) or lam_{t+1} h_t (shifted, a_t = c_{t+1}); mirrored in reverse
            if not ctx.shifted:
                grad_a = _neighbour_product(lam, h, zero_first=not ctx.reverse)
            else:
                grad_a = _neighbour_product(h, lam, zero_first=ctx.reverse)
        grad_b = lam if ctx.needs_input_grad[1] else None
        return grad_a, grad_b, None, None, None


def linear_scan(a: torch.Tensor, b: torch.Tensor, dim: int = 1, initial_state: Optional[torch.Tensor] = None,
                chunk_size: Optional[int] = None) -> torch.Tensor:
    """All states of h_t = a_t * h_{t-1} + b_t along `dim` (elementwise), by a parallel scan.

    Args:
        a, b: broadcastable tensors; time runs along `dim`.
        initial_state: h_{-1}, shaped like one time step (`dim` removed); None = zeros.
        chunk_size: scan inside chunks of this many steps and carry the state between them
            (bounds the O(L log L) work and the temporaries at long L); None: `default_chunk_size`
            of the device; <= 0: one chunk.

    Returns h with the broadcast shape of a and b, in their promoted dtype. Differentiable in a, b
    and initial_state. Fastest with `dim` the outermost dimension of contiguous a and b (each chunk
    is then one contiguous block).
    """
    if chunk_size is None:
        chunk_size = default_chunk_size(a.device)
    dtype = torch.promote_types(a.dtype, b.dtype)
    a, b = torch.broadcast_tensors(a.to(dtype), b.to(dtype))
    dim = dim % a.dim()
    a, b = a.movedim(dim, 0), b.movedim(dim, 0)
    if initial_state is not None and a.shape[0] > 0:  # fold h_{-1} into the first input
        b = torch.cat([b[:1] + a[:1] * initial_state.to(dtype).unsqueeze(0), b[1:]])
    return LinearScan.apply(a, b, chunk_size, False, False).movedim(0, dim)


# ---- the mixer forward ---------------------------------------------------------------------------
# mamba-ssm (transformers picks it up by itself) or the hub `kernels` package (`use_kernels=True`):
# with either installed, a mixer on an accelerator keeps transformers' forward (its kernel path).
KERNEL_PACKAGES_INSTALLED = any(importlib.util.find_spec(name) is not None for name in ("mamba_ssm", "kernels"))


def _modeling_mamba():
    from transformers.models.mamba import modeling_mamba

    return modeling_mamba


@functools.lru_cache(maxsize=None)
def supports_installed_transformers() -> bool:
    """True if transformers' MambaMixer has the layout `fast_slow_forward` reproduces (5.x: one
    `forward(hidden_states, cache_params | cache, attention_mask, **kwargs)` calling the module functions
    `mamba_inner_fn` / `causal_conv1d_fn` / `mamba_selective_scan`; no `slow_forward`)."""
    try:
        mm = _modeling_mamba()
    except ImportError:
        return False
    if hasattr(mm.MambaMixer, "slow_forward"):  # transformers 4.x layout: not reproduced here
        return False
    needed = ("mamba_inner_fn", "mamba_selective_scan", "causal_conv1d_fn", "apply_mask_to_padding_states")
    if not all(hasattr(mm, name) for name in needed):
        return False
    return _cache_argument(mm) is not None


def _cache_argument(mm) -> Optional[str]:
    """The name MambaMixer.forward gives its cache: `cache_params` (transformers <= 5.23) or `cache`
    (5.24 renamed it); None for any other signature."""
    params = list(inspect.signature(mm.MambaMixer.forward).parameters)
    for name in ("cache_params", "cache"):
        if params == ["self", "hidden_states", name, "attention_mask", "kwargs"]:
            return name
    return None


def selective_scan(hidden_states, dt, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                   chunk_size: Optional[int] = None):
    """transformers' `mamba_selective_scan` (no final state, sequential path) with the loop replaced
    by `linear_scan`. Shapes as there: hidden_states, dt, z (batch, d_inner, L); A (d_inner, N);
    B, C (batch, N, L)."""
    input_dtype = hidden_states.dtype

    if delta_bias is not None:
        dt = dt + delta_bias.to(dt.dtype)[..., None]
    if delta_softplus:
        dt = F.softplus(dt)

    # The same elementwise products as transformers' (batch, d_inner, L, N) discretisation, laid out
    # time-major, (L, batch, d_inner, N), so that each scan chunk is one contiguous block.
    dt = dt.permute(2, 0, 1).contiguous()  # (L, batch, d_inner)
    B = B.permute(2, 0, 1)  # (L, batch, N)
    C = C.permute(2, 0, 1)

    discrete_A = torch.exp(A[None, None, :, :] * dt[:, :, :, None])
    discrete_B = dt[:, :, :, None] * B[:, :, None, :].float()
    deltaB_u = discrete_B * hidden_states.permute(2, 0, 1)[:, :, :, None].float()

    states = linear_scan(discrete_A, deltaB_u, dim=0, chunk_size=chunk_size)
    # the loop's matmul(state_i.to(input_dtype), C[:, i, :, None]), for every i at once
    scan_output = torch.einsum("lbdn,lbn->bdl", states.to(input_dtype), C)

    if D is not None:
        scan_output = scan_output + hidden_states * D[None, :, None]
    if z is not None:
        scan_output = scan_output * F.silu(z)
    return scan_output


def use_transformers_forward(mixer: nn.Module, hidden_states: torch.Tensor, cache_params, kwargs) -> bool:
    if cache_params is not None:  # generation: conv/ssm states to read and update
        return True
    if any(v is not None for v in kwargs.values()):  # e.g. seq_idx / cu_seqlens for the conv kernel
        return True
    if hidden_states.device.type != "cpu" and KERNEL_PACKAGES_INSTALLED:  # the CUDA kernel path
        return True
    from transformers.utils.import_utils import is_mambapy_available, is_torchdynamo_compiling

    if getattr(mixer, "use_mambapy", False) and is_mambapy_available():
        return True
    if getattr(mixer, "use_associative_scan", False) and is_torchdynamo_compiling():
        return True  # transformers' own parallel path (torch associative_scan), compile-only
    return False


def fast_slow_forward(mixer: nn.Module, hidden_states: torch.Tensor, cache_params=None,
                      attention_mask: Optional[torch.Tensor] = None, cache=None, **kwargs) -> torch.Tensor:
    """`MambaMixer.forward` with the selective scan done by `linear_scan`; same signature.

    Reproduces the installed transformers' forward for `cache_params=None` (training and eval),
    attention_mask included (padding positions zeroed before in_proj and after the conv, as there);
    anything else is handed to the original `type(mixer).forward`.
    """
    cache_params = cache if cache is not None else cache_params  # either name (see _cache_argument)
    if use_transformers_forward(mixer, hidden_states, cache_params, kwargs):
        name = _cache_argument(_modeling_mamba()) or "cache_params"
        return type(mixer).forward(mixer, hidden_states, attention_mask=attention_mask,
                                   **{name: cache_params}, **kwargs)
    return _parallel_forward(mixer, hidden_states, attention_mask)


def _parallel_forward_body(mixer: nn.Module, hidden_states: torch.Tensor,
                           attention_mask: Optional[torch.Tensor]) -> torch.Tensor:
    mm = _modeling_mamba()
    dtype = hidden_states.dtype

    # 1. Gated MLP's linear projection
    hidden_states = mm.apply_mask_to_padding_states(hidden_states, attention_mask)
    projected_states = mixer.in_proj(hidden_states).transpose(1, 2)

    A = -torch.exp(mixer.A_log.float())
    # (no fused kernel here: transformers' torch `mamba_inner_fn` returns None, so it is skipped)
    hidden_states_B_C, gate = projected_states.chunk(2, dim=1)

    # 2. Convolution sequence transformation (transformers' function: causal-conv1d's kernel if installed)
    hidden_states_B_C = mm.causal_conv1d_fn(
        hidden_states_B_C,
        mixer.conv1d.weight.squeeze(1),
        mixer.conv1d.bias,
        activation=mixer.activation,
    )

    # 3. SSM transformation
    hidden_states_B_C = mm.apply_mask_to_padding_states(hidden_states_B_C.transpose(1, 2), attention_mask)
    time_step, B, C = torch.split(
        mixer.x_proj(hidden_states_B_C),
        [mixer.time_step_rank, mixer.ssm_state_size, mixer.ssm_state_size],
        dim=-1,
    )
    time_step = mixer.dt_proj.weight @ time_step.transpose(1, 2)
    time_proj_bias = mixer.dt_proj.bias.float() if mixer.dt_proj.bias is not None else None

    scan_output = selective_scan(
        hidden_states_B_C.transpose(1, 2),
        time_step,
        A,
        B.transpose(1, 2),
        C.transpose(1, 2),
        D=mixer.D.float(),
        z=gate,
        delta_bias=time_proj_bias,
        delta_softplus=True,
        chunk_size=getattr(mixer, "scan_chunk_size", None),
    )

    # 4. Final linear projection
    return mixer.out_proj(scan_output.transpose(1, 2).to(dtype))


def _fire_accelerate_hooks(forward):
    """transformers decorates MambaMixer.forward with `force_accelerate_hooks(["conv1d", "dt_proj"])`
    (their weights are used without calling the submodules); keep that for offloaded models."""
    try:
        from transformers.integrations.accelerate import force_accelerate_hooks
    except ImportError:
        return forward
    return force_accelerate_hooks(["conv1d", "dt_proj"])(forward)


_parallel_forward = _fire_accelerate_hooks(_parallel_forward_body)


def install_parallel_scan(model: nn.Module, chunk_size: Optional[int] = None) -> int:
    """Route every transformers `MambaMixer` in `model` through `fast_slow_forward`, per instance
    (`mixer.forward` becomes a partial of it; the class, parameters and state_dict are untouched).

    Returns the number of mixers patched: 0 (with a warning) if the installed transformers' mixer
    is not the layout reproduced here, in which case transformers' own path runs.
    """
    mm = _modeling_mamba()
    mixers = [m for m in model.modules() if type(m) is mm.MambaMixer]  # not subclasses: they may override forward
    if not mixers:
        return 0
    if not supports_installed_transformers():
        import transformers

        warnings.warn(f"parallel selective scan: transformers {transformers.__version__}'s MambaMixer is not "
                      "the layout it reproduces; using transformers' own (sequential) path", stacklevel=2)
        return 0
    for mixer in mixers:
        # a functools.partial (not a bound method) so the module still pickles and deep-copies
        mixer.forward = functools.partial(fast_slow_forward, mixer)
        mixer.scan_chunk_size = chunk_size
    return len(mixers)
