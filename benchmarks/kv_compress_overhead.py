"""What each eviction method adds to a dense prefill: prefill with its attention capture + one compression.

    python benchmarks/kv_compress_overhead.py [--model DIR] [--data FILE] [--context 4096] [--sparsity 0.9] \
        [--rounding ceil|floor] [--repeats 3] [--methods tova snapkv ...] [--threads N]

The context is the first C tokens of the text (default: the PG-19 sample in ../shared/data, fp32 weights).
For each method:
- prefill s: `sparsity.prefill` with the recorder the method declares (`Needs`; none for key-only methods,
  which then run the model's own attention untouched);
- compress s: one `EvictionState.compress` to the budget: scoring and physical eviction of every layer;
- ratio: (prefill + compress) / the dense prefill (`prefill` without a recorder);
- stats MiB: what the recorder holds after the prefill.
Every repeat times dense and every method once, in a rotated order (so load from other processes spreads
over all of them); each figure is the min over the repeats, after one untimed warm-up on a short context.
On a shared machine only the ratios of one run mean something; check `uptime` before.
DIR defaults to $LB_SMOLLM2_DIR or ~/.cache/lightning_bench/smollm2-135m-instruct.
"""

import argparse
import os
import time
from pathlib import Path

import torch

from lightning_bench.sparsity import METHODS, AttentionRecorder, budget, make_method, prefill

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("LB_SHARED_DIR", ROOT.parent / "shared"))
DEFAULT_MODEL = os.environ.get("LB_SMOLLM2_DIR", str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))
WINDOW_METHODS = ["tova", "snapkv", "knorm", "streaming_llm", "random", "local_strided", "cab_v4"]
CUMULATIVE_METHODS = ["h2o", "cab", "cab_v3"]


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def run_method(net, ids, name, sparsity, rounding):
    """(prefill s, compress s, recorder bytes) of one prefill + compression with `name` ("dense": no recorder)."""
    mask = torch.ones_like(ids)
    if name == "dense":
        seconds, _ = timed(lambda: prefill(net, ids, mask, None))
        return seconds, 0.0, 0
    method = make_method(name)
    recorder = AttentionRecorder.for_method(method)
    seconds, (state, _) = timed(lambda: prefill(net, ids, mask, recorder))
    held = recorder.nbytes() if recorder is not None else 0
    keep = budget(state.seen, sparsity, rounding=rounding)
    compress_s, _ = timed(lambda: state.compress(method, keep, recorder))
    assert state.length == int(keep.max())
    return seconds, compress_s, held


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--data", default=str(SHARED / "data/pg19/test/12204.txt"))
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--sparsity", type=float, default=0.9)
    parser.add_argument("--rounding", choices=["ceil", "floor"], default="ceil")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", nargs="+", default=WINDOW_METHODS + CUMULATIVE_METHODS,
                        choices=sorted(set(METHODS) - {"dense"}))
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: the machine's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    net = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    stream = tokenizer(Path(args.data).read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
    if len(stream) < args.context:
        parser.error(f"{args.data} has {len(stream)} tokens, fewer than --context {args.context}")
    ids = torch.tensor(stream[:args.context])[None]
    print(f"model {args.model}  data {args.data}  context {args.context} tokens  fp32  threads "
          f"{torch.get_num_threads()}  sparsity {args.sparsity} ({args.rounding})  attention "
          f"{net.config._attn_implementation}  load {os.getloadavg()[0]:.2f}")

    sides = ["dense", *args.methods]
    for name in sides:  # untimed warm-up: lazy initialisation, thread pools, allocator
        run_method(net, ids[:, :256], name, args.sparsity, args.rounding)
    best: dict[str, list] = {}
    start = time.perf_counter()
    for rep in range(args.repeats):
        order = sides[rep % len(sides):] + sides[:rep % len(sides)]
        for name in order:
            figures = run_method(net, ids, name, args.sparsity, args.rounding)
            best[name] = [min(a, b) for a, b in zip(best[name], figures)] if name in best else list(figures)

    dense = best["dense"][0]
    print(f"\n{'method':<15}{'declares':<22}{'prefill s':>10}{'compress s':>11}{'ratio':>8}{'stats MiB':>11}")
    print(f"{'dense':<15}{'-':<22}{dense:>10.2f}{0:>11.3f}{1:>8.3f}{0:>11.1f}")
    for name in args.methods:
        prefill_s, compress_s, held = best[name]
        needs = make_method(name).needs
        declared = ", ".join(f"{n}[{needs.window}]" if n == "window" else n for n in needs.names()) or "nothing"
        print(f"{name:<15}{declared:<22}{prefill_s:>10.2f}{compress_s:>11.3f}{(prefill_s + compress_s) / dense:>8.3f}"
              f"{held / 2**20:>11.1f}")
    print(f"\nmin of {args.repeats} repeats, {time.perf_counter() - start:.0f} s; load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
