"""Where one downstream group's time goes: `lightning_bench downstream` under cProfile, summed by part.

    python benchmarks/profile_group.py --data_dir DATA [--task ruler/niah_single_1] [--samples 4] [--threads 2]

Runs the long_context preset on one task and the query_aware protocol (every method and ratio of the preset,
one group: one prefill per example, the cells as rows of a batch) into a temporary folder, then prints the
cumulative seconds of the KV engine's parts (prefill, attention statistics, decoding forwards, compressions,
stacking and selecting rows) and of the model's forwards (docs/sparsity.md, "Where a 4k RULER group's time
goes"). DATA holds ruler/4096/ (generate_ruler, as in the preset's comment).
"""

import argparse
import cProfile
import pstats
import tempfile
import time

PARTS = [("the group", "run_group", "downstream/decode.py"), ("prefills", "prefill", "sparsity/engine.py"),
         ("attention statistics", "observe", "sparsity/capture.py"),
         ("decoding continuation (fed part + steps)", "continue_prompts", "sparsity/task_decode.py"),
         ("forwards after the prefill (feed)", "feed", "sparsity/engine.py"),
         ("compressions", "compress", "sparsity/cache.py"), ("stacking rows", "stack", "sparsity/engine.py"),
         ("dropping finished rows", "select", "sparsity/engine.py"),
         ("sampling + stops", "pick", "sparsity/sampling.py"), ("meter", "meter", "sparsity/task_decode.py")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data_dir", required=True)
    parser.add_argument("--task", default="ruler/niah_single_1")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    from lightning_bench.cli import main as cli

    with tempfile.TemporaryDirectory(prefix="profile_group_") as out:
        argv = ["downstream", "--config", "configs/downstream/long_context.yaml", "--data_dir", args.data_dir,
                "--results_dir", out, "--name", "p", "--tasks", f"[{args.task}]", "--protocols", "[query_aware]",
                "--max_samples", str(args.samples), "--threads", str(args.threads)]
        profile, start = cProfile.Profile(), time.perf_counter()
        profile.runcall(cli, argv)
        wall = time.perf_counter() - start
    stats = pstats.Stats(profile).stats
    print(f"wall {wall:.1f} s")
    for label, name, where in PARTS:  # the largest cumulative time of a function of that name in that file
        seconds = max((ct for (f, _, n), (_, _, _, ct, _) in stats.items() if n == name and f.endswith(where)),
                      default=0.0)
        print(f"{label:<45} {seconds:8.1f} s")


if __name__ == "__main__":
    main()
