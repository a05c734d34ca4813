"""FlopsCallback (FLOPs of a real step) and ProfilingCallback (FLOPs + memory + throughput in one).

How the FLOPs are measured (counter="torch", the default): on the first training batch the real
training step is counted, in two parts, with no extra computation:

    on_train_batch_start  -> counter A on (+ analytic hooks on the BK / Mamba layers)
    training_step (forward + loss)
    on_before_backward    -> counter A off, counter B on
    backward
    on_after_backward     -> counter B off     (the optimizer step is not counted)

so forward and backward are measured separately on the step Lightning actually runs (precision
plugin, gradient accumulation and manual optimization included), with no extra forward, no gradient
to zero and no RNG draw: a run with profiling on trains exactly like one with it off. Evaluation:
the first validation / test batch's step is counted the same way (forward only, between
on_*_batch_start and on_*_batch_end). Sanity-check batches are never measured. A measured batch is
excluded from throughput (the counter's dispatch overhead slows it down).

counter="fvcore" instead traces one extra forward of the first batch with fvcore (RNG state forked);
its backward is the 2 x forward convention. See flops.py for every formula.
"""

from __future__ import annotations

from typing import Optional

import lightning as L

from lightning_bench.profiling.flops import COUNTERS, FlopSession, StepFlops, backward_from_forward, measure_flops
from lightning_bench.profiling.monitors import (STAGES, MemoryCallback, ThroughputCallback, batch_counts,
                                                log_metrics, peak_memory)

__all__ = ["FlopsCallback", "ProfilingCallback", "SUMMARY_KEYS"]

# every key ProfilingCallback.summary() returns (None where it does not apply / is switched off)
SUMMARY_KEYS = ("forward_flops", "backward_flops", "total_flops", "flops_per_token", "flop_counter",
                "tokens_per_sec", "samples_per_sec", "mfu", "peak_memory_mb", "peak_memory_kind",
                "peak_memory_reserved_mb", "per_stage")
_FLOP_KEYS = ("forward_flops", "backward_flops", "total_flops", "flops_per_token", "flop_counter")


class FlopsCallback(L.Callback):
    """FLOPs per step, measured once per stage on a real batch.

    Args:
        counter: "torch" (torch.utils.flop_counter + formulas, the default) or "fvcore" (cross-check).
        train: measure the first training batch (forward + backward).
        eval: measure the first validation / test batch (forward).

    After the run: `train_flops` / `eval_flops[stage]` hold `StepFlops` objects (with per-op and
    per-analytic-term breakdowns); `summary()` gives the record fields.
    """

    def __init__(self, counter: str = "torch", train: bool = True, eval: bool = True):
        if counter not in COUNTERS:
            raise ValueError(f"counter must be one of {COUNTERS}, got {counter!r}")
        self.counter, self.train, self.eval = counter, train, eval
        self.train_flops: Optional[StepFlops] = None
        self.eval_flops: dict[str, StepFlops] = {}
        self._session: Optional[FlopSession] = None
        self._phase: Optional[str] = None  # "forward" | "backward" | "eval"
        self._forward = None
        self._counts = (0, 0)
        self._measured_now: dict[str, bool] = {}

    # ---- what other callbacks ask --------------------------------------------------------------
    def measured_current_batch(self, stage: str) -> bool:
        """Whether the batch of `stage` now running (or that just ended) is the one being measured."""
        return self._measured_now.get(stage, False)

    def flops_per_token(self, stage: str) -> Optional[float]:
        """Training: (forward + backward) per token; evaluation: the evaluation forward per token."""
        if stage == "train":
            return self.train_flops.flops_per_token if self.train_flops else None
        found = self.eval_flops.get(stage) or next(iter(self.eval_flops.values()), None)
        return found.flops_per_token if found else None

    def summary(self) -> dict:
        """forward/backward/total_flops, flops_per_token, flop_counter of the training step (of the first
        evaluation step if nothing was trained: forward only), and `per_stage` FLOPs."""
        main = self.train_flops or next((self.eval_flops[s] for s in ("test", "val") if s in self.eval_flops), None)
        out = dict(main.summary()) if main else dict.fromkeys(_FLOP_KEYS)
        steps = {"train": self.train_flops, **self.eval_flops}
        out["per_stage"] = {s: {k: v for k, v in step.summary().items() if k != "flop_counter"}
                            for s, step in steps.items() if step is not None}
        return out

    # ---- training step -------------------------------------------------------------------------
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._measured_now["train"] = False
        if not self.train or self.train_flops is not None or trainer.sanity_checking or self._phase:
            return
        self._counts = batch_counts(batch)
        if not self._counts[0]:
            return  # not an LM batch: nothing to count per token
        self._measured_now["train"] = True
        if self.counter == "fvcore":
            self.train_flops = measure_flops(pl_module, batch, backward=True, counter="fvcore", stage="train")
            self._log_train(trainer)
            return
        self._session = FlopSession(pl_module).start()
        self._phase = "forward"

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        if self._phase == "forward":
            self._forward = self._session.stop()
            self._session = FlopSession(analytic=False).start()
            self._phase = "backward"

    def on_after_backward(self, trainer, pl_module) -> None:
        if self._phase == "backward":
            counted = self._session.stop()
            self._session, self._phase = None, None
            self.train_flops = StepFlops(forward=self._forward, backward=backward_from_forward(self._forward, counted),
                                         tokens=self._counts[0], samples=self._counts[1], counter=self.counter,
                                         stage="train")
            self._log_train(trainer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._phase in ("forward", "backward"):  # the step skipped backward (e.g. returned None): retry
            self._abort()

    def _log_train(self, trainer) -> None:
        s = self.train_flops.summary()
        log_metrics(trainer, {f"perf/{k}": s[k] for k in ("forward_flops", "backward_flops", "total_flops",
                                                          "flops_per_token")})

    # ---- evaluation steps ----------------------------------------------------------------------
    def _eval_start(self, trainer, pl_module, batch, stage: str) -> None:
        self._measured_now[stage] = False
        if not self.eval or stage in self.eval_flops or trainer.sanity_checking or self._phase:
            return
        self._counts = batch_counts(batch)
        if not self._counts[0] or _has_parametrizations(pl_module):
            # torch's FlopCounterMode (its ModuleTracker) crashes under no_grad/inference_mode when a
            # module's input is a leaf Parameter, which is what a weight parametrization (QAT
            # fake-quant) feeds its parametrization module: evaluation FLOPs are then not counted
            return
        self._measured_now[stage] = True
        if self.counter == "fvcore":
            self._store_eval(trainer, stage, measure_flops(pl_module, batch, backward=False, counter="fvcore",
                                                           stage=stage))
            return
        self._session = FlopSession(pl_module).start()
        self._phase = "eval"

    def _eval_end(self, trainer, stage: str) -> None:
        if self._phase == "eval":
            forward = self._session.stop()
            self._session, self._phase = None, None
            self._store_eval(trainer, stage, StepFlops(forward=forward, backward=None, tokens=self._counts[0],
                                                       samples=self._counts[1], counter=self.counter, stage=stage))

    def _store_eval(self, trainer, stage: str, step: StepFlops) -> None:
        self.eval_flops[stage] = step
        log_metrics(trainer, {f"perf/{stage}/forward_flops": step.forward_flops,
                              f"perf/{stage}/flops_per_token": step.flops_per_token})

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self._eval_start(trainer, pl_module, batch, "val")

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._eval_end(trainer, "val")

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self._eval_start(trainer, pl_module, batch, "test")

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        self._eval_end(trainer, "test")

    # ---- never leave a counter running ---------------------------------------------------------
    def _abort(self) -> None:
        if self._session is not None:
            self._session.abort()
        self._session, self._phase, self._forward = None, None, None

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._abort()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._abort()


class ProfilingCallback(L.Callback):
    """FLOPs, peak memory and throughput in one callback (each part can be switched off).

    Args:
        flops / memory / throughput: which parts run. All off = every hook returns at once.
        counter: FLOP counter, "torch" (default) or "fvcore".
        peak_flops: device peak FLOP/s for MFU instead of Lightning's table (None: the table).

    `summary()` returns every key of SUMMARY_KEYS (None where a part is off or does not apply):
    forward_flops, backward_flops, total_flops, flops_per_token (per training step; of the first
    evaluation step in an evaluation-only run), flop_counter, tokens_per_sec, samples_per_sec, mfu
    (train if it ran, else test, else val), peak_memory_mb, peak_memory_kind, peak_memory_reserved_mb
    (CUDA only) and per_stage = {stage: {tokens_per_sec, samples_per_sec, mfu, seconds, tokens, samples,
    batches, forward_flops, backward_flops, total_flops, flops_per_token}}.
    Logged to the Lightning loggers: perf/forward_flops, perf/backward_flops, perf/total_flops,
    perf/flops_per_token, perf/{val,test}/forward_flops, perf/{val,test}/flops_per_token,
    perf/{stage}/tokens_per_sec, perf/{stage}/samples_per_sec, perf/{stage}/mfu, perf/peak_memory_mb,
    perf/peak_memory_reserved_mb.
    """

    record_keys = SUMMARY_KEYS  # what record_fields gives the run's record

    def __init__(self, flops: bool = True, memory: bool = True, throughput: bool = True, counter: str = "torch",
                 peak_flops: Optional[float] = None):
        self.flops = FlopsCallback(counter=counter) if flops else None
        self.memory = MemoryCallback() if memory else None
        self.throughput = ThroughputCallback(flops=self.flops, peak_flops=peak_flops) if throughput else None
        # throughput first: its clock starts before the FLOP counter is switched on
        self.parts = [c for c in (self.throughput, self.flops, self.memory) if c is not None]

    def summary(self) -> dict:
        out = dict.fromkeys(SUMMARY_KEYS)
        per_stage: dict[str, dict] = {}
        for part in self.parts:
            s = part.summary()
            for stage, values in (s.pop("per_stage", None) or {}).items():
                per_stage.setdefault(stage, {}).update(values)
            out.update(s)
        out["per_stage"] = {s: per_stage[s] for s in STAGES if s in per_stage}
        return out

    def record_fields(self, trainer, pl_module) -> dict:
        """The record's cost fields (results/recorder.py asks every callback): `summary()`, with the
        process's peak memory even when the memory part is off."""
        summary = self.summary()
        if summary.get("peak_memory_mb") is None:
            summary.update(peak_memory(trainer.strategy.root_device))
        return summary

    # ---- hook forwarding -------------------------------------------------------------------------
    def setup(self, trainer, pl_module, stage):
        for c in self.parts:
            c.setup(trainer, pl_module, stage)

    def teardown(self, trainer, pl_module, stage):
        for c in self.parts:
            c.teardown(trainer, pl_module, stage)

    def on_exception(self, trainer, pl_module, exception):
        for c in self.parts:
            c.on_exception(trainer, pl_module, exception)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        for c in self.parts:
            c.on_train_batch_start(trainer, pl_module, batch, batch_idx)

    def on_before_backward(self, trainer, pl_module, loss):
        for c in self.parts:
            c.on_before_backward(trainer, pl_module, loss)

    def on_after_backward(self, trainer, pl_module):
        for c in self.parts:
            c.on_after_backward(trainer, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        for c in self.parts:
            c.on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        for c in self.parts:
            c.on_validation_batch_start(trainer, pl_module, batch, batch_idx, dataloader_idx)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        for c in self.parts:
            c.on_validation_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        for c in self.parts:
            c.on_test_batch_start(trainer, pl_module, batch, batch_idx, dataloader_idx)

    def on_test_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        for c in self.parts:
            c.on_test_batch_end(trainer, pl_module, outputs, batch, batch_idx, dataloader_idx)

    def on_train_epoch_end(self, trainer, pl_module):
        for c in self.parts:
            c.on_train_epoch_end(trainer, pl_module)

    def on_validation_epoch_end(self, trainer, pl_module):
        for c in self.parts:
            c.on_validation_epoch_end(trainer, pl_module)

    def on_test_epoch_end(self, trainer, pl_module):
        for c in self.parts:
            c.on_test_epoch_end(trainer, pl_module)


def _has_parametrizations(pl_module) -> bool:
    from torch.nn.utils import parametrize

    return any(parametrize.is_parametrized(m) for m in pl_module.modules())
