r"""`lightning_bench infinitebench_generate`: make InfiniteBench's synthetic retrieval tasks at any length,
for any tokenizer, as JSON lines in the benchmark's own format.

    lightning_bench infinitebench_generate --task passkey kv_retrieval --tokenizer $LB_SMOLLM2_DIR \
        --lengths 4096 8192 --depths 11 --per_depth 5 --seed 0 --data_dir DATA/infinitebench
    lightning_bench test ... --task infinitebench/passkey --data.data_dir DATA --data.max_context 8192

`--data_dir DIR` (old spelling `--out`) writes DIR/<length>/<task>.jsonl per length (atomically) and
DIR/<length>/manifest.json (per
task: generator, rows, what a length counts, shortest and longest row, depths, seed, tokenizer), the sets that
tasks/infinitebench/layout.yaml names for `--max_context <length>`; `-o FILE` writes every length into one
file with FILE.manifest.json beside it (read it with --data.paths).
The options may also come from `--config FILE` (YAML, the same names; flags after it override it);
`--print_config` prints the resolved options as such a file and exits.

As OpenBMB/InfiniteBench's data/construct_synthetic_dataset.py builds them:
- passkey: a haystack of the noise line "The grass is green. The sky is blue. The sun is yellow. Here we go.
  There and back again.\n" repeated, with the line "The pass key is K. Remember it. K is the pass key.\n"
  at a depth; K is 5 random digits; the question "What is the pass key?".
- number_string: the same haystack with "The sequence of digits is K. Remember it. K is the sequence of
  digits.\n"; K is 5 random digits, then 5 times a random digit doubled in place (10 digits with runs).
- kv_retrieval: "JSON data:\n{...}" of random UUID4 key/value pairs (lost-in-the-middle's make_kv_retrieval_data
  draws them so); the question '\nKey: "<key>"\nThe value associated with the specified key is: ' asks for
  the pair at the depth (its position among the pairs).

Length: each of `--lengths` is a target number of tokens as the given tokenizer encodes them: under `--data_dir`
RULER's count, the whole prompt (the task's template, in the tokenizer's chat template when it has one) plus
the task's new-token limit, so an N set fits a run under --max_context N whole (the run's middle cut would
take the needle at depth 50 first); under `-o` the tokens of `context` alone (the haystack / JSON, with the
needle). Each row holds the most noise that stays within it: whole noise sentences for passkey /
number_string (about 5 tokens each, so within 1% from ~500 tokens up), whole pairs for kv_retrieval (a pair
is 60-70 tokens with SmolLM2's tokenizer: within 1% from ~7000 tokens up). The benchmark's own files are
~128k tokens with the noise line counted as 25 tokens; here the tokenizer counts.

Depth: the fraction of the context before the needle. `--depths N` spaces N depths evenly over [0, 1] (as
the benchmark steps through its haystack); passkey / number_string put the needle at the line boundary (or
the haystack's end) nearest the depth, so the needle is a line of its own as in the benchmark. `len`
(passkey, number_string) is, as in the benchmark's files, the number of context tokens after the needle.
Every row also records `target_length` (the length asked for) and `depth` (the depth asked for, in percent,
as RULER's rows and by_depth figures count it), so the scorer can report by length and by depth; the
manifests keep the fractions given.

Deterministic: every row draws from its own generator seeded by (task, seed, length, depth index, sample),
so the same arguments give the same file, byte for byte, on any machine.
"""

from __future__ import annotations

import json
import math
import random
import sys
import uuid
from pathlib import Path
from dataclasses import dataclass, field
from typing import Callable, Literal, Optional, Sequence, get_args

from lightning_bench.data.options import ClosedUnitInterval, NonNegativeInt, PositiveInt, parse_command
from lightning_bench.errors import ConfigError
from lightning_bench.tasks.generated_sets import check_replaceable, normalized, read_manifest
from lightning_bench.results.io import check_output, write_text_atomic

# @2: rows record target_length and depth; @3: the prompt counted with its answer prefix
GENERATOR = "lightning_bench.tasks.infinitebench.generate@4"  # 4: the prompt counted in the protocols' parts
NOISE = ("The grass is green. ", "The sky is blue. ", "The sun is yellow. ", "Here we go. ", "There and back again.\n")
NEEDLES = {"passkey": "The pass key is {key}. Remember it. {key} is the pass key.\n",
           "number_string": "The sequence of digits is {key}. Remember it. {key} is the sequence of digits.\n"}
QUESTIONS = {"passkey": "What is the pass key?", "number_string": "What is the sequence of digits?"}
KV_QUESTION = '\nKey: "{key}"\nThe value associated with the specified key is: '
Task = Literal["passkey", "number_string", "kv_retrieval"]
TASKS = get_args(Task)


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
        raise ConfigError(f"the target length {target} is shorter than the needle alone ({count(0)} tokens counted); "
                          "ask for a longer --lengths")
    return lo


# (context, question) -> the tokens a row is fitted by: the context's alone, or RULER's count (prompt_count)
Measure = Callable[[str, str], int]


def context_count(tokenizer) -> Measure:
    return lambda context, question: len(tokenizer.encode(context))


def prompt_count(task: str, tokenizer) -> Measure:
    """RULER's count of a row, as a run under --max_context counts it: the task's prompt (its definition's
    template, in the tokenizer's chat template when it has one, as --chat_template auto renders it; encoded in
    the parts the compression protocols feed, which some tokenizers make a token or two longer than the
    prompt encoded whole: the longer protocol's count) plus the task's new-token limit. A set counted so is read whole under --max_context N: the run's middle cut would
    otherwise take the needle at depth 50 first."""
    from lightning_bench.tasks.datamodules.encoding import split_prompt
    from lightning_bench.tasks.registry import get_task
    from lightning_bench.tasks.prompts import build_request, render_generation

    name = f"infinitebench/{task}"
    tok = getattr(tokenizer, "tok", None)
    chat = tok if getattr(tok, "chat_template", None) is not None else None

    def count(context: str, question: str) -> int:  # as the protocols encode it: in parts (split_prompt), the longer
        request = build_request(name, {"context": context, "input": question, "answers": [""]})
        text, cue_start = render_generation(request, chat)
        parts, _ = split_prompt(tokenizer, text, cue_start, request.document, room=sys.maxsize)
        return max(sum(map(len, part)) for part in parts.values()) + get_task(name).generation.max_new_tokens

    return count


def _needle_row(task: str, tokenizer, target: int, depth: float, rng: random.Random, guess: int,
                measure: Measure) -> tuple[dict, int]:
    key = _key(task, rng)
    needle = NEEDLES[task].format(key=key)
    unit = len(tokenizer.encode("".join(NOISE * 8))) / (8 * len(NOISE))

    def build(m: int) -> str:
        return _haystack(m, needle, depth)[0].rstrip(" ")

    m = _largest_within(lambda m: measure(build(m), QUESTIONS[task]), target, guess or int(target / unit), unit)
    context, start = _haystack(m, needle, depth)
    context = context.rstrip(" ")
    after = len(tokenizer.encode(context[start + len(needle):]))
    return {"context": context, "input": QUESTIONS[task], "answer": key, "len": after}, m


def _pair(rng: random.Random) -> tuple[str, str]:
    return (str(uuid.UUID(int=rng.getrandbits(128), version=4)), str(uuid.UUID(int=rng.getrandbits(128), version=4)))


def _kv_context(pairs: Sequence[tuple[str, str]]) -> str:
    return "JSON data:\n{" + ", ".join(f'"{k}": "{v}"' for k, v in pairs) + "}"


def _kv_row(tokenizer, target: int, depth: float, rng: random.Random, guess: int,
            measure: Measure) -> tuple[dict, int]:
    pairs: list[tuple[str, str]] = []

    def first(n: int) -> list[tuple[str, str]]:
        while len(pairs) < n:
            pairs.append(_pair(rng))
        return pairs[:n]

    def asked(n: int) -> tuple[str, str]:  # the pair at the depth among n
        return first(n)[min(n - 1, round(depth * (n - 1)))] if n else ("", "")

    def count(n: int) -> int:
        return measure(_kv_context(first(n)), KV_QUESTION.format(key=asked(n)[0]))

    unit = (len(tokenizer.encode(_kv_context(first(21)))) - len(tokenizer.encode(_kv_context(first(1))))) / 20
    n = _largest_within(count, target, guess or int(target / unit), unit)
    if n < 1:
        raise ConfigError(f"the target length {target} is shorter than one key/value pair; ask for a longer --lengths")
    key, value = asked(n)
    return {"context": _kv_context(first(n)), "input": KV_QUESTION.format(key=key), "answer": value}, n


def depths_of(count: int) -> list[float]:
    """`count` depths evenly spaced over [0, 1] (one: 0.5)."""
    if count < 1:
        raise ConfigError(f"--depths must be at least 1, got {count}")
    return [0.5] if count == 1 else [i / (count - 1) for i in range(count)]


def generate(task: str, tokenizer, lengths: Sequence[int], depths: Sequence[float], per_depth: int = 1,
             seed: int = 0, measure: Measure | None = None) -> list[dict]:
    """Rows of `task` for every length x depth x sample, in that order, in the benchmark's file format
    ({id, context, input, answer, len} or, for kv_retrieval, {id, context, input, answer}) plus
    target_length and depth (percent).
    `tokenizer`: anything with encode(text) -> token ids (data/tokenization.py's HFTokenizer).
    `measure`: what a length counts (prompt_count: RULER's count); default the context's tokens alone."""
    if task not in TASKS:
        raise ConfigError(f"unknown InfiniteBench generated task {task!r}; valid: {', '.join(TASKS)}")
    if per_depth < 1:
        raise ConfigError(f"--per_depth must be at least 1, got {per_depth}")
    bad = [d for d in depths if not 0.0 <= d <= 1.0]
    if bad:
        raise ConfigError(f"depths must lie in [0, 1], got {bad}")
    measure = measure or context_count(tokenizer)
    rows = []
    for length in lengths:
        if length < 1:
            raise ConfigError(f"--length must be a positive number of tokens, got {length}")
        guess = 0
        for d, depth in enumerate(depths):
            for sample in range(per_depth):
                rng = random.Random(f"infinitebench/{task}/seed={seed}/length={length}/depth={d}/sample={sample}")
                if task == "kv_retrieval":
                    row, guess = _kv_row(tokenizer, length, depth, rng, guess, measure)
                else:
                    row, guess = _needle_row(task, tokenizer, length, depth, rng, guess, measure)
                rows.append({"id": len(rows), **row, "target_length": length, "depth": percent(depth)})
    return rows


def percent(depth: float) -> float:
    """A depth fraction as the percent the rows record (0.1 -> 10.0, not 10.000000000000002)."""
    return round(100 * depth, 6)


def write_jsonl(rows: list[dict], path: str | Path, manifest: dict | None = None) -> Path:
    """The rows as JSON lines, atomically; `manifest` (how they were made) beside them as <path>.manifest.json."""
    path = write_text_atomic(path, "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))
    if manifest is not None:
        write_text_atomic(path.with_name(path.name + ".manifest.json"), json.dumps(manifest, indent=1) + "\n")
    return path


def arguments_of(tokenizer, depths: Sequence[float], per_depth: int, seed: int) -> dict:
    """What decides a task's rows at one length (generated_sets.py: a file is replaced only under the same)."""
    return {"generator": GENERATOR, "depths": list(depths), "per_depth": per_depth, "seed": seed,
            "tokenizer": tokenizer.content()}


def write_sets(task: str, tokenizer, out: str | Path, lengths: Sequence[int], depths: Sequence[float],
               per_depth: int = 1, seed: int = 0) -> list[Path]:
    """<out>/<length>/<task>.jsonl for each length (ids from 0 in each), counted as RULER counts (prompt_count),
    each followed by its entry in <out>/<length>/manifest.json (one entry per task: the tasks of one length
    share the folder)."""
    measure = prompt_count(task, tokenizer)
    paths = []
    for length in lengths:
        rows = generate(task, tokenizer, [length], depths, per_depth, seed, measure)
        folder = Path(out) / str(length)
        paths.append(write_jsonl(rows, folder / f"{task}.jsonl"))
        manifest_path = folder / "manifest.json"
        manifest = read_manifest(manifest_path)
        counted = [measure(r["context"], r["input"]) for r in rows]
        manifest[task] = {"generator": GENERATOR, "rows": len(rows), "target_length": length,
                          "length_is": "prompt tokens (chat template applied if the tokenizer has one) + the "
                                       "task's max_new_tokens, as RULER counts", "length_min": min(counted),
                          "length_max": max(counted), "depths": list(depths), "per_depth": per_depth, "seed": seed,
                          "tokenizer": tokenizer.describe(),
                          "arguments": normalized(arguments_of(tokenizer, depths, per_depth, seed))}
        write_text_atomic(manifest_path, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return paths


@dataclass
class InfiniteBenchConfig:
    """infinitebench_generate's options (`--config FILE` reads them from YAML under the same names)."""

    task: list[Task]
    """one or more (-o: one)"""
    tokenizer: str
    """a tokenizer folder or hub name (gpt2 works offline)"""
    lengths: list[PositiveInt]
    """target context tokens (one or more; --length is another spelling)"""
    depths: PositiveInt = 11
    """evenly spaced depths over [0, 1]"""
    depth: list[ClosedUnitInterval] = field(default_factory=list)
    """explicit depths in [0, 1], instead of --depths (empty: --depths)"""
    per_depth: PositiveInt = 1
    """samples per length and depth"""
    seed: NonNegativeInt = 0
    """the seed every row's draws derive from"""
    data_dir: Optional[str] = None
    """folder for <length>/<task>.jsonl and <length>/manifest.json (e.g. DATA/infinitebench, read with
    --data_dir DATA --max_context <length>); --out is its deprecated spelling. Give it or -o"""
    output: Optional[str] = None
    """one JSON-lines file holding every length (read with --paths). Give it or --data_dir"""

    def __post_init__(self):
        if (self.data_dir is None) == (self.output is None):
            raise ConfigError(f"infinitebench_generate: give --data_dir DIR or -o/--output FILE"
                              f"{', not both' if self.data_dir is not None else ''}")
        for option, values in (("--task", self.task), ("--lengths", self.lengths)):
            if not values:
                raise ConfigError(f"infinitebench_generate: {option} is empty; give at least one value")


def main(argv: list[str]) -> int:
    args = parse_command("infinitebench_generate", InfiniteBenchConfig, argv, __doc__,
                         spellings={"--lengths": ["--length"], "--output": ["-o"]},
                         old_spellings={"--out": "--data_dir"})
    if args.output and len(args.task) > 1:
        raise ConfigError(f"-o {args.output} holds one task, got --task {' '.join(args.task)}; use --data_dir DIR "
                          "for several")
    if args.data_dir:  # before the tokenizer loads and the rows are drawn
        check_output("--data_dir", args.data_dir)
    else:
        check_output("-o", args.output, kind="file")

    from lightning_bench.data.tokenization import HFTokenizer

    depths = args.depth if args.depth else depths_of(args.depths)
    tokenizer = HFTokenizer(args.tokenizer)
    arguments = arguments_of(tokenizer, depths, args.per_depth, args.seed)
    for task in args.task:  # nothing is drawn before every file to be written is known replaceable
        if args.data_dir:
            for length in args.lengths:
                folder = Path(args.data_dir) / str(length)
                check_replaceable(folder / f"{task}.jsonl", read_manifest(folder / "manifest.json").get(task),
                                  arguments, "--data_dir")
        else:
            check_replaceable(args.output, read_manifest(f"{args.output}.manifest.json"),
                              {**arguments, "task": task, "lengths": args.lengths}, "-o")
    for task in args.task:
        if args.data_dir:
            paths = write_sets(task, tokenizer, args.data_dir, args.lengths, depths, args.per_depth, args.seed)
        else:
            rows = generate(task, tokenizer, args.lengths, depths, args.per_depth, args.seed)
            manifest = {"generator": GENERATOR, "task": task, "rows": len(rows), "lengths": args.lengths,
                        "length_is": "context tokens", "depths": depths, "per_depth": args.per_depth,
                        "seed": args.seed, "tokenizer": tokenizer.describe(),
                        "arguments": normalized({**arguments, "task": task, "lengths": args.lengths})}
            paths = [write_jsonl(rows, args.output, manifest)]
        print(f"{task}: {len(depths)} depths x {args.per_depth} at {', '.join(map(str, args.lengths))} tokens -> "
              f"{', '.join(map(str, paths))}")
    return 0
