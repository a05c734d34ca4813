"""Prefill + compress + continue on a 4k PG-19 context, two checkouts of the code side by side in one run.

    python benchmarks/prefill_continue_speed.py --before /tmp/before [--after .] [--context 4096] \
        [--method h2o] [--sparsity 0.5] [--new_tokens 32] [--repeats 3] [--threads 2]

Each checkout runs in its own worker process (its lightning_bench first on PYTHONPATH), the model loaded
once per worker; the rounds alternate before/after so the load of other processes falls on both. A round
is one `generate_for_task` call (the public prefill + compress + decode path of the downstream driver):
the last 64 context tokens are the question (query_aware protocol), greedy decoding, no stop token, so
both sides decode exactly `--new_tokens` tokens. Prints each side's min and median seconds, the ratio
after/before, and whether both generated the same tokens. On a shared machine only the ratio of one run
means something.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("LB_SHARED_DIR", ROOT.parent / "shared"))
DEFAULT_MODEL = os.environ.get("LB_SMOLLM2_DIR", str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))
QUESTION = 64


def worker(args) -> None:
    """Read one JSON request per line on stdin ("go"), answer with the seconds and tokens of one round."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lightning_bench.sparsity import generate_for_task

    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    net = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    ids = tokenizer(Path(args.data).read_text(), return_tensors="pt").input_ids[:, :args.context]
    context, question = ids[:, :-QUESTION], ids[:, -QUESTION:]
    generate_for_task(net, context[:, :256], question, args.method, sparsity=args.sparsity, max_new_tokens=2)
    print(json.dumps({"ready": True}), flush=True)
    for _ in sys.stdin:
        start = time.perf_counter()
        out = generate_for_task(net, context, question, args.method, sparsity=args.sparsity,
                                max_new_tokens=args.new_tokens)
        print(json.dumps({"seconds": time.perf_counter() - start, "tokens": list(map(int, out.tokens))}), flush=True)


def start(checkout: Path, args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": str(args.threads)}
    argv = [sys.executable, __file__, "--worker", *sys.argv[1:]]
    process = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                               cwd=checkout)
    assert json.loads(process.stdout.readline())["ready"]
    return process


def round_trip(process: subprocess.Popen) -> dict:
    process.stdin.write("go\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path)
    parser.add_argument("--after", type=Path, default=ROOT)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--data", default=str(SHARED / "data/pg19/test/12204.txt"))
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--method", default="h2o")
    parser.add_argument("--sparsity", type=float, default=0.5)
    parser.add_argument("--new_tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.before is None:
        parser.error("--before CHECKOUT is required (a git worktree of the code to compare with)")
    sides = {"before": start(args.before.resolve(), args), "after": start(args.after.resolve(), args)}
    runs = {name: [] for name in sides}
    for r in range(args.repeats):
        for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
            runs[name].append(round_trip(sides[name]))
    for process in sides.values():
        process.stdin.close()
        process.wait()
    print(f"context {args.context} tokens ({args.context - QUESTION} + {QUESTION} question), {args.method} at "
          f"sparsity {args.sparsity}, {args.new_tokens} new tokens, {args.repeats} rounds, {args.threads} threads")
    for name, rounds in runs.items():
        seconds = [r["seconds"] for r in rounds]
        print(f"{name:>6}: min {min(seconds):.3f} s, median {statistics.median(seconds):.3f} s  "
              f"({', '.join(f'{s:.2f}' for s in seconds)})")
    ratio = min(r["seconds"] for r in runs["after"]) / min(r["seconds"] for r in runs["before"])
    same = all(a["tokens"] == b["tokens"] for a, b in zip(runs["before"], runs["after"]))
    print(f"after / before (min): {ratio:.3f}; same tokens: {same}")


if __name__ == "__main__":
    main()
