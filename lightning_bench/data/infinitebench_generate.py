r"""`lightning_bench infinitebench_generate`: make InfiniteBench's synthetic retrieval tasks at any length,
for any tokenizer, as JSON lines in the benchmark's own format.

    lightning_bench infinitebench_generate --task passkey --tokenizer ~/.cache/lightning_bench/smollm2-135m-instruct \
        --length 4096 16384 --depths 11 --per_depth 5 --seed 0 --output passkey_smollm2.jsonl
    lightning_bench test ... --task infinitebench/passkey \
        --data.paths '{"infinitebench/passkey": "passkey_smollm2.jsonl"}'

As OpenBMB/InfiniteBench's data/construct_synthetic_dataset.py builds them:
- passkey: a haystack of the noise line "The grass is green. The sky is blue. The sun is yellow. Here we go.
  There and back again.\n" repeated, with the line "The pass key is K. Remember it. K is the pass key.\n"
  at a depth; K is 5 random digits; the question "What is the pass key?".
- number_string: the same haystack with "The sequence of digits is K. Remember it. K is the sequence of
  digits.\n"; K is 5 random digits, then 5 times a random digit doubled in place (10 digits with runs).
- kv_retrieval: "JSON data:\n{...}" of random UUID4 key/value pairs (lost-in-the-middle's make_kv_retrieval_data
  draws them so); the question '\nKey: "<key>"\nThe value associated with the specified key is: ' asks for
  the pair at the depth (its position among the pairs).

Length: `--length` is the target number of tokens of `context` (the haystack / JSON, with the needle) as the
given tokenizer encodes it; each row holds the most noise that stays within it: whole noise sentences for
passkey / number_string (about 5 tokens each, so within 1% from ~500 tokens up), whole pairs for
kv_retrieval (a pair is 60-70 tokens with SmolLM2's tokenizer: within 1% from ~7000 tokens up). The
benchmark's own files are ~128k tokens with the noise line counted as 25 tokens; here the tokenizer counts.

Depth: the fraction of the context before the needle. `--depths N` spaces N depths evenly over [0, 1] (as the
benchmark steps through its haystack); passkey / number_string put the needle at the line boundary (or the
haystack's end) nearest the depth, so the needle is a line of its own as in the benchmark. `len` (passkey,
number_string) is, as in the benchmark's files, the number of context tokens after the needle.

Deterministic: every row draws from its own generator seeded by (task, seed, length, depth index, sample),
so the same arguments give the same file, byte for byte, on any machine.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import uuid
from pathlib import Path
from typing import Callable, Sequence

from lightning_bench.errors import ConfigError

NOISE = ("The grass is green. ", "The sky is blue. ", "The sun is yellow. ", "Here we go. ", "There and back again.\n")
NEEDLES = {"passkey": "The pass key is {key}. Remember it. {key} is the pass key.\n",
           "number_string": "The sequence of digits is {key}. Remember it. {key} is the sequence of digits.\n"}
QUESTIONS = {"passkey": "What is the pass key?", "number_string": "What is the sequence of digits?"}
KV_QUESTION = '\nKey: "{key}"\nThe value associated with the specified key is: '
TASKS = ("passkey", "number_string", "kv_retrieval")


def _key(task: str, rng: random.Random) -> str:
    digits = [str(rng.randint(0, 9)) for _ in range(5)]
    if task == "number_string":
        for k in range(5):  # a random digit doubled in place, 5 times
            pos = rng.randint(0, 5 + k - 1)
            digits.insert(pos, digits[pos])
    return "".join(digits)


def _haystack(sentences: int, needle: str, depth: float) -> tuple[str, int]:
    """`sentences` noise sentences with the needle at the line boundary (or the end) nearest `depth`;
    (context, index of the needle's first character)."""
    full_lines = sentences // len(NOISE)
    spots = [line * len(NOISE) for line in range(full_lines + 1)] + [sentences]
    spot = min(spots, key=lambda s: (abs(s - depth * sentences), s))
    noise = [NOISE[i % len(NOISE)] for i in range(sentences)]
    before = "".join(noise[:spot])
    return before + needle + "".join(noise[spot:]), len(before)


def _largest_within(count: Callable[[int], int], target: int, guess: int, unit: float) -> int:
    """The largest n >= 0 with count(n) <= target, count growing with n: steps from `guess` by the token cost
    `unit` of one more n, never re-trying a size already known to fit (lo) or not (hi)."""
    lo, hi, n = -1, None, max(0, guess)
    while hi is None or hi - lo > 1:
        t = count(n)
        if t <= target:
            lo = max(lo, n)
        else:
            hi = n if hi is None else min(hi, n)
        if hi is not None and hi - lo <= 1:
            break
        step = (target - t) / unit
        n = n + (math.floor(step) if step >= 0 else -math.ceil(-step))
        n = max(n, lo + 1) if hi is None else min(max(n, lo + 1), hi - 1)
    if lo < 0:
        raise ConfigError(f"the target length {target} is shorter than the needle alone ({count(0)} tokens); "
                          "ask for a longer --length")
    return lo


def _needle_row(task: str, tokenizer, target: int, depth: float, rng: random.Random, guess: int) -> tuple[dict, int]:
    key = _key(task, rng)
    needle = NEEDLES[task].format(key=key)
    unit = len(tokenizer.encode("".join(NOISE * 8))) / (8 * len(NOISE))

    def build(m: int) -> str:
        return _haystack(m, needle, depth)[0].rstrip(" ")

    m = _largest_within(lambda m: len(tokenizer.encode(build(m))), target, guess or int(target / unit), unit)
    context, start = _haystack(m, needle, depth)
    context = context.rstrip(" ")
    after = len(tokenizer.encode(context[start + len(needle):]))
    return {"context": context, "input": QUESTIONS[task], "answer": key, "len": after}, m


def _pair(rng: random.Random) -> tuple[str, str]:
    return (str(uuid.UUID(int=rng.getrandbits(128), version=4)), str(uuid.UUID(int=rng.getrandbits(128), version=4)))


def _kv_context(pairs: Sequence[tuple[str, str]]) -> str:
    return "JSON data:\n{" + ", ".join(f'"{k}": "{v}"' for k, v in pairs) + "}"


def _kv_row(tokenizer, target: int, depth: float, rng: random.Random, guess: int) -> tuple[dict, int]:
    pairs: list[tuple[str, str]] = []

    def first(n: int) -> list[tuple[str, str]]:
        while len(pairs) < n:
            pairs.append(_pair(rng))
        return pairs[:n]

    unit = (len(tokenizer.encode(_kv_context(first(21)))) - len(tokenizer.encode(_kv_context(first(1))))) / 20
    n = _largest_within(lambda n: len(tokenizer.encode(_kv_context(first(n)))), target,
                        guess or int(target / unit), unit)
    if n < 1:
        raise ConfigError(f"the target length {target} is shorter than one key/value pair; ask for a longer --length")
    chosen = first(n)
    key, value = chosen[min(n - 1, round(depth * (n - 1)))]
    return {"context": _kv_context(chosen), "input": KV_QUESTION.format(key=key), "answer": value}, n


def depths_of(count: int) -> list[float]:
    """`count` depths evenly spaced over [0, 1] (one: 0.5)."""
    if count < 1:
        raise ConfigError(f"--depths must be at least 1, got {count}")
    return [0.5] if count == 1 else [i / (count - 1) for i in range(count)]


def generate(task: str, tokenizer, lengths: Sequence[int], depths: Sequence[float], per_depth: int = 1,
             seed: int = 0) -> list[dict]:
    """Rows of `task` for every length x depth x sample, in that order, in the benchmark's file format
    ({id, context, input, answer, len} or, for kv_retrieval, {id, context, input, answer}).
    `tokenizer`: anything with encode(text) -> token ids (data/tokenization.py's HFTokenizer)."""
    if task not in TASKS:
        raise ConfigError(f"unknown InfiniteBench generated task {task!r}; valid: {', '.join(TASKS)}")
    if per_depth < 1:
        raise ConfigError(f"--per_depth must be at least 1, got {per_depth}")
    bad = [d for d in depths if not 0.0 <= d <= 1.0]
    if bad:
        raise ConfigError(f"depths must lie in [0, 1], got {bad}")
    rows = []
    for length in lengths:
        if length < 1:
            raise ConfigError(f"--length must be a positive number of tokens, got {length}")
        guess = 0
        for d, depth in enumerate(depths):
            for sample in range(per_depth):
                rng = random.Random(f"infinitebench/{task}/seed={seed}/length={length}/depth={d}/sample={sample}")
                if task == "kv_retrieval":
                    row, guess = _kv_row(tokenizer, length, depth, rng, guess)
                else:
                    row, guess = _needle_row(task, tokenizer, length, depth, rng, guess)
                rows.append({"id": len(rows), **row})
    return rows


def write_jsonl(rows: list[dict], path: str | Path, manifest: dict | None = None) -> Path:
    """The rows as JSON lines, atomically; `manifest` (how they were made) beside them as <path>.manifest.json."""
    from lightning_bench.results.io import write_text_atomic

    path = write_text_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    if manifest is not None:
        write_text_atomic(path.with_name(path.name + ".manifest.json"), json.dumps(manifest, indent=1) + "\n")
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="lightning_bench infinitebench_generate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, choices=TASKS)
    parser.add_argument("--tokenizer", required=True, help="a tokenizer folder or hub name (gpt2 works offline)")
    parser.add_argument("--length", type=int, nargs="+", required=True, help="target context tokens (one or more)")
    parser.add_argument("--depths", type=int, default=11, help="evenly spaced depths over [0, 1] (default 11)")
    parser.add_argument("--depth", type=float, nargs="+", help="explicit depths in [0, 1] (instead of --depths)")
    parser.add_argument("--per_depth", type=int, default=1, help="samples per length and depth (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("-o", "--output", required=True, help="the JSON-lines file to write")
    args = parser.parse_args(argv)

    from lightning_bench.data.tokenization import HFTokenizer

    depths = args.depth if args.depth else depths_of(args.depths)
    tokenizer = HFTokenizer(args.tokenizer)
    rows = generate(args.task, tokenizer, args.length, depths, args.per_depth, args.seed)
    manifest = {"generator": "lightning_bench.data.infinitebench_generate", "task": args.task, "rows": len(rows),
                "lengths": args.length, "depths": depths, "per_depth": args.per_depth, "seed": args.seed,
                "tokenizer": tokenizer.describe()}
    path = write_jsonl(rows, args.output, manifest)
    print(f"{len(rows)} {args.task} rows ({', '.join(map(str, args.length))} tokens, {len(depths)} depths) -> {path}")
    return 0
