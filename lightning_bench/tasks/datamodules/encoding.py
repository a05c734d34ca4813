"""Downstream requests encoded for a causal LM: the data preparation of prompted scoring (the scoring
itself is evaluation/request_scoring.py, which imports this; the task layer never imports evaluation).

Tokenisation follows lm-evaluation-harness: the continuation tokens are those of
encode(context + continuation) after the longest common prefix with encode(context), so a token that
merges across the boundary is scored as part of the continuation. No BOS is added to a non-empty
context (lm-eval's rule for loglikelihood requests). Too-long rows lose tokens from the left; a
generation prompt with a document loses the document's middle (`fit_document`).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Optional

import torch

from lightning_bench.errors import ConfigError
from lightning_bench.data.windows import IGNORE_INDEX

REQUEST_KINDS = ("loglikelihood", "next_token", "generate")  # the batches prompted scoring reads


@dataclass
class EncodedRequest:
    """One request of one example, ready to batch. `request_id` indexes the DataModule's request list."""

    kind: str  # loglikelihood | next_token | generate
    request_id: int
    tokens: list[int]  # the model input (context + continuation minus its last token, or the prompt)
    scored_from: int = 0  # loglikelihood: first position whose label is scored
    targets: list[int] = field(default_factory=list)  # loglikelihood: continuation tokens (the labels)
    choice_index: int = 0  # loglikelihood: which choice this row scores
    choice_tokens: list[int] = field(default_factory=list)  # next_token: one token per choice
    truncated: int = 0  # tokens cut from the left to fit max_length
    cue: int = 0  # generate: the last tokens that follow the user's text (template turn, answer prefix)


def split_continuation(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    whole = tokenizer.encode(context + continuation)
    ctx = tokenizer.encode(context)
    common = 0
    for a, b in zip(ctx, whole):
        if a != b:
            break
        common += 1
    if common == len(whole):  # the continuation added nothing of its own: score at least one token
        common -= 1
    return whole[:common], whole[common:]


def encode_multiple_choice(tokenizer, request_id: int, context: str, choices, max_length: int) -> list[EncodedRequest]:
    pairs = [split_continuation(tokenizer, context, c) for c in choices]
    same_context = all(ctx == pairs[0][0] for ctx, _ in pairs)
    single = all(len(cont) == 1 for _, cont in pairs)
    if same_context and single and len({cont[0] for _, cont in pairs}) == len(pairs) and pairs[0][0]:
        ctx = pairs[0][0]
        cut = max(0, len(ctx) - max_length)
        return [EncodedRequest("next_token", request_id, ctx[cut:], choice_tokens=[c[0] for _, c in pairs],
                               truncated=cut)]
    rows = []
    for index, (ctx, cont) in enumerate(pairs):
        whole = ctx + cont
        if len(cont) >= max_length:
            raise ConfigError(f"a continuation of {len(cont)} tokens does not fit --data.max_length {max_length}; "
                              "raise it")
        cut = max(0, len(whole) - 1 - max_length)
        tokens = whole[cut:-1]
        rows.append(EncodedRequest("loglikelihood", request_id, tokens, scored_from=len(tokens) - len(cont),
                                   targets=cont, choice_index=index, truncated=cut))
    return rows


def encode_generation(tokenizer, request_id: int, context: str, cue_start: int, max_length: int,
                      max_new_tokens: int, document: Optional[str] = None, label: str = "",
                      cut_left: bool = True) -> EncodedRequest:
    """The prompt's tokens, fitted into max_length - max_new_tokens: a `document` (a part of `context`)
    loses tokens from its middle (`fit_document`); another prompt loses tokens from the left (k-shot
    contexts, code before the line to complete) or, with cut_left=False (an instruction and a question),
    is an error. `cue_start`: where the text after the user's begins (its tokens are the request's `cue`)."""
    room = max_length - max_new_tokens
    if room < 8:
        raise ConfigError(f"--data.max_length {max_length} leaves no room for a prompt after --data.max_new_tokens "
                          f"{max_new_tokens}; raise max_length or lower max_new_tokens")
    if document is not None:  # the query_aware parts of split_prompt: `test` feeds what the downstream cell feeds
        parts, cut = split_prompt(tokenizer, context, cue_start, document, room, label)
        ctx, question, cue = parts["query_aware"]
        return EncodedRequest("generate", request_id, ctx + question + cue, truncated=cut, cue=len(cue))
    # the user's text and the cue encoded on their own, as the query_aware protocol (split_prompt) feeds them
    cue = tokenizer.encode(context[cue_start:])
    tokens = tokenizer.encode(context[:cue_start]) + cue
    if len(tokens) <= room:
        return EncodedRequest("generate", request_id, tokens, cue=len(cue))
    if not cut_left:
        raise ConfigError(f"{label or 'a prompt'}: {len(tokens)} tokens do not fit --data.max_length minus "
                          f"--data.max_new_tokens ({room}) and it has no document to shorten; raise max_length")
    cut = len(tokens) - room
    return EncodedRequest("generate", request_id, tokens[cut:], truncated=cut, cue=min(len(cue), room - 1))


def encode_parts(tokenizer, text: str, cuts: list[int]) -> list[list[int]]:
    """`text` encoded whole (as `tokenizer.encode`), split between tokens at the character offsets `cuts`
    (ascending; a token straddling one goes after it), so every protocol and `lightning_bench test` feed the
    same tokens; a tokenizer without offsets (word-level) encodes the pieces on their own."""
    bounds = [0, *cuts, len(text)]
    tok = getattr(tokenizer, "tok", None)
    if not getattr(tok, "is_fast", False):
        return [tokenizer.encode(text[a:b]) for a, b in zip(bounds, bounds[1:])]
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    ids = list(enc["input_ids"])
    if ids != tokenizer.encode(text):  # the same call `encode` makes; anything else would be a bug
        raise RuntimeError("offsets encoding differs from the tokenizer's encode")
    ks = [0, *(sum(1 for _, stop in enc["offset_mapping"] if stop <= c) for c in cuts), len(ids)]
    return [ids[a:b] for a, b in zip(ks, ks[1:])]


def fit_document(tokenizer, context: str, document: str, room: int, label: str = "") -> tuple[str, str, int]:
    """(`context` with the middle of `document` removed so that it encodes to at most `room` tokens, the
    shortened document, document tokens removed). The kept head and tail of the document are joined
    directly, as LongBench truncates; the text is re-encoded whole, so the tokens are the tokenizer's own
    for the text shown. The instruction and question around the document are never cut: a prompt that
    does not fit without its document is an error."""
    start = context.rindex(document)  # the query's own document comes last (after any k-shot examples)
    head, tail = context[:start], context[start + len(document):]
    doc = tokenizer.encode(document)
    keep = len(doc) - (len(tokenizer.encode(context)) - room)
    if keep >= len(doc):
        return context, document, 0
    while True:
        if keep <= 0:
            bare = len(tokenizer.encode(head + tail))
            raise ConfigError(f"{label or 'a prompt'}: {bare} tokens without its document do not fit --data.max_length "
                              f"minus --data.max_new_tokens ({room}); raise max_length or lower max_new_tokens")
        first = keep // 2
        short = tokenizer.decode(doc[:first]) + tokenizer.decode(doc[len(doc) - (keep - first):])
        if len(tokenizer.encode(head + short + tail)) <= room:
            return head + short + tail, short, len(doc) - keep
        keep -= len(tokenizer.encode(head + short + tail)) - room  # re-encoding across the joint can add a token or two


def split_prompt(tokenizer, prompt: str, cue_start: int, document: Optional[str], room: int,
                 label: str = "") -> tuple[dict[str, tuple[list[int], list[int], list[int]]], int]:
    """({protocol: (context, question, cue tokens)}, document tokens removed) of a rendered generation prompt,
    for the compression protocols (sparsity/task_decode.py): the context runs to the end of the (middle-cut)
    document, the question to the end of the user's text (`cue_start`), the cue is the rest (the chat
    template's closing turn and assistant header, the answer prefix); without a document the user's whole
    text is context. Each protocol's two parts are encoded on their own, as kvpress's pipeline encodes them
    (query_aware: the user's text | the cue; query_agnostic: the context | question + cue), and split
    between tokens inside a part (`encode_parts`); `encode_generation` encodes the query_aware way, so
    `lightning_bench test` feeds the same tokens. Over `room`, the document loses its middle (never the
    question or the cue)."""
    fit = room
    while True:  # encoded in parts a prompt can take a token or two more than whole: fit it that much tighter
        cut, short, short_doc = 0, prompt, document
        if document is not None:
            short, short_doc, cut = fit_document(tokenizer, prompt, document, fit, label)
        cue_at = len(short) - (len(prompt) - cue_start)
        end = short.rindex(short_doc) + len(short_doc) if document is not None else cue_at
        context, question = encode_parts(tokenizer, short[:cue_at], [end])
        parts = {"query_aware": (context, question, tokenizer.encode(short[cue_at:])),
                 "query_agnostic": (tokenizer.encode(short[:end]), *encode_parts(tokenizer, short[end:], [cue_at - end]))}
        over = max(sum(map(len, p)) for p in parts.values()) - room
        if over <= 0:
            return parts, cut
        if document is None or fit - over < 8:
            raise ConfigError(f"{label or 'a prompt'}: {room + over} tokens do not fit --max_length minus "
                              f"--max_new_tokens ({room})" + ("" if document is not None else " and it has no "
                                                               "document to shorten") + "; raise max_length")
        fit -= over


def collate(rows: list[EncodedRequest], pad_id: int) -> dict:
    """A homogeneous batch, right-padded (causal models: padding after a row cannot change it)."""
    kind = rows[0].kind
    width = max(len(r.tokens) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, :len(r.tokens)] = torch.tensor(r.tokens)
        if kind == "loglikelihood":
            labels[i, r.scored_from:len(r.tokens)] = torch.tensor(r.targets)
        else:
            # the last position is the scored one (also what SparsityCallback counts as scored)
            labels[i, len(r.tokens) - 1] = r.choice_tokens[0] if r.choice_tokens else 0
    batch = {"kind": kind, "input_ids": input_ids, "labels": labels,
             "request_id": torch.tensor([r.request_id for r in rows]),
             "choice_index": torch.tensor([r.choice_index for r in rows])}
    if kind == "next_token":
        batch["choice_tokens"] = [r.choice_tokens for r in rows]
    return batch


def stop_token_ids(tokenizer, stop: str) -> set[int]:
    """Ids whose text contains `stop` (a newline can hide inside a merged token such as ".\\n\\n")."""
    return {i for i, text in enumerate(_token_texts(tokenizer)) if stop in text}


_TEXTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _token_texts(tokenizer) -> list[str]:
    """Every id's decoded text, decoded once per tokenizer: a task asks for each of its stops, and decoding
    the whole vocabulary takes about a second."""
    if tokenizer not in _TEXTS:
        _TEXTS[tokenizer] = [tokenizer.decode([i]) for i in range(tokenizer.vocab_size)]
    return _TEXTS[tokenizer]
