r"""`lightning_bench counting_stars_generate`: make Counting-Stars' English sets over a local haystack.

    lightning_bench counting_stars_generate --haystack ../shared/data/pg19 --lengths 2000 4000 \
        --data_dir DATA/counting_stars
    lightning_bench test ... --task counting_stars --data.data_dir DATA

As the benchmark's gen_test_data.ipynb builds them (English): the haystack is the text with its newlines
made spaces, cut to its first int(scale x length) space-separated pieces (the benchmark's scale 0.8: ~0.8
words a token, so a length is a nominal number of tokens; the tokenizer is not consulted). M evidence
sentences go in one after another: star t (t = 0 .. M-1) after piece L*t + (t + 1)*s of the text as it is
by then, s = int(pieces / M), L the pieces of the sentence, which spreads them evenly (the first at depth
~1/M, the last at the end of the context, just before the question). The sentences, with a_t the count
and r_t = a_t +- 1 the wrong one:

    searching   "\nThe little penguin counted {a_t} ★\n"
    reasoning   "\nThe little penguin counted {r_t} ★, but found that a mistake had been made, so the counting
                was done again, and this time {a_t} ★ was counted correctly.\n"

The counts: for M = 32 the benchmark's own lists (the same at every length); for another M, drawn as it
drew them (one value in each block [4i+1, 4i+3], shuffled; r = a +- 1) from `--seed`. The benchmark's
haystack is Paul Graham's essays, which are not distributed with it: any local text serves (a .txt file or
a folder of them, read in sorted order), and the manifest names it with its sha256.

Writes DATA_DIR/<task>.jsonl (one row per length, atomically) and its entry in DATA_DIR/manifest.json; an
existing <task>.jsonl made with other arguments is refused (tasks/generated_sets.py).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from lightning_bench.data.options import NonNegativeInt, PositiveInt, parse_command
from lightning_bench.errors import ConfigError, MissingData
from lightning_bench.options import OpenClosedUnitInterval
from lightning_bench.results.io import check_output, write_text_atomic
from lightning_bench.tasks.generated_sets import check_replaceable, normalized, read_manifest
from lightning_bench.tasks.counting_stars.definitions import PIECES_PER_TOKEN, QUESTIONS

GENERATOR = "lightning_bench.tasks.counting_stars.generate@1"
Task = Literal["searching", "reasoning"]
SENTENCES = {"searching": "\nThe little penguin counted {a} ★\n",
             "reasoning": "\nThe little penguin counted {r} ★, but found that a mistake had been made, so the "
                          "counting was done again, and this time {a} ★ was counted correctly.\n"}
# the benchmark's counts for 32 stars (its context_data/a_stars.txt and r_stars.txt, key "32")
COUNTS_32 = [15, 117, 42, 69, 58, 107, 9, 49, 113, 66, 26, 102, 81, 94, 77, 61, 5, 19, 109, 3, 35, 54, 86, 89, 127,
             21, 46, 122, 38, 97, 74, 29]
WRONG_32 = [16, 116, 43, 70, 59, 106, 8, 48, 112, 67, 25, 101, 82, 93, 76, 62, 6, 18, 108, 4, 34, 53, 85, 90, 126,
            22, 45, 121, 39, 96, 75, 30]


def star_counts(stars: int, seed: int) -> tuple[list[int], list[int]]:
    """(the counts, the wrong counts stated before them in the reasoning task)."""
    if stars == 32:
        return list(COUNTS_32), list(WRONG_32)
    rng = random.Random(f"counting_stars:{stars}:{seed}")
    counts = [4 * i + rng.randint(1, 3) for i in range(stars)]  # distinct, never adjacent: a +- 1 is no count
    rng.shuffle(counts)
    wrong: list[int] = []
    for a in counts:  # distinct and positive, as the benchmark's own lists are (a +- 1 inside a's block always is)
        wrong.append(rng.choice([r for r in (a - 1, a + 1) if r > 0 and r not in wrong]))
    return counts, wrong


def read_haystack(path: str | Path) -> tuple[str, list[dict]]:
    """The haystack text (newlines made spaces) and its sources [{path, sha256}]."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*.txt") if p.is_file()) if path.is_dir() else [path]
    if not files or not all(f.is_file() for f in files):
        raise MissingData(f"counting_stars_generate: --haystack {path}: no text found; give a .txt file or a "
                          "folder of them (e.g. ../shared/data/pg19)")
    raw = [f.read_bytes() for f in files]
    sources = [{"path": str(f), "sha256": hashlib.sha256(b).hexdigest()} for f, b in zip(files, raw)]
    # newlines made spaces, as the benchmark reads its essays (universal newlines: CRLF is one newline)
    texts = [b.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n") for b in raw]
    return "".join(t.replace("\n", " ") for t in texts), sources


def make_row(task: str, haystack: str, length: int, scale: float, counts: list[int], wrong: list[int]) -> dict:
    """One row: the haystack cut to int(scale x length) pieces with the len(counts) sentences in it."""
    pieces = int(length * scale)
    words = haystack.split(" ")
    if len(words) < pieces:
        raise ConfigError(f"counting_stars_generate: the haystack has {len(words)} pieces, length {length} needs "
                          f"{pieces}; give a longer --haystack or a shorter length")
    context, step = " ".join(words[:pieces]), pieces // len(counts)
    for t, (a, r) in enumerate(zip(counts, wrong)):
        sentence = SENTENCES[task].format(a=a, r=r)
        words = context.split(" ")
        at = len(sentence.split(" ")) * t + t * step + step
        context = " ".join(words[:at]) + sentence + " ".join(words[at:])
    marks = [context.index(SENTENCES[task].format(a=a, r=r)) for a, r in zip(counts, wrong)]
    return {"id": f"{task}-{length}", "task": task, "context": context, "question": QUESTIONS[task],
            "counts": counts, **({"distractors": wrong} if task == "reasoning" else {}), "length": length,
            "context_size": pieces, "star_depths": [round(100.0 * m / len(context), 2) for m in marks],
            "max_new_tokens": answer_tokens(len(counts))}


def answer_tokens(stars: int) -> int:
    """The new-token limit of a row with `stars` counts: the JSON answer takes ~4.4 SmolLM2 tokens a count (32
    counts: 138-143 tokens), so 8 a count leaves room for any tokenizer's digits and a code fence."""
    return 8 * stars


@dataclass
class CountingStarsConfig:
    """counting_stars_generate's options (`--config FILE` reads them from YAML under the same names)."""

    haystack: str
    """a .txt file or a folder of them (read in sorted order), e.g. ../shared/data/pg19 (~27k words)"""
    data_dir: str
    """folder for <task>.jsonl and manifest.json (e.g. DATA/counting_stars, read with --data.data_dir DATA)"""
    lengths: list[PositiveInt]
    """nominal context lengths (tokens at ~0.8 words a token; the benchmark's are 4000 ... 128000)"""
    task: list[Task] = field(default_factory=lambda: list(get_args(Task)))
    """searching, reasoning or both"""
    stars: PositiveInt = 32
    """evidence sentences per row (the benchmark's M; 32 uses its own counts)"""
    scale: OpenClosedUnitInterval = PIECES_PER_TOKEN
    """haystack pieces per nominal token (the benchmark's English sets: 0.8)"""
    seed: NonNegativeInt = 0
    """the seed of the counts when --stars is not 32"""

    def __post_init__(self):
        for option, values in (("--task", self.task), ("--lengths", self.lengths)):
            if not values:
                raise ConfigError(f"counting_stars_generate: {option} is empty; give at least one value")


def main(argv: list[str]) -> int:
    args = parse_command("counting_stars_generate", CountingStarsConfig, argv, __doc__,
                         spellings={"--lengths": ["--length"]})
    out = check_output("--data_dir", args.data_dir)  # before the haystack is read
    haystack, sources = read_haystack(args.haystack)
    arguments = {"generator": GENERATOR, "lengths": args.lengths, "scale": args.scale, "stars": args.stars,
                 "seed": args.seed if args.stars != 32 else None,  # 32 stars: the benchmark's counts, no draw
                 "haystack": [s["sha256"] for s in sources]}  # the bytes, not the paths' spelling
    manifest = read_manifest(out / "manifest.json")
    for task in args.task:
        check_replaceable(out / f"{task}.jsonl", manifest.get(task), arguments, "--data_dir")
    counts, wrong = star_counts(args.stars, args.seed)
    rows = {task: [make_row(task, haystack, n, args.scale, counts, wrong) for n in args.lengths]
            for task in args.task}  # every row made before any file is written
    out.mkdir(parents=True, exist_ok=True)
    for task, task_rows in rows.items():
        path = write_text_atomic(out / f"{task}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                                                   for r in task_rows))
        print(f"{task}: {len(task_rows)} rows ({args.stars} stars) at {', '.join(map(str, args.lengths))} -> {path}")
        manifest[task] = {"arguments": normalized(arguments), "haystack": sources,
                          "counts": "the benchmark's (32 stars)" if args.stars == 32 else "drawn from seed",
                          "length_is": "nominal tokens: int(scale x length) space-separated pieces"}
        write_text_atomic(out / "manifest.json", json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return 0
