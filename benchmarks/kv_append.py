"""What appending to the KV cache costs a decoding step: transformers' DynamicLayer (torch.cat of the whole
cache every token) against lightning_bench's GrowingLayer (in-place writes into spare room), same model,
same cached keys and values, same tokens, in interleaved rounds.

    python benchmarks/kv_append.py [--model DIR] [--contexts 2048 4096 8192] [--steps 20] [--rounds 2] [--threads 1]

The cache is filled with random keys/values of the model's shape (the prefill is not what is timed), then
`--steps` single-token forwards are timed per side; printed: ms per token (median over rounds) per side and
their ratio, and whether the two sides' logits are equal bit for bit.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lightning_bench.sparsity.engine import cache_argument  # noqa: E402
from lightning_bench.sparsity.growing_layer import growing_cache  # noqa: E402

DEFAULT_MODEL = os.environ.get("LB_SMOLLM2_DIR", str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))


def filled(cache, keys, values):
    for i, (k, v) in enumerate(zip(keys, values)):
        cache.update(k.clone(), v.clone(), i)
    return cache


@torch.no_grad()
def decode(net, cache, context: int, steps: int) -> tuple[float, list[torch.Tensor]]:
    token, logits = torch.tensor([[42]]), []
    start = time.perf_counter()
    for step in range(steps):
        out = net(input_ids=token, attention_mask=torch.ones(1, context + step + 1, dtype=torch.long),
                  position_ids=torch.tensor([[context + step]]), **cache_argument(net, cache), use_cache=True)
        logits.append(out.logits[0, -1])
        token = out.logits[0, -1].argmax().view(1, 1)
    return (time.perf_counter() - start) / steps, logits


def main():
    from transformers import AutoModelForCausalLM, DynamicCache

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--contexts", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    net = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    cfg = net.config
    heads, dim = cfg.num_key_value_heads, cfg.hidden_size // cfg.num_attention_heads
    print(f"{args.model}: {args.steps} tokens per round, {args.rounds} rounds, {torch.get_num_threads()} thread(s)")
    print("| cached tokens | DynamicLayer ms/token | GrowingLayer ms/token | speed-up | logits equal |")
    print("|---|---|---|---|---|")
    for context in args.contexts:
        gen = torch.Generator().manual_seed(context)
        keys = [torch.randn(1, heads, context, dim, generator=gen) for _ in range(cfg.num_hidden_layers)]
        values = [torch.randn(1, heads, context, dim, generator=gen) for _ in range(cfg.num_hidden_layers)]
        times = {"dynamic": [], "growing": []}
        outs = {}
        for _ in range(args.rounds):
            for side, make in (("dynamic", lambda: DynamicCache(config=cfg)), ("growing", lambda: growing_cache(cfg))):
                seconds, outs[side] = decode(net, filled(make(), keys, values), context, args.steps)
                times[side].append(seconds)
        dyn, grow = statistics.median(times["dynamic"]), statistics.median(times["growing"])
        equal = all(torch.equal(a, b) for a, b in zip(outs["dynamic"], outs["growing"]))
        print(f"| {context} | {1000 * dyn:.0f} | {1000 * grow:.0f} | {dyn / grow:.2f}x | {equal} |")


if __name__ == "__main__":
    main()
