"""What a downstream grid needs before anything decodes: the model, its tokenizer, every task's prompts,
with every length and budget checked (one error line, not an error after hours of decoding)."""

from __future__ import annotations

import torch

from lightning_bench.data.downstream.prompted import check_window
from lightning_bench.data.tasks import default_max_length
from lightning_bench.errors import ConfigError
from lightning_bench.experiments.downstream.config import DownstreamConfig
from lightning_bench.experiments.downstream.prompts import TaskPrompts, build_prompts, shortest_context


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
    from lightning_bench.sparsity.decode import resolve_network

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
