"""ResNet-BK language model (plain nn.Modules; the LightningModule wraps these).

Architecture (see docs/DESIGN "ResNet-BK"):

    h = tok_emb(ids) [+ pos_emb(positions)]
    for each block:  h = h + BKLayer(LayerNorm(h))
    logits = lm_head(LayerNorm(h))                              (untied head)

    BKLayer(x) = MoE(x) + bk_scale * Linear(2 -> d)(bk_features(clamp(Linear(d -> 1)(x))))

Token mixing happens *only* in the BK core (a causal scan, see ``bk_core``); everything
else is per token, so the whole network is causal by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from lightning_bench.models.bk_core import bk_features
from lightning_bench.models.scan_flops import bk_scan_forward_flops

__all__ = ["BKConfig", "MoEFeedForward", "BKLayer", "BKBlock", "ResNetBKNet"]


@dataclass
class BKConfig:
    """Hyper-parameters of :class:`ResNetBKNet`.

    Defaults are the reference model (d_model 64, 4 layers, n_seq 128, 4 experts, top-1);
    its benchmark configuration is ``d_model=256, n_layers=8``.
    """

    vocab_size: int
    d_model: int = 64
    n_layers: int = 4
    max_seq_len: int = 128
    num_experts: int = 4
    top_k: int = 1
    dropout: float = 0.1
    v_max: float = 3.0
    feature_clamp: float = 10.0
    bk_scale: float = 1.0
    z_imag: float = 1.0
    z_real: float = 0.0
    position_embedding: str = "learned"  # "learned" | "none"
    scan_impl: str = "scan"  # "scan" | "sequential"
    # False -> exact, future-dependent diagonal (encoder/classification use only).
    causal: bool = True
    # Not used by the network itself: forward() returns the unweighted auxiliary loss and
    # the training module multiplies it by this weight.
    load_balance_weight: float = 0.01

    def __post_init__(self) -> None:
        if self.vocab_size <= 0 or self.d_model <= 0 or self.n_layers < 0:
            raise ValueError("vocab_size and d_model must be positive, n_layers >= 0")
        if self.num_experts < 1 or not 1 <= self.top_k <= self.num_experts:
            raise ValueError(
                f"need num_experts >= 1 and 1 <= top_k <= num_experts, got "
                f"num_experts={self.num_experts}, top_k={self.top_k}"
            )
        if self.position_embedding not in ("learned", "none"):
            raise ValueError(
                f"position_embedding must be 'learned' or 'none', got {self.position_embedding!r}"
            )
        if self.position_embedding == "learned" and self.max_seq_len <= 0:
            raise ValueError("max_seq_len must be positive with learned position embeddings")
        if self.scan_impl not in ("scan", "sequential"):
            raise ValueError(f"scan_impl must be 'scan' or 'sequential', got {self.scan_impl!r}")
        # Im z > 0 is what bounds |g| <= 1/Im z; at Im z = 0 the resolvent has poles on
        # the real spectrum and the recurrence can divide by ~0.
        if not self.z_imag > 0:
            raise ValueError(f"z_imag must be > 0 (resolvent off the real axis), got {self.z_imag}")
        if self.v_max <= 0 or self.feature_clamp <= 0:
            raise ValueError("v_max and feature_clamp must be positive")

    @property
    def z(self) -> complex:
        return complex(self.z_real, self.z_imag)

    @property
    def bk_impl(self) -> str:
        return self.scan_impl if self.causal else "noncausal"


class MoEFeedForward(nn.Module):
    """Mixture of ``num_experts`` Linear(d,2d)-ReLU-Dropout-Linear(2d,d) experts.

    Routing: softmax over ALL experts, then the top-k. With ``top_k > 1`` the selected
    gates are renormalised to sum to 1. With ``top_k == 1`` the gate is the raw
    probability of the chosen expert (Switch Transformer): renormalising a single gate
    would make it identically 1 and cut the router off from the task gradient, which is
    precisely the reference implementation's defect. The router additionally gets
    gradient from the load-balancing loss.

    No capacity limit / token dropping: capacity is decided over the whole batch and
    sequence, so dropping would make a token's output depend on other (future) tokens.

    ``forward(x) -> (out, aux)`` where ``aux = E * sum_e f_e * P_e`` (Switch
    load-balancing loss): ``f_e`` is the fraction of routing assignments (token, slot)
    sent to expert ``e`` (so ``sum_e f_e = 1`` for any ``top_k``) and ``P_e`` the mean
    router probability of ``e`` over tokens. It equals 1 under perfectly uniform routing.
    """

    def __init__(self, d_model: int, num_experts: int = 4, top_k: int = 1, dropout: float = 0.1):
        super().__init__()
        if not 1 <= top_k <= num_experts:
            raise ValueError(f"top_k must be in [1, {num_experts}], got {top_k}")
        self.num_experts = num_experts
        self.top_k = top_k
        self.router = nn.Linear(d_model, num_experts)
        self.experts = nn.ModuleList(
            nn.Sequential(
                nn.Linear(d_model, 2 * d_model),
                nn.ReLU(),
                nn.Dropout(dropout),
                nn.Linear(2 * d_model, d_model),
            )
            for _ in range(num_experts)
        )
        for expert in self.experts:
            expert[3]._residual_out = True  # see ResNetBKNet.reset_parameters

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return (probs (T, E), gates (T, k), expert indices (T, k)) for flat tokens x (T, d)."""
        probs = F.softmax(self.router(x).float(), dim=-1)
        top_p, top_i = probs.topk(self.top_k, dim=-1)
        gates = top_p if self.top_k == 1 else top_p / top_p.sum(dim=-1, keepdim=True)
        return probs, gates, top_i

    def load_balance_loss(self, probs: torch.Tensor, top_i: torch.Tensor) -> torch.Tensor:
        """Switch-Transformer auxiliary loss ``E * sum_e f_e * P_e`` (unweighted)."""
        counts = torch.zeros(self.num_experts, device=probs.device, dtype=probs.dtype)
        counts = counts.scatter_add(
            0, top_i.reshape(-1), torch.ones_like(top_i.reshape(-1), dtype=probs.dtype)
        )
        f = counts / max(top_i.numel(), 1)  # not differentiable (argmax), as in Switch
        p_mean = probs.mean(dim=0)
        return self.num_experts * (f * p_mean).sum()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        probs, gates, top_i = self.route(flat)
        out = torch.zeros_like(flat)
        # Sparse dispatch: each expert only sees its tokens (E/top_k times cheaper than running
        # every expert densely).
        for e, expert in enumerate(self.experts):
            tok, slot = (top_i == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            y = expert(flat.index_select(0, tok)) * gates[tok, slot].unsqueeze(-1)
            out = out.index_add(0, tok, y.to(out.dtype))
        aux = self.load_balance_loss(probs, top_i)
        return out.reshape(shape), aux


class BKLayer(nn.Module):
    """One ResNet-BK mixing layer: MoE(x) + bk_scale * Linear(2->d)(BK features)."""

    def __init__(self, config: BKConfig):
        super().__init__()
        self.v_max = config.v_max
        self.feature_clamp = config.feature_clamp
        self.bk_scale = config.bk_scale
        self.z = config.z
        self.impl = config.bk_impl
        self.v_proj = nn.Linear(config.d_model, 1)
        self.bk_out = nn.Linear(2, config.d_model)
        self.bk_out._residual_out = True  # see ResNetBKNet.reset_parameters
        self.moe = MoEFeedForward(config.d_model, config.num_experts, config.top_k, config.dropout)

    def potential(self, x: torch.Tensor) -> torch.Tensor:
        """Per-token scalar potential v, clamped to +-v_max: (B, N)."""
        return self.v_proj(x).squeeze(-1).clamp(-self.v_max, self.v_max)

    @property
    def feature_bound(self) -> float:
        """The bound that holds on every feature [Re G, Im G]: |G| <= 1/Im z for every impl (bk_core:
        Im(-1/G) >= Im z), and the clamp at feature_clamp. 1 at the default z = i, where the clamp
        (10) is no bound at all: an 8-bit grid on +-feature_clamp would leave G ~25 of its 255 levels."""
        return min(self.feature_clamp, 1.0 / self.z.imag)

    def scan_forward_flops(self, x: torch.Tensor) -> int:
        """FLOPs of the resolvent-diagonal scan on input x (..., N, d): elementwise complex arithmetic
        that the FLOP counter cannot see (formula: models/scan_flops.py)."""
        batch = math.prod(int(n) for n in x.shape[:-2])  # int(): shapes are tensors under jit.trace
        return bk_scan_forward_flops(batch, int(x.shape[-2]), self.impl)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        feats = bk_features(self.potential(x), self.z, self.feature_clamp, impl=self.impl)
        moe_out, aux = self.moe(x)
        return moe_out + self.bk_scale * self.bk_out(feats.to(x.dtype)), aux


class BKBlock(nn.Module):
    """Pre-norm residual block: h + BKLayer(LayerNorm(h))."""

    def __init__(self, config: BKConfig):
        super().__init__()
        self.norm = nn.LayerNorm(config.d_model)
        self.layer = BKLayer(config)

    def forward(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, aux = self.layer(self.norm(h))
        return h + out, aux


class ResNetBKNet(nn.Module):
    """ResNet-BK causal LM: ``forward(input_ids (B, N)) -> (logits (B, N, V), aux_loss)``.

    ``aux_loss`` is the sum over layers of the unweighted load-balancing losses; the
    caller multiplies it by ``config.load_balance_weight``.
    """

    def __init__(self, config: BKConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        # With "none" the scan's recurrence is itself order-aware (g_i depends on where
        # a token sits in the chain), so no length cap is needed.
        self.pos_emb = (
            nn.Embedding(config.max_seq_len, config.d_model)
            if config.position_embedding == "learned"
            else None
        )
        self.blocks = nn.ModuleList(BKBlock(config) for _ in range(config.n_layers))
        self.final_norm = nn.LayerNorm(config.d_model)
        # Untied head with bias. With the bias the reference defaults (vocab 30k, d 64,
        # 4 layers, 4 experts) give 4,146,116 parameters, matching the design's "4.15M".
        self.lm_head = nn.Linear(config.d_model, config.vocab_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # GPT-2-style small init: N(0, 0.02) weights, zero biases, LayerNorm (1, 0).
        # Residual output projections are scaled by 1/sqrt(2 * n_layers) so the residual
        # stream's variance does not grow with depth.
        resid_std = 0.02 / math.sqrt(2 * max(self.config.n_layers, 1))
        for module in self.modules():
            if isinstance(module, nn.Linear):
                std = resid_std if getattr(module, "_residual_out", False) else 0.02
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden, aux = self.hidden_states(input_ids)
        return self.lm_head(hidden), aux

    def hidden_states(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(hidden (B, N, d) after the final LayerNorm, i.e. the lm_head's input, aux_loss)``."""
        if input_ids.dim() != 2:
            raise ValueError(
                f"input_ids must be (batch, seq_len), got shape {tuple(input_ids.shape)}"
            )
        n = input_ids.shape[1]
        h = self.tok_emb(input_ids)
        if self.pos_emb is not None:
            if n > self.config.max_seq_len:
                raise ValueError(
                    f"sequence length {n} exceeds max_seq_len={self.config.max_seq_len} of the "
                    "learned position embeddings; use a shorter input, a larger max_seq_len, or "
                    "position_embedding='none' (the BK recurrence is order-aware without it)"
                )
            h = h + self.pos_emb(torch.arange(n, device=input_ids.device))
        aux = h.new_zeros((), dtype=torch.float32)
        for block in self.blocks:
            h, layer_aux = block(h)
            aux = aux + layer_aux
        return self.final_norm(h), aux

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Parameter count; ``exclude_embeddings`` drops the token and position tables
        (the untied lm_head is a real matmul per token and is kept)."""
        total = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            total -= self.tok_emb.weight.numel()
            if self.pos_emb is not None:
                total -= self.pos_emb.weight.numel()
        return total
