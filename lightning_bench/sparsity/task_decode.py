"""A generative task's prompt on the KV engine: `generate_for_task` (one example, batch 1).

A prompt is a context (the document), a question, and a cue: what follows the user's text (the chat
template's closing turn and assistant header, then the answer prefix). The protocols are kvpress's
(its pipeline and evaluation's query_aware): a span is prefilled and compressed, the rest is fed on the
compressed cache, and every answer token comes from the compressed cache; the cue is never evicted.

query_aware     compress context + question; feed the cue; decode.
query_agnostic  compress the context only (the method and its statistics never see the question); feed
                question + cue; decode. This is what a cache built once per document and reused for many
                questions holds.
A prompt with nothing after its span (no cue and, for query_agnostic, no question) holds its last token
back as the fed part, so no answer token is ever read from the dense prefill's logits. PROTOCOL_VERSION 2
names this rule in the records (version 1 took the first answer token from the dense prefill and let the
method evict the cue).

The prefill does not depend on the method, only the statistics recorded during it do: `prefill_prompt`
records those of every method given (one recorder per distinct `Needs`, each exactly what it computes
alone) and `continue_rows` continues it with many methods, budgets and draws as the rows of one batch,
each row giving the tokens of a separate call (tests/test_batched_continuation.py). With `interval` > 0
the cache is re-compressed every `interval` decoding steps (decode.Compress) to (1 - sparsity) of
everything seen or `budget_tokens`; with 0 only the first compression happens and statistics stop being
recorded after it. Sparsity 0 never compresses, so it reproduces dense decoding token for token. Decoding
and stops are sampling.Decoding, the rule of `lightning_bench test --task`.

Metered (KVRecord): from the first compression on, after it and after every later forward, so
`kv_bytes_peak` is the largest compressed cache and `dense_kv_bytes_peak` the uncompressed one at the
same moments; the dense prefill before it is `kv_bytes_prefill` (query_aware: the same for every method).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch

from lightning_bench.errors import ConfigError
from lightning_bench.sparsity.capture import AttentionRecorder, RecorderFanOut
from lightning_bench.sparsity.decode import Compress
from lightning_bench.sparsity.engine import Budget, KVEngine, KVRecord, positive_int
from lightning_bench.sparsity.methods import Method, make_method
from lightning_bench.sparsity.sampling import Decoding

PROTOCOLS = ("query_aware", "query_agnostic")
PROTOCOL_VERSION = 2  # the cue is fed after compression, every answer token from the compressed cache


def _as_row(ids, name: str, allow_empty: bool) -> torch.Tensor:
    """`ids` as a (1, T) long tensor (a 1-D sequence is taken as one row, None as no tokens); batch 1 only."""
    ids = torch.empty(1, 0, dtype=torch.long) if ids is None else torch.as_tensor(ids)
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


def span_length(Tc: int, Tq: int, Tcue: int, protocol: str) -> int:
    """The tokens a prompt's first compression applies to (its prefilled span, module docstring)."""
    span = Tc if protocol == "query_agnostic" else Tc + Tq
    fed = Tc + Tq + Tcue - span
    return span if fed else span - 1


def _check_fixed_budget(plan: Budget, prompt: "PrefilledPrompt") -> None:
    """A fixed budget larger than the span the first compression applies to: a one-line error."""
    plan.fits(prompt.span_tokens, f"the compressed span ({prompt.span_tokens} tokens, protocol {prompt.protocol})")


@dataclass
class PrefilledPrompt:
    """One prompt prefilled under a protocol, to be continued by any method (`continue_rows`).

    engine: over the dense cache of the span (module docstring). recorders: {Needs: AttentionRecorder} of
    the methods it was prefilled for. fed_ids: what is fed after compressing (never empty). seconds: the
    prefill's wall time. kv_prefill: the bytes of its dense cache."""

    engine: KVEngine
    recorders: dict
    fed_ids: torch.Tensor
    context_tokens: int
    question_tokens: int
    cue_tokens: int
    span_tokens: int
    protocol: str
    kv_prefill: int
    seconds: float

    @property
    def state(self):
        return self.engine.state


@torch.no_grad()
def prefill_prompt(net, context_ids: torch.Tensor, question_ids: Optional[torch.Tensor] = None,
                   protocol: str = "query_aware", methods=("dense",), method_params: Optional[dict] = None,
                   cue_ids: Optional[torch.Tensor] = None) -> PrefilledPrompt:
    """Prefill the span of one prompt (context, question, cue) for `protocol`, recording the attention
    statistics every method of `methods` (names or Method instances; method_params: {name: parameters})
    reads."""
    engine = KVEngine(net)
    if protocol not in PROTOCOLS:
        raise ConfigError(f"unknown KV-cache protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
    parts = [_as_row(context_ids, "context_ids", allow_empty=False), _as_row(question_ids, "question_ids", True),
             _as_row(cue_ids, "cue_ids", True)]
    whole = torch.cat(parts, dim=1).to(engine.device)
    Tc, Tq, Tcue = (part.shape[1] for part in parts)
    span = span_length(Tc, Tq, Tcue, protocol)
    if span < 1:
        raise ConfigError("the prompt has one token: nothing to compress before the answer; give a longer context")
    made = [make_method(m, **(method_params or {}).get(getattr(m, "name", m), {})) for m in methods]
    recorders = {m.needs: AttentionRecorder(m.needs) for m in made if m.needs}
    engine.recorder = None if not recorders else next(iter(recorders.values())) if len(recorders) == 1 \
        else RecorderFanOut(recorders.values())
    with engine.evaluating():
        start = engine.clock()
        engine.prefill(whole[:, :span])
        seconds = engine.clock() - start
    return PrefilledPrompt(engine, recorders, whole[:, span:], Tc, Tq, Tcue, span, protocol,
                           engine.state.kv_bytes(), seconds)


def continue_prompt(prompt: PrefilledPrompt, method: Union[str, Method] = "dense", *, interval: int = 0,
                    rerotate: bool = False, **row) -> KVRecord:
    """Compress `prompt`'s cache with `method` and generate: one row of `continue_rows` (`row`: the
    arguments of `continuation`). The prompt is left as it was, so another method can continue it again.
    The record's figures: context_tokens, question_tokens, compressed_tokens (what the first compression
    applied to), kept_tokens (the slots it kept), kv_bytes_prefill."""
    return continue_rows(prompt, [continuation(method, **row)], interval=interval, rerotate=rerotate)[0]


@dataclass
class Row:
    """One continuation of a batch: a method and budget, and how it decodes (its own generator, stops)."""

    plan: Budget
    decoding: Decoding


def continuation(method: Union[str, Method] = "dense", *, sparsity: Optional[float] = None,
                 budget_tokens: Optional[int] = None, rounding: str = "ceil", method_params: Optional[dict] = None,
                 **decoding) -> Row:
    """A checked `Row`: the budget as Budget.build's arguments, the decoding as sampling.Decoding's fields
    (max_new_tokens, temperature, top_p, generator, stop_ids, stop_strings, tokenizer)."""
    return Row(Budget.build(method, sparsity, budget_tokens, rounding, method_params), Decoding(**decoding).check())


@torch.no_grad()
def continue_rows(prompt: PrefilledPrompt, rows: list[Row], max_rows: int = 16, interval: int = 0,
                  rerotate: bool = False, attention_error: bool = False, meter_every: int = 1) -> list[KVRecord]:
    """Several methods, budgets or draws continuing one prefilled prompt as the rows of a batch: one
    prompt's part of `continue_prompts`."""
    return continue_prompts([(prompt, rows)], max_rows, interval, rerotate, attention_error, meter_every)[0]


@torch.no_grad()
def continue_prompts(work: list[tuple[PrefilledPrompt, list[Row]]], max_rows: int = 16, interval: int = 0,
                     rerotate: bool = False, attention_error: bool = False,
                     meter_every: int = 1) -> list[list[KVRecord]]:
    """The rows of one or several prefilled prompts (examples), each prompt with its own methods, budgets
    and draws, decoded as the rows of shared batches, `max_rows` at a time (what bounds memory), rows of
    similar cache lengths together: each row's cache compressed by its own method from its prompt's prefill
    (which is neither copied nor changed), what follows the span fed (one forward per prompt of a batch:
    each prompt's fed part has its own length), then every row's answer decoded together, rows of different
    prompts padded to the longest cache with filler slots (KVEngine.stack), a finished row leaving the
    batch. With `interval` > 0 every row is re-compressed by its method every `interval` steps, reading
    its running attention statistics: then a batch holds the rows whose methods read the same statistics
    (one recorder per batch). With `attention_error`, every forward of an evicting row is also compared with
    attention over its full cache (attention_error.FullCacheReference): its record's `attention_sums`; a
    masker stack's rows are metered by the stack itself. Both meters take the fed part, then every
    `meter_every`-th decoding step (0, N, 2N, ...): the reference's cost falls about N-fold. Greedy tokens,
    stops and records are those of each row decoded alone (tests/test_batched_continuation.py); sampled rows draw from their own generators. The records come
    back per prompt, in the order of `work`.

    Why each prompt is prefilled alone and only the continuations share a batch: a long span's prefill is
    already a large matrix product (batching gains nothing, and left padding would spend compute on
    fillers), while each decoding step is a matrix-vector product per row, which a batch amortises.

    Timings: a row's prefill_seconds is its prompt's prefill plus its own compression (and its share of
    its prompt's fed forward); each batched step's wall time is shared equally by the rows it decoded, so
    the rows' decode_seconds add up to the batch's. The meter counts a row's own slots (fillers left out)."""
    positive_int("max_rows", max_rows)
    positive_int("interval", interval, minimum=0)
    positive_int("meter_every", meter_every)
    if attention_error and rerotate:
        raise ConfigError("the attention error of eviction compares with the full cache at the true positions; "
                          "re-rotated keys have other ones: drop rerotate or the attention error")
    for prompt, rows in work:
        for row in rows:
            _check_fixed_budget(row.plan, prompt)
            needs = row.plan.method.needs
            if needs and needs not in prompt.recorders:
                raise ConfigError(f"the prompt was prefilled without the attention statistics {row.plan.method.name!r} "
                                  f"reads ({', '.join(needs.names())}); pass it to prefill_prompt(methods=...)")
    pairs = [(p, r) for p, (_, rows) in enumerate(work) for r in range(len(rows))]
    batches: dict = {}  # rows of one batch: all of them, or (interval) those reading the same statistics
    for pair in pairs:  # and one masker stack per batch (its forwards attend through it)
        method = work[pair[0]][1][pair[1]].plan.method
        batches.setdefault((method.needs if interval else None, id(getattr(method, "stack", None))), []).append(pair)
    records: list = [[None] * len(rows) for _, rows in work]
    for members in batches.values():
        for chunk in batches_by_cache_length(work, members, max_rows):
            for (p, r), record in zip(chunk, _decode_rows(work, chunk, interval, rerotate, attention_error,
                                                          meter_every)):
                records[p][r] = record
    return records


def batches_by_cache_length(work: list[tuple[PrefilledPrompt, list[Row]]], members: list[tuple[int, int]],
                            max_rows: int) -> list[list[tuple[int, int]]]:
    """`members` ((prompt, row) pairs of `work`) in batches of at most `max_rows` rows whose first
    compression keeps at most twice as many slots as the batch's shortest: every row of a batch attends
    over the longest row's slots (its own plus fillers), so a dense row batched with 10% budgets would make
    each of them as slow as itself. Within a batch the rows stay grouped by prompt."""
    kept = {(p, r): int(work[p][1][r].plan.keep(work[p][0].state).max()) for p, r in members}
    chunks: list[list[tuple[int, int]]] = []
    for pair in sorted(members, key=kept.get):
        if not chunks or len(chunks[-1]) == max_rows or kept[pair] > 2 * kept[chunks[-1][0]]:
            chunks.append([])
        chunks[-1].append(pair)
    return [sorted(chunk) for chunk in chunks]


def _compressed(engine: KVEngine, row: Row, rerotate: bool, record: KVRecord) -> float:
    """Compress one row alone (as `engine`, a single-row fork or selection) by its method; the seconds."""
    start = engine.clock()
    record.compressions += int(Compress(row.plan, rerotate)(engine))
    return engine.clock() - start


def _started(prompt: PrefilledPrompt, rows: list[Row], interval: int, rerotate: bool,
             records: list[KVRecord], reference=None, ids: tuple = ()) -> tuple[KVEngine, torch.Tensor]:
    """`rows` of one prompt compressed (each alone, from a fork of its prefill), stacked, and fed what
    follows the span: the batch and its last logits (len(rows), V). Meters each row before and after."""
    slot, dense = prompt.engine.slot_bytes, prompt.engine.dense_length
    engines = [prompt.engine.fork(prompt.recorders.get(row.plan.method.needs)) for row in rows]
    seconds = [_compressed(e, row, rerotate, rec) for e, row, rec in zip(engines, rows, records)]
    for engine, row, record in zip(engines, rows, records):
        if not interval:
            engine.recorder = None  # no later compression reads the statistics: stop computing them
        record.figures.update(kept_tokens=int(engine.state.n_valid.sum()), context_tokens=prompt.context_tokens,
                              question_tokens=prompt.question_tokens, cue_tokens=prompt.cue_tokens,
                              kv_bytes_prefill=prompt.kv_prefill, compressed_tokens=prompt.span_tokens)
        record.method = {**row.plan.describe(), "protocol": prompt.protocol, "protocol_version": PROTOCOL_VERSION,
                         "interval": interval, "question_tokens": prompt.question_tokens,
                         **({"rerotate": True} if rerotate else {})}
    batch = KVEngine.stack(engines)
    batch.masking = getattr(rows[0].plan.method, "stack", None)  # the context stays dense, what is fed is not
    if batch.masking is None and reference is not None:  # eviction against its full cache: rows `ids`
        batch.masking, reference.rows = reference, list(ids)
    del engines
    if batch.masking is not None:
        batch.masking.metering = True  # the fed part: always metered
    _meter(records, batch.state.n_valid.tolist(), slot, dense)
    start = batch.clock()  # what follows the span, on each row's compressed cache: one forward for the rows
    logits = batch.feed(prompt.fed_ids.expand(len(rows), -1), logits_to_keep=1)[:, -1]
    fed = (batch.clock() - start) / len(rows)
    _meter_attention(batch, records)
    _meter(records, batch.state.n_valid.tolist(), slot, dense + prompt.fed_ids.shape[1])
    for record, own in zip(records, seconds):
        record.prefill_seconds = prompt.seconds + own + fed
    return batch, logits


def _meter(records: list[KVRecord], lengths: list[int], slot: int, dense) -> None:
    """Append each row's cache length, its KV bytes and the dense cache's (`dense`: slots, one or per row)."""
    for i, (record, length) in enumerate(zip(records, lengths)):
        record.cache_lengths.append(length)
        record.kv_bytes.append(slot * length)
        record.dense_kv_bytes.append(slot * (dense[i] if isinstance(dense, list) else dense))


def _meter_attention(batch: KVEngine, records: list[KVRecord]) -> None:
    """Under a masker stack: each row's density and attention-error sums of the forward just made added to its
    record (`figures["attention_sums"]`, {layer: [kept, visible, error^2, dense^2]}; masking.attention_figures)."""
    if batch.masking is None:
        return
    from lightning_bench.sparsity.masking.stack import add_sums

    pending = batch.masking.drain()
    for i, record in enumerate(records):
        add_sums(record.figures.setdefault("attention_sums", {}),
                 {layer: sums[:, i].tolist() for layer, sums in pending.items()})


def _decode_rows(work: list[tuple[PrefilledPrompt, list[Row]]], chunk: list[tuple[int, int]], interval: int,
                 rerotate: bool, attention_error: bool = False, meter_every: int = 1) -> list[KVRecord]:
    """The rows of `chunk` ((prompt, row) pairs, grouped by prompt) decoded as one batch; their records."""
    rows = [work[p][1][r] for p, r in chunk]
    records = [KVRecord(forwards=work[p][0].engine.record.forwards) for p, _ in chunk]
    by_prompt: dict = {}
    for i, (p, _) in enumerate(chunk):
        by_prompt.setdefault(p, []).append(i)
    slot = work[chunk[0][0]][0].engine.slot_bytes
    reference = None
    if attention_error and getattr(rows[0].plan.method, "stack", None) is None:
        from lightning_bench.sparsity.attention_error import FullCacheReference

        reference = FullCacheReference()
        for i, (p, _) in enumerate(chunk):
            reference.add_row(i, work[p][0].state.cache)
    with work[chunk[0][0]][0].engine.evaluating():
        parts, logits = [], []
        for p, members in by_prompt.items():
            prompt = work[p][0]
            part, last = _started(prompt, [rows[i] for i in members], interval, rerotate, [records[i] for i in members],
                                  reference, members)
            parts.append(part)
            logits.append(last)
        batch = parts[0] if len(parts) == 1 else KVEngine.stack(parts)
        logits = torch.cat(logits)
        dense = [work[p][0].engine.dense_length + work[p][0].fed_ids.shape[1] for p, _ in chunk]
        del parts
        active = list(range(len(rows)))
        tokens = [[row.decoding.pick(logits[r])] for r, row in enumerate(rows)]
        stopped = [row.decoding.stop_reason(t) for row, t in zip(rows, tokens)]
        while True:
            going = [i for i, r in enumerate(active)
                     if stopped[r] is None and len(tokens[r]) < rows[r].decoding.max_new_tokens]
            if not going:
                break
            start, step = batch.clock(), len(tokens[active[0]]) - 1  # decoding steps done so far
            if len(going) < len(active):
                batch, active = batch.select(going), [active[i] for i in going]
            if step and interval and step % interval == 0:  # each row re-compressed alone, then batched again
                singles = [batch.select([i]) for i in range(len(active))]
                for single, r in zip(singles, active):
                    _compressed(single, rows[r], rerotate, records[r])
                batch = KVEngine.stack(singles)
            if reference is not None:
                reference.rows = list(active)
            if batch.masking is not None:
                batch.masking.metering = step % meter_every == 0
            logits = batch.step(torch.tensor([tokens[r][-1] for r in active], device=batch.device))
            for i, r in enumerate(active):
                tokens[r].append(rows[r].decoding.pick(logits[i]))
                stopped[r] = rows[r].decoding.stop_reason(tokens[r])
            _meter([records[r] for r in active], batch.state.n_valid.tolist(), slot,
                   [dense[r] + step + 1 for r in active])
            _meter_attention(batch, [records[r] for r in active])
            share = (batch.clock() - start) / len(active)
            for r in active:
                records[r].decode_seconds += share
        if batch.masking is not None:
            batch.masking.metering = True  # a stack is shared by the cell's examples: the next fed part is metered
    for r, record in enumerate(records):
        record.tokens, record.stopped = tokens[r], stopped[r]
        record.forwards += len(tokens[r])  # the fed part's, then one per decoded token after the first
    return records


def generate_for_task(net, context_ids: torch.Tensor, question_ids: Optional[torch.Tensor] = None,
                      method: Union[str, Method] = "dense", *, protocol: str = "query_aware", interval: int = 0,
                      rerotate: bool = False, cue_ids: Optional[torch.Tensor] = None, **row) -> KVRecord:
    """Generate the answer to one prompt (context + question) with `method` compressing the KV cache.

    Args:
        net: as KVEngine's. context_ids: (1, Tc) the context (document) tokens; question_ids: (1, Tq), or
            None / empty; cue_ids: (1, Tcue) what follows the user's text (template turn, answer prefix), or None.
        protocol: "query_aware" or "query_agnostic" (module docstring).
        interval: re-compress every `interval` decoding steps (0: only the first compression).
        rerotate: kept keys re-rotated to contiguous positions.
        row: `continuation`'s arguments: sparsity, budget_tokens (at most the tokens the first compression
            applies to), rounding, method_params (as Budget.build); max_new_tokens, stop_ids (token ids that
            end the generation, kept in `tokens`), stop_strings (texts that end it once
            tokenizer.decode(tokens) holds one), temperature (0 = greedy, else nucleus sampling with top_p
            from `generator`, None = torch's global one).
    """
    one = continuation(method, **row)  # every argument is checked before the (possibly long) prefill
    positive_int("interval", interval, minimum=0)
    Tc, Tq, Tcue = (_as_row(ids, name, name != "context_ids").shape[1] for ids, name in
                    ((context_ids, "context_ids"), (question_ids, "question_ids"), (cue_ids, "cue_ids")))
    one.plan.fits(span_length(Tc, Tq, Tcue, protocol), f"the compressed span (protocol {protocol})")
    prompt = prefill_prompt(net, context_ids, question_ids, protocol, [one.plan.method], cue_ids=cue_ids)
    return continue_rows(prompt, [one], interval=interval, rerotate=rerotate)[0]
