"""Low-bit evaluation speed on CPU: `lightning_bench test --bits 8|4` against `--bits 32`, and the fast
CPU kernels (quantization/cpu_lowbit.py) against the bitsandbytes modules they replace.

Variants, each a `lightning_bench test` subprocess as users run it, on the same data:
  32             fp32
  8, 4           the low-bit modules with the default cpu_kernel "auto" (fast CPU forward)
  8-bnb, 4-bnb   the same modules forced to bitsandbytes' own forward (LB_CPU_KERNEL=bitsandbytes)
The variants run in interleaved rounds (this machine is shared and noisy: compare medians); each run
gives the record's eval_time (test loop wall time) and the process wall time.

Numerics (in process, same weights, same batches): the network is built as the CLI builds it (BK:
random init, seed 1234; SmolLM2: the pretrained folder), exported to bitsandbytes modules, and run on
the CLI's first --numerics-batches test batches with the fast CPU forward and with bitsandbytes' forward:
max |logit difference| and the token perplexity of each. The CLI records give the perplexity of
each variant on the whole data as well.

    python benchmarks/lowbit_eval_speed.py [--models bk smollm2] [--rounds 3] [--documents 2]
        [--seq-len 512] [--model DIR] [--kernels]

--kernels adds a micro-benchmark of candidate int8 / nf4 kernels on SmolLM2 and ResNet-BK shapes.
Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = os.environ.get("LB_SMOLLM2_DIR", str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))
SMOLLM2_CONFIG = "configs/test/smollm2_wikitext2.yaml"
VARIANTS = {"32": (32, None), "8": (8, "auto"), "4": (4, "auto"), "8-bnb": (8, "bitsandbytes"),
            "4-bnb": (4, "bitsandbytes")}


def cli_args(model: str, args) -> list[str]:
    if model == "bk":  # docs/measurements.md's ResNet-BK test (offline PTB, reference defaults)
        return ["test", "--model", "bk"]
    return ["test", "--config", SMOLLM2_CONFIG, "--model.pretrained", args.model,
            "--data.eval_max_documents", str(args.documents), "--data.seq_len", str(args.seq_len)]


def run_cli(model: str, variant: str, args, out: Path) -> dict:
    bits, kernel = VARIANTS[variant]
    results = out / f"{model}_{variant}"
    cmd = ["lightning_bench", *cli_args(model, args), "--bits", str(bits), "--results_dir", str(results),
           "--trainer.default_root_dir", str(out / "logs")]
    env = dict(os.environ)
    env.pop("LB_CPU_KERNEL", None)
    if kernel is not None:
        env["LB_CPU_KERNEL"] = kernel
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", "from lightning_bench.cli import main; main()", *cmd[1:]],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    path = max(results.glob("*_test.json"), key=lambda p: p.stat().st_mtime)
    record = json.loads(path.read_text())
    path.unlink()  # the next round writes the same name
    quant = record.get("quantization") or {}
    return {"eval_s": record["eval_time"], "wall_s": wall, "ppl": record["metrics"]["ppl"],
            "model_size_mb": record["model_size_mb"], "kernel": quant.get("kernel", "fp32"),
            "kernel_calls": quant.get("kernel_calls"), "config": record["config"],
            "command": ("LB_CPU_KERNEL=bitsandbytes " if kernel == "bitsandbytes" else "")
            + " ".join(cmd[:cmd.index("--results_dir")])}


# ---- numerics --------------------------------------------------------------------------------------
def build_module(config: dict, model_dir: str):
    from lightning_bench.data import LMDataModule

    data_args = dict(config["data"]["init_args"])
    if data_args.get("test_path"):
        data_args["test_path"] = str((ROOT / data_args["test_path"]).resolve())
    if config["model"]["class_path"].endswith("HFLanguageModel"):
        data_args["tokenizer"] = model_dir
    dm = LMDataModule(**data_args)
    dm.setup("test")
    mod_name, _, cls_name = config["model"]["class_path"].rpartition(".")
    cls = getattr(importlib.import_module(mod_name), cls_name)
    init = dict(config["model"]["init_args"])
    if "pretrained" in init:
        init["pretrained"] = model_dir
    torch.manual_seed(config.get("seed_everything") or 1234)
    module = cls(**init)
    module.build(dm.vocab_size)
    return module.eval(), dm


def numerics(config: dict, model_dir: str, n_batches: int) -> dict:
    from lightning_bench.models.token_nll import IGNORE_INDEX
    from lightning_bench.quantization import export_lowbit
    from lightning_bench.quantization.cpu_lowbit import use_bitsandbytes_kernels, use_cpu_kernels

    module, dm = build_module(config, model_dir)
    batches = []
    for batch in dm.test_dataloader():
        batches.append(batch)
        if len(batches) == n_batches:
            break
    out = {}
    for bits in (8, 4):
        lowbit = copy.deepcopy(module)
        report = export_lowbit(lowbit.net, bits, layers=lowbit.quantizable_layers())
        max_diff, logit_max, nll, count = 0.0, 0.0, {"cpu": 0.0, "bnb": 0.0}, 0
        with torch.inference_mode():
            for batch in batches:
                ids, labels = batch["input_ids"], batch["labels"]
                use_cpu_kernels(lowbit.net)
                fast = lowbit(ids).float()
                use_bitsandbytes_kernels(lowbit.net)
                ref = lowbit(ids).float()
                mask = labels != IGNORE_INDEX
                max_diff = max(max_diff, float((fast - ref)[mask].abs().max()))
                logit_max = max(logit_max, float(ref[mask].abs().max()))
                for side, logits in (("cpu", fast), ("bnb", ref)):
                    nll[side] += float(F.cross_entropy(logits.flatten(0, 1), labels.flatten(),
                                                       ignore_index=IGNORE_INDEX, reduction="sum"))
                count += int(mask.sum())
        ppl = {k: math.exp(v / count) for k, v in nll.items()}
        out[bits] = {"kernel": report.kernel, "batches": len(batches), "tokens": count,
                     "logit_max_abs_diff": max_diff, "logit_max_abs": logit_max,
                     "ppl_cpu": ppl["cpu"], "ppl_bnb": ppl["bnb"], "ppl_rel_diff": ppl["cpu"] / ppl["bnb"] - 1}
    return out


# ---- kernels ---------------------------------------------------------------------------------------
def kernels(tokens: int, reps: int = 15) -> list[dict]:
    """Min / median ms of candidate kernels per Linear shape, interleaved."""
    from lightning_bench.quantization.cpu_lowbit import use_cpu_kernels
    from lightning_bench.quantization.export import _to_lowbit

    rows = []
    shapes = [("smollm2 q/o", 576, 576), ("smollm2 gate/up", 576, 1536), ("smollm2 down", 1536, 576),
              ("smollm2 k/v", 576, 192), ("bk expert in", 128, 256), ("bk expert out", 256, 128)]
    for label, k, n in shapes:
        lin = torch.nn.Linear(k, n)
        x = torch.randn(tokens, k) * torch.rand(tokens, 1) * 3
        fns = {"fp32": lambda: lin(x)}
        for bits in (8, 4):
            bnb_mod = _to_lowbit(lin, bits, 0.0).eval()
            fast = copy.deepcopy(bnb_mod)
            use_cpu_kernels(torch.nn.Sequential(fast))
            fns[f"bnb{bits}"] = lambda m=bnb_mod: m(x)
            fns[f"cpu{bits}"] = lambda m=fast: m(x)
            if bits == 8:
                codes = bnb_mod.weight.data
                a8 = torch.randint(-127, 128, (tokens, k), dtype=torch.int8)
                fns["_int_mm"] = lambda a8=a8, codes=codes: torch._int_mm(a8, codes.t())
        times = {name: [] for name in fns}
        with torch.inference_mode():
            for fn in fns.values():
                fn()
            for _ in range(reps):
                for name, fn in fns.items():
                    start = time.perf_counter()
                    fn()
                    times[name].append((time.perf_counter() - start) * 1e3)
        rows.append({"shape": f"{label} {k}x{n}", "tokens": tokens,
                     **{name: [round(min(v), 3), round(statistics.median(v), 3)] for name, v in times.items()}})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["bk", "smollm2"], choices=["bk", "smollm2"])
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--documents", type=int, default=2, help="SmolLM2: first N WikiText-2 test articles")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--model", default=DEFAULT_MODEL, help="SmolLM2 folder")
    parser.add_argument("--numerics-batches", type=int, default=4)
    parser.add_argument("--no-numerics", action="store_true")
    parser.add_argument("--kernels", action="store_true", help="also time candidate kernels per Linear shape")
    parser.add_argument("--kernels-only", action="store_true")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)
    summary: dict = {"machine": {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
                                 "threads": torch.get_num_threads()}}
    if args.kernels or args.kernels_only:
        summary["kernels_ms_min_median"] = kernels(1024)
        print("kernel ms (min / median), 1024 tokens:")
        for row in summary["kernels_ms_min_median"]:
            print("  " + row["shape"] + ": " + ", ".join(f"{k} {v[0]:.2f}/{v[1]:.2f}" for k, v in row.items()
                                                        if k not in ("shape", "tokens")))
        if args.kernels_only:
            print(json.dumps(summary))
            return
    runs: dict = {m: {v: [] for v in args.variants} for m in args.models}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for model in args.models:
                for variant in args.variants:
                    run = run_cli(model, variant, args, Path(tmp))
                    runs[model][variant].append(run)
                    print(f"round {r + 1} {model} {variant}: eval {run['eval_s']:.2f} s, wall {run['wall_s']:.2f} s, "
                          f"ppl {run['ppl']:.4f}, kernel {run['kernel']}", flush=True)
    print()
    print("| model | --bits | kernel | eval s (median) | x fp32 | process wall s (median) | x fp32 | token ppl | model_size_mb |")
    print("|---|---|---|---|---|---|---|---|---|")
    summary["runs"] = {}
    for model in args.models:
        base = runs[model].get("32")
        base_eval = statistics.median(r["eval_s"] for r in base) if base else None
        base_wall = statistics.median(r["wall_s"] for r in base) if base else None
        summary["runs"][model] = {}
        for variant, rs in runs[model].items():
            ev, wall = statistics.median(r["eval_s"] for r in rs), statistics.median(r["wall_s"] for r in rs)
            first = rs[0]
            entry = {"eval_s_median": ev, "wall_s_median": wall, "eval_s": [r["eval_s"] for r in rs],
                     "wall_s": [r["wall_s"] for r in rs], "ppl": first["ppl"], "kernel": first["kernel"],
                     "kernel_calls": first["kernel_calls"], "model_size_mb": first["model_size_mb"],
                     "eval_x_fp32": ev / base_eval if base_eval else None,
                     "wall_x_fp32": wall / base_wall if base_wall else None, "command": first["command"]}
            summary["runs"][model][variant] = entry
            print(f"| {model} | {variant} | {entry['kernel']} | {ev:.2f} | "
                  f"{entry['eval_x_fp32'] or float('nan'):.2f} | {wall:.2f} | {entry['wall_x_fp32'] or float('nan'):.2f} | "
                  f"{entry['ppl']:.4f} | {entry['model_size_mb']:.2f} |")
        for bits in ("8", "4"):
            if bits in runs[model] and f"{bits}-bnb" in runs[model]:
                a, b = runs[model][bits][0]["ppl"], runs[model][f"{bits}-bnb"][0]["ppl"]
                summary["runs"][model][f"ppl_rel_diff_{bits}_vs_bnb"] = a / b - 1
    print("\ncommands:")
    for model in args.models:
        for variant, entry in summary["runs"][model].items():
            if isinstance(entry, dict):
                print(f"  {model} {variant}: {entry['command']}")
    if not args.no_numerics:
        summary["numerics"] = {}
        print("\nnumerics, fast CPU kernels vs bitsandbytes modules (same weights, same batches):")
        for model in args.models:
            variant = next(iter(runs[model]))
            res = numerics(runs[model][variant][0]["config"], args.model, args.numerics_batches)
            summary["numerics"][model] = res
            for bits, r in res.items():
                print(f"  {model} --bits {bits} ({r['kernel']}): max |logit diff| {r['logit_max_abs_diff']:.3g} "
                      f"(logits up to {r['logit_max_abs']:.3g}), ppl {r['ppl_cpu']:.6f} vs {r['ppl_bnb']:.6f} "
                      f"(rel {r['ppl_rel_diff']:+.2e}) over {r['tokens']} tokens / {r['batches']} batches")
    for model in args.models:
        for v in summary["runs"][model].values():
            if isinstance(v, dict):
                v.pop("config", None)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
