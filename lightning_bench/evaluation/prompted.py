"""Prompted scoring of a LanguageModule: loglikelihood of continuations and greedy generation.

The request kinds of lm-evaluation-harness, run inside Lightning's test loop so that every model
family, `--bits` and `--sparsity` compose with them (all logits come from `module.lm_forward`):

* `loglikelihood` rows: context + one continuation; the row's labels mark the continuation tokens
  (everything else is IGNORE_INDEX), and the step returns the summed log-probability of those tokens
  and whether each was the greedy choice.
* `next_token` rows: when every choice of a question is one token after the same context (MMLU's
  " A".." D", yes/no, ...), one forward of the context scores all choices from the last position's
  distribution. Identical to scoring each choice as its own row, at 1/n of the cost.
* `generate` rows (one prompt per batch: no padding effects): greedy decoding until a token that
  contains the stop string or `max_new_tokens`; for SQuAD v2 the probability of the whole no-answer
  string after the prompt (one teacher-forced forward) is returned for the no-answer threshold.

Tokenisation follows lm-evaluation-harness: the continuation tokens are those of
encode(context + continuation) after the longest common prefix with encode(context), so a token that
merges across the boundary is scored as part of the continuation. No BOS is added to a non-empty
context (lm-eval's rule for loglikelihood requests). Too-long rows lose tokens from the left.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch
import torch.nn.functional as F

from lightning_bench.errors import ConfigError, DivergedError
from lightning_bench.evaluation.windows import IGNORE_INDEX


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


def encode_generation(tokenizer, request_id: int, context: str, max_length: int, max_new_tokens: int) -> EncodedRequest:
    tokens = tokenizer.encode(context)
    room = max_length - max_new_tokens
    if room < 8:
        raise ConfigError(f"--data.max_length {max_length} leaves no room for a prompt after --data.max_new_tokens "
                          f"{max_new_tokens}; raise max_length or lower max_new_tokens")
    cut = max(0, len(tokens) - room)
    return EncodedRequest("generate", request_id, tokens[cut:], truncated=cut)


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


@torch.no_grad()
def score_batch(module, batch: dict, generation: Optional[dict] = None) -> dict:
    """What the test step returns for a request batch (CPU tensors / lists, keyed by request)."""
    kind = batch["kind"]
    if kind == "generate":
        return generate(module, batch, **(generation or {}))
    labels = batch["labels"]
    keep = (labels != IGNORE_INDEX).any(0).nonzero().squeeze(1)
    logp = F.log_softmax(module.lm_forward(batch["input_ids"], logits_to_keep=keep).logits.float(), dim=-1)
    labels = labels[:, keep]
    if kind == "next_token":
        last = (labels != IGNORE_INDEX).long().cumsum(1).argmax(1)  # the one scored column of each row
        rows = logp[torch.arange(len(logp)), last]
        _check_finite(rows, module)
        loglik = [rows[i, torch.tensor(c, device=rows.device)].double().cpu().tolist()
                  for i, c in enumerate(batch["choice_tokens"])]
        top = rows.argmax(-1).tolist()
        greedy = [[top[i] == t for t in c] for i, c in enumerate(batch["choice_tokens"])]  # per choice
        return {"kind": kind, "request_id": batch["request_id"].tolist(), "loglik": loglik, "greedy": greedy}
    mask = labels != IGNORE_INDEX
    token_logp = logp.gather(-1, labels.clamp_min(0)[..., None])[..., 0].masked_fill(~mask, 0.0)
    _check_finite(token_logp, module)
    is_greedy = ((logp.argmax(-1) == labels) | ~mask).all(1)
    return {"kind": kind, "request_id": batch["request_id"].tolist(),
            "choice_index": batch["choice_index"].tolist(), "loglik": token_logp.sum(1).double().cpu().tolist(),
            "greedy": is_greedy.cpu().tolist()}


def _check_finite(scored: torch.Tensor, module) -> None:
    """NaN compares false, so argmax/acc would still give a finite, meaningless score. Checking only the
    scored values is enough (a NaN logit makes its whole row's log-softmax NaN) and spares a full-vocabulary
    scan per batch."""
    if scored.isnan().any():
        raise DivergedError("the model's log-probabilities are nan on a test request: its outputs are not finite",
                            "test/loglikelihood", float("nan"), module.global_step)


def stop_token_ids(tokenizer, stop: str) -> set[int]:
    """Ids whose text contains `stop` (a newline can hide inside a merged token such as ".\\n\\n")."""
    vocab_size = tokenizer.vocab_size
    return {i for i in range(vocab_size) if stop in tokenizer.decode([i])}


@torch.no_grad()
def generate(module, batch: dict, tokenizer=None, stop_ids: frozenset = frozenset(), max_new_tokens: int = 32,
             no_answer_tokens: Optional[list[int]] = None) -> dict:
    """Greedy decoding of one prompt through `lm_forward` (every family; under --sparsity the
    evicting forward). Each step re-reads the whole sequence: these models need no KV-cache API and
    the eviction protocol stays that of the loglikelihood rows. HF models without eviction use their
    own KV cache through `generate`, which is greedy-equivalent (tests/test_prompted.py)."""
    ids = batch["input_ids"]
    if ids.shape[0] != 1:
        raise ValueError("generation batches hold one prompt")
    new: list[int] = []
    # under KV eviction every step must go through the evicting lm_forward, not the network's own cache
    evicting = getattr(module, "active_eviction", None) is not None
    net = getattr(module, "net", None)
    if not evicting and hasattr(net, "generate") and hasattr(net, "config") and not getattr(net.config, "is_encoder_decoder", False):
        from transformers import GenerationConfig

        # a clean config: the checkpoint's own generation_config (repetition penalty, min length, ...)
        # would make this differ from plain greedy decoding
        config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=0,
                                  eos_token_id=sorted(stop_ids) or None)
        out = net.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)
        new = out[0, ids.shape[1]:].tolist()
    else:
        seq = ids
        for step in range(max_new_tokens):
            last = torch.tensor([seq.shape[1] - 1], device=seq.device)
            logits = module.lm_forward(seq, logits_to_keep=last).logits[0, -1].float()
            token = int(logits.argmax())
            new.append(token)
            if token in stop_ids:
                break
            seq = torch.cat([seq, seq.new_tensor([[token]])], dim=1)
    # the stop token itself is not part of the answer (a newline inside it is cut by the scorer anyway)
    text = tokenizer.decode(new[:-1] if new and new[-1] in stop_ids else new) if tokenizer is not None else ""
    na_prob = None
    if no_answer_tokens:  # P(the whole no-answer string | prompt): one teacher-forced forward
        seq = torch.cat([ids, ids.new_tensor([no_answer_tokens])], dim=1)
        positions = torch.arange(ids.shape[1] - 1, seq.shape[1] - 1, device=ids.device)
        logp = F.log_softmax(module.lm_forward(seq[:, :-1], logits_to_keep=positions).logits[0].float(), dim=-1)
        na_prob = float(logp.gather(-1, seq.new_tensor(no_answer_tokens)[:, None]).sum().exp())
    return {"kind": "generate", "request_id": batch["request_id"].tolist(), "tokens": [new], "text": [text],
            "no_answer_prob": [na_prob]}
