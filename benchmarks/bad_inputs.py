"""Run every bad input of tests/test_bad_inputs.py as its own `lightning_bench` process and count how each
ends: clean (exit 2, one `lightning_bench: error:` line naming the option, nothing left behind), traceback,
silent (exit 0: the bad value was accepted), or noisy (exit 2, but usage lines, another error line, a
line that does not name the option, or a result file left).

    python benchmarks/bad_inputs.py                      # the installed code
    python benchmarks/bad_inputs.py --code /tmp/before   # another checkout's lightning_bench (the cases stay these)

Each case runs in a fresh folder with its own cache, offline W&B and no HF_HUB_OFFLINE (as a user's shell).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import FIXTURES  # noqa: E402
from tests.test_bad_inputs import CASES, prepare, results_left  # noqa: E402

MAIN = "import sys; from lightning_bench.cli import main; sys.exit(main(sys.argv[1:]))"


def classify(code: int, err: str, expect: str, left: list[str]) -> str:
    if "Traceback" in err or code not in (0, 2):
        return "traceback"
    if code == 0:
        return "silent"
    lines = [line for line in err.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    errors = [line for line in lines if "error" in line.lower()]
    if not last.startswith("lightning_bench: error: ") or errors != [last] or expect not in last or left:
        return "noisy"
    return "clean"


def run_case(name: str, code_root: Path, timeout: float) -> tuple[str, str, str, float]:
    with tempfile.TemporaryDirectory(prefix="bad_input_") as tmp:
        tmp = Path(tmp)
        argv, env_over = prepare(name, FIXTURES / "tiny_corpus", tmp)
        env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
        env.update({"PYTHONPATH": str(code_root), "WANDB_MODE": "offline", "LB_CACHE_DIR": str(tmp / "cache"),
                    "WANDB_SILENT": "true", **env_over})
        before = set(results_left(tmp))
        start = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-c", MAIN, *argv], cwd=tmp, env=env, capture_output=True,
                                  text=True, timeout=timeout)
            code, err = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired:
            return name, "silent", f"still running after {timeout:.0f} s", timeout
        left = sorted(set(results_left(tmp)) - before)
        outcome = classify(code, err, CASES[name].expect, left)
        lines = [line for line in err.splitlines() if line.strip()]
        detail = f"exit {code}; {len(lines)} stderr lines; last: {lines[-1][:150] if lines else ''}"
        return name, outcome, detail + (f"; left {left}" if left else ""), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose lightning_bench runs")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--only", nargs="*", help="case names (default: all)")
    args = parser.parse_args()
    names = args.only or list(CASES)
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda n: run_case(n, args.code.resolve(), args.timeout), names))
    counts: dict[str, int] = {}
    for name, outcome, detail, seconds in results:
        counts[outcome] = counts.get(outcome, 0) + 1
        print(f"{outcome:9s} {seconds:6.1f}s  {name}: {detail}")
    print(f"\n{len(results)} bad inputs against {args.code.resolve()}: " +
          ", ".join(f"{counts.get(k, 0)} {k}" for k in ("clean", "traceback", "silent", "noisy")))


if __name__ == "__main__":
    main()
