"""Which share of a RULER needle's value tokens each KV-cache method keeps, and what the model then answers.

    python benchmarks/needle_coverage.py FILE.jsonl [--model DIR] [--examples 5] [--sparsity 0.5 0.9]
        [--methods streaming_llm snapkv tova knorm h2o] [--protocol query_aware] [--threads N]

FILE is a niah set made by `lightning_bench generate_ruler` (rows with context / question / answer_prefix /
outputs). Per example: one dense prefill recording every method's statistics, then per method and level
one compression of a copy of the cache (the mechanism `downstream` uses) and:
- coverage: the value tokens (the gold answer's characters in the context, found by the tokenizer's
  offsets) kept, as a share, averaged over (layer, KV head); also the layer with the lowest share;
- the greedy answer (12 tokens at most, stopped at the end-of-sequence token) and whether it holds the gold.
`h2o_mean` (defined here, not a library method) is h2o with kvpress's per-query averaging of the scores.
The prompt is the base prompt (context + question + answer prefix, no chat template), the context and
the rest encoded separately; `downstream` encodes the prompt whole, so a token straddling the cut may
differ. It explains scores, it does not replace them.
"""

import argparse
import copy
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dataclasses import dataclass  # noqa: E402

from lightning_bench.sparsity import budget, make_method  # noqa: E402
from lightning_bench.sparsity.methods import H2O, Priority  # noqa: E402
from lightning_bench.sparsity.task_decode import continue_prompt, prefill_prompt  # noqa: E402

DEFAULT_MODEL = os.environ.get("LB_SMOLLM2_DIR", str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))


@dataclass
class H2OMean(H2O):
    """Diagnostic only (`--methods h2o_mean`): h2o with each key's summed attention divided by the number of
    prefill queries that saw it (the normalisation kvpress's ObservedAttentionPress applies), to tell the
    cumulative sum's bias towards early tokens from what the scores themselves miss. Same recent split."""

    def priority(self, view):
        heavy = super().priority(view)
        seen_by = view.positions.amax(-1, keepdim=True) + 1 - view.positions  # right after the prefill
        return Priority(heavy.score / seen_by.clamp(min=1).float(), heavy.tier)


def method_named(name: str):
    return H2OMean() if name == "h2o_mean" else make_method(name)


def value_tokens(tokenizer, context: str, values: list[str]) -> tuple[list[int], list[int]]:
    """(context token ids, indices of the tokens overlapping any occurrence of the gold values)."""
    enc = tokenizer(context, return_offsets_mapping=True, add_special_tokens=False)
    spans = []
    for value in values:
        start = context.find(value)
        while start >= 0:
            spans.append((start, start + len(value)))
            start = context.find(value, start + 1)
    if not spans:
        raise SystemExit(f"a gold value of {values} is not in the context: is this a RULER niah file?")
    hit = [i for i, (a, b) in enumerate(enc["offset_mapping"]) if any(a < e and b > s for s, e in spans)]
    return enc["input_ids"], hit


def coverage(prompt, method, sparsity: float, needle: torch.Tensor) -> tuple[float, int, float]:
    """(mean kept share of the needle tokens over layers x heads, worst layer, its share)."""
    state = copy.deepcopy(prompt.state)
    recorder = copy.deepcopy(prompt.recorders.get(method.needs)) if method.needs else None
    state.compress(method, budget(state.seen, sparsity), recorder)
    per_layer = []
    for positions in state.positions:  # per layer (1, H, S) token positions; state.valid (1, S) marks fillers
        kept = positions[0].masked_fill(~state.valid[0][None, :], -1)
        per_layer.append(float(torch.stack([torch.isin(needle, head).float().mean() for head in kept]).mean()))
    worst = min(range(len(per_layer)), key=per_layer.__getitem__)
    return sum(per_layer) / len(per_layer), worst, per_layer[worst]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--examples", type=int, default=5)
    parser.add_argument("--sparsity", type=float, nargs="+", default=[0.5, 0.9])
    parser.add_argument("--methods", nargs="+", default=["streaming_llm", "snapkv", "tova", "knorm", "h2o"])
    parser.add_argument("--protocol", default="query_aware", choices=["query_aware", "query_agnostic"])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    net = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    methods = [method_named(m) for m in args.methods]
    rows = [json.loads(line) for line in open(args.file, encoding="utf-8")][:args.examples]
    totals: dict[tuple, list] = {}
    print(f"{args.file}: {len(rows)} examples, protocol {args.protocol}, threads {torch.get_num_threads()}")
    for i, row in enumerate(rows):
        context_ids, needle = value_tokens(tokenizer, row["context"], row["outputs"])
        rest = tokenizer(row["question"] + (row.get("answer_prefix") or ""), add_special_tokens=False)["input_ids"]
        prompt = prefill_prompt(net, torch.tensor([context_ids]), torch.tensor([rest]), args.protocol,
                                methods=["dense"] + methods)
        needle_t = torch.tensor(needle)
        for method in methods:
            for s in args.sparsity:
                share, worst, worst_share = coverage(prompt, method, s, needle_t)
                out = continue_prompt(prompt, method, sparsity=s, max_new_tokens=12,
                                      stop_ids={tokenizer.eos_token_id})
                answer = tokenizer.decode(out.tokens, skip_special_tokens=True).strip()
                right = all(v.lower() in answer.lower() for v in row["outputs"])
                name = "h2o_mean" if isinstance(method, H2OMean) else method.name
                totals.setdefault((name, s), []).append((share, right))
                print(f"  example {i} depth {row.get('depth')}: {name} {s:g}: needle kept {share:.2f} "
                      f"(worst layer {worst}: {worst_share:.2f}); answer {answer[:24]!r} {'right' if right else 'wrong'}",
                      flush=True)
    print("\n| method | sparsity | needle tokens kept (mean over examples, layers, heads) | right answers |")
    print("|---|---|---|---|")
    for (name, s), got in totals.items():
        print(f"| {name} | {s:g} | {sum(g[0] for g in got) / len(got):.2f} | {sum(g[1] for g in got)}/{len(got)} |")


if __name__ == "__main__":
    main()
