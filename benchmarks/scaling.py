"""Forward+backward cost vs sequence length for ResNet-BK, Mamba and the Transformer.

What is measured, per (model, seq_len): one training step's forward + backward (no optimizer
step) at batch 1, loss = cross-entropy on random targets (+ the weighted load-balancing loss for
bk, as in training). Every model gets the same small width (default d_model 64, 2 layers, vocab
1000). Each model is built once, run once as a warm-up, then timed `--reps` times; the median is
reported. Each (model, seq_len) runs in a fresh subprocess (`--one MODEL L`), so one slow or
failing configuration cannot take the others down and memory starts from a clean process:

* on CPU the memory column is the increase of the peak RSS (resource.getrusage ru_maxrss; the
  high-water mark is reset right after the build where the kernel allows it) over the RSS measured
  right after the model is built, before the first forward: activations, autograd buffers,
  gradients, allocator slack; not the weights;
* on CUDA it is torch.cuda.max_memory_allocated (peak stats reset after the build) minus the
  memory allocated right after the build.

Columns: ms per fwd+bwd, microseconds per token (= time / seq_len), MiB per 1k tokens
(= memory / seq_len * 1000).

How to read the growth ratios (per-token cost at the longest length / at the shortest, by default
8192/512 = 16x more tokens): 1.0 means cost linear in N (constant per token); ~16 means quadratic
(per-token cost grows like N); log-linear work (e.g. a Hillis-Steele scan, N log N) gives
log2(8192)/log2(512) ~ 1.44 at most. Fixed per-call costs (Python/dispatch time, and on CPU
~15-20 MiB of RSS that the first fwd+bwd of any process adds: allocator arenas, lazily initialised
kernels, autograd's thread) weigh most at short lengths and push the raw ratios below 1. So each
model also runs once at `--floor-len` (8) tokens, shown as its "floor" row, and the "net" ratios
subtract that floor from both lengths before dividing: read the net columns for the asymptotic
growth. If the longest length is skipped, the ratios use the longest length that finished (and say
so). Torch's default intra-op thread count is kept (and printed); when other processes keep the
cores busy, those threads wait on one another inside every op and timings inflate many-fold
(`--threads 1` avoids it); timings on a shared 2-core machine are noisy at the +-10-20% level
even so.

`--out FILE` also writes the run as one JSON record (kind "scaling": every row, each floor, the growth
ratios, how it was measured and `meta`), the input of `lightning_bench report` (docs/results.md,
"Reports"). FILE must not exist: that is checked before anything is measured, and nothing is replaced.

    python benchmarks/scaling.py                                   # all models, 512..8192
    python benchmarks/scaling.py --models bk --seq-lens 256 512 --reps 1
    python benchmarks/scaling.py --threads 1 --out scaling.json    # the table, and the record for report
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone

MODELS = ("bk", "mamba", "transformer")
DEFAULT_SEQ_LENS = (512, 1024, 2048, 4096, 8192)
RESULT_TAG = "SCALING_RESULT "


# ---------------------------------------------------------------------------------------------
# One configuration (runs inside its own process)
# ---------------------------------------------------------------------------------------------
def _current_rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak_rss() -> bool:
    """Reset the kernel's RSS high-water mark (Linux >= 4.0); False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def build_model(name: str, d_model: int, layers: int, vocab: int, seq_len: int):
    from lightning_bench.models import MambaLM, ResNetBKLM, TransformerLM

    if name == "bk":
        return ResNetBKLM(d_model=d_model, n_layers=layers, position_embedding="none", vocab_size=vocab)
    if name == "mamba":
        return MambaLM(d_model=d_model, n_layer=layers, vocab_size=vocab)
    if name == "transformer":
        n_head = 4 if d_model % 4 == 0 else 1
        return TransformerLM(n_layer=layers, d_model=d_model, n_head=n_head, max_seq_len=max(8192, seq_len),
                             vocab_size=vocab)
    raise ValueError(f"unknown model {name!r}; expected one of {MODELS}")


def run_one(name: str, seq_len: int, args) -> dict:
    import torch
    import torch.nn.functional as F

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cuda = torch.cuda.is_available() and not args.cpu
    device = torch.device("cuda" if cuda else "cpu")

    module = build_model(name, args.d_model, args.layers, args.vocab, seq_len).to(device).train()
    input_ids = torch.randint(0, args.vocab, (1, seq_len), device=device)
    targets = torch.randint(0, args.vocab, (1, seq_len), device=device)

    def step():
        module.zero_grad(set_to_none=True)
        out = module.lm_forward(input_ids)
        loss = F.cross_entropy(out.logits.flatten(0, 1).float(), targets.flatten())
        if out.aux_loss is not None:
            loss = loss + module.aux_loss_weight * out.aux_loss
        loss.backward()

    if cuda:
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    else:
        base = _current_rss_bytes()
        reset_ok = _reset_peak_rss()
        peak_before = _peak_rss_bytes()

    step()  # warm-up
    times = []
    for _ in range(args.reps):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)

    result = {"model": name, "seq_len": seq_len, "device": str(device), "threads": torch.get_num_threads(),
              "params": sum(p.numel() for p in module.parameters()), "ms": 1e3 * statistics.median(times),
              "times_ms": [1e3 * t for t in times]}
    if cuda:
        result["mem_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20
        result["mem_note"] = ""
    else:
        peak = _peak_rss_bytes()
        result["mem_mib"] = max(peak - base, 0) / 2**20
        # Without the reset, a peak from before the forward (imports, build) can hide the step's.
        result["mem_note"] = "" if reset_ok or peak > peak_before else "peak RSS unchanged by fwd+bwd (lower bound)"
    if name == "transformer":
        result["attn"] = getattr(module.net.config, "_attn_implementation", "?")
    return result


# ---------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------
def _child_cmd(name: str, seq_len: int, args) -> list[str]:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", name, str(seq_len), "--reps", str(args.reps),
           "--d-model", str(args.d_model), "--layers", str(args.layers), "--vocab", str(args.vocab)]
    return cmd + (["--cpu"] if args.cpu else []) + (["--threads", str(args.threads)] if args.threads else [])


def _failure_reason(proc: subprocess.CompletedProcess) -> str:
    if proc.returncode < 0:
        sig = -proc.returncode
        return f"killed by signal {sig}" + (" (out of memory?)" if sig == 9 else "")
    lines = [ln.strip() for ln in (proc.stderr or "").splitlines() if ln.strip()]
    for ln in reversed(lines):  # the exception line, not the traceback's last frame
        if "Error" in ln or "error" in ln:
            return ln[:160]
    return (lines[-1][:160] if lines else f"exit code {proc.returncode}")


def measure(name: str, seq_len: int, args) -> dict:
    try:
        proc = subprocess.run(_child_cmd(name, seq_len, args), capture_output=True, text=True,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"model": name, "seq_len": seq_len, "skipped": f"exceeded the {args.timeout:.0f} s limit"}
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    return {"model": name, "seq_len": seq_len, "skipped": _failure_reason(proc)}


def _probe_device(args) -> tuple[str, int, str]:
    """Device, torch threads and version as the children will see them (kept out of this process,
    so the parent stays small: a child inherits the parent's RSS high-water mark at exec)."""
    code = ("import torch; %s print(('cuda' if torch.cuda.is_available() and not %r else 'cpu'), "
            "torch.get_num_threads(), torch.__version__)"
            % (f"torch.set_num_threads({args.threads});" if args.threads else "", args.cpu))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    device, threads, version = out[0], int(out[1]), out[2]
    if device == "cuda":
        name = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.get_device_name())"],
                              capture_output=True, text=True).stdout.strip()
        device = f"cuda ({name})"
    return device, threads, version


def _fmt(x, spec: str) -> str:
    return format(x, spec) if x is not None else format("n/a", spec.split(".")[0])


# ---------------------------------------------------------------------------------------------
# The record (--out)
# ---------------------------------------------------------------------------------------------
def _refuse(message: str):
    print(f"{os.path.basename(sys.argv[0]) or 'scaling.py'}: error: {message}", file=sys.stderr)
    sys.exit(2)


def check_out(path: str) -> None:
    """Before anything is measured: FILE is new and can be written (one error line and exit 2 if not)."""
    from lightning_bench.errors import ConfigError
    from lightning_bench.results.io import check_output

    if os.path.lexists(path):
        _refuse(f"--out {path}: exists; name a new file (a record is never replaced)")
    try:
        check_output("--out", path, kind="file")
    except ConfigError as err:
        _refuse(str(err))


def _row(r: dict) -> dict:
    """One (model, seq_len) of the record: the printed columns at full precision (None where skipped)."""
    done = "skipped" not in r
    row = {"model": r["model"], "seq_len": r["seq_len"], "ms": r.get("ms"),
           "us_per_token": 1e3 * r["ms"] / r["seq_len"] if done else None, "mem_mib": r.get("mem_mib"),
           "mib_per_1k_tokens": r["mem_mib"] * 1e3 / r["seq_len"] if done else None, "params": r.get("params"),
           "times_ms": r.get("times_ms")}
    row.update({k: r[k] for k in ("attn", "skipped") if k in r})
    return row | ({"mem_note": r["mem_note"]} if r.get("mem_note") else {})


def write_record(path: str, argv: list[str], rows: list[dict], floors: dict, growth: dict, how: dict) -> None:
    from lightning_bench.results.io import write_json_atomic
    from lightning_bench.results.meta import git_revision, package_versions

    if os.path.lexists(path):  # made by someone else while this ran: still never replaced
        _refuse(f"--out {path}: appeared while this ran; not replaced (the table above holds the numbers)")
    meta = {"created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "versions": package_versions(), "git": git_revision(),
            "command": shlex.join(["python", "benchmarks/scaling.py", *argv]), "argv": list(argv)}
    write_json_atomic(path, {"kind": "scaling", "rows": rows, "floors": floors, "growth": growth, "how": how,
                             "meta": meta})
    print(f"record: {path}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--seq-lens", nargs="+", type=int, default=list(DEFAULT_SEQ_LENS))
    parser.add_argument("--reps", type=int, default=3, help="timed fwd+bwd per config (median reported)")
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds per config (build + warm-up + reps) before it is reported as skipped")
    parser.add_argument("--floor-len", type=int, default=8,
                        help="also run each model at this tiny length to show its fixed per-call cost "
                             "(0: don't); the 'net' ratios subtract it")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads in each config (default: leave torch's default)")
    parser.add_argument("--cpu", action="store_true", help="stay on CPU even if CUDA is available")
    parser.add_argument("--out", metavar="FILE", default=None,
                        help="also write the run as one JSON record (rows, floors, growth, how, meta) to FILE, "
                             "which must not exist (checked before anything is measured)")
    parser.add_argument("--one", nargs=2, metavar=("MODEL", "SEQ_LEN"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be >= 1")

    if args.one:
        name, seq_len = args.one[0], int(args.one[1])
        print(RESULT_TAG + json.dumps(run_one(name, seq_len, args)), flush=True)
        return
    if args.out:
        check_out(args.out)

    start = time.perf_counter()
    seq_lens = sorted(set(args.seq_lens))
    device, threads, version = _probe_device(args)
    on_cuda = device.startswith("cuda")
    mem_label = ("CUDA max allocated above post-build allocation" if on_cuda
                 else "peak RSS increase over post-build RSS")
    print("Forward+backward scaling with sequence length (batch 1, CE on random targets)")
    load = os.getloadavg()[0]
    print(f"device {device} | torch {version} | torch threads {threads} | {os.cpu_count()} CPUs | "
          f"load avg {load:.2f} at start")
    if not on_cuda and threads > 1 and load > 1.0:
        print(f"  note: the CPUs were busy before the start; while other processes keep them busy, {threads} "
              "intra-op threads wait on one another in every op: timings inflate and get noisy (try --threads 1)")
    print(f"same width for every model: d_model {args.d_model}, {args.layers} layers, vocab {args.vocab}, batch 1 "
          f"(transformer: {4 if args.d_model % 4 == 0 else 1} heads, SDPA; bk: position_embedding='none')")
    print(f"timing: 1 warm-up + median of {args.reps} fwd+bwd, each config in a fresh process "
          f"(limit {args.timeout:.0f} s)")
    print(f"memory: {mem_label}, MiB")
    print()
    header = (f"{'model':<12}{'seq_len':>8}{'ms/fwd+bwd':>13}{'us/token':>11}{'MiB/1k tok':>12}"
              f"{'mem MiB':>10}   notes")
    print(header)
    print("-" * len(header))

    results, floors = {}, {}
    for name in args.models:
        if args.floor_len:
            f = floors[name] = measure(name, args.floor_len, args)
            if "skipped" in f:
                print(f"{name:<12}{args.floor_len:>8}   floor run failed: {f['skipped']}", flush=True)
            else:
                print(f"{name:<12}{args.floor_len:>8}{f['ms']:>13.1f}{'':>11}{'':>12}{f['mem_mib']:>10.1f}   "
                      f"floor (fixed per-call cost); {f['params'] / 1e3:.0f}k params", flush=True)
        give_up = None
        for seq_len in seq_lens:
            r = ({"model": name, "seq_len": seq_len, "skipped": give_up} if give_up
                 else measure(name, seq_len, args))
            results[name, seq_len] = r
            if "skipped" in r:
                print(f"{name:<12}{seq_len:>8}   skipped: {r['skipped']}", flush=True)
                if give_up is None and "limit" in r["skipped"]:
                    give_up = f"seq_len {seq_len} already exceeded the {args.timeout:.0f} s limit"
                continue
            notes = [n for n in (r.get("mem_note"), f"attn={r['attn']}" if "attn" in r else "") if n]
            print(f"{name:<12}{seq_len:>8}{r['ms']:>13.1f}{1e3 * r['ms'] / seq_len:>11.2f}"
                  f"{r['mem_mib'] * 1e3 / seq_len:>12.3f}{r['mem_mib']:>10.1f}   {'; '.join(notes)}", flush=True)
        print()

    lo, hi = seq_lens[0], seq_lens[-1]
    print(f"growth of per-token cost, {hi}/{lo} ({hi // lo}x tokens): 1.0 = linear in N, "
          f"{hi / lo:.0f} = quadratic, {math.log2(hi) / math.log2(lo):.2f} = N log2 N")
    if args.floor_len:
        print(f"  'net': the same after subtracting each model's seq_len {args.floor_len} floor (fixed cost per call)")
    print(f"{'model':<12}{'time/token':>12}{'memory/token':>14}" + (f"{'net time':>10}{'net memory':>12}"
                                                                    if args.floor_len else ""))

    def ratio(a, b, key, top, base=0.0):
        num, den = (b[key] - base) / top, (a[key] - base) / lo
        return num / den if den > 0 else None

    growth = {}
    for name in args.models:
        done = [n for n in seq_lens if "skipped" not in results[name, n]]
        a = results[name, lo]
        top = done[-1] if done else hi  # fall back to the longest length that finished
        b = results[name, top]
        ok = lo in done and top > lo
        f = floors.get(name) or {}
        net_ok = ok and bool(args.floor_len) and "skipped" not in f
        g = growth[name] = {"time_per_token": ratio(a, b, "ms", top) if ok else None,
                            "memory_per_token": ratio(a, b, "mem_mib", top) if ok else None,
                            "net_time": ratio(a, b, "ms", top, f["ms"]) if net_ok else None,
                            "net_memory": ratio(a, b, "mem_mib", top, f["mem_mib"]) if net_ok else None,
                            "from": lo, "to": top if ok else None}
        line = f"{name:<12}{_fmt(g['time_per_token'], '>12.2f')}{_fmt(g['memory_per_token'], '>14.2f')}"
        if args.floor_len:
            line += f"{_fmt(g['net_time'], '>10.2f')}{_fmt(g['net_memory'], '>12.2f')}"
        if not ok:
            line += f"   (needs {lo} and a longer length to finish)"
        elif top != hi:
            line += (f"   only {top}/{lo} ({top // lo}x tokens; {hi} skipped): "
                     f"quadratic would be {top / lo:.0f}")
        print(line)
    wall = time.perf_counter() - start
    print(f"\ntotal wall time {wall:.1f} s (load avg {os.getloadavg()[0]:.2f} at end)")
    if args.out:
        rows = [_row(results[name, n]) for name in args.models for n in seq_lens]
        how = {"device": device, "torch": version, "threads": threads, "cpus": os.cpu_count(),
               "load_avg_start": load, "d_model": args.d_model, "layers": args.layers, "vocab": args.vocab,
               "batch": 1, "reps": args.reps, "timeout_s": args.timeout, "floor_len": args.floor_len,
               "transformer_heads": 4 if args.d_model % 4 == 0 else 1, "memory": f"{mem_label}, MiB",
               "timed": "one training step's forward + backward (no optimizer step) at batch 1, loss = cross-entropy "
                        "on random targets (+ the weighted load-balancing loss for bk); 1 warm-up, then the median "
                        f"of {args.reps} timed steps; each (model, seq_len) in a fresh process",
               "wall_s": wall}
        write_record(args.out, list(sys.argv[1:] if argv is None else argv), rows,
                     {name: _row(f) for name, f in floors.items()}, growth, how)


if __name__ == "__main__":
    main()
