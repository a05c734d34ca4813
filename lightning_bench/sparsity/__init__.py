"""KV-cache sparsity: one eviction mechanism, many importance functions, one engine.

- methods.py: the importance functions and their registry (`METHODS`, `make_method`).
- capture.py: the `lb_capture` attention function (transformers AttentionInterface) and its statistics.
- cache.py:   budget, physical eviction on a DynamicCache, RoPE positions / rerotation, padding.
- engine.py:  `KVEngine` (prefill, feed, compress, step, fork / stack / select, one meter) and `KVRecord`.
- sampling.py: greedy / nucleus choice of the next token, stops, the per-draw seed rule.
- schedules over the engine: decode.py `generate_with_eviction` (compress, decode, re-compress every
  interval; rerotation), task_decode.py `generate_for_task` (query-aware / query-agnostic prompts),
  streaming.py `streaming_logits` (perplexity of a stream under eviction).
- callback.py: `SparsityCallback`, streaming.StreamingEviction inside Lightning's validate / test / predict.
"""

from lightning_bench.sparsity.cache import EvictionState, budget, select_slots
from lightning_bench.sparsity.capture import AttentionRecorder, Needs
from lightning_bench.sparsity.decode import generate_with_eviction
from lightning_bench.sparsity.engine import Budget, KVEngine, KVRecord, prefill
from lightning_bench.sparsity.methods import METHODS, LayerView, Method, make_method
from lightning_bench.sparsity.task_decode import generate_for_task

__all__ = ["AttentionRecorder", "Budget", "EvictionState", "KVEngine", "KVRecord", "LayerView", "METHODS", "Method",
           "Needs", "budget", "generate_for_task", "generate_with_eviction", "make_method", "prefill", "select_slots"]
