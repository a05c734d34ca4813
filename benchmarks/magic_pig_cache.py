"""MagicPIG's key-signature cache on a real model: the same continuation decoded with the cache (a decoding step
hashes only its new key) and without it (every key hashed at every step, the cache bound set to 0), on one
prompt prefilled each time. Prints whether the tokens and the per-layer density / error sums are equal (they
must be, bit for bit) and the decode seconds of both.

    python benchmarks/magic_pig_cache.py [--model DIR] [--context 1200] [--new-tokens 24] \
        [--stack sink:0.01,local:0.01,magic_pig:10:75] [--threads 1]
"""

import argparse
import os
import time
from pathlib import Path

import torch

from attention_error_cost import model_and_prompt  # benchmarks/ is on the path of a script run from it
from lightning_bench.sparsity import task_decode
from lightning_bench.sparsity.masking import sampled
from lightning_bench.sparsity.masking.method import MaskedAttention

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = os.environ.get("LB_SMOLLM2_DIR", str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/wikitext-2/test.txt"))
    parser.add_argument("--context", type=int, default=1200)
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--stack", default="sink:0.01,local:0.01,magic_pig:10:75")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    net, context, question = model_and_prompt(args, " What is the text above about?")
    runs = {}
    bound = sampled.CACHED_KEY_ELEMENTS
    for label, elements in (("cached", bound), ("every key hashed", 0)):
        sampled.CACHED_KEY_ELEMENTS = elements
        stack = MaskedAttention("pig", args.stack)  # a fresh masker: nothing cached from the other run
        prompt = task_decode.prefill_prompt(net, torch.tensor([context]), torch.tensor([question]),
                                            "query_agnostic", [stack])
        start = time.perf_counter()
        row = task_decode.continuation(stack, sparsity=0.0, max_new_tokens=args.new_tokens)
        record = task_decode.continue_rows(prompt, [row])[0]
        runs[label] = (record.tokens, record.figures["attention_sums"], time.perf_counter() - start)
    sampled.CACHED_KEY_ELEMENTS = bound
    (tokens, sums, cached), (tokens_all, sums_all, every) = runs.values()
    print(f"{args.model}: context {len(context)} tokens, {args.stack}, {len(tokens)} new tokens, fp32, "
          f"{args.threads} thread(s)")
    print(f"tokens equal: {tokens == tokens_all}; density / error sums equal: {sums == sums_all}")
    print(f"continuation seconds (the fed question and the decoding): cached {cached:.1f}, every key hashed "
          f"{every:.1f} ({every / cached:.1f}x)")


if __name__ == "__main__":
    main()
