"""Mamba: a selective state-space LM, built from transformers' MambaForCausalLM with random init.

Kernels: on CPU (and on CUDA without the `cuda` extra) transformers runs its pure-PyTorch path
(sequential selective scan, conv1d; scan_impl="parallel" swaps in a parallel scan); mamba-ssm
does not even import without CUDA. With the `cuda` extra installed (mamba-ssm, causal-conv1d),
transformers picks up their fused kernels automatically on GPU, with nothing to configure here.
"""

from __future__ import annotations

from typing import Optional

import torch
from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from torch import nn

from lightning_bench.errors import ConfigError
from lightning_bench.models.base import Betas, LanguageModule
from lightning_bench.models.capabilities import AnalyticFlops, QuantizableLayers
from lightning_bench.models.scan_flops import mamba_mixer_forward_flops


def _mixers(net: nn.Module):
    # transformers' MambaMixer exactly (checkpoints loaded by HFLanguageModel included); its relatives
    # (e.g. FalconMambaMixer) compute something else
    return [(name, m) for name, m in net.named_modules()
            if type(m).__name__ == "MambaMixer" and hasattr(m, "ssm_state_size")]


def _mixer_flops(mixer: nn.Module, args: tuple, kwargs: dict) -> int:
    h = args[0] if args and isinstance(args[0], torch.Tensor) else kwargs.get("hidden_states")
    batch, length, hidden = (int(n) for n in h.shape)  # int(): shapes are tensors under jit.trace
    return mamba_mixer_forward_flops(batch, length, hidden, mixer.intermediate_size, mixer.ssm_state_size,
                                     mixer.time_step_rank, mixer.conv_kernel_size)


def mamba_analytic_flops(net: nn.Module) -> list[AnalyticFlops]:
    """The selective scan is elementwise work the FLOP counter cannot see; with mamba-ssm's fused kernels
    it sees none of the mixer: each mixer's whole cost, minus what the counter saw (models/scan_flops.py)."""
    return [AnalyticFlops(m, "mamba_selective_scan", _mixer_flops, whole_module=True) for _, m in _mixers(net)]


def mamba_quantizable_layers(net: nn.Module) -> QuantizableLayers:
    """dt_proj stays fp32: the scan (models/selective_scan.py, mamba-ssm's kernels) reads its weight
    directly (`dt_proj.weight @ time_step`), which a packed low-bit weight cannot serve."""
    keep = {f"{name}.dt_proj" if name else "dt_proj": "weight read directly by its parent module (not through forward)"
            for name, m in _mixers(net) if isinstance(getattr(m, "dt_proj", None), nn.Linear)}
    return QuantizableLayers(keep_fp32=keep)


class MambaLM(LanguageModule):
    """Mamba (v1) decoder LM.

    Args:
        d_model: hidden size.
        n_layer: Mamba blocks.
        d_state: SSM state size per channel (N).
        d_conv: causal depthwise convolution width.
        expand: inner size = expand * d_model.
        tie_embeddings: share the input embedding and the output projection.
        vocab_size: default None = the data's tokenizer's vocabulary.
        scan_impl: "parallel" (default) runs transformers' pure-PyTorch mixer path with a parallel
            selective scan (models/selective_scan.py); "transformers" leaves transformers' own path.

    No positional limit: the recurrence takes any length (max_seq_len is None).
    """

    alias = "mamba"

    def __init__(self, d_model: PositiveInt = 128, n_layer: PositiveInt = 2, d_state: PositiveInt = 16,
                 d_conv: PositiveInt = 4, expand: PositiveInt = 2, tie_embeddings: bool = True,
                 vocab_size: Optional[PositiveInt] = None, scan_impl: str = "parallel",
                 learning_rate: PositiveFloat = 1e-3, weight_decay: NonNegativeFloat = 0.1, betas: Betas = (0.9, 0.95),
                 warmup_steps: NonNegativeInt = 100, min_lr_ratio: ClosedUnitInterval = 0.1):
        super().__init__(learning_rate, weight_decay, betas, warmup_steps, min_lr_ratio)
        if scan_impl not in ("parallel", "transformers"):
            raise ConfigError(f"--model.scan_impl must be 'parallel' or 'transformers', got {scan_impl!r}")
        self.save_hyperparameters()
        if vocab_size is not None:
            self.build(vocab_size)

    def build_network(self, vocab_size: int) -> nn.Module:
        from transformers import MambaConfig, MambaForCausalLM

        hp = self.hparams
        config = MambaConfig(vocab_size=vocab_size, hidden_size=hp.d_model, num_hidden_layers=hp.n_layer,
                             state_size=hp.d_state, conv_kernel=hp.d_conv, expand=hp.expand,
                             tie_word_embeddings=hp.tie_embeddings, bos_token_id=None, eos_token_id=None,
                             pad_token_id=None, use_cache=False)
        net = MambaForCausalLM(config)
        # As in mamba-ssm: the SSM's A (log-parametrised, S4D-real init) and skip D are not decayed
        # (decaying A_log pulls every state's decay rate towards exp(0) = 1).
        for name, p in net.named_parameters():
            if name.endswith(("A_log", ".D")):
                p._no_weight_decay = True
        # Without mamba-ssm (always on CPU) transformers scans with a Python loop over positions whose
        # backward backpropagates every per-step index op into a full-size zero gradient (20-80 s per
        # training step of configs/compare/mamba_small.yaml on CPU). "parallel" swaps that loop for an
        # exact parallel scan, per mixer instance (same weights, config and checkpoints). Wherever
        # mamba-ssm's CUDA kernels (or hub kernels) are installed and the model is on the GPU, and for
        # generation with a cache, the mixers still run transformers' own forward unchanged.
        if hp.get("scan_impl", "parallel") == "parallel":
            from lightning_bench.models.selective_scan import install_parallel_scan

            install_parallel_scan(net)
        return net

    def analytic_flops(self) -> list[AnalyticFlops]:
        return mamba_analytic_flops(self.net) if self.net is not None else []

    def quantizable_layers(self) -> QuantizableLayers:
        return mamba_quantizable_layers(self.net) if self.net is not None else QuantizableLayers()
