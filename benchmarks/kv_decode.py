"""Decode tokens/s and KV-cache bytes of evicting methods against dense on SmolLM2 (greedy decoding).

For each context length (default 2048 and 4096; SmolLM2's max context is 8192) the context is the
first C tokens of the WikiText-2 test text; each method prefills it, compresses the cache (sparsity
0.9 by default: keep ceil(0.1 * tokens seen), re-compressed every `--intervals` steps: 1 = after
every token as H2O does, 16 = a cheaper schedule) and decodes `--new-tokens` tokens greedily with
`sparsity.generate_with_eviction`. One short untimed warm-up call per method comes first.

    python benchmarks/kv_decode.py [--model DIR] [--contexts 2048 4096] [--methods h2o streaming_llm] \
        [--sparsity 0.9] [--new-tokens 64] [--intervals 1 16] [--threads N]

Reported per (context, method):
- decode tok/s: 1 / the MEDIAN decoding step, a step being the time from one one-token forward's
  start to the next's (so the forward on the pruned cache plus the re-compression that follows it;
  forward hooks). The median keeps a burst of load from another process on a shared machine out
  of the figure; `mean` is (new tokens - 1) / (wall time after the prefill forward), every step
  and the first compression included. The prefill is timed apart.
- KV MiB: the peak bytes of every layer's keys and values over the decoding steps (the tensors
  themselves: eviction is physical).
- the ratios sparse / dense of both (the figure of merit: tok/s ratio > 1 is a speed-up, KV ratio
  ~ 1 - sparsity), and how many leading greedy tokens equal dense's (a rough quality hint: greedy
  outputs diverge for good after one difference; the perplexity comparison is
  `lightning_bench generation`).
DIR defaults to $LB_SMOLLM2_DIR or ~/.cache/lightning_bench/smollm2-135m-instruct.
"""

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from lightning_bench.sparsity import generate_with_eviction

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = os.environ.get("LB_SMOLLM2_DIR", str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))


class ForwardTimer:
    """Start time and duration of every forward of `net` (hooks): the median step between decode forwards
    is what this benchmark reports, which the library's records (whole-call timings) do not give."""

    def __init__(self, net, device: torch.device):
        self.net, self.sync = net, device.type == "cuda"
        self.starts: list[float] = []
        self.calls: list[float] = []

    def _now(self) -> float:
        if self.sync:
            torch.cuda.synchronize()
        return time.perf_counter()

    def __enter__(self):
        self._handles = [self.net.register_forward_pre_hook(lambda *_: self.starts.append(self._now())),
                         self.net.register_forward_hook(lambda *_: self.calls.append(self._now() - self.starts[-1]))]
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()


def decode(net, ids, method, sparsity, new_tokens, interval, device):
    kwargs = {} if method == "dense" else {"sparsity": sparsity}
    with ForwardTimer(net, device) as timer:
        res = generate_with_eviction(net, ids, None, method, max_new_tokens=new_tokens, interval=interval, **kwargs)
    prefill = timer.calls[0]
    steps = [b - a for a, b in zip(timer.starts[1:], timer.starts[2:])]  # decode forward to decode forward
    return {"prefill_s": prefill, "decode_tok_s": 1 / statistics.median(steps),
            "mean_tok_s": (new_tokens - 1) / (res.seconds - prefill),
            "kv_peak": max(res.kv_bytes[1:]), "tokens": res.tokens[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/wikitext-2/test.txt"))
    parser.add_argument("--contexts", nargs="+", type=int, default=[2048, 4096])
    parser.add_argument("--methods", nargs="+", default=["h2o", "streaming_llm"])
    parser.add_argument("--sparsity", type=float, default=0.9)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--intervals", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (1 steadies a shared CPU)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.new_tokens < 4:
        parser.error("--new-tokens must be >= 4 (the median step needs a few decoding steps)")

    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = torch.device(args.device)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    net = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).to(device).eval()
    limit = net.config.max_position_embeddings
    if max(args.contexts) + args.new_tokens > limit:
        parser.error(f"context + new tokens must fit the model's max context ({limit})")
    text = Path(args.data).read_text(encoding="utf-8")
    stream = tokenizer(text[:100 * max(args.contexts)], add_special_tokens=False)["input_ids"]
    methods = ["dense", *args.methods]  # warm-up order
    print(f"model {args.model}  data {args.data}  device {device}  threads {torch.get_num_threads()}")
    print(f"sparsity {args.sparsity} (re-compressed every i steps)  greedy decode of {args.new_tokens} tokens, "
          f"context = the first C tokens of the text")

    start = time.perf_counter()
    warm = torch.tensor(stream[:256])[None]
    for method in methods:  # untimed: lazy initialisation, thread pools, allocator
        decode(net, warm, method, args.sparsity, 8, 1, device)

    print(f"\n{'ctx':>5}  {'method':<24}{'prefill s':>10}{'decode tok/s':>14}{'ratio':>7}{'(mean':>7}{'ratio)':>7}"
          f"{'KV MiB':>9}{'ratio':>7}{'same prefix':>13}")
    for ctx in args.contexts:
        ids = torch.tensor(stream[:ctx])[None]
        runs = [("dense", 0, "dense")] + [(m, i, f"{m} s{args.sparsity} i{i}") for m in args.methods
                                          for i in args.intervals]
        dense = None
        for method, interval, label in runs:
            r = decode(net, ids, method, args.sparsity, args.new_tokens, interval, device)
            dense = dense or r
            differ = (r["tokens"] != dense["tokens"]).nonzero()
            same = int(differ[0]) if len(differ) else args.new_tokens
            print(f"{ctx:>5}  {label:<24}{r['prefill_s']:>10.2f}{r['decode_tok_s']:>14.1f}"
                  f"{r['decode_tok_s'] / dense['decode_tok_s']:>7.2f}{r['mean_tok_s']:>7.1f}"
                  f"{r['mean_tok_s'] / dense['mean_tok_s']:>7.2f}{r['kv_peak'] / 2**20:>9.1f}"
                  f"{r['kv_peak'] / dense['kv_peak']:>7.3f}{same:>8}/{args.new_tokens}", flush=True)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
