"""Prompted scoring of a LanguageModule: loglikelihood of continuations and generation.

The request kinds of lm-evaluation-harness (encoded by tasks/datamodules/encoding.py), run inside
Lightning's test loop so that every model family, `--bits` and `--sparsity` compose with them:

* `loglikelihood` rows: context + one continuation; the row's labels mark the continuation tokens
  (everything else is IGNORE_INDEX), and the step returns the summed log-probability of those tokens
  and whether each was the greedy choice.
* `next_token` rows: when every choice of a question is one token after the same context (MMLU's
  " A".." D", yes/no, ...), one forward of the context scores all choices from the last position's
  distribution. Identical to scoring each choice as its own row, at 1/n of the cost.
* `generate` rows (one prompt per batch: no padding effects): decoding (sparsity.sampling: greedy or
  nucleus, stop ids and strings) until a stop or `max_new_tokens`; for SQuAD v2 the probability of the
  whole no-answer string after the prompt (one teacher-forced forward) for the no-answer threshold.

The logits of scored rows come from `logits(module, input_ids, logits_to_keep)` (default: the module's
`lm_forward`; under `--sparsity` the streaming logits of evaluator.Evaluation). Generation under a KV
method (`kv`, a sparsity StreamingEviction) runs on the KV engine exactly as the `downstream` command's
query-aware cell does (sparsity/task_decode.py: one prefill, one compression, decoding on the cache), so
the two give the same predictions.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from lightning_bench.errors import DivergedError
from lightning_bench.models.token_nll import IGNORE_INDEX
from lightning_bench.models.hf import end_of_turn_ids
from lightning_bench.sparsity.sampling import Decoding, draw_generator


def module_logits(module, input_ids: torch.Tensor, logits_to_keep=None) -> torch.Tensor:
    return module.lm_forward(input_ids, logits_to_keep=logits_to_keep).logits


@torch.no_grad()
def score_batch(module, batch: dict, generation: Optional[dict] = None, logits: Callable = module_logits,
                kv=None) -> dict:
    """What the test step returns for a request batch (CPU tensors / lists, keyed by request)."""
    kind = batch["kind"]
    if kind == "generate":
        return generate(module, batch, **(generation or {}), logits=logits, kv=kv)
    labels = batch["labels"]
    keep = (labels != IGNORE_INDEX).any(0).nonzero().squeeze(1)
    logp = F.log_softmax(logits(module, batch["input_ids"], keep).float(), dim=-1)
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


@torch.no_grad()
def generate(module, batch: dict, tokenizer=None, stop_ids: frozenset = frozenset(), max_new_tokens: int = 32,
             no_answer_tokens: Optional[list[int]] = None, stop_strings: tuple[str, ...] = (), samples: int = 1,
             temperature: float = 0.0, top_p: float = 1.0, seed: int = 0, logits: Callable = module_logits,
             kv=None, cue_tokens: int = 0) -> dict:
    """Decoding of one prompt: greedy, or `samples` draws at `temperature` / `top_p`, each from its own
    generator (sampling.draw_generator(seed, request id, draw)). Stops at a token in `stop_ids` (EOS, tokens
    holding a one-character stop) or once the new text holds one of `stop_strings` (multi-character stops
    such as HumanEval's "\ndef").

    Under a KV method (`kv`) the prompt's span is prefilled once on the KV engine and the draws continue it
    as the rows of one batch (task_decode, query-aware, compressed once after the prefill; the last
    `cue_tokens`, what follows the user's text, fed on the compressed cache). A generation also stops at
    the model's own end ids (generation_config: a chat model's end of turn). Otherwise HF models use their own KV
    cache through `generate` (greedy-equivalent, tests/test_downstream.py) and other families re-read the
    whole sequence through `lm_forward` at every step (they have no KV-cache API)."""
    ids = batch["input_ids"]
    if ids.shape[0] != 1:
        raise ValueError("generation batches hold one prompt")
    rid = int(batch["request_id"][0])
    stop_ids = frozenset(stop_ids) | end_of_turn_ids(getattr(module, "net", None))
    decodings = [Decoding(max_new_tokens, temperature, top_p, draw_generator(seed, rid, draw, temperature),
                          stop_ids, stop_strings, tokenizer) for draw in range(samples)]
    draws = _kv_draws(module, ids, kv, decodings, cue_tokens) if kv is not None else \
        [_decode(module, ids, d) for d in decodings]
    texts = [_answer_text(tokenizer, new, stop_ids) for new in draws]
    na_prob = None
    if no_answer_tokens:  # P(the whole no-answer string | prompt): one teacher-forced forward
        seq = torch.cat([ids, ids.new_tensor([no_answer_tokens])], dim=1)
        positions = torch.arange(ids.shape[1] - 1, seq.shape[1] - 1, device=ids.device)
        logp = F.log_softmax(logits(module, seq[:, :-1], positions)[0].float(), dim=-1)
        na_prob = float(logp.gather(-1, seq.new_tensor(no_answer_tokens)[:, None]).sum().exp())
    out = {"kind": "generate", "request_id": batch["request_id"].tolist(), "tokens": [draws[0]], "text": [texts[0]],
           "no_answer_prob": [na_prob]}
    if samples > 1:
        out["samples"] = [texts]
    return out


def _answer_text(tokenizer, new: list[int], stop_ids) -> str:
    # the stop token itself is not part of the answer (a newline inside it is cut by the scorer anyway)
    return tokenizer.decode(new[:-1] if new and new[-1] in stop_ids else new) if tokenizer is not None else ""


def _kv_draws(module, ids: torch.Tensor, kv, decodings: list[Decoding], cue_tokens: int) -> list[list[int]]:
    """The draws on the KV engine, the settings of the downstream command's query-aware cell (interval 0):
    one prefill of the user's text, the cue fed after compression, the draws continuing it as the rows of
    one batch."""
    from lightning_bench.sparsity.task_decode import Row, continue_rows, prefill_prompt

    cut = ids.shape[1] - cue_tokens
    prompt = prefill_prompt(module.net, ids[:, :cut], None, "query_aware", [kv.method], cue_ids=ids[:, cut:])
    records = continue_rows(prompt, [Row(kv.plan, decoding.check()) for decoding in decodings], rerotate=kv.rerotate)
    for record in records:  # the run's sparsity figures count the answers too
        kv.add_generation(record, prompt.engine.slot_bytes)
    return [record.tokens for record in records]


def _decode(module, ids, decoding: Decoding) -> list[int]:
    net = getattr(module, "net", None)
    if hasattr(net, "generate") and hasattr(net, "config") and not getattr(net.config, "is_encoder_decoder", False):
        return _hf_generate(net, ids, decoding)
    new: list[int] = []
    seq = ids
    while not new or not decoding.finished(new):
        last = torch.tensor([seq.shape[1] - 1], device=seq.device)
        new.append(decoding.pick(module.lm_forward(seq, logits_to_keep=last).logits[0, -1]))
        seq = torch.cat([seq, seq.new_tensor([[new[-1]]])], dim=1)
    return new


def _hf_generate(net, ids, decoding: Decoding) -> list[int]:
    from transformers import GenerationConfig

    # a clean config: the checkpoint's own generation_config (repetition penalty, min length, ...)
    # would make this differ from plain greedy decoding
    sampled = decoding.temperature > 0
    config = GenerationConfig(max_new_tokens=decoding.max_new_tokens, do_sample=sampled, num_beams=1, pad_token_id=0,
                              eos_token_id=sorted(decoding.stop_ids) or None,
                              **({"temperature": decoding.temperature, "top_p": decoding.top_p, "top_k": 0}
                                 if sampled else {}),
                              **({"stop_strings": list(decoding.stop_strings)} if decoding.stop_strings else {}))
    extra = {"tokenizer": decoding.tokenizer.tok} if decoding.stop_strings else {}
    if sampled:  # transformers samples from the global generator
        torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=decoding.generator)))
    out = net.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config, **extra)
    return out[0, ids.shape[1]:].tolist()
