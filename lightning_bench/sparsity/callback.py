"""`SparsityCallback`: evaluate a LanguageModule under KV-cache eviction, or under query-time sparse attention
(a masker stack, sparsity/masking: `SparsityCallback(attention_sparsity="sink:16,local:64")`, every query of a
window sparse, the record holding density and attention error per layer), with the usual protocols.

From on_{validation,test,predict}_start to the matching _end the callback holds the module inside
`with eviction.applied(module):` (streaming.py), so its evaluation steps compute the logits with
`streaming.streaming_logits` (each evaluation window, or request row, read as a stream on a cache
compressed by the method) and generate a task's answers on the KV engine (one prefill, one
compression, decoding on the cache: the `downstream` command's query-aware cell); the block is left at
the stage's end, on an exception and at teardown, whichever comes first. Everything else is unchanged:
the DataModule's windows, `_eval_step`'s NLL sums, the logged metrics and the JSON records. Training
steps of a fit are never touched.

    trainer = L.Trainer(callbacks=[SparsityCallback("h2o", ratio=0.9, chunk_size=16)])
    trainer.test(model, datamodule=data)            # test/ppl is now the streaming perplexity at 90% sparsity
    callback.summary()                              # method, budget, cache size and KV bytes, for the record

The cache-size figures count the tokens a window scores (labels != -100); padding and
context-only positions are fed but not counted.
"""

from __future__ import annotations

from contextlib import ExitStack
from functools import partialmethod
from typing import Optional

import lightning as L

from lightning_bench.errors import ConfigError
from lightning_bench.models.token_nll import IGNORE_INDEX
from lightning_bench.sparsity.streaming import StreamingEviction, new_totals

STAGES = ("validation", "test", "predict")


class SparsityCallback(L.Callback):
    """Route a LanguageModule's evaluation logits through streaming KV-cache eviction.

    Args:
        method, ratio, budget_tokens, method_params, rounding: as engine.Budget.build (`ratio` is its
            sparsity; budget_tokens at most the window length; the rounding is recorded in the summary).
        chunk_size: tokens per forward while streaming a window (1 = exact per-token streaming).
        interval: compress after every `interval`-th chunk.
        rerotate: re-rotate the kept keys to contiguous positions at each compression (RoPE models).
        attention_sparsity: a masker stack (masking.MaskerStack.parse's spec) instead of an eviction method.
    """

    record_keys = ("sparsity",)  # what record_fields gives the run's record

    def __init__(self, method: str = "dense", ratio: Optional[float] = None, budget_tokens: Optional[int] = None,
                 chunk_size: int = 1, interval: int = 1, rerotate: bool = False,
                 method_params: Optional[dict] = None, rounding: str = "ceil", attention_sparsity=None):
        if attention_sparsity is not None:
            from lightning_bench.sparsity.masking.perplexity import QueryTimeSparsity

            self.eviction = QueryTimeSparsity.build(attention_sparsity)
        else:
            self.eviction = StreamingEviction.build(method, ratio, budget_tokens, chunk_size, interval, rerotate,
                                                    method_params, rounding)
        self.stages: dict[str, dict] = {}
        self._stage: Optional[str] = None
        self._applied = ExitStack()

    @property
    def method(self):
        return self.eviction.method

    # ---- what the record gets ---------------------------------------------------------------
    def record_fields(self, trainer, pl_module) -> dict:
        """The record's `sparsity` block (results/recorder.py asks every callback)."""
        return {"sparsity": self.summary()}

    def summary(self, stage: Optional[str] = None) -> dict:
        """Settings and measured cache figures of `stage` (default: the last evaluated stage).

        mean_cache_length: cache slots attended per scored token (dense: its position + 1), averaged;
        cache_fraction: its ratio to the dense figure; peak_kv_bytes: the most key/value bytes held while
        streaming one batch of windows (dense_peak_kv_bytes: the dense cache of the same batch)."""
        stage = stage or self._stage
        if not isinstance(self.eviction, StreamingEviction):  # a masker stack: its own meter
            return {**self.eviction.settings(), "stage": stage, **self.eviction.figures()}
        acc = self.stages.get(stage) if stage else None
        figures = {"stage": stage, "mean_cache_length": None, "dense_mean_cache_length": None, "cache_fraction": None,
                   "peak_kv_bytes": None, "dense_peak_kv_bytes": None, "compressions": 0, "scored_tokens": 0,
                   "forwards": 0}
        if acc and acc["tokens"]:
            figures.update(mean_cache_length=acc["cache"] / acc["tokens"],
                           dense_mean_cache_length=acc["dense"] / acc["tokens"],
                           cache_fraction=acc["cache"] / acc["dense"], peak_kv_bytes=acc["peak"],
                           dense_peak_kv_bytes=acc["dense_peak"], compressions=acc["compressions"],
                           scored_tokens=acc["tokens"], forwards=acc["forwards"])
        return {**self.eviction.settings(), **figures}

    # ---- applying / leaving the eviction ----------------------------------------------------------
    def _start(self, trainer, pl_module, stage: str) -> None:
        self._end()  # a stage that started before this one ended (validation inside fit) is left first
        self._stage = stage
        if not isinstance(self.eviction, StreamingEviction):
            self.eviction.reset()
            self._applied.enter_context(self.eviction.applied(pl_module))
            return
        window = getattr(getattr(trainer, "datamodule", None), "seq_len", None)
        budget_tokens = self.eviction.plan.budget_tokens
        if budget_tokens is not None and window is not None and budget_tokens > window:
            raise ConfigError(f"--sparsity.budget_tokens {budget_tokens} is larger than the evaluation window "
                              f"(--data.seq_len {window}): nothing would be evicted; lower it")
        self._stage = stage
        self.stages[stage] = self.eviction.totals = new_totals()
        self._applied.enter_context(self.eviction.applied(pl_module))

    def _end(self, *_args, **_kwargs) -> None:
        if isinstance(self.eviction, StreamingEviction):
            self.eviction.scored = None
        self._applied.close()

    # ---- Lightning hooks ----------------------------------------------------------------------
    on_validation_start = partialmethod(_start, stage="validation")
    on_test_start = partialmethod(_start, stage="test")
    on_predict_start = partialmethod(_start, stage="predict")
    on_validation_end = on_test_end = on_predict_end = on_exception = teardown = _end

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        labels = batch.get("labels") if isinstance(batch, dict) else None
        if not isinstance(self.eviction, StreamingEviction):
            return
        self.eviction.scored = None if labels is None else (labels != IGNORE_INDEX)

    on_test_batch_start = on_predict_batch_start = on_validation_batch_start
