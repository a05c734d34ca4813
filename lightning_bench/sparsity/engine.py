"""The KV engine: one object drives every compressed cache (`KVEngine`), one meter measures it (`KVRecord`).

Streaming perplexity (streaming.py), decoding on a pruned cache (decode.py) and a task's prompt
(task_decode.py) are short schedules of the same five moves: `prefill` (recording the attention
statistics the methods declare), `feed` tokens, `compress` (a method and a per-row budget, through
`EvictionState.compress`), `step` one token per row, and `fork` / `stack` / `select` (one prefill
continued by several methods and budgets as the rows of one batch, finished rows leaving it). The
engine alone switches the network to eval() and back, syncs the device before a clock is read, and
meters cache lengths, KV bytes and the dense cache's bytes, so a schedule only decides WHEN each move
happens (as kvpress wraps a press instead of rewriting the loop).
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator, Optional, Union

import torch

from lightning_bench.errors import ConfigError
from lightning_bench.models.hf import config_has_kv_cache
from lightning_bench.sparsity.cache import EvictionState, budget, check_rounding, check_sparsity
from lightning_bench.sparsity.capture import AttentionRecorder, capturing
from lightning_bench.sparsity.methods import Method, make_method


def resolve_network(net):
    """The transformers model of a LanguageModule (its `.net`) or `net` itself, checked for a KV cache."""
    from transformers import PreTrainedModel

    owner = type(net).__name__
    if not isinstance(net, PreTrainedModel) and isinstance(getattr(net, "net", None), torch.nn.Module):
        net = net.net
    config = getattr(net, "config", None)
    if not isinstance(net, PreTrainedModel) or config is None or not config_has_kv_cache(config):
        raise ConfigError(f"{owner} has no KV cache to evict from; KV-cache sparsity needs an attention model "
                          "(--model transformer or --model hf)")
    return net


def cache_argument(net, cache) -> dict:
    """The keyword argument that hands `cache` to `net`'s forward: `cache` since transformers 5.24 renamed
    it (the old name then warns on every call, and goes in 5.40), `past_key_values` before."""
    return {_cache_parameter(type(net)): cache}


@functools.lru_cache(maxsize=None)
def _cache_parameter(model_class: type) -> str:  # the signature through transformers' decorators
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def prefill(net, input_ids: torch.Tensor, attention_mask: torch.Tensor,
            recorder: Optional[AttentionRecorder] = None) -> tuple[EvictionState, torch.Tensor]:
    """`KVEngine.prefill` for callers that handle the EvictionState themselves: (state, last logits (B, V))."""
    engine = KVEngine(net, recorder)
    logits = engine.prefill(input_ids, attention_mask)
    return engine.state, logits


def check_rows(input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor], padding: str) -> torch.Tensor:
    """The (B, T) 0/1 mask of a batch padded on `padding`'s side ("left": prompts, "right": streamed texts),
    every row holding a token; one-line ConfigErrors otherwise."""
    what = "(batch, context) with a non-empty context" if padding == "left" \
        else "(batch, tokens) with at least one token"
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise ConfigError(f"input_ids must be {what}, got {tuple(input_ids.shape)}")
    if attention_mask is None:
        return torch.ones_like(input_ids)
    if attention_mask.shape != input_ids.shape:
        raise ConfigError(f"attention_mask {tuple(attention_mask.shape)} does not match "
                          f"input_ids {tuple(input_ids.shape)}")
    mask = attention_mask.long()
    steps = mask[:, 1:] - mask[:, :-1]
    if bool(((mask != 0) & (mask != 1)).any()) or bool((steps < 0 if padding == "left" else steps > 0).any()):
        raise ConfigError("attention_mask must be left-padded (0s, then 1s, per row); pad prompts on the left"
                          if padding == "left" else
                          "streaming takes right-padded rows (1s, then 0s): a row is a text read from its start")
    if bool((mask.sum(-1) == 0).any()):
        raise ConfigError("a row of attention_mask has no tokens")
    return mask


def positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ConfigError(f"--sparsity.{name} must be {what}, got {value!r}")
    return value


@dataclass
class Budget:
    """A method and how much it keeps: (1 - sparsity) of each row's tokens seen so far, rounded by
    `rounding`, or `budget_tokens` (cache.budget). Built once, checked once, by every schedule."""

    method: Method
    sparsity: Optional[float]
    budget_tokens: Optional[int] = None
    rounding: str = "ceil"

    @classmethod
    def build(cls, method: Union[str, Method] = "dense", sparsity: Optional[float] = None,
              budget_tokens: Optional[int] = None, rounding: str = "ceil",
              method_params: Optional[dict] = None) -> "Budget":
        """`method`: a registry name (methods.METHODS) with its `method_params`, or a Method. Exactly one of
        `sparsity` (the fraction evicted, in [0, 1), of each row's tokens seen so far, rounded by `rounding`:
        "ceil" or "floor", cache.budget) and `budget_tokens` (a fixed number of slots kept), or neither for a
        method that never evicts (its sparsity is then 0.0; None when `budget_tokens` is used)."""
        built = make_method(method, **(method_params or {}))
        if sparsity is None and budget_tokens is None:
            if built.evicts:
                raise ConfigError(f"method {built.name!r} needs --sparsity.ratio or --sparsity.budget_tokens")
            sparsity = 0.0
        elif sparsity is not None and budget_tokens is not None:
            raise ConfigError("give either sparsity (a ratio) or budget_tokens (a token count), not both")
        elif sparsity is not None:
            sparsity = check_sparsity(sparsity)
        else:
            positive_int("budget_tokens", budget_tokens)
        return cls(built, sparsity, budget_tokens, check_rounding(rounding))

    def fits(self, tokens: int, what: str) -> None:
        """A fixed budget above the `tokens` a first compression applies to (`what`) would evict nothing."""
        if self.budget_tokens is not None and self.budget_tokens > tokens:
            raise ConfigError(f"--sparsity.budget_tokens {self.budget_tokens} is larger than {what}; lower it or "
                              "use a longer context")

    def keep(self, state: EvictionState) -> torch.Tensor:
        if not self.method.evicts:
            return state.n_valid
        return budget(state.seen, self.sparsity, self.budget_tokens, self.rounding)

    def describe(self) -> dict:
        return {**self.method.describe(), "sparsity": self.sparsity, "budget_tokens": self.budget_tokens,
                "rounding": self.rounding}


@dataclass
class KVRecord:
    """The one record of a run on the engine: what was decoded (tokens, nll, stopped), the meter's series
    (cache_lengths: slots attended by each metered position, itself included; kv_bytes / dense_kv_bytes:
    every layer's keys + values after each metered forward or compression, and what an uncompressed cache
    would hold), compressions that evicted something, forwards, device-synced seconds, the settings
    (`method`) and the schedule's own scalars (`figures`, readable as attributes: `record.kept_tokens`).
    Each schedule's docstring says which moments it meters."""

    method: dict = field(default_factory=dict)
    tokens: object = None
    nll: Optional[torch.Tensor] = None
    stopped: Optional[str] = None
    cache_lengths: list = field(default_factory=list)
    kv_bytes: list = field(default_factory=list)
    dense_kv_bytes: list = field(default_factory=list)
    compressions: int = 0
    forwards: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    figures: dict = field(default_factory=dict)

    def __getattr__(self, name: str):
        if name in (self.__dict__.get("figures") or {}):
            return self.figures[name]
        raise AttributeError(f"{type(self).__name__} has no field or figure {name!r}")

    seconds = property(lambda self: self.prefill_seconds + self.decode_seconds)
    peak_kv_bytes = kv_bytes_peak = property(lambda self: max(self.kv_bytes))
    dense_kv_bytes_peak = property(lambda self: max(self.dense_kv_bytes))
    cache_length_final = property(lambda self: self.cache_lengths[-1])

    @property
    def decode_tokens_per_s(self) -> Optional[float]:
        steps = len(self.tokens) - 1 if isinstance(self.tokens, list) else 0
        return steps / self.decode_seconds if steps and self.decode_seconds > 0 else None

    def summary(self) -> dict:
        nll = {} if self.nll is None else {"tokens": self.nll.numel(), "nll": float(self.nll.mean()),
                                           "ppl": math.exp(float(self.nll.mean()))}
        return {**self.method, **{k: v for k, v in self.figures.items() if not isinstance(v, torch.Tensor)}, **nll,
                "cache_len_final": self.cache_length_final, "kv_bytes_peak": self.peak_kv_bytes,
                "dense_kv_bytes_peak": self.dense_kv_bytes_peak, "compressions": self.compressions,
                "forwards": self.forwards, "seconds": self.seconds}


class KVEngine:
    """One KV cache of a transformers causal LM and the moves made on it (module docstring).

    Args:
        net: a transformers causal LM with a KV cache, or a LanguageModule whose `.net` is one.
        recorder: the attention statistics to record while feeding (AttentionRecorder, a RecorderFanOut of
            several, or None: the model's own attention runs untouched).
    """

    def __init__(self, net, recorder=None):
        self.net = resolve_network(net)
        self.device = next(self.net.parameters()).device
        self.recorder = recorder
        self.masking = None  # a masking.MaskerStack the fed tokens attend through (None: the model's attention)
        self.state: Optional[EvictionState] = None
        self.record = KVRecord()
        self.slot_bytes = 0  # bytes of one cache slot (every layer's key and value)
        self.dense_length = 0  # slots an uncompressed cache would hold
        self._inv_freq = None

    # ---- the train/eval switch and the clock ------------------------------------------------
    @contextmanager
    def evaluating(self) -> Iterator["KVEngine"]:
        """The network in eval() inside the block, back to its own mode after (also on an exception)."""
        was_training = self.net.training
        self.net.eval()
        try:
            yield self
        finally:
            self.net.train(was_training)

    def clock(self) -> float:
        """perf_counter after the device finished its queued work (timings of CUDA runs are real)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    # ---- moves ----------------------------------------------------------------------------------
    @torch.no_grad()
    def prefill(self, input_ids: torch.Tensor, attention_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Dense prefill of a left-padded batch (mask None: no padding) at true positions (0 at each row's
        first token, as transformers' generate), recording what `recorder` declares; the last logits (B, V)."""
        from lightning_bench.sparsity.growing_layer import growing_cache

        input_ids = input_ids.to(self.device)
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask.to(self.device)
        config = self.net.config
        group = config.num_attention_heads // (getattr(config, "num_key_value_heads", None)
                                               or config.num_attention_heads)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        if self.recorder is not None:
            self.recorder.query_valid = mask.bool()
        cache = growing_cache(config)
        with capturing(self.net, self.recorder):  # the model appends the context to `cache` in place
            out = self.net(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                           **cache_argument(self.net, cache), use_cache=True, logits_to_keep=1)
        if self.recorder is not None:
            self.recorder.query_valid = None
        self.state = EvictionState(cache, mask, positions, group_size=group)
        self.slot_bytes = self.state.kv_bytes() // max(1, self.state.length)
        self.dense_length = self.state.length
        self.record.forwards += 1
        return out.logits[:, -1]

    @torch.no_grad()
    def feed(self, input_ids: torch.Tensor, logits_to_keep: Union[int, torch.Tensor] = 0) -> torch.Tensor:
        """Append q tokens per row (B, q): they attend to the cache and causally to each other, at the
        positions `state.next_inputs` gives (true ones, or contiguous after a rerotation). Their logits
        (B, q', V), with transformers' `logits_to_keep` (0 = all q; a 1-D tensor = those positions)."""
        q = input_ids.shape[1]
        mask, pos = self.state.next_inputs(q)
        with capturing(self.net, self.recorder, self.masking):
            out = self.net(input_ids=input_ids.to(self.device), attention_mask=mask, position_ids=pos,
                           **cache_argument(self.net, self.state.cache), use_cache=True,
                           logits_to_keep=logits_to_keep)
        self.state.append(q)
        self.dense_length += q
        self.record.forwards += 1
        return out.logits

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per row (B,); the next logits (B, V)."""
        return self.feed(tokens.reshape(-1, 1))[:, -1]

    def check_rope(self, rerotate: bool) -> None:
        """A one-line error, before any forward, when `rerotate` is asked of a model without RoPE."""
        if rerotate and self._inv_freq is None:
            self._inv_freq = next((m.inv_freq for m in self.net.modules()
                                   if isinstance(getattr(m, "inv_freq", None), torch.Tensor)), None)
            if self._inv_freq is None:
                raise ConfigError("--sparsity.rerotate needs a RoPE model; this one has no rotary embedding")

    def compress(self, method: Method, keep: torch.Tensor, rerotate: bool = False) -> bool:
        """Evict down to `keep` (B,) slots per row with `method` (EvictionState.compress); False when nothing
        had to go. With `rerotate` the kept keys move to contiguous RoPE positions."""
        self.check_rope(rerotate)
        done = self.state.compress(method, keep, self.recorder, rerotate, self._inv_freq)
        self.record.compressions = self.state.compressions
        return done

    def meter(self) -> None:
        self.record.cache_lengths.append(self.state.length)
        self.record.kv_bytes.append(self.state.kv_bytes())
        self.record.dense_kv_bytes.append(self.slot_bytes * self.dense_length)

    def fork(self, recorder=None) -> "KVEngine":
        """A copy that shares this cache's tensors (and `recorder`'s statistics), for compressions, which
        gather new tensors and leave the shared ones as they were, before `stack`: nothing is copied.
        Neither it nor this engine may append to the shared tensors while the other is in use."""
        other = copy.copy(self)
        state = other.state = copy.copy(self.state)
        state.cache = copy.copy(self.state.cache)
        state.cache.layers = [copy.copy(layer) for layer in self.state.cache.layers]
        state.positions, state.rope = list(self.state.positions), list(self.state.rope)
        other.recorder = _map_stats(recorder, lambda t, _: t)
        other.record = KVRecord(forwards=self.record.forwards)
        return other

    @classmethod
    def stack(cls, engines: list["KVEngine"]) -> "KVEngine":
        """One engine whose rows are the rows of `engines` (caches of any lengths, e.g. compressed by different
        methods and budgets): each is left-padded with filler slots (invalid, as an eviction leaves them) to
        the longest, so every row attends to exactly its own slots and decodes as it would alone. Their
        recorders (all None, or all AttentionRecorders of one `Needs`) are stacked too, their statistics
        padded alike (fillers are never attended: zero)."""
        first = engines[0]
        S = max(e.state.length for e in engines)
        left = lambda t, value=0: torch.nn.functional.pad(t, (S - t.shape[-1], 0), value=value)  # noqa: E731
        other = first.fork()
        state = other.state
        for i, layer in enumerate(state.cache.layers):  # each row copied once, into the batch's new buffers
            parts = [(e.state.cache.layers[i].keys, e.state.cache.layers[i].values) for e in engines]
            keys, values = _new_slots(layer, parts[0], sum(k.shape[0] for k, _ in parts), S)
            row = 0
            for k, v in parts:  # fillers first (zeros: never attended, and no NaN reaches a masked product)
                end, fill = row + k.shape[0], S - k.shape[-2]
                keys[row:end, :, :fill], values[row:end, :, :fill] = 0, 0
                keys[row:end, :, fill:], values[row:end, :, fill:] = k, v
                row = end
        state.valid = torch.cat([left(e.state.valid, False) for e in engines])
        layers = range(len(first.state.positions))
        shared = all(e.state.rope[i] is e.state.positions[i] for e in engines for i in layers)
        state.positions = [torch.cat([left(e.state.positions[i]) for e in engines]) for i in layers]
        state.rope = list(state.positions) if shared else [torch.cat([left(e.state.rope[i]) for e in engines])
                                                           for i in layers]
        state.seen = torch.cat([e.state.seen for e in engines])
        state.next_rope = torch.cat([e.state.next_rope for e in engines])
        other.recorder = _map_stats(first.recorder, lambda _, at: torch.cat([left(e.recorder.layers[at[0]][at[1]])
                                                                            for e in engines]))
        return other

    def select(self, rows: list[int], trim: bool = True) -> "KVEngine":
        """An engine over `rows` of this batch (new tensors; this one is left as it was), without the leading
        filler slots that none of them needs when `trim`: one row alone is then exactly the cache it would
        hold had it never been batched (what a compression of that row alone scores)."""
        index = torch.tensor(rows, device=self.device)
        valid = self.state.valid[index]
        start = int(valid.any(0).nonzero()[0]) if trim and bool(valid.any()) else 0
        cut = lambda t: t[index][..., start:]  # noqa: E731 - rows, then slots (the last dimension)
        other = self.fork()
        state = other.state
        for layer in state.cache.layers:  # each kept row copied once, into new buffers
            old = layer.keys, layer.values
            keys, values = _new_slots(layer, old, len(rows), old[0].shape[-2] - start)
            for j, r in enumerate(rows):
                keys[j], values[j] = old[0][r, :, start:], old[1][r, :, start:]
        shared = state.rope[0] is state.positions[0]
        state.valid, state.positions = valid[:, start:], [cut(p) for p in state.positions]
        state.rope = list(state.positions) if shared else [cut(r) for r in state.rope]
        state.seen, state.next_rope = state.seen[index], state.next_rope[index]
        other.recorder = _map_stats(self.recorder, lambda t, _: cut(t))
        other.record = self.record
        return other


def _new_slots(layer, like: tuple, batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """New (keys, values) of `batch` rows and `length` slots made `layer`'s cache, for the caller to fill:
    inside a GrowingLayer's buffers with spare room, so the next append writes in place."""
    from lightning_bench.sparsity.growing_layer import GrowingLayer

    if isinstance(layer, GrowingLayer):
        return layer.reserve(like[0], like[1], batch, length)
    layer.keys = like[0].new_empty(batch, *like[0].shape[1:-2], length, like[0].shape[-1])
    layer.values = like[1].new_empty(batch, *like[1].shape[1:-2], length, like[1].shape[-1])
    return layer.keys, layer.values


def _map_stats(recorder, change):
    """A shallow copy of `recorder` (an AttentionRecorder, or None) with every statistic `change(tensor,
    (layer, name))`, in new dicts (what a compression re-gathers, leaving the original as it was)."""
    if recorder is None:
        return None
    out = copy.copy(recorder)
    out.layers = {i: {name: change(t, (i, name)) for name, t in stats.items()} for i, stats in recorder.layers.items()}
    return out
