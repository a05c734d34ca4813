"""ResultsRecorder: the callback that writes one JSON record per fit / validate / test run.

fit      -> {results_dir}/{model}_{dataset}_seq{seq_len}_bits{bits}_{run_id}.json
validate -> ..._validate_{run_id}.json,  test -> ..._test_{run_id}.json
The name without the run id is a link to the latest run's record (results/naming.py).

Field meanings (docs/results.md has the full list):
  final_loss / final_perplexity: validation cross-entropy (nats/token) and perplexity after the last
      validation of the fit; best_perplexity: the lowest validation perplexity seen.
  epoch_losses: mean training cross-entropy per epoch; epoch_perplexities: validation perplexity
      at each validation run (once per epoch unless val_check_interval says otherwise).
  forward/backward/total_flops: null until the profiling callbacks measure them.
  status: "completed", or "diverged" (a DivergedError stopped the run: `divergence` says where and the
      last finite figures; final_loss / final_perplexity are then null, never a perplexity of 1).
  meta.resumed_from: the checkpoint (and its step) a fit resumed from; the running figures (losses,
      curve, tokens, time) are part of the checkpoint, so a resumed fit reports the whole run.

Other callbacks add their own fields: every callback of the run that has a method
`record_fields(trainer, pl_module) -> dict` contributes it (ProfilingCallback: the cost fields,
QuantizationCallback: model_size_mb / model_size / quantization, SparsityCallback: `sparsity`).
`record_keys` (optional) names the keys a callback contributes, so a caller wanting one field asks only it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import lightning as L
import torch
from lightning.pytorch.callbacks import Checkpoint

from lightning_bench.errors import DivergedError
from lightning_bench.results.io import read_json, write_json_atomic
from lightning_bench.results.meta import processes, run_meta
from lightning_bench.results.naming import RUN_ID, new_run_id, point_latest, run_path


def run_name(model, datamodule, bits: int) -> str:
    """`{model}_{dataset}_seq{seq_len}_bits{bits}`: the record's file stem, and the log/checkpoint folder name."""
    dataset = getattr(datamodule, "dataset_name", "unknown")
    return f"{getattr(model, 'model_name', type(model).__name__)}_{dataset}_seq{getattr(datamodule, 'seq_len', None)}_bits{bits}"


def headline(path: str | Path) -> str:
    """One line of a written record's figures, for the end of the run's screen."""
    record = read_json(path)
    stage, status = record.get("stage"), record.get("status")
    if status != "completed":
        return f"{stage}: {status} ({(record.get('divergence') or {}).get('quantity')}); record {path}"
    if stage == "fit":
        ppl, best = record.get("final_perplexity"), record.get("best_perplexity")
        figure = (f"final validation perplexity {ppl:.2f} (best {best:.2f})" if ppl is not None
                  else "no validation (no validation split or --trainer.limit_val_batches 0)")
        return f"fit: {figure} after {record.get('global_steps')} steps; record {path}"
    metrics = record.get("metrics") or {}
    protocol = (record.get("meta") or {}).get("evaluation_protocol") or {}
    window = f"window {protocol.get('window')} tokens, " + (f"stride {protocol['stride']}" if "stride" in protocol
                                                             else f"rolling context {protocol.get('context')}")
    return (f"{stage}: perplexity {metrics.get('ppl', float('nan')):.3f} over {metrics.get('scored_tokens')} tokens "
            f"({protocol.get('name')}, {window}, split {protocol.get('split')}); record {path}")


# cost fields every record carries (null where not measured); see lightning_bench/profiling
PERF_FIELDS = ("forward_flops", "backward_flops", "total_flops", "flops_per_token", "flop_counter",
               "tokens_per_sec", "samples_per_sec", "mfu", "peak_memory_mb", "peak_memory_kind",
               "peak_memory_reserved_mb", "per_stage")
SIZE_FIELDS = ("model_size_mb", "model_size", "quantization")


def callback_fields(trainer, pl_module, key: Optional[str] = None) -> dict:
    """The fields the run's callbacks contribute (`record_fields`); with `key`, only from callbacks that
    declare it in `record_keys` (or declare nothing)."""
    fields: dict = {}
    for callback in trainer.callbacks:
        contribute = getattr(callback, "record_fields", None)
        if not callable(contribute) or (key is not None and key not in getattr(callback, "record_keys", (key,))):
            continue
        fields.update(contribute(trainer, pl_module))
    return fields


def log_files(trainer) -> dict:
    """Where the run's logger wrote: {"csv": metrics.csv} for the CSV logger, {"wandb": run dir} for W&B
    (reports draw the loss curves from the CSV)."""
    files = {}
    for logger in getattr(trainer, "loggers", []):
        kind = type(logger).__name__
        if kind == "CSVLogger" and getattr(logger, "log_dir", None):
            files["csv"] = str((Path(logger.log_dir) / "metrics.csv").resolve())
        elif kind == "WandbLogger" and getattr(logger, "save_dir", None):
            files["wandb"] = str(Path(logger.save_dir).resolve())
    return files


def model_size(trainer, pl_module, contributed: Optional[dict] = None) -> dict:
    """model_size_mb measured from the stored tensors, unless a callback measures it (with --bits 8/4:
    the low-bit model's size, its breakdown and what was done)."""
    from lightning_bench.quantization.export import size_breakdown

    if pl_module.net is None:
        return {"model_size_mb": None}
    if contributed is None:
        contributed = callback_fields(trainer, pl_module, "model_size_mb")
    size = {k: contributed[k] for k in SIZE_FIELDS if k in contributed}
    return size if "model_size_mb" in size else {"model_size_mb": size_breakdown(pl_module.net)["total_mb"]}


def sparsity_summary(trainer, pl_module=None) -> dict | None:
    return callback_fields(trainer, pl_module, "sparsity").get("sparsity")


def cost_fields(trainer, contributed: dict) -> dict:
    """PERF_FIELDS from the contributed fields (null where not measured); the peak memory at least."""
    from lightning_bench.profiling.monitors import peak_memory

    if not any(k in contributed for k in PERF_FIELDS):
        contributed = peak_memory(trainer.strategy.root_device)
    return {k: contributed.get(k) for k in PERF_FIELDS}


class ResultsRecorder(L.Callback):
    def __init__(self, results_dir: str = "benchmark_results", bits: int = 32, config: Optional[dict] = None,
                 seed: Optional[int] = None, precision_note: Optional[str] = None, run_id: Optional[str] = None):
        self.results_dir, self.bits, self.config = Path(results_dir), bits, config or {}
        self.seed, self.precision_note = seed, precision_note
        self.run_id = run_id or new_run_id()
        self.written: dict[str, Path] = {}
        self._reset()

    def _reset(self):
        self.epoch_losses, self.val_curve = [], []
        self._loss_sum, self._loss_n, self._loss_epoch = 0.0, 0, 0
        self._last_loss = None  # (step, training CE) of the last finite step: a diverged record's last figure
        self._t0 = None
        self._time_before = 0.0  # training seconds before the checkpoint this fit resumed from
        self.training_time = None
        self._trained_tokens = 0
        self.pending_fit = None
        self.resumed_from = None

    # ---- resume: the running figures travel in the checkpoint ---------------------------------
    def state_dict(self) -> dict:
        return {"epoch_losses": list(self.epoch_losses), "val_curve": list(self.val_curve),
                "loss_sum": self._loss_sum, "loss_n": self._loss_n, "loss_epoch": self._loss_epoch,
                "last_loss": self._last_loss,
                "trained_tokens": self._trained_tokens, "training_time": self._elapsed()}

    def load_state_dict(self, state: dict) -> None:
        self.epoch_losses, self.val_curve = list(state["epoch_losses"]), list(state["val_curve"])
        self._loss_sum, self._loss_n, self._last_loss = state["loss_sum"], state["loss_n"], state["last_loss"]
        self._loss_epoch = state["loss_epoch"]
        self._trained_tokens, self._time_before = state["trained_tokens"], state["training_time"]

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        if trainer.state.fn == "fit":
            folder = Path(str(trainer.ckpt_path)).parent.name  # checkpoints/{name}_seed{seed}/{run_id}/
            self.resumed_from = {"checkpoint": str(trainer.ckpt_path), "step": checkpoint.get("global_step"),
                                 "run_id": folder if RUN_ID.fullmatch(folder) else None}

    def _elapsed(self) -> float:
        return self._time_before + (time.perf_counter() - self._t0 if self._t0 else 0.0)

    def setup(self, trainer, pl_module, stage):
        # Lightning orders checkpoint callbacks last only among those the Trainer was built with; this one
        # is usually appended later. Before them, a checkpoint taken at a batch's end holds that batch's figures.
        # (A new list: Lightning is iterating over the current one to call this hook.)
        checkpoints = [c for c in trainer.callbacks if isinstance(c, Checkpoint)]
        trainer.callbacks = [c for c in trainer.callbacks if not isinstance(c, Checkpoint)] + checkpoints

    # ---- fit ------------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module):
        if trainer.ckpt_path is None:  # a resumed fit keeps what load_state_dict restored
            self._reset()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.reset_peak_memory_stats()

    def on_train_start(self, trainer, pl_module):
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        ce = outputs.get("ce") if isinstance(outputs, dict) else None
        if self._loss_n and trainer.current_epoch != self._loss_epoch:
            # resumed from a checkpoint taken at an epoch's last batch: Lightning skips that epoch's end
            self.on_train_epoch_end(trainer, pl_module)
        self._loss_epoch = trainer.current_epoch
        if ce is not None:
            self._loss_sum += float(ce)
            self._loss_n += 1
            self._last_loss = (trainer.global_step, float(ce))
        tokens = outputs.get("tokens") if isinstance(outputs, dict) else None  # every rank's, under DDP
        self._trained_tokens += int(tokens if tokens is not None else (batch["labels"] != -100).sum())

    def on_train_epoch_end(self, trainer, pl_module):
        if self._loss_n:
            self.epoch_losses.append(self._loss_sum / self._loss_n)
        self._loss_sum, self._loss_n = 0.0, 0

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        if trainer.state.fn == "validate" and self.pending_fit is None:
            return self._write_eval(trainer, pl_module, "validate", "val")
        metrics = pl_module.last_eval.get("val")
        if metrics:
            # the final validation of a fit stopped mid-epoch runs after Lightning has advanced the epoch
            # counter: it belongs to the epoch of the last training step
            epoch = self._loss_epoch if self.pending_fit is not None else trainer.current_epoch
            self.val_curve.append({"epoch": epoch, "step": trainer.global_step, **metrics})
        if self.pending_fit is not None:  # the final validation that `finish_fit` asked for
            self._write_fit(*self.pending_fit)

    def on_train_end(self, trainer, pl_module):
        self.training_time = self._elapsed() if self._t0 else None

    def on_fit_end(self, trainer, pl_module):
        if trainer.interrupted:
            return  # a crash or Ctrl-C: no record rather than a record of a run that did not finish
        if self._loss_n:  # the last epoch stopped early (max_steps): still report its mean
            self.on_train_epoch_end(trainer, pl_module)
        has_val = bool(trainer.num_val_batches) and trainer.limit_val_batches != 0
        if has_val and (not self.val_curve or self.val_curve[-1]["step"] != trainer.global_step):
            # training stopped between validations (max_steps / max_time): the record's final
            # perplexity must describe the final weights, so `finish_fit` validates once more
            self.pending_fit = (trainer, pl_module)
            return
        self._write_fit(trainer, pl_module)

    def finish_fit(self, trainer, pl_module) -> None:
        """Run the final validation a fit that stopped mid-epoch still owes (then the record is written)."""
        if self.pending_fit is not None:
            trainer.validate(pl_module, datamodule=trainer.datamodule, verbose=False)

    def _write_fit(self, trainer, pl_module, divergence: Optional[dict] = None):
        self.pending_fit = None
        last = self.val_curve[-1] if self.val_curve and divergence is None else {}
        ppls = [v["ppl"] for v in self.val_curve]
        record = {
            "status": "diverged" if divergence else "completed",
            "divergence": divergence,
            "final_loss": last.get("loss"),
            "final_perplexity": last.get("ppl"),
            "best_perplexity": min(ppls) if ppls else None,
            "training_time": self.training_time,
            "epoch_losses": self.epoch_losses,
            "epoch_perplexities": ppls,
            "validation_curve": self.val_curve,
            "global_steps": trainer.global_step,
            "trained_tokens": self._trained_tokens,
        }
        self._write(trainer, pl_module, "fit", record, split="validation" if self.val_curve else None,
                    extra_meta={"resumed_from": self.resumed_from})

    # ---- divergence -----------------------------------------------------------------------
    def on_exception(self, trainer, pl_module, exception):
        """A DivergedError still gets a record (status "diverged"); any other exception gets none."""
        if not isinstance(exception, DivergedError):
            return
        divergence = {"quantity": exception.quantity, "value": str(exception.value), "step": exception.step}
        if trainer.state.fn == "fit" or self.pending_fit is not None:  # pending: the fit's final validation
            if self._loss_n:  # the finite steps of the epoch it stopped in
                self.on_train_epoch_end(trainer, pl_module)
            if self.training_time is None and self._t0:  # stopped inside training (on_train_end never ran)
                self.training_time = self._elapsed()
            step, loss = self._last_loss or (None, None)
            divergence.update(last_finite_step=step, last_finite_train_loss=loss)
            self._write_fit(trainer, pl_module, divergence)
        elif trainer.state.fn in ("validate", "test"):
            stage = "validate" if trainer.state.fn == "validate" else "test"
            self._write(trainer, pl_module, stage, {"status": "diverged", "divergence": divergence, "metrics": None},
                        split="validation" if stage == "validate" else "test")

    # ---- validate / test ------------------------------------------------------------------
    def on_validation_start(self, trainer, pl_module):
        self._eval_t0 = time.perf_counter()

    def on_test_start(self, trainer, pl_module):
        self._eval_t0 = time.perf_counter()

    def on_test_end(self, trainer, pl_module):
        self._write_eval(trainer, pl_module, "test", "test")

    def _write_eval(self, trainer, pl_module, stage, key):
        metrics = pl_module.last_eval.get(key)
        if not metrics or trainer.interrupted:
            return
        seconds = time.perf_counter() - self._eval_t0
        record = {"status": "completed", "metrics": metrics, "eval_time": seconds,
                  "scored_tokens_per_sec": metrics["scored_tokens"] / seconds if seconds > 0 else None,
                  "eval_path": getattr(pl_module, "eval_path", None)}
        self._write(trainer, pl_module, stage, record, split="validation" if key == "val" else "test")

    # ---- the record -----------------------------------------------------------------------
    def _write(self, trainer, pl_module, stage, body, split, extra_meta: Optional[dict] = None):
        dm = trainer.datamodule
        dataset = getattr(dm, "dataset_name", "unknown")
        seq_len = getattr(dm, "seq_len", None)
        contributed = callback_fields(trainer, pl_module)
        baselines = {}
        if split and hasattr(dm, "unigram_perplexity"):
            baselines[f"unigram_{split}_ppl"] = dm.unigram_perplexity(split)
        record = {
            "run_id": self.run_id, "model_name": pl_module.model_name, "dataset": dataset, "seq_len": seq_len, "bits": self.bits,
            "stage": stage, **body,
            **cost_fields(trainer, contributed),
            **model_size(trainer, pl_module, contributed),
            "parameters": pl_module.parameter_counts(),
            "baselines": baselines,
            "config": self.config,
            "logs": log_files(trainer),
            "meta": run_meta(seed=self.seed, datamodule=dm, precision_note=self.precision_note,
                             protocol=dm.protocol(split) if split and hasattr(dm, "protocol") else None,
                             extra={**(extra_meta or {}), "processes": processes(trainer)}),
        }
        # anything else a callback contributes follows (e.g. `sparsity`)
        record.update({k: v for k, v in contributed.items() if k not in record and k not in SIZE_FIELDS and v})
        sparsity = record.get("sparsity")
        suffix = "" if stage == "fit" else f"_{stage}"
        if sparsity and sparsity.get("mechanism") == "masking":  # one file per masker stack
            suffix += f"_attn_{sparsity['slug']}"
        elif sparsity:  # one file per method and level, next to the dense record
            level = sparsity["ratio"] if sparsity.get("ratio") is not None else f"b{sparsity.get('budget_tokens')}"
            suffix += f"_{sparsity['method']}_s{level}"
        stem = f"{run_name(pl_module, dm, self.bits)}{suffix}"
        if trainer.is_global_zero:
            self.written[stage] = write_json_atomic(run_path(self.results_dir, stem, self.run_id), record)
            latest = point_latest(self.written[stage], self.results_dir / f"{stem}.json")
            print(f"lightning_bench: wrote {self.written[stage]} (latest of its name: {latest})")
