"""LanguageModule: what every model family shares (loss, evaluation sums, optimizer, schedule).

A subclass builds its network in `build_network(vocab_size)` and maps token ids to logits in
`network_forward`. The network is built in `configure_model`, after the DataModule is set up, so a
randomly initialised model takes its vocabulary size from the tokenizer the data actually uses.

What a family supports is declared here and overridden per family, so the other packages ask the
model instead of knowing it: `supports_kv_cache` (sparsity), `analytic_flops()` (profiling: work the
FLOP counter cannot see), `quantizable_layers()` and `load_quantized()` (quantization), in the types of
models/capabilities.py: models/ imports none of the packages above it (tests/test_package_boundaries.py).
How evaluation batches are scored is not the module's business: its steps delegate to `evaluation`, set
by callbacks for a stage (an object with `logits(module, input_ids, logits_to_keep)`, `scores(batch)` and
`score(module, batch)`: sparsity's StreamingEviction, evaluation/evaluator.py's Evaluation of a task's
requests), and use their own forward when it is None.

Fine-tuning (a DataModule with `finetune_num_labels`, batches with kind "classification") adds a
`task_head` on the last real token's final hidden state; see models/sequence_head.py.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass
from typing import Callable, Optional

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import is_in_torch_dispatch_mode
from jsonargparse.typing import ClosedUnitInterval, NonNegativeFloat, NonNegativeInt, PositiveFloat
from torch import nn

from lightning_bench.errors import ConfigError, DivergedError
from lightning_bench.models.keyed_sum import KeyedSum
from lightning_bench.models.capabilities import AnalyticFlops, QuantizableLayers, bf16_support
from lightning_bench.models.sequence_head import SequenceHead, last_token_pool
from lightning_bench.models.token_nll import IGNORE_INDEX, head_nll, logits_nll
from lightning_bench.options import Fraction

EVAL_STAGES = ("val", "test")
# The ranges of the model options are their annotations (jsonargparse.typing: PositiveInt, ...): the CLI
# refuses a value outside them while parsing, and --help shows them. [0, 1) is a dropout probability or an
# AdamW beta (1 drops everything / never forgets a gradient).
Betas = tuple[Fraction, Fraction]


@dataclass
class LMOutput:
    logits: torch.Tensor  # (batch, seq, vocab)
    aux_loss: Optional[torch.Tensor] = None  # e.g. a router's load-balancing loss, weighted by the module


class ClassDefault:
    """A class attribute that an instance may refine: `Cls.attr` is `default` (readable before any model
    is built, e.g. to plan an experiment grid), `instance.attr` is `refine(instance)` (e.g. from the
    checkpoint's config)."""

    def __init__(self, default, refine):
        self.default, self.refine = default, refine

    def __get__(self, instance, owner):
        return self.default if instance is None else self.refine(instance)


class LanguageModule(L.LightningModule):
    """Shared training/evaluation for causal LMs.

    Args:
        learning_rate: peak AdamW learning rate.
        weight_decay: applied to matrices only; norms, biases and embeddings are not decayed.
        betas: AdamW betas.
        warmup_steps: linear warmup, then cosine decay to `min_lr_ratio * learning_rate` at the
            last step Lightning will run (trainer.estimated_stepping_batches).
        min_lr_ratio: final learning rate as a fraction of the peak.
        aux_loss_weight: weight of the network's auxiliary loss (if it has one) in the training loss.
    """

    alias = "lm"  # the --model alias; subclasses override
    supports_kv_cache = False  # attention families set True: KV-cache eviction (sparsity/) needs a cache

    def __init__(self, learning_rate: PositiveFloat = 1e-3, weight_decay: NonNegativeFloat = 0.1,
                 betas: Betas = (0.9, 0.95), warmup_steps: NonNegativeInt = 100, min_lr_ratio: ClosedUnitInterval = 0.1,
                 aux_loss_weight: NonNegativeFloat = 0.0):
        super().__init__()
        # stored here: subclasses' save_hyperparameters() may omit it
        self.aux_loss_weight = plain_value(aux_loss_weight)
        self.net: Optional[nn.Module] = None
        self.task_head: Optional[SequenceHead] = None  # built in configure_model for fine-tuning runs
        # evaluation sums are kept in float64 (a split has ~1e5-1e6 tokens of ~1-10 nats each), per batch,
        # added in one order however many processes scored the batches (models/keyed_sum.py). NaN reaches
        # the sum: `_eval_epoch_end` turns a non-finite sum into a DivergedError
        self.eval_nll = nn.ModuleDict({s: KeyedSum() for s in EVAL_STAGES})
        self.eval_tokens = nn.ModuleDict({s: KeyedSum() for s in EVAL_STAGES})
        self._eval_batches = 0  # the keys of batches without window indices (this rank's count)
        self.last_eval: dict[str, dict] = {}
        # how evaluation batches are scored (module docstring); None = the network's own forward
        self.evaluation = None
        self.optimizer_8bit = False  # bitsandbytes' AdamW8bit instead of torch's (use_8bit_optimizer)
        self.adamw_8bit: Optional[Callable] = None  # that optimizer, as the caller passed it
        self._rng_to_restore: Optional[dict] = None  # a checkpoint's RNG states, set at the first resumed step
        self.compile_backend: Optional[str] = None  # torch.compile backend of the training step (use_compile)
        self._compiled_losses: Optional[Callable] = None

    def save_hyperparameters(self, *args, ignore=None, frame=None, logger: bool = True) -> None:
        """Lightning's, with the range-checked values the CLI passes (PositiveInt, ...: subclasses of int
        and float) stored as plain numbers: a checkpoint is read weights-only, which refuses other classes."""
        super().save_hyperparameters(*args, ignore=ignore, frame=frame or inspect.currentframe().f_back,
                                     logger=logger)
        for hparams in (self._hparams, self._hparams_initial):
            for key, value in hparams.items():
                hparams[key] = plain_value(value)

    # ---- what subclasses provide ----------------------------------------------------------
    def build_network(self, vocab_size: int) -> nn.Module:
        raise NotImplementedError

    def lm_forward(self, input_ids: torch.Tensor, logits_to_keep: Optional[torch.Tensor] = None) -> LMOutput:
        """Logits for `input_ids` (B, T); `logits_to_keep` (1-D positions) limits them to those positions."""
        return self.network_forward(input_ids, logits_to_keep)

    def network_forward(self, input_ids: torch.Tensor, logits_to_keep: Optional[torch.Tensor] = None) -> LMOutput:
        """The network's forward (see lm_forward). This default serves every family whose net is a
        transformers *ForCausalLM; their own `logits_to_keep` applies the output head (and any logit
        soft-capping) only where asked."""
        keep = 0 if logits_to_keep is None else logits_to_keep  # transformers: 0 = all positions
        return LMOutput(self.net(input_ids=input_ids, use_cache=False, logits_to_keep=keep).logits)

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Final (normed) hidden states (B, T, d): the output head's input. Default: a transformers
        *ForCausalLM, whose base model ends with the final norm."""
        return self.net.base_model(input_ids=input_ids, attention_mask=attention_mask,
                                   use_cache=False).last_hidden_state

    @property
    def hidden_size(self) -> int:
        return self.net.config.hidden_size  # transformers configs map it for every architecture

    def sequence_representation(self, batch: dict) -> torch.Tensor:
        """(B, d): the final hidden state of each row's last real token."""
        mask = batch["attention_mask"]
        return last_token_pool(self.hidden_states(batch["input_ids"], mask), mask)

    @property
    def max_seq_len(self) -> Optional[int]:
        """Longest window the model can take (None: no limit)."""
        return None

    @property
    def model_name(self) -> str:
        return self.alias

    def analytic_flops(self) -> list[AnalyticFlops]:
        """Modules of the network whose work the FLOP counter cannot see, with their formulas."""
        return []

    def quantizable_layers(self) -> QuantizableLayers:
        """Linear layers that must stay fp32 and activations to fake-quantize under --bits 8/4."""
        return QuantizableLayers()

    def load_quantized(self, bits: int, vocab_size: Optional[int] = None, loader: Optional[Callable] = None,
                       **options):
        """Load the network directly with `bits`-bit Linear layers where the family can (pretrained
        checkpoints); returns the quantization's ExportReport, or None: the network is then built in fp32
        and exported (QuantizationCallback). `loader` is quantization's `load_pretrained_lowbit`, passed by
        the caller (see use_8bit_optimizer for why)."""
        return None

    def use_8bit_optimizer(self, enabled: bool = True, optimizer: Optional[Callable] = None) -> None:
        """bitsandbytes' AdamW8bit (same parameter groups and schedule) instead of torch's AdamW.

        The caller passes it (`optimizer=lightning_bench.quantization.adamw8bit`), as it passes
        `load_quantized` its loader: a model never imports quantization/ (the layer above it), so whoever
        turns a quantization feature on hands the model the function. Plain arguments, no registry: what a
        model runs is visible at the call."""
        self.optimizer_8bit = bool(enabled)
        self.adamw_8bit = optimizer if enabled else None

    def use_compile(self, backend: Optional[str] = "inductor") -> None:
        """torch.compile the training step's forward + loss with `backend` (None: eager). The network itself
        is not wrapped, so state_dict keys, checkpoints, the FLOP count (measured eagerly) and evaluation are
        unchanged; only language-model training steps run the compiled function (a classification fine-tune's
        step stays eager). The FLOP-counted first step of a run, a resumed one's too, runs eagerly, so a
        resumed compiled fit continues closely but not bit for bit. On an H200, a 202M-parameter Transformer
        stepped 1.68x faster with inductor than eagerly (22.5% -> 37.9% MFU; docs/gpu.md)."""
        self.compile_backend = backend
        self._compiled_losses = None if backend is None else torch.compile(self._train_losses, backend=backend)

    # ---- setup ----------------------------------------------------------------------------
    def setup(self, stage: str) -> None:
        dm = getattr(self.trainer, "datamodule", None)
        limit = self.max_seq_len
        if dm is not None and limit is not None and dm.seq_len > limit:
            raise ConfigError(f"window --data.seq_len {dm.seq_len} exceeds the model's maximum context "
                              f"{limit}; lower --data.seq_len (downstream tasks: --data.max_length)")

    def configure_model(self) -> None:
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if self.net is None:
            if dm is None or getattr(dm, "tokenizer", None) is None:
                raise ConfigError("the model's vocabulary comes from the data; run it with an LMDataModule")
            self.build(dm.vocab_size)
        elif self.hparams.get("vocab_size") is not None and getattr(dm, "tokenizer", None) is not None:
            # a random-init family built from a checkpoint (or --model.vocab_size): at least one row per token of
            # the data's tokenizer (padding rows are fine); a word vocabulary, rebuilt from the data, exactly
            vocabulary_mismatch(dm.vocab_size, self.hparams.vocab_size,
                                exact=getattr(dm.tokenizer, "exact_vocabulary", False))
        # built before Lightning restores a checkpoint's state dict, so a fine-tuned head is restored too
        num_labels = getattr(dm, "finetune_num_labels", None)
        if num_labels is not None and self.task_head is None:
            self.task_head = SequenceHead(self.hidden_size, num_labels)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        # load_from_checkpoint has no DataModule to read finetune_num_labels from: the head's shape is in its weights
        weight = checkpoint["state_dict"].get("task_head.proj.weight")
        if weight is not None and self.task_head is None:
            self.task_head = SequenceHead(weight.shape[1], weight.shape[0])
        self._rng_to_restore = checkpoint.get("rng_states")

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # Lightning does not checkpoint RNG states: a resumed run would draw other dropout masks
        checkpoint["rng_states"] = {"torch": torch.get_rng_state(),
                                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []}

    def on_train_batch_start(self, batch, batch_idx):
        # restored at the first resumed step, not on load: between load and this step Lightning draws from
        # the global RNG (sanity validation builds dataloader iterators), which the uninterrupted run did not
        if self._rng_to_restore is not None:
            torch.set_rng_state(self._rng_to_restore["torch"])
            if self._rng_to_restore["cuda"]:
                torch.cuda.set_rng_state_all(self._rng_to_restore["cuda"])
            self._rng_to_restore = None

    def build(self, vocab_size: int) -> None:
        """Build the network; a random-init family saves its vocabulary in hparams, so checkpoints
        (load_from_checkpoint) rebuild the same shapes."""
        if "vocab_size" in self.hparams:
            self.hparams.vocab_size = vocab_size
        self.net = self.build_network(vocab_size)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm_forward(input_ids).logits

    # ---- training -------------------------------------------------------------------------
    def _logs_this_step(self) -> bool:
        """Whether Lightning writes the loggers after this training step. It drops other steps' values,
        and each `self.log` costs ~1 ms (benchmarks/train_overhead.py), so values shown only in the logs
        are logged only then; the progress bar's loss is logged every step."""
        connector = getattr(self._trainer, "_logger_connector", None)
        return connector is None or bool(getattr(connector, "should_update_logs", True))

    def training_step(self, batch, batch_idx):
        to_loggers = self._logs_this_step()
        if to_loggers:
            self.log("train/lr", self.optimizers().param_groups[0]["lr"])
        if batch.get("kind") == "classification":
            return self._sequence_step(batch, "train")
        # the FLOP-counted first step runs under a dispatch mode, which dynamo refuses (and it would then skip
        # the function for good): that step runs eagerly, the others compiled
        compiled = self._compiled_losses if not is_in_torch_dispatch_mode() else None
        ce, aux_loss = (compiled or self._train_losses)(batch["input_ids"], batch["labels"])
        reported = self._global_batch(ce.detach(), batch["labels"])
        self.log("train/loss", reported["ce"], prog_bar=True)
        if to_loggers:
            self.log("train/ppl", torch.exp(reported["ce"]))
        # under DDP (which averages the ranks' gradients) each rank's loss is weighted by its share of the
        # global batch's tokens: the gradient is the global batch's mean, as in one process
        loss = ce * reported["weight"] if "weight" in reported else ce
        if aux_loss is not None:
            if to_loggers:
                self.log("train/aux_loss", aux_loss)
            loss = loss + self.aux_loss_weight * aux_loss
        self._check_finite(loss)
        return {"loss": loss, "ce": reported["ce"], "tokens": reported["tokens"]}

    def _global_batch(self, ce: torch.Tensor, labels: torch.Tensor) -> dict:
        """The step's cross-entropy and scored tokens over the global batch: under DDP each rank's loss is
        the mean over its own rows, and the curve a record keeps is the mean over every rank's tokens
        (token-weighted, so the figure is one process's at the same global batch)."""
        tokens = (labels != IGNORE_INDEX).sum()
        if self._trainer is None or self.trainer.world_size <= 1:
            return {"ce": ce, "tokens": tokens}
        world = self.trainer.world_size
        sums = self.all_gather(torch.stack([ce.double() * tokens, tokens.double()])).reshape(-1, 2).sum(0)
        return {"ce": (sums[0] / sums[1]).to(ce.dtype), "tokens": sums[1].long(),
                "weight": (tokens.double() * world / sums[1]).to(ce.dtype)}

    def _train_losses(self, input_ids: torch.Tensor, labels: torch.Tensor):
        """(cross-entropy, the network's auxiliary loss or None) of a training batch: what --compile compiles
        (logging and the finiteness check stay outside: they would break the graph)."""
        out = self.lm_forward(input_ids)
        ce = F.cross_entropy(out.logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX)
        return ce, out.aux_loss

    def _check_finite(self, loss: torch.Tensor) -> None:
        """Stop at the first non-finite training loss (one host sync per step; the recorder reads the loss
        every step anyway): its optimizer step would make every weight NaN."""
        if not torch.isfinite(loss):
            step = self.global_step + 1  # counted from 1, like the record's global_steps
            value = float(loss.detach())
            raise DivergedError(f"the training loss is {value} at step {step}: the run diverged; "
                                "lower --model.learning_rate or raise --model.warmup_steps", "train/loss", value, step)

    # ---- evaluation: sum NLL over scored tokens, turn into every unit at the end ---------------
    def output_head(self) -> Optional[nn.Module]:
        """The module mapping `hidden_states` to logits (None: unknown). Default: a transformers model's
        output embeddings."""
        get = getattr(self.net, "get_output_embeddings", None)
        return get() if callable(get) else None

    def _check_head_fusion(self) -> None:
        """Decide at the start of each evaluation whether it may fuse the output head with the loss
        (models/token_nll.py): only when the head is a plain Linear AND the network's logits on a
        short probe equal head(hidden_states) (a family that scales or soft-caps its logits, or adds
        anything after the head, fails the probe and keeps the logits path)."""
        head = self.output_head() if self.net is not None else None
        fusable = type(head) is nn.Linear
        if fusable:
            device = head.weight.device
            probe = (torch.arange(1, 9, device=device) % head.out_features)[None]
            with torch.no_grad():
                reference = self.network_forward(probe).logits.float()
                fused = F.linear(self.hidden_states(probe), head.weight, head.bias).float()
            tol = 1e-4 if head.weight.dtype == torch.float32 else 2e-2
            # equal_nan: a diverged network is still scored (its NaN sum raises DivergedError at epoch end)
            scale = float(reference.nan_to_num(0.0, 0.0, 0.0).abs().max())
            fusable = reference.shape == fused.shape and torch.allclose(reference, fused, rtol=tol, atol=tol * scale,
                                                                        equal_nan=True)
        # a tuple, not an attribute: an nn.Module attribute would be registered (a state_dict key)
        self._fused_head = (head,) if fusable else ()
        some_weight = head.weight if head is not None else next(iter(self.parameters()), None)
        weights = str(some_weight.dtype if some_weight is not None else None).replace("torch.", "")
        self.eval_path = {"nll": "output head fused with the loss (vocabulary slices)" if fusable
                          else "logits, then logsumexp - target logit", "head_weights": weights}
        if weights == "bfloat16":  # how fast bf16 is depends on the hardware: say what this one has
            self.eval_path["bf16"] = bf16_support(head is not None and head.weight.is_cuda)

    def _prepare_eval(self) -> None:
        # a bf16-true run casts the whole module, the sums' states too (1,508 tokens would count as
        # 1,504): they go back to float64 before any batch is added
        for metric in (*self.eval_nll.values(), *self.eval_tokens.values()):
            metric.set_dtype(torch.float64)
        self._eval_batches = 0
        self._check_head_fusion()

    def on_validation_epoch_start(self) -> None:
        self._prepare_eval()

    def on_test_epoch_start(self) -> None:
        self._prepare_eval()

    def _eval_step(self, batch, stage: str):
        labels = batch["labels"]
        scored = labels != IGNORE_INDEX
        fused = getattr(self, "_fused_head", ()) if self.evaluation is None else ()
        if fused:
            head = fused[0]
            # only scored positions go through the head (sliding windows score only their tail)
            hidden = self.hidden_states(batch["input_ids"])[scored]
            nll = head_nll(hidden, head.weight, head.bias, labels[scored])
        else:
            # the output head runs only at positions some window in the batch scores
            keep = scored.any(0).nonzero().squeeze(1)
            if len(keep) == labels.shape[1]:
                keep = None
            logits = self.evaluation.logits(self, batch["input_ids"], keep) if self.evaluation is not None \
                else self.lm_forward(batch["input_ids"], logits_to_keep=keep).logits
            nll = logits_nll(logits, labels if keep is None else labels[:, keep])
        key = self._batch_key(batch)
        self.eval_nll[stage].update(key, nll.sum(dtype=torch.float64))
        self.eval_tokens[stage].update(key, scored.sum().double())

    def _batch_key(self, batch) -> int:
        """The key the evaluation sums order this batch by: its first window's index in the split (the same
        under any number of processes); a loader without indices gets this rank's count, interleaved
        over the ranks (unique, but then N processes add in another order than one)."""
        if "window_index" in batch:
            return int(batch["window_index"][0])
        trainer = self._trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        self._eval_batches += 1
        return (self._eval_batches - 1) * world + rank

    def validation_step(self, batch, batch_idx):
        if batch.get("kind") == "classification":
            return self._sequence_step(batch, "val")
        self._eval_step(batch, "val")

    def test_step(self, batch, batch_idx):
        if batch.get("kind") == "classification":
            return self._sequence_step(batch, "test")
        if self.evaluation is not None and self.evaluation.scores(batch):  # e.g. a task's prompted requests
            return self.evaluation.score(self, batch)
        self._eval_step(batch, "test")

    # ---- fine-tuning: the task head on the sequence representation --------------------------
    def _sequence_step(self, batch, stage: str) -> dict:
        """Head loss and metrics; evaluation returns each row's prediction for callbacks to collect."""
        if self.task_head is None:
            raise ConfigError("a classification batch reached a model without a task head: the DataModule "
                              "must set finetune_num_labels")
        head, targets = self.task_head, batch["targets"]
        logits = head(self.sequence_representation(batch))
        loss = head.loss(logits, targets)
        predictions = head.predictions(logits.detach())
        # epoch metrics are means weighted by the explicit batch size (exact with a short last batch),
        # over every rank's rows in evaluation
        log = {"batch_size": len(targets), "sync_dist": stage != "train"}
        self.log(f"{stage}/loss", loss, prog_bar=stage == "train", **log)
        if not head.regression:
            self.log(f"{stage}/accuracy", (predictions == targets).float().mean(), **log)
        elif stage != "train":
            self.log(f"{stage}/mse", loss, **log)
        if stage == "train":
            self._check_finite(loss)
            return {"loss": loss}
        return {"row_index": batch["row_index"].cpu(), "predictions": predictions.cpu()}

    def predict_step(self, batch, batch_idx):
        """Per-token NLL of each window (context positions are NaN)."""
        logits = self.evaluation.logits(self, batch["input_ids"]) if self.evaluation is not None \
            else self.lm_forward(batch["input_ids"]).logits
        nll = F.cross_entropy(logits.transpose(1, 2).float(), batch["labels"], ignore_index=IGNORE_INDEX,
                              reduction="none")
        return nll.masked_fill(batch["labels"] == IGNORE_INDEX, float("nan"))

    def _eval_epoch_end(self, stage: str):
        self._eval_batches = 0
        scored = self.eval_tokens[stage].update_called
        if self.trainer.world_size > 1:  # every rank syncs the sums, also one that had no batch
            scored = self.trainer.strategy.reduce_boolean_decision(scored, all=False)
        if not scored:  # no LM batch (e.g. fine-tuning): nothing to report
            return
        nll, tokens = float(self.eval_nll[stage].compute()), float(self.eval_tokens[stage].compute())
        self.eval_nll[stage].reset(), self.eval_tokens[stage].reset()
        if not math.isfinite(nll):
            raise DivergedError(f"the {stage} loss is {nll} after {self.global_step} training steps: the "
                                "model's outputs are not finite",
                                f"{stage}/loss", nll, self.global_step)
        if self.trainer.sanity_checking or tokens == 0:
            return
        metrics = perplexity_metrics(nll, int(tokens), self._eval_units(stage))
        self.last_eval[stage] = metrics
        self.log_dict({f"{stage}/{k}": float(v) for k, v in metrics.items() if v is not None}, sync_dist=False)

    def _eval_units(self, stage: str) -> Optional[dict]:
        dm = getattr(self.trainer, "datamodule", None)
        if dm is None or not hasattr(dm, "eval_units"):
            return None
        return dm.eval_units("validation" if stage == "val" else "test")

    def on_validation_epoch_end(self):
        self._eval_epoch_end("val")

    def on_test_epoch_end(self):
        self._eval_epoch_end("test")

    # ---- optimisation ---------------------------------------------------------------------
    def configure_optimizers(self):
        hp = self.hparams
        decay, no_decay = decay_groups(self)
        if self.optimizer_8bit:  # --optimizer_8bit (use_8bit_optimizer)
            adamw = self.adamw_8bit
            if adamw is None:
                raise ConfigError("use_8bit_optimizer was called without the optimizer: pass "
                                  "optimizer=lightning_bench.quantization.adamw8bit")
        else:
            adamw = torch.optim.AdamW
        optimizer = adamw([{"params": decay, "weight_decay": hp.weight_decay},
                           {"params": no_decay, "weight_decay": 0.0}], lr=hp.learning_rate, betas=tuple(hp.betas))
        total = max(1, int(self.trainer.estimated_stepping_batches))
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: warmup_cosine(step, hp.warmup_steps, total, hp.min_lr_ratio))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    # ---- description ----------------------------------------------------------------------
    def parameter_counts(self) -> dict:
        if self.net is None:
            return {}
        embedding = sum(m.weight.numel() for m in self.net.modules() if isinstance(m, nn.Embedding))
        # logical counts: a 4-bit Linear packs two weights per stored byte (p.numel() would halve it)
        packed = {id(m.weight): m.in_features * m.out_features for m in self.net.modules()
                  if isinstance(m, nn.Linear)}
        total = sum(packed.get(id(p), p.numel()) for p in self.net.parameters())
        return {"total": total, "embedding": embedding, "non_embedding": total - embedding}


def vocabulary_mismatch(data_tokens: int, model_tokens: int, exact: bool = False) -> None:
    """Refuse a data tokenizer the model's embedding does not fit: more tokens than it has rows, or (exact: a
    model built for one tokenizer, e.g. a word vocabulary) any other number."""
    if data_tokens > model_tokens or (exact and data_tokens != model_tokens):
        only = "only " if data_tokens > model_tokens else ""
        raise ConfigError(f"the data's tokenizer has {data_tokens} tokens but the model {only}{model_tokens}; "
                          "use --data.tokenizer auto" + (" (the tokenizer it was trained with; a word vocabulary is "
                                                         "rebuilt from the --data it was trained on)" if exact else ""))


def plain_value(value):
    """`value` with jsonargparse's restricted numbers (and strings) as the builtin type they extend."""
    if isinstance(value, (list, tuple)):
        return type(value)(plain_value(v) for v in value)
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base(value)
    return value


def decay_groups(module: nn.Module) -> tuple[list, list]:
    """(parameters with weight decay, without): matrices decay; norms, biases and embeddings do not."""
    embeddings = {id(m.weight) for m in module.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    for p in module.parameters():
        if p.requires_grad:
            # `_no_weight_decay` is mamba-ssm's flag (e.g. the SSM's A_log and D): honoured for every family
            exempt = p.ndim < 2 or id(p) in embeddings or getattr(p, "_no_weight_decay", False)
            (no_decay if exempt else decay).append(p)
    return decay, no_decay


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float) -> float:
    """LR multiplier: linear 0 -> 1 over `warmup` steps, then cosine 1 -> min_ratio at `total`."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def perplexity_metrics(nll_sum: float, n_tokens: int, units: Optional[dict]) -> dict:
    """Every reported unit from one summed NLL (nats). Word/byte units only when every token of the
    evaluated text was scored (otherwise their denominators would describe a different text)."""
    ce = nll_sum / n_tokens
    metrics = {"loss": ce, "ppl": math.exp(ce), "bits_per_token": ce / math.log(2), "scored_tokens": n_tokens,
               "word_ppl": None, "byte_ppl": None, "bits_per_byte": None}
    if units and units.get("tokens") == n_tokens:
        metrics.update(word_ppl=math.exp(nll_sum / units["words"]), byte_ppl=math.exp(nll_sum / units["bytes"]),
                       bits_per_byte=nll_sum / units["bytes"] / math.log(2))
    return metrics
