"""Side by side with the `rouge` PyPI package (pltrdy 1.0.1), which LooGLE and LongBench score with: our
re-implementation (lightning_bench/tasks/longbench/rouge_package.py) on the same pairs.

    python -m venv /tmp/rouge_venv && /tmp/rouge_venv/bin/pip install rouge==1.0.1
    /tmp/rouge_venv/bin/python benchmarks/rouge_package_parity.py [--random 2000] [--loogle DIR]

The package is kept out of the project (an unmaintained dependency for one formula), so this runs in its
own venv with only the standard library and our module, loaded from its file. Pairs: every LooGLE
shortdep_qa answer of the shared sample against its evidence sentences, its question, its lower-cased copy
and the next answer; each longdep_summarization summary against the head of its document; then seeded
random texts over a small vocabulary with punctuation, mixed case and "." runs. Printed: the largest
|ours - package| over ROUGE-1/2/L f/p/r, the pairs where the package raises (ours: None), and both sides'
time over all pairs.
"""

import argparse
import ast
import importlib.util
import json
import random
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE = ROOT / "lightning_bench/tasks/longbench/rouge_package.py"


def ours_module():
    spec = importlib.util.spec_from_file_location("rouge_package", MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loogle_pairs(folder: Path) -> list[tuple[str, str]]:
    pairs = []
    for line in open(folder / "shortdep_qa.jsonl", encoding="utf-8"):
        qa = ast.literal_eval(json.loads(line)["qa_pairs"])  # LooGLE stores the list as a Python literal
        for i, q in enumerate(qa):
            nxt = qa[(i + 1) % len(qa)]["A"]
            pairs += [(q["A"], q["S"]), (q["A"], q["Q"]), (q["A"].lower(), q["A"]), (nxt, q["A"])]
    for line in open(folder / "longdep_summarization.jsonl", encoding="utf-8"):
        row = json.loads(line)
        pairs.append((row["output"], row["input"][:3000]))
    return pairs


def random_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    vocab = ["the", "The", "cat", "sat", "on", "mat", "Paris,", "paris", "a", "of", ".", "..", "dog", "ran", "x"]

    def text():
        return " ".join(rng.choice(vocab) for _ in range(rng.randint(0, 40)))
    return [(text(), text()) for _ in range(n)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=2000)
    parser.add_argument("--loogle", default=str(ROOT.parent / "shared/data/loogle"))
    args = parser.parse_args()
    try:
        from rouge import Rouge
    except ImportError:
        print("the `rouge` package is not installed here: nothing to compare (see this script's docstring)")
        return
    ours = ours_module()
    pairs = loogle_pairs(Path(args.loogle)) + random_pairs(args.random)
    package = Rouge()
    worst, raised, mismatched_raise = 0.0, 0, 0
    t_ours = t_pkg = 0.0
    for hyp, ref in pairs:
        start = time.perf_counter()
        mine = ours.scores(hyp, ref)
        t_ours += time.perf_counter() - start
        start = time.perf_counter()
        try:
            theirs = package.get_scores(hyp, ref)[0]
        except (ValueError, RecursionError):
            theirs = None
        t_pkg += time.perf_counter() - start
        if theirs is None or mine is None:
            raised += theirs is None
            mismatched_raise += (theirs is None) != (mine is None)
            continue
        for variant in ("rouge-1", "rouge-2", "rouge-l"):
            for part in "fpr":
                worst = max(worst, abs(mine[variant][part] - theirs[variant][part]))
    print(f"{len(pairs)} pairs ({len(pairs) - args.random} from the LooGLE sample, {args.random} random)")
    print(f"max |ours - package| over ROUGE-1/2/L f, p, r: {worst:.3g}")
    print(f"package raised on {raised} pairs; ours disagreed on whether to score {mismatched_raise} of them")
    print(f"time: ours {t_ours:.2f} s, package {t_pkg:.2f} s (ratio {t_ours / t_pkg:.2f})")


if __name__ == "__main__":
    main()
