"""What a downstream grid needs before anything decodes: the model, its tokenizer, every task's prompts,
with every length and budget checked (one error line, not an error after hours of decoding).

The prompts: each task's examples built once, exactly as `lightning_bench test --task` builds them
(PromptedDataModule: definitions, chat template, k-shot, stops, sampling), then split into the context
the compression protocols may compress and the question that follows it."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lightning_bench.tasks.datamodules.prompted import PromptedDataModule, Request, check_window
from lightning_bench.tasks import default_max_length, get_task
from lightning_bench.tasks.prompts import Generation
from lightning_bench.errors import ConfigError
from lightning_bench.tasks.datamodules.encoding import split_prompt
from lightning_bench.experiments.downstream.config import DownstreamConfig


@dataclass
class TaskSample:
    request: Request  # .task, .row, .request (the Generation)
    # {protocol: (context, question, cue tokens)}: up to the end of the task's document (the user's whole text
    # when it has none), the rest of the user's text (the question), what follows it (the chat template's
    # closing turn and assistant header, the answer prefix); encoded per protocol as kvpress encodes it
    parts: dict
    truncated: int  # document tokens removed from the middle to fit max_length - max_new_tokens
    max_new_tokens: int  # the task's, or the row's own (long-context rows)


@dataclass
class TaskPrompts:
    task: str
    samples: list[TaskSample]
    stop_ids: frozenset
    stop_strings: tuple[str, ...]
    max_new_tokens: int
    sampling: dict  # {samples, temperature, top_p, seed}
    chat_template: bool
    source: dict  # where the rows came from (files + sha256, or the hub)


def build_prompts(cfg, tokenizer, max_length: int) -> tuple[dict[str, TaskPrompts], dict]:
    """{task: TaskPrompts} for every task of `cfg` (a DownstreamConfig), and the data provenance."""
    dm = PromptedDataModule(tasks=cfg.tasks, data_dir=cfg.data_dir, paths=cfg.paths, max_samples=cfg.max_samples,
                            max_length=max_length, max_new_tokens=cfg.max_new_tokens,
                            chat_template=cfg.chat_template, samples=cfg.samples, temperature=cfg.temperature,
                            top_p=cfg.top_p, max_context=cfg.max_context)
    dm.tokenizer = tokenizer
    for task in dm.task_names:
        if get_task(task).output_type != "generate_until":
            raise ConfigError(f"{task} is scored by log-likelihood, not generated: `downstream` compares KV-cache "
                              f"methods on generation; use `lightning_bench test --task {task} --sparsity ...`")
    dm.setup("test")  # rows, requests, stop tokens; a prompt that cannot fit is a one-line error here
    out: dict[str, TaskPrompts] = {}
    for req in dm.requests:
        r: Generation = req.request
        task = req.task
        if task not in out:
            stop = tuple(r.stop)
            out[task] = TaskPrompts(task, [], dm.stop_ids.get(stop, frozenset()), tuple(s for s in stop if len(s) > 1),
                                    dm.max_new_tokens(task), dm.sampling(task), dm.uses_chat_template(task),
                                    dm.sources.get(task, {}).get(dm.eval_split(task), {}))
        limit = dm.max_new_tokens(task, req.row)
        parts, cut = split_prompt(tokenizer, *dm.render(task, r), r.document, max_length - limit,
                                  f"{task} sample {req.row.get('id')!r}")
        out[task].samples.append(TaskSample(req, parts, cut, limit))
    return out, dm.provenance()


def shortest_context(prompts: TaskPrompts, protocol: str) -> int:
    """The fewest tokens a first compression sees in this task (what a fixed budget must not exceed)."""
    from lightning_bench.sparsity.task_decode import span_length

    protocol = "query_agnostic" if protocol == "query_agnostic" else "query_aware"  # interval: query_aware's
    return min(span_length(*map(len, s.parts[protocol]), protocol) for s in prompts.samples)


def model_record(cfg: DownstreamConfig, quantization) -> dict:
    """The model as the cells' fingerprint and the results name it; `bits` only when not 32, so the cells
    of full-precision runs keep the fingerprint they were written with."""
    out = {"pretrained": cfg.model.pretrained, "dtype": cfg.weights_dtype(), "revision": cfg.model.revision}
    if cfg.bits != 32:
        out["bits"] = cfg.bits
    if quantization is not None:
        out["quantization"] = quantization.as_dict()  # path, scheme, kernel, layers kept fp32, size
    return out


def _check_budgets(cfg: DownstreamConfig, prompts: dict[str, TaskPrompts]) -> None:
    for task, p in prompts.items():
        for protocol in cfg.protocols:
            shortest = shortest_context(p, protocol)
            for b in cfg.budget_tokens:
                if b > shortest:
                    what = "context" if protocol == "query_agnostic" else "prompt"
                    raise ConfigError(f"--budget_tokens {b} is larger than the shortest {what} of {task} under "
                                      f"{protocol} ({shortest} tokens); lower it")


def network(cfg: DownstreamConfig, module, tokenizer, device: torch.device):
    """(the network on `device`, the quantization record or None)."""
    from lightning_bench.sparsity.engine import resolve_network

    quantization = None
    if cfg.bits in (8, 4):  # bitsandbytes low-bit Linear layers straight from the checkpoint, as `test --bits`
        from lightning_bench.quantization import load_pretrained_lowbit

        quantization = module.load_quantized(cfg.bits, tokenizer.vocab_size, loader=load_pretrained_lowbit)
        net = module.net.to(device).eval()
    else:
        net = module.build_network(tokenizer.vocab_size).to(device).eval()
    resolve_network(net)  # a model without a KV cache: one line, before any cell runs
    return net, quantization


def prepare(cfg: DownstreamConfig):
    """(module, tokenizer, prompts, data provenance, max_length), every length checked before decoding."""
    from lightning_bench.data.tokenization import build_tokenizer
    from lightning_bench.models import HFLanguageModel

    module = HFLanguageModel(cfg.model.pretrained, dtype=cfg.weights_dtype(), revision=cfg.model.revision)
    limit = module.max_seq_len
    if cfg.max_context is not None and cfg.max_length is None:
        check_window(cfg.max_context, limit, "--max_context", "--max_length")
    max_length = cfg.max_length or cfg.max_context or default_max_length(cfg.tasks, limit)
    if limit is not None and max_length > limit:
        raise ConfigError(f"--max_length {max_length} is longer than the model's context ({limit}); lower it")
    source = module.tokenizer_source
    tokenizer = build_tokenizer(source["name"], **source.get("kwargs", {}))
    prompts, provenance = build_prompts(cfg, tokenizer, max_length)
    _check_budgets(cfg, prompts)
    return module, tokenizer, prompts, provenance, max_length
