"""The downstream quick_test grid run serially, on 1 Ray worker and on 2 Ray workers: wall time of the whole
command (a local Ray instance started, the model loaded once per worker, every cell computed, the report
written), cells/hour, and whether the three results JSONs hold the same scores.

    python benchmarks/ray_workers.py [--config configs/downstream/quick_test.yaml] [--out ray_workers.json]

Each arm writes into a fresh folder of its own, one thread per worker (`--threads 1`; a serial run also one
thread), so that the arms differ only in how many processes compute groups. What the machine has
(cores) is printed beside the figures, and each group's own time: 2 workers cannot beat 1 by more than the
cores and the grid's groups allow (quick_test has 2 groups, XSum and SQuAD v2: the run takes at least the longer).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ARMS = {"serial": [], "ray, 1 worker": ["--executor", "ray", "--ray.workers", "1"],
        "ray, 2 workers": ["--executor", "ray", "--ray.workers", "2"]}
# the driver's line after each group (a Ray worker's output reaches the driver's log too)
GROUP_LINE = re.compile(r"(\d+) cells of (\S+) in ([\d.]+) s")
SCORES = ("task", "method", "level", "compression_protocol", "metrics", "num_examples")  # what must agree


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/downstream/quick_test.yaml")
    ap.add_argument("--out", default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    lb = Path(sys.executable).parent / "lightning_bench"
    out = {"machine": {"cpu_cores": os.cpu_count(), "platform": sys.platform}, "config": args.config, "arms": {}}
    scores = {}
    with tempfile.TemporaryDirectory() as tmp:
        for arm, extra in ARMS.items():
            folder = Path(tmp) / arm.replace(" ", "_").replace(",", "")
            argv = ["downstream", "--config", args.config, "--results_dir", str(folder), "--name", "quick_test",
                    "--threads", "1", *extra]
            start = time.perf_counter()
            done = subprocess.run([str(lb), *argv], capture_output=True, text=True)
            wall = time.perf_counter() - start
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            groups = {m.group(2): float(m.group(3)) for m in GROUP_LINE.finditer(done.stdout + done.stderr)}
            cells = json.loads((folder / "quick_test" / "quick_test_results.json").read_text())["cells"]
            scores[arm] = {k: {f: c.get(f) for f in SCORES} for k, c in cells.items()}
            out["arms"][arm] = {"wall_s": round(wall, 1), "cells": len(cells),
                                "cells_per_hour": round(len(cells) / wall * 3600, 1), "group_s": groups,
                                "command": "lightning_bench " + shlex.join(argv)}
            print(f"{arm:>15}: {len(cells)} cells in {wall:7.1f} s = {len(cells) / wall * 3600:6.1f} cells/hour; "
                  f"groups: {', '.join(f'{g} {t:.1f} s' for g, t in groups.items())}", flush=True)
    serial = out["arms"]["serial"]["wall_s"]
    for arm in out["arms"].values():
        arm["speedup_vs_serial"] = round(serial / arm["wall_s"], 2)
    out["same_scores"] = all(s == scores["serial"] for s in scores.values())
    print(f"machine: {os.cpu_count()} CPU cores; same scores in every arm: {out['same_scores']}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    return 0 if out["same_scores"] else 1


if __name__ == "__main__":
    sys.exit(main())
