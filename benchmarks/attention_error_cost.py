"""What metering costs while decoding: eviction's full-cache reference (`downstream --attention_error`) and a
masker stack's own meter, every step and every N-th step (`--meter_every N`), against the same rows unmetered.

One prompt is prefilled once (the first C tokens of the WikiText-2 test text as the context, a short question,
query_agnostic as the RULER grids run), then each setting continues it with `task_decode.continue_rows`, the
path `lightning_bench downstream` takes, `--new-tokens` greedy tokens with no stop, settings interleaved over
`--repeats` rounds so a burst of load from another process falls on all of them. Reported per setting: the
median decode seconds of the rows (the records' `decode_seconds`, every decoding step), the ratio to the same
method unmetered, the tokens (equal in every setting: metering changes none) and the density and attention
error the setting measured.

    python benchmarks/attention_error_cost.py [--model DIR] [--context 4000] [--new-tokens 32] \
        [--every 1 8] [--repeats 3] [--threads 1]
"""

import argparse
import os
import statistics
from pathlib import Path

import torch

from lightning_bench.sparsity import task_decode
from lightning_bench.sparsity.masking.stack import attention_figures
from lightning_bench.sparsity.masking.method import MaskedAttention

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = os.environ.get("LB_SMOLLM2_DIR", str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))
QUESTION = " What is the special magic number mentioned in the text above?"


def model_and_prompt(args, question: str):
    """The fp32 model on `args.threads` threads, the first `args.context` tokens of `args.data` and `question`'s
    tokens (also benchmarks/magic_pig_cache.py's)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    net = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    text = Path(args.data).read_text()
    context = tokenizer(text[:20 * args.context], add_special_tokens=False)["input_ids"][:args.context]
    return net, context, tokenizer(question, add_special_tokens=False)["input_ids"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/wikitext-2/test.txt"))
    parser.add_argument("--context", type=int, default=4000)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--ratio", type=float, default=0.9, help="the evicting method's sparsity")
    parser.add_argument("--stack", default="sink:0.05,local:0.05,oracle_topk:0.1")
    parser.add_argument("--every", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    net, context, question = model_and_prompt(args, QUESTION)
    stack = MaskedAttention("stack", args.stack)
    prompt = task_decode.prefill_prompt(net, torch.tensor([context]), torch.tensor([question]), "query_agnostic",
                                        ["h2o", stack])
    print(f"{args.model}: context {len(context)} tokens + question {len(question)}, query_agnostic, "
          f"{args.new_tokens} new tokens, fp32, {args.threads} thread(s); prefill {prompt.seconds:.1f} s")
    settings = [("h2o", args.ratio, False, 1)] + [("h2o", args.ratio, True, n) for n in args.every]
    settings += [(stack, 0.0, False, n) for n in args.every]  # a stack always meters; 1 is its baseline
    seconds: dict = {s: [] for s in settings}
    outcome: dict = {}
    for _ in range(args.repeats):
        for setting in settings:
            method, ratio, error, every = setting
            row = task_decode.continuation(method, sparsity=ratio, max_new_tokens=args.new_tokens)
            record = task_decode.continue_rows(prompt, [row], attention_error=error, meter_every=every)[0]
            seconds[setting].append(record.decode_seconds)
            sums = record.figures.get("attention_sums")
            outcome[setting] = (record.tokens, attention_figures(sums) if sums else None)
    rows = []
    for setting in settings:
        method, ratio, error, every = setting
        name = method if isinstance(method, str) else f"stack {args.stack}"
        base = ("h2o", args.ratio, False, 1) if isinstance(method, str) else (stack, 0.0, False, args.every[0])
        median = statistics.median(seconds[setting])
        tokens, figures = outcome[setting]
        meter = ("full-cache reference" if error else "none") if isinstance(method, str) else "the stack's own"
        rows.append((name, ratio, meter, every if (error or not isinstance(method, str)) else "—", median,
                     median / statistics.median(seconds[base]), tokens == outcome[base][0],
                     "—" if figures is None else f"{figures['density']:.4f}",
                     "—" if figures is None else f"{figures['attention_error']:.4f}"))
    print("| method | sparsity | meter | every | decode s (median) | / unmetered | same tokens | density | error |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]:.2f} | {r[5]:.2f} | {r[6]} | {r[7]} | {r[8]} |")
    print(f"(the stack's rows compare with its first --every ({args.every[0]}): a stack cannot decode unmetered)")


if __name__ == "__main__":
    main()
