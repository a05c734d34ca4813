"""KV-cache sparsity: one eviction mechanism, many importance functions, one engine.

- methods.py: the importance functions and their registry (`METHODS`, `make_method`).
- capture.py: the `lb_capture` attention function (transformers AttentionInterface) and its statistics.
- cache.py:   budget, physical eviction on a DynamicCache, RoPE positions / rerotation, padding.
- engine.py:  `KVEngine` (prefill, feed, compress, step, copy / expand, one meter) and `KVRecord`.
- sampling.py: greedy / nucleus choice of the next token, stops, the per-draw seed rule.
- schedules over the engine: decode.py `generate_with_eviction` (compress, decode, re-compress every
  interval; rerotation), task_decode.py `generate_for_task` (query-aware / query-agnostic prompts),
  streaming.py `streaming_logits` (perplexity of a stream under eviction).
- callback.py: `SparsityCallback`, streaming.StreamingEviction inside Lightning's validate / test / predict.
"""

from lightning_bench.sparsity.cache import EvictionState, budget, kv_bytes, select_slots
from lightning_bench.sparsity.capture import CAPTURE_NAME, AttentionRecorder, Needs, capturing, register
from lightning_bench.sparsity.decode import EvictionResult, generate_with_eviction
from lightning_bench.sparsity.engine import KVEngine, KVRecord, prefill, resolve_network
from lightning_bench.sparsity.methods import METHODS, LayerView, Method, Priority, make_method, method_names
from lightning_bench.sparsity.task_decode import TaskGeneration, generate_for_task

__all__ = ["AttentionRecorder", "CAPTURE_NAME", "EvictionResult", "EvictionState", "KVEngine", "KVRecord",
           "LayerView", "METHODS", "Method", "Needs", "Priority", "TaskGeneration", "budget", "capturing",
           "generate_for_task", "generate_with_eviction", "kv_bytes", "make_method", "method_names", "prefill",
           "register", "resolve_network", "select_slots"]
