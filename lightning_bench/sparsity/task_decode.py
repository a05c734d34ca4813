"""KV-cache compression on a generative task's prompt: `generate_for_task` (one example, batch 1).

Every method runs through ONE mechanism, the one of `decode.generate_with_eviction`: prefill, score the
cached tokens, keep the top `keep` (cache.EvictionState.compress), continue generating on the pruned
cache; only the importance function (methods.py) differs. The prompt is split into a context (the
document) and a question, and the tokens fed are always context + question; `protocol` says when the
first compression happens:

query_aware     prefill context + question densely; the first new token comes from the prefill's last
                logits; compress to the budget over all Tc + Tq tokens; decode.
query_agnostic  prefill the context only; compress it to the budget over its Tc tokens (the method, and
                its attention statistics, never see the question: the recorder observes only the
                context's queries and keys before that compression); feed the question on the
                compressed cache (appended, never compressed by this first compression); the first new
                token comes from the last question position; decode. The compressed context is what a
                cache built once per document and reused for many questions would hold.

Without a question both protocols are the same run (the record says "question_tokens": 0).

The prefill does not depend on the method (only the statistics recorded during it do), so it can be
shared: `prefill_prompt` prefills once, recording the statistics of every method it is given (one
recorder per distinct `Needs`, each computing exactly what it computes alone), and `continue_prompt`
compresses a copy of it with one method and decodes. `generate_for_task` is the two in a row; the
downstream driver prefills each example once per (task, protocol, seed) and continues it for every
method and budget, which gives the same tokens as separate calls (tests/test_task_decode.py) at a
fraction of the cost on long contexts.
With `interval` > 0 the cache is re-compressed every `interval` decoding steps, keeping (1 - sparsity)
of everything seen so far (context, question, generated tokens) or `budget_tokens`, as
`generate_with_eviction` does; with interval 0 only the first compression happens (and the attention
statistics stop being recorded after it). Sparsity 0 skips every compression (cache.py), so it
reproduces dense decoding token for token.

Decoding is greedy (temperature 0) or nucleus sampling (`prompted.sample_token`) from the given
torch.Generator, and stops at a token of `stop_ids`, once the decoded new text holds one of
`stop_strings`, or after `max_new_tokens`, as `prompted.generate` does.

Memory: `kv_bytes_peak` is the largest cache (keys and values of every layer) held from the first
compression on, measured right after it and after every later forward (the question's, each decoding
step's); `dense_kv_bytes_peak` is what an uncompressed cache would hold at the same moments. The dense
prefill that precedes the first compression is `kv_bytes_prefill` (for query_aware it is the whole
prompt's, the same for every method).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Optional, Union

import torch

from lightning_bench.errors import ConfigError
from lightning_bench.evaluation.prompted import sample_token
from lightning_bench.sparsity.cache import EvictionState, budget, check_rounding
from lightning_bench.sparsity.capture import AttentionRecorder, RecorderFanOut
from lightning_bench.sparsity.decode import check_budget, extend, prefill, resolve_network
from lightning_bench.sparsity.methods import Method, make_method

PROTOCOLS = ("query_aware", "query_agnostic")


@dataclass
class TaskGeneration:
    """What one `generate_for_task` call produced (see the module docstring for the protocols).

    tokens: the generated tokens, the stop token included when one stopped the generation.
    stopped: "stop_token", "stop_string", or None (max_new_tokens reached).
    compressed_tokens: tokens the first compression applied to (query_aware: context + question,
        query_agnostic: context). kept_tokens: cache slots it kept (== compressed_tokens when it evicted
        nothing: dense, sparsity 0).
    cache_length_final: cache slots at the end (the last generated token is never fed).
    kv_bytes_peak / dense_kv_bytes_peak / kv_bytes_prefill: see the module docstring.
    compressions: evictions that removed something (0 for dense and sparsity 0).
    prefill_seconds: prefill + first compression (+ the question's forward for query_agnostic);
        decode_seconds: the rest; decode_tokens_per_s: tokens generated after the first / decode_seconds
        (None without a decoding step).
    method: method.describe() plus the budget, protocol, interval and token counts.
    """

    tokens: list[int]
    stopped: Optional[str]
    context_tokens: int
    question_tokens: int
    compressed_tokens: int
    kept_tokens: int
    cache_length_final: int
    kv_bytes_peak: int
    dense_kv_bytes_peak: int
    compressions: int
    prefill_seconds: float
    decode_seconds: float
    decode_tokens_per_s: Optional[float]
    method: dict
    kv_bytes_prefill: int = 0


def _as_row(ids, name: str, allow_empty: bool) -> torch.Tensor:
    """`ids` as a (1, T) long tensor (a 1-D sequence is taken as one row); batch 1 only."""
    ids = torch.as_tensor(ids)
    if ids.dim() == 1:
        ids = ids[None]
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ConfigError(f"{name} must be one row (1, T): generate_for_task decodes one example at a time, "
                          f"got shape {tuple(ids.shape)}")
    if ids.shape[1] == 0 and not allow_empty:
        raise ConfigError(f"{name} is empty: give at least one context token")
    if ids.dtype not in (torch.long, torch.int32, torch.int64):
        raise ConfigError(f"{name} must hold integer token ids, got {ids.dtype}")
    return ids.long()


def _check_decoding(interval, max_new_tokens, temperature, top_p, stop_strings, tokenizer) -> None:
    if isinstance(interval, bool) or not isinstance(interval, int) or interval < 0:
        raise ConfigError(f"--sparsity.interval must be an integer >= 0, got {interval!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ConfigError(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    if not temperature >= 0.0:
        raise ConfigError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise ConfigError(f"top_p must be in (0, 1], got {top_p}")
    if isinstance(stop_strings, str):
        raise ConfigError(f"stop_strings must be a sequence of strings, got the string {stop_strings!r}")
    if stop_strings and tokenizer is None:
        raise ConfigError("stop_strings need the tokenizer (to decode the new tokens); pass tokenizer=")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _check_fixed_budget(budget_tokens: Optional[int], Tc: int, Tq: int, protocol: str) -> int:
    """The tokens the first compression applies to; a fixed budget larger than them is a one-line error."""
    agnostic = protocol == "query_agnostic" and Tq > 0
    compressed = Tc if agnostic else Tc + Tq
    if budget_tokens is not None and budget_tokens > compressed:
        what = "the context" if agnostic else "the context + question"
        raise ConfigError(f"--sparsity.budget_tokens {budget_tokens} is larger than {what} ({compressed} tokens, "
                          f"protocol {protocol}); lower it or use a longer context")
    return compressed


@dataclass
class PrefilledPrompt:
    """One prompt prefilled under a protocol, to be continued by any method (`continue_prompt`).

    state / logits: the dense cache after the first forward (context + question for query_aware, the
        context for query_agnostic) and its last position's logits. recorders: {Needs: AttentionRecorder}
        of the methods it was prefilled for. question_ids: what query_agnostic feeds after compressing.
    seconds: the prefill's wall time. kv_prefill: the bytes of its dense cache."""

    state: EvictionState
    logits: torch.Tensor
    recorders: dict
    question_ids: torch.Tensor
    context_tokens: int
    question_tokens: int
    protocol: str
    agnostic: bool
    kv_prefill: int
    seconds: float

    @property
    def compressed_tokens(self) -> int:
        return self.context_tokens if self.agnostic else self.context_tokens + self.question_tokens


@torch.no_grad()
def prefill_prompt(net, context_ids: torch.Tensor, question_ids: Optional[torch.Tensor] = None,
                   protocol: str = "query_aware", methods=("dense",), method_params: Optional[dict] = None
                   ) -> PrefilledPrompt:
    """Prefill one prompt (context + question) for `protocol`, recording the attention statistics every
    method of `methods` (names or Method instances; method_params: {name: parameters}) reads."""
    net = resolve_network(net)
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown KV-cache protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    context_ids = _as_row(context_ids, "context_ids", allow_empty=False)
    question_ids = _as_row(question_ids if question_ids is not None else torch.empty(1, 0, dtype=torch.long),
                           "question_ids", allow_empty=True)
    made = [make_method(m, **(method_params or {}).get(getattr(m, "name", m), {})) for m in methods]
    recorders = {m.needs: AttentionRecorder(m.needs) for m in made if m.needs}
    Tc, Tq = context_ids.shape[1], question_ids.shape[1]
    agnostic = protocol == "query_agnostic" and Tq > 0
    was_training = net.training
    net.eval()
    device = next(net.parameters()).device
    context_ids, question_ids = context_ids.to(device), question_ids.to(device)
    observer = None if not recorders else next(iter(recorders.values())) if len(recorders) == 1 \
        else RecorderFanOut(recorders.values())
    try:
        _sync(device)
        start = time.perf_counter()
        first = context_ids if agnostic else torch.cat([context_ids, question_ids], dim=1)
        state, logits = prefill(net, first, torch.ones_like(first), observer)
        _sync(device)
        seconds = time.perf_counter() - start
    finally:
        net.train(was_training)
    return PrefilledPrompt(state, logits, recorders, question_ids, Tc, Tq, protocol, agnostic, state.kv_bytes(),
                           seconds)


@torch.no_grad()
def continue_prompt(net, prompt: PrefilledPrompt, method: Union[str, Method] = "dense", *,
                    sparsity: Optional[float] = None, budget_tokens: Optional[int] = None, interval: int = 0,
                    max_new_tokens: int = 32, stop_ids=frozenset(), stop_strings=(), tokenizer=None,
                    temperature: float = 0.0, top_p: float = 1.0, generator: Optional[torch.Generator] = None,
                    method_params: Optional[dict] = None, rounding: str = "ceil", reuse: bool = True
                    ) -> TaskGeneration:
    """Compress `prompt`'s cache with `method` and generate (arguments as `generate_for_task`). With
    `reuse` the prompt is left as it was (its cache and statistics are copied), so it can be continued
    again by another method; reuse=False consumes it."""
    net = resolve_network(net)
    method = make_method(method, **(method_params or {}))
    sparsity = check_budget(method, sparsity, budget_tokens)
    check_rounding(rounding)
    _check_decoding(interval, max_new_tokens, temperature, top_p, stop_strings, tokenizer)
    if method.needs and method.needs not in prompt.recorders:
        raise ConfigError(f"the prompt was prefilled without the attention statistics {method.name!r} reads "
                          f"({', '.join(method.needs.names())}); pass it to prefill_prompt(methods=...)")
    Tc, Tq, agnostic, protocol = prompt.context_tokens, prompt.question_tokens, prompt.agnostic, prompt.protocol
    compressed = _check_fixed_budget(budget_tokens, Tc, Tq, protocol)
    stop_ids = frozenset(int(t) for t in stop_ids)
    state, logits, question_ids = prompt.state, prompt.logits, prompt.question_ids
    recorder = prompt.recorders.get(method.needs) if method.needs else None
    if reuse:
        state, recorder = copy.deepcopy(state), copy.deepcopy(recorder)

    def keep_for(state) -> torch.Tensor:
        return budget(state.seen, sparsity, budget_tokens, rounding) if method.evicts else state.n_valid

    def pick(logits: torch.Tensor) -> int:
        row = logits[0].float()
        return int(row.argmax()) if temperature <= 0 else sample_token(row, temperature, top_p, generator)

    def stop_reason(tokens: list[int]) -> Optional[str]:
        if tokens[-1] in stop_ids:
            return "stop_token"
        if stop_strings and any(s in tokenizer.decode(tokens) for s in stop_strings):
            return "stop_string"
        return None

    was_training = net.training
    net.eval()
    device = next(net.parameters()).device
    try:
        _sync(device)
        start = time.perf_counter()
        per_token = prompt.kv_prefill // max(1, state.length)
        state.compress(method, keep_for(state), recorder)
        kept = int(state.n_valid.sum())
        if not interval:
            recorder = None  # no later compression reads the statistics: stop computing them
        held, dense = [state.kv_bytes()], [per_token * int(state.seen.sum())]
        if agnostic:
            logits = extend(net, state, question_ids, recorder, logits_to_keep=1)[:, -1]
            held.append(state.kv_bytes())
            dense.append(per_token * int(state.seen.sum()))
        tokens = [pick(logits)]
        _sync(device)
        decode_start = time.perf_counter()
        stopped = stop_reason(tokens)
        while stopped is None and len(tokens) < max_new_tokens:
            step = len(tokens) - 1  # decoding steps done so far
            if interval and step and step % interval == 0:
                state.compress(method, keep_for(state), recorder)
            logits = extend(net, state, torch.tensor([[tokens[-1]]], device=device), recorder)[:, -1]
            held.append(state.kv_bytes())
            dense.append(per_token * int(state.seen.sum()))
            tokens.append(pick(logits))
            stopped = stop_reason(tokens)
        _sync(device)
        end = time.perf_counter()
    finally:
        net.train(was_training)
    decode_seconds = end - decode_start
    steps = len(tokens) - 1
    return TaskGeneration(
        tokens=tokens, stopped=stopped, context_tokens=Tc, question_tokens=Tq, compressed_tokens=compressed,
        kept_tokens=kept, cache_length_final=state.length, kv_bytes_peak=max(held), dense_kv_bytes_peak=max(dense),
        compressions=state.compressions, prefill_seconds=prompt.seconds + decode_start - start,
        decode_seconds=decode_seconds,
        decode_tokens_per_s=steps / decode_seconds if steps and decode_seconds > 0 else None,
        method={**method.describe(), "sparsity": sparsity, "budget_tokens": budget_tokens, "rounding": rounding,
                "protocol": protocol, "interval": interval, "question_tokens": Tq},
        kv_bytes_prefill=prompt.kv_prefill)


def generate_for_task(net, context_ids: torch.Tensor, question_ids: Optional[torch.Tensor] = None,
                      method: Union[str, Method] = "dense", *, sparsity: Optional[float] = None,
                      budget_tokens: Optional[int] = None, protocol: str = "query_aware", interval: int = 0,
                      max_new_tokens: int = 32, stop_ids=frozenset(), stop_strings=(), tokenizer=None,
                      temperature: float = 0.0, top_p: float = 1.0, generator: Optional[torch.Generator] = None,
                      method_params: Optional[dict] = None, rounding: str = "ceil") -> TaskGeneration:
    """Generate the answer to one prompt (context + question) with `method` compressing the KV cache.

    Args:
        net: a transformers causal LM with a KV cache, or a LanguageModule whose `.net` is one.
        context_ids: (1, Tc) the context (document) tokens; question_ids: (1, Tq), or None / empty.
        method: registry name (methods.METHODS) or a Method instance; method_params: its parameters.
        sparsity: fraction of the cache evicted, in [0, 1); budget_tokens: a fixed number of slots kept
            instead (<= the tokens the first compression applies to). Exactly one of the two; neither for
            dense. rounding: how (1 - sparsity) * n is rounded ("ceil" or "floor", cache.budget).
        protocol: "query_aware" or "query_agnostic" (module docstring).
        interval: re-compress every `interval` decoding steps (0: only the first compression).
        max_new_tokens: most tokens generated; stop_ids: token ids that end the generation (kept in
            `tokens`); stop_strings: texts that end it once tokenizer.decode(tokens) holds one.
        temperature: 0 = greedy, else nucleus sampling with `top_p` from `generator` (a torch.Generator;
            None = torch's global one).
    """
    method = make_method(method, **(method_params or {}))
    # every argument is checked before the (possibly long) prefill
    check_budget(method, sparsity, budget_tokens)
    check_rounding(rounding)
    _check_decoding(interval, max_new_tokens, temperature, top_p, stop_strings, tokenizer)
    if budget_tokens is not None:  # a fixed budget larger than the first compression's span: one line, before the prefill
        Tq = 0 if question_ids is None else _as_row(question_ids, "question_ids", allow_empty=True).shape[1]
        _check_fixed_budget(budget_tokens, _as_row(context_ids, "context_ids", allow_empty=False).shape[1], Tq, protocol)
    prompt = prefill_prompt(net, context_ids, question_ids, protocol, [method])
    return continue_prompt(net, prompt, method, sparsity=sparsity, budget_tokens=budget_tokens, interval=interval,
                           max_new_tokens=max_new_tokens, stop_ids=stop_ids, stop_strings=stop_strings,
                           tokenizer=tokenizer, temperature=temperature, top_p=top_p, generator=generator,
                           rounding=rounding, reuse=False)
