"""ResNet-BK: the O(N) LM that mixes tokens only through a causal resolvent-diagonal scan.

The network itself (BK core, MoE layer, blocks) lives in `resnet_bk_net` / `bk_core` as plain
nn.Modules; this module wraps it in the shared LanguageModule recipe. The router's load-balancing
loss is returned unweighted by the network and weighted here by `load_balance_weight` (the base
class's `aux_loss_weight`).
"""

from __future__ import annotations

from typing import Optional

from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from torch import nn

from lightning_bench.errors import ConfigError
from lightning_bench.models.base import Betas, Fraction, LanguageModule, LMOutput
from lightning_bench.models.capabilities import ActivationRange, AnalyticFlops, QuantizableLayers
from lightning_bench.models.resnet_bk_net import BKConfig, BKLayer, ResNetBKNet


class ResNetBKLM(LanguageModule):
    """ResNet-BK causal LM (defaults = the reference model: 4.15M parameters at vocab 30k).

    Args:
        d_model: hidden size.
        n_layers: BK blocks (pre-norm residual: h + BKLayer(LayerNorm(h))).
        max_seq_len: size of the learned position table (the longest window with
            position_embedding="learned"; no limit with "none").
        num_experts: MoE experts per layer.
        top_k: experts each token is routed to.
        dropout: dropout inside the experts.
        v_max: the per-token potential is clamped to +-v_max.
        feature_clamp: the resolvent features [Re G, Im G] are clamped to +-feature_clamp (a no-op
            when 1/Im z is smaller: |G| <= 1/Im z; 8-bit QAT quantizes G on +-min of the two).
        bk_scale: weight of the BK branch next to the MoE branch.
        z_imag: Im z of the spectral shift z (must be > 0; |G| <= 1/Im z).
        position_embedding: "learned" (token + learned positions, the reference) or "none"
            (the causal recurrence is itself order-aware, so any length works).
        scan_impl: "scan" (parallel prefix product, O(log N) depth) or "sequential" (reference loop).
        vocab_size: default None = the data's tokenizer's vocabulary.
        load_balance_weight: weight of the router's load-balancing loss in the training loss.
    """

    alias = "bk"

    def __init__(self, d_model: PositiveInt = 64, n_layers: PositiveInt = 4, max_seq_len: PositiveInt = 128,
                 num_experts: PositiveInt = 4, top_k: PositiveInt = 1, dropout: Fraction = 0.1,
                 v_max: PositiveFloat = 3.0, feature_clamp: PositiveFloat = 10.0, bk_scale: NonNegativeFloat = 1.0,
                 z_imag: PositiveFloat = 1.0, position_embedding: str = "learned", scan_impl: str = "scan",
                 vocab_size: Optional[PositiveInt] = None, learning_rate: PositiveFloat = 1e-3,
                 weight_decay: NonNegativeFloat = 0.1, betas: Betas = (0.9, 0.95), warmup_steps: NonNegativeInt = 100,
                 min_lr_ratio: ClosedUnitInterval = 0.1, load_balance_weight: NonNegativeFloat = 0.01):
        super().__init__(learning_rate, weight_decay, betas, warmup_steps, min_lr_ratio,
                         aux_loss_weight=load_balance_weight)
        self.save_hyperparameters()
        # validate the sizes now, before a Trainer and the data are set up (the vocabulary may come later)
        self._config(vocab_size if vocab_size is not None else 1)
        if vocab_size is not None:
            self.build(vocab_size)

    def _config(self, vocab_size: int) -> BKConfig:
        hp = self.hparams
        try:
            return BKConfig(vocab_size=vocab_size, d_model=hp.d_model, n_layers=hp.n_layers,
                            max_seq_len=hp.max_seq_len, num_experts=hp.num_experts, top_k=hp.top_k,
                            dropout=hp.dropout, v_max=hp.v_max, feature_clamp=hp.feature_clamp,
                            bk_scale=hp.bk_scale, z_imag=hp.z_imag, position_embedding=hp.position_embedding,
                            scan_impl=hp.scan_impl, load_balance_weight=hp.load_balance_weight)
        except ValueError as err:
            raise ConfigError(str(err)) from err

    def build_network(self, vocab_size: int) -> nn.Module:
        config = self._config(vocab_size)
        return ResNetBKNet(config)

    @property
    def max_seq_len(self) -> Optional[int]:
        return self.hparams.max_seq_len if self.hparams.position_embedding == "learned" else None

    def network_forward(self, input_ids, logits_to_keep=None) -> LMOutput:
        logits, aux_loss = self.net(input_ids)
        return LMOutput(logits if logits_to_keep is None else logits[:, logits_to_keep], aux_loss)

    def hidden_states(self, input_ids, attention_mask=None):
        # the net is causal, so right padding never reaches a real token: it needs no mask. The router's
        # aux loss is dropped: fine-tuning trains on the task loss alone, as for every family
        return self.net.hidden_states(input_ids)[0]

    def output_head(self):
        return self.net.lm_head

    @property
    def hidden_size(self) -> int:
        return self.net.config.d_model

    def _bk_layers(self) -> list[tuple[str, BKLayer]]:
        return [(n, m) for n, m in self.net.named_modules() if isinstance(m, BKLayer)] if self.net is not None else []

    def analytic_flops(self) -> list[AnalyticFlops]:
        return [AnalyticFlops(layer, "bk_scan", _scan_flops) for _, layer in self._bk_layers()]

    def quantizable_layers(self) -> QuantizableLayers:
        # the two bounded activations of every layer, on the range each provably stays in: the potential v
        # (v_proj's output, clamped to +-v_max) and the resolvent features G (bk_out's input,
        # +-min(feature_clamp, 1/Im z); the reference used +-feature_clamp, a tenth of the grid at z = i)
        ranges = []
        for name, layer in self._bk_layers():
            ranges += [ActivationRange(f"{name}.v_proj", "output", float(layer.v_max)),
                       ActivationRange(f"{name}.bk_out", "input", float(layer.feature_bound))]
        return QuantizableLayers(activations=ranges)


def _scan_flops(layer: BKLayer, args: tuple, kwargs: dict) -> int:
    return layer.scan_forward_flops(args[0] if args else kwargs["x"])
