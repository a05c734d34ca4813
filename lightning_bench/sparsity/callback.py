"""`SparsityCallback`: evaluate a LanguageModule under KV-cache eviction with the usual protocols.

Between on_{validation,test,predict}_start and the matching _end, the callback replaces the module's
`lm_forward` by one that computes the logits with `streaming.streaming_logits` (each evaluation
window read as a stream on a cache compressed by the method), and restores it afterwards (also when
the run fails). Everything else is unchanged: the DataModule's windows, `_eval_step`'s NLL sums,
the logged metrics and the JSON records. Training steps of a fit are never touched.

    trainer = L.Trainer(callbacks=[SparsityCallback("h2o", ratio=0.9, chunk_size=16)])
    trainer.test(model, datamodule=data)            # test/ppl is now the streaming perplexity at 90% sparsity
    callback.summary()                              # method, budget, cache size and KV bytes, for the record

The cache-size figures count the tokens a window scores (labels != -100); padding and
context-only positions are fed but not counted.
"""

from __future__ import annotations

from typing import Optional

import lightning as L

from lightning_bench.errors import ConfigError
from lightning_bench.evaluation.windows import IGNORE_INDEX
from lightning_bench.sparsity.decode import resolve_network
from lightning_bench.sparsity.streaming import check_streaming_args, streaming_logits

STAGES = ("validation", "test", "predict")


class SparsityCallback(L.Callback):
    """Route a LanguageModule's evaluation logits through streaming KV-cache eviction.

    Args:
        method: sparsity method name (`lightning_bench.sparsity.METHODS`).
        ratio: sparsity, the fraction of the tokens seen so far that is evicted, in [0, 1).
        budget_tokens: a fixed number of cached tokens instead of a ratio (at most the window length).
        chunk_size: tokens per forward while streaming a window (1 = exact per-token streaming).
        interval: compress after every `interval`-th chunk.
        rerotate: re-rotate the kept keys to contiguous positions at each compression (RoPE models).
        method_params: the method's own parameters (e.g. {"recent_ratio": 0.5} for h2o).
    Exactly one of `ratio` and `budget_tokens` for an evicting method; neither for `dense`.
    """

    def __init__(self, method: str = "dense", ratio: Optional[float] = None, budget_tokens: Optional[int] = None,
                 chunk_size: int = 1, interval: int = 1, rerotate: bool = False,
                 method_params: Optional[dict] = None):
        self.method, self.ratio = check_streaming_args(method, ratio, budget_tokens, chunk_size, interval,
                                                       method_params)
        self.budget_tokens, self.chunk_size, self.interval = budget_tokens, chunk_size, interval
        self.rerotate = bool(rerotate)
        self.stages: dict[str, dict] = {}
        self._stage: Optional[str] = None
        self._scored = None
        self._saved = None

    # ---- what the record gets ---------------------------------------------------------------
    def settings(self) -> dict:
        return {**self.method.describe(), "ratio": self.ratio, "budget_tokens": self.budget_tokens,
                "chunk_size": self.chunk_size, "interval": self.interval, "rerotate": self.rerotate}

    def summary(self, stage: Optional[str] = None) -> dict:
        """Settings and measured cache figures of `stage` (default: the last evaluated stage).

        mean_cache_length: cache slots attended per scored token (dense: its position + 1), averaged;
        cache_fraction: its ratio to the dense figure; peak_kv_bytes: the most key/value bytes held while
        streaming one batch of windows (dense_peak_kv_bytes: the dense cache of the same batch)."""
        stage = stage or self._stage
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
        return {**self.settings(), **figures}

    # ---- installing / removing the streaming forward -----------------------------------------
    def _start(self, trainer, pl_module, stage: str) -> None:
        from lightning_bench.models.base import LanguageModule

        if not isinstance(pl_module, LanguageModule):
            raise ConfigError(f"SparsityCallback evaluates LanguageModules, not {type(pl_module).__name__}")
        resolve_network(pl_module)  # a model family without a KV cache: one-line ConfigError
        window = getattr(getattr(trainer, "datamodule", None), "seq_len", None)
        if self.budget_tokens is not None and window is not None and self.budget_tokens > window:
            raise ConfigError(f"--sparsity.budget_tokens {self.budget_tokens} is larger than the evaluation window "
                              f"(--data.seq_len {window}): nothing would be evicted; lower it")
        self._stage = stage
        self.stages[stage] = {"cache": 0.0, "dense": 0.0, "tokens": 0, "peak": 0, "dense_peak": 0,
                              "compressions": 0, "forwards": 0}
        self._saved = (pl_module, pl_module.__dict__.get("lm_forward"))
        pl_module.lm_forward = self._streaming_forward(pl_module, stage)

    def _end(self, *_args) -> None:
        if self._saved is None:
            return
        pl_module, previous = self._saved
        pl_module.__dict__.pop("lm_forward", None)
        if previous is not None:
            pl_module.lm_forward = previous
        self._saved, self._scored = None, None

    def _streaming_forward(self, pl_module, stage: str):
        from lightning_bench.models.base import LMOutput

        def lm_forward(input_ids, logits_to_keep=None):
            scored = self._scored if self._scored is not None and self._scored.shape == input_ids.shape else None
            logits, stats = streaming_logits(pl_module.net, input_ids, None, self.method, sparsity=self.ratio,
                                             budget_tokens=self.budget_tokens, chunk_size=self.chunk_size,
                                             interval=self.interval, rerotate=self.rerotate,
                                             logits_to_keep=logits_to_keep, scored=scored)
            acc = self.stages[stage]
            acc["cache"] += stats.mean_cache_length * stats.counted_tokens if stats.counted_tokens else 0.0
            acc["dense"] += stats.dense_mean_cache_length * stats.counted_tokens if stats.counted_tokens else 0.0
            acc["tokens"] += stats.counted_tokens
            acc["peak"] = max(acc["peak"], stats.peak_kv_bytes)
            acc["dense_peak"] = max(acc["dense_peak"], stats.dense_kv_bytes)
            acc["compressions"] += stats.compressions
            acc["forwards"] += stats.chunks
            return LMOutput(logits)

        return lm_forward

    def _batch_start(self, batch) -> None:
        labels = batch.get("labels") if isinstance(batch, dict) else None
        self._scored = None if labels is None else (labels != IGNORE_INDEX)

    # ---- Lightning hooks ----------------------------------------------------------------------
    def on_validation_start(self, trainer, pl_module):
        self._start(trainer, pl_module, "validation")

    def on_test_start(self, trainer, pl_module):
        self._start(trainer, pl_module, "test")

    def on_predict_start(self, trainer, pl_module):
        self._start(trainer, pl_module, "predict")

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._batch_start(batch)

    def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._batch_start(batch)

    def on_predict_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._batch_start(batch)

    def on_validation_end(self, trainer, pl_module):
        self._end()

    def on_test_end(self, trainer, pl_module):
        self._end()

    def on_predict_end(self, trainer, pl_module):
        self._end()

    def on_exception(self, trainer, pl_module, exception):
        self._end()
