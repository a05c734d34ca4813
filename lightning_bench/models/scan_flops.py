"""Forward FLOP formulas of the token-mixing scans of ResNet-BK and Mamba: the work the FLOP counter cannot see.

The model declares which of its modules need such a term (``LanguageModule.analytic_flops()``, a list of
``AnalyticFlops`` from models/capabilities.py: module, kind, formula); profiling/flops.py adds the terms
by forward hooks while its counter runs (and documents the counting conventions: one multiply-add = 2
FLOPs, a real add/sub/mul/div/sqrt/exp = 1 per element, comparisons and copies = 0). Complex arithmetic,
in real FLOPs: ``mul = 6`` (4 mul + 2 add), ``add/sub = 2``, ``|z| = 4`` (2 mul, 1 add, 1 sqrt),
``complex / real = 2``, ``complex / complex = 11`` (multiply by the conjugate 6, ``|d|^2`` 3, two real
divisions 2; textbook count -- torch's Smith-style division does about as much). The formulas live with
the models whose scans they count; profiling/flops.py re-exports them.

ResNet-BK scan (``BKLayer``, default ``scan_impl="scan"``), per sequence of length N, per layer:

* ``alpha_i = v_i - 2 - z``: one complex subtraction, 2 N.
* Hillis-Steele doubling, steps ``s = 1, 2, 4, ... < N`` (``S = ceil(log2 N)`` steps); a step updates
  the ``N - s`` positions ``i >= s`` with ``P_i <- P_i @ P_{i-s}`` and renormalises. Per updated
  position: the 2x2 complex product = 8 complex mul + 4 complex add = 8*6 + 4*2 = 56; the
  normalisation = 4 moduli (4*4 = 16) + max/clamp (0) + 4 complex-by-real divisions (4*2 = 8) = 24;
  80 FLOPs in all. Positions updated over all steps: ``U = sum_s (N - s) = S*N - (2^S - 1)``.
* ``g = b / d``: one complex division per position, 11 N.

  ``bk_scan = B * (2N + 80 U + 11N)`` per layer (e.g. N = 8: S = 3, U = 17, 1464 per sequence).

  ``scan_impl="sequential"`` (``g = 1/(alpha_i - g)``): ``B * 15 N`` (alpha 2, subtraction 2, division
  11). Non-causal diagonal: two causal scans + alpha (2N) + two complex subtractions (4N) + a division
  (11N). The projections around the scan (``Linear(d->1)``, ``Linear(2->d)``) and the MoE experts
  (only the tokens routed to each expert) are matmuls: the counter sees them, on the real routing.

Mamba selective scan (transformers' ``MambaMixer``; B batch, L length, D = d_inner = expand * d_model,
N = d_state, R = dt_rank, K = d_conv). What transformers' pure-PyTorch path computes per (b, l, d):

* discretisation: ``dt + dt_bias`` 1, ``softplus`` 1; ``A * dt`` N, ``exp`` N; ``dt * B`` N, ``* u`` N;
* recurrence ``h = dA * h + dBu``: 2 N;
* output contraction ``y = h @ C`` (a bmm per step): 2 N -- the counter SEES this one;
* ``y + u * D``: 2; gate ``y * silu(z)``: 2.

  So the scan is ``(8N + 6) B L D`` FLOPs, of which the counter sees ``2 N B L D``; the analytic term is
  ``(6N + 6) B L D`` per layer. (The ``9 B L D N`` often quoted from mamba-ssm issue #110 is a
  convention for the fused kernel; the slow path executes the sequential recurrence above: 8 N per
  (b, l, d), plus 6.)

  The term is computed as "what the mixer costs minus what the counter saw inside it", with the full
  mixer in counter conventions: in_proj ``2BL*d*2D`` + depthwise conv ``2B*D*(L+K-1)*K`` (padded output,
  as computed) + x_proj ``2BL*D*(R+2N)`` + dt_proj ``2BL*R*D`` + contraction ``2BLDN`` + out_proj
  ``2BL*D*d`` + the scan's ``(6N+6)BLD``. On the slow path (CPU; CUDA without mamba-ssm) that leaves
  exactly ``(6N+6)BLD``; with mamba-ssm's fused kernels (which the counter cannot see into) it adds the
  invisible projections and conv too -- never counting anything twice. fvcore additionally misses the
  batch of the broadcast ``dt_proj.weight @ time_step`` matmul; the same subtraction covers it.
  Any other implementation of the same recurrence inside a ``MambaMixer`` (e.g. a parallel doubling
  scan) is charged this same algorithmic count: a doubling scan's extra work (~3 flops per updated
  position per step, i.e. ~3 (S L - 2^S + 1) instead of 2 L per (b, d, n)) is NOT counted, unlike the
  BK scan above, whose doubling work is what it executes by design.
"""

from __future__ import annotations

__all__ = ["bk_scan_forward_flops", "mamba_mixer_forward_flops", "mamba_scan_forward_flops"]

# real FLOPs of complex arithmetic (see the module docstring)
C_MUL, C_ADD, C_ABS, C_DIV_REAL, C_DIV = 6, 2, 4, 2, 11
BK_STEP_FLOPS = 8 * C_MUL + 4 * C_ADD + 4 * C_ABS + 4 * C_DIV_REAL  # 80 per updated position


def _hillis_steele_updates(n: int) -> int:
    """Positions updated over all doubling steps: sum over s = 1, 2, 4, ... < n of (n - s)."""
    total, s = 0, 1
    while s < n:
        total += n - s
        s *= 2
    return total


def bk_scan_forward_flops(batch: int, seq_len: int, impl: str = "scan") -> int:
    """Forward FLOPs of one BK layer's resolvent-diagonal scan for `batch` sequences of `seq_len`."""
    n = int(seq_len)
    if n <= 0 or batch <= 0:
        return 0
    if impl == "scan":
        per_seq = C_ADD * n + BK_STEP_FLOPS * _hillis_steele_updates(n) + C_DIV * n
    elif impl == "sequential":
        per_seq = (C_ADD + C_ADD + C_DIV) * n
    elif impl == "noncausal":  # bk_diagonal_noncausal runs the scan forwards and backwards
        per_seq = 2 * bk_scan_forward_flops(1, n, "scan") + C_ADD * n + 2 * C_ADD * n + C_DIV * n
    else:
        raise ValueError(f"unknown BK impl {impl!r}; expected 'scan', 'sequential' or 'noncausal'")
    return int(batch) * per_seq


def mamba_scan_forward_flops(batch: int, seq_len: int, d_inner: int, d_state: int) -> dict:
    """Forward FLOPs of transformers' selective scan, split into what the torch counter cannot see
    (`elementwise`: discretisation, recurrence, D skip, gate) and what it can (`contraction`: y = h @ C)."""
    bld = int(batch) * int(seq_len) * int(d_inner)
    return {"elementwise": (6 * d_state + 6) * bld, "contraction": 2 * d_state * bld}


def mamba_mixer_forward_flops(batch: int, seq_len: int, hidden: int, d_inner: int, d_state: int,
                              dt_rank: int, conv_kernel: int) -> int:
    """Forward FLOPs of a whole MambaMixer in counter conventions (matmuls, padded depthwise conv, scan)."""
    bl = int(batch) * int(seq_len)
    scan = mamba_scan_forward_flops(batch, seq_len, d_inner, d_state)
    return (2 * bl * hidden * 2 * d_inner                                   # in_proj
            + 2 * batch * d_inner * (seq_len + conv_kernel - 1) * conv_kernel  # conv1d (padded output)
            + 2 * bl * d_inner * (dt_rank + 2 * d_state)                    # x_proj
            + 2 * bl * dt_rank * d_inner                                    # dt_proj
            + 2 * bl * d_inner * hidden                                     # out_proj
            + scan["contraction"] + scan["elementwise"])
