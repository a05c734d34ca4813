"""The GPU check (issue 28, item 4): one run, one JSON of figures, each check isolated and time-limited.

    bash benchmarks/gpu_check.sh --out gpu_check.json            # on the GPU machine (docs/gpu.md)
    bash benchmarks/gpu_check.sh --dry-run --out /tmp/x.json     # the same code on CPU, tiny sizes (the test)

Sections (each in its own process, with its own time limit; a failed or timed-out one is recorded as
{"status": "failed", "error": ...} and the next one runs):
  env         GPU name, memory, a measured bf16 matmul rate, which optional kernels import
  eval        `lightning_bench test` (SmolLM2, WikiText-2 test, fp32 and bf16) against a plain transformers
              loop on the same windows (benchmarks/eval_throughput.py's in-process passes, on the GPU)
  mfu         `lightning_bench fit --model transformer` (~200M parameters, bf16-mixed): steady-state step
              time (warm-up steps skipped) and MFU = counted FLOPs per step / step time / bf16 dense peak
  step_variants  the same network and batch size stepped outside Lightning: eager (fit's step), fused
              AdamW, torch.compile + fused AdamW (benchmarks/train_step_variants.py): what each would win
  bnb         `lightning_bench test --bits 8|4` on CUDA against the same on CPU (perplexity parity) and
              tokens/s against --bits 16 and 32 on CUDA
  mamba       our MambaLM (parallel scan) on CPU against transformers' own CUDA path (mamba-ssm kernels if
              they import, else its PyTorch loop) and our scan on CUDA, same weights: logits max |diff|
  eviction    every method of the registry: kept positions on CUDA == on CPU (fp32, same SmolLM2 prompt),
              and prefill + compress against a dense prefill at a 4k context (kv_compress_overhead.py)
  downstream  `lightning_bench downstream --config configs/downstream/quick_test.yaml` on CUDA: cells/hour

--dry-run: device cpu, a tiny random Llama (GPT-2 tokenizer; or --model DIR) instead of SmolLM2, a tiny
Mamba, a few steps, tiny contexts; the JSON has the same keys. Each section runs in a fresh interpreter (on
the GPU: no CUDA state can leak from one into another), or with --isolation fork (the --dry-run default) in
a fork of this process, which imports the heavy modules once and never touches CUDA itself.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

# torch.cuda.is_available() through NVML, without creating a CUDA context in the parent: forked children
# can then start their own (a context made before fork() is unusable in the child)
os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # the library from this tree; the sibling benchmark scripts

SHARED = Path(os.environ.get("LB_SHARED_DIR", ROOT.parent / "shared"))
DEFAULT_MODEL = os.environ.get("LB_SMOLLM2_DIR", str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))
TEST_CONFIG = "configs/test/smollm2_wikitext2.yaml"
QUICK_TEST = "configs/downstream/quick_test.yaml"
ATTENTION_RULER = "configs/downstream/attention_sparsity.yaml"

# seconds per section on the GPU; all of them (+ setup) stay under the 8 minutes of the issue
LIMITS = {"setup": 60, "env": 30, "eval": 75, "mfu": 150, "step_variants": 150, "bnb": 90, "mamba": 45,
          "eviction": 75, "downstream": 120, "attention_sparsity": 330, "attention_ruler": 540, "ruler_v2": 560}
# query-time sparse attention against eviction on WikiText-2 perplexity, near 10%, then 5% and 20% of the keys:
# (label, the `test` options); each run is recorded as it ends, the ones the section's time does not reach skipped
ATTENTION_RUNS = [("dense", [])] + [
    (f"{label} {level}", option) for level, runs in (
        ("10%", [("oracle_topk", "oracle_topk:0.1"), ("sink+local", "sink:0.05,local:0.05"),
                 ("sink+local+oracle_topk", "sink:0.025,local:0.025,oracle_topk:0.05"),
                 ("magic_pig K10 L75", "sink:0.01,local:0.01,magic_pig:10:75"),
                 ("adaptive_sampling eps 0.25", "sink:0.01,local:0.01,oracle_topk:0.02,"
                                                "adaptive_sampling:0.01:0.25:0.25:0.01:0.01"),
                 ("streaming_llm", 0.9), ("h2o", 0.9), ("tova", 0.9)]),
        ("5%", [("oracle_topk", "oracle_topk:0.05"), ("sink+local", "sink:0.025,local:0.025"),
                ("sink+local+oracle_topk", "sink:0.0125,local:0.0125,oracle_topk:0.025"),
                ("magic_pig K11 L75", "sink:0.01,local:0.01,magic_pig:11:75"),
                ("adaptive_sampling eps 0.5", "sink:0.01,local:0.01,oracle_topk:0.01,"
                                              "adaptive_sampling:0.01:0.5:0.3:0.01:0.01"),
                ("streaming_llm", 0.95), ("h2o", 0.95), ("tova", 0.95)]),
        ("20%", [("oracle_topk", "oracle_topk:0.2"), ("sink+local", "sink:0.1,local:0.1"),
                 ("sink+local+oracle_topk", "sink:0.05,local:0.05,oracle_topk:0.1"),
                 ("magic_pig K8 L75", "sink:0.01,local:0.01,magic_pig:8:75"),
                 ("adaptive_sampling eps 0.1", "sink:0.01,local:0.01,oracle_topk:0.05,"
                                               "adaptive_sampling:0.01:0.1:0.1:0.01:0.01"),
                 ("streaming_llm", 0.8), ("h2o", 0.8), ("tova", 0.8)]))
    for label, option in runs]
# bf16 dense tensor-core peaks (datasheet, no sparsity) by device-name substring, first match wins
PEAK_BF16 = [("h100 pcie", 756e12), ("h100 nvl", 835e12), ("h100", 989.4e12), ("h200", 989.4e12),
             ("a100", 312e12)]
MFU_GOAL = 0.40

SIZES = {
    "gpu": dict(matmul=8192, eval_docs=60, eval_seq=2048, eval_batch=8,
                fit=dict(n_layer=12, d_model=1024, n_head=16, seq=1024, batch=16, warmup=10, steps=30),
                bnb_docs=3, bnb_seq=1024, mamba=dict(d_model=512, n_layer=4, vocab=32000, seq=512, batch=2),
                kv_context=1024, kv_overhead_context=4096, kv_repeats=3, kv_sparsity=0.9, downstream=[],
                attention=dict(docs=3, seq=2048, batch=4, runs=len(ATTENTION_RUNS), budget=220),
                attention_ruler=["--max_batch_rows", "64", "--batch_examples", "8"],
                ruler_v2=["--max_batch_rows", "64", "--batch_examples", "8"]),
    "dry": dict(matmul=256, eval_docs=1, eval_seq=64, eval_batch=2,
                fit=dict(n_layer=1, d_model=64, n_head=4, seq=32, batch=2, warmup=2, steps=2),
                bnb_docs=1, bnb_seq=64, mamba=dict(d_model=32, n_layer=1, vocab=100, seq=16, batch=1),
                kv_context=48, kv_overhead_context=96, kv_repeats=1, kv_sparsity=0.5,
                downstream=["--max_samples", "1", "--max_new_tokens", "4", "--max_length", "192"],
                attention=dict(docs=1, seq=64, batch=2, runs=3, budget=60),
                attention_ruler=["--tasks", "xsum", "--max_samples", "1", "--max_new_tokens", "3", "--max_length", "192",
                                 "--max_context", "null", "--attention_sparsity", '{topk_10: "oracle_topk:0.1"}',
                                 "--methods", "[dense, h2o]", "--ratios", "[0.5]"],
                ruler_v2=["--tasks", "[xsum]", "--max_samples", "1", "--max_new_tokens", "3", "--max_length", "192",
                          "--max_context", "null", "--methods", "[dense, snapkv]", "--protocols", "[query_aware]"]),
}


# ---- helpers every section uses --------------------------------------------------------------------
def say(ctx: dict, message: str) -> None:
    """A progress line on the real terminal (the section's own output goes to its log file)."""
    print(f"[gpu_check {ctx['section']} {time.monotonic() - ctx['t0']:5.1f}s] {message}", file=ctx["progress"],
          flush=True)


def device(ctx: dict):
    import torch

    return torch.device(ctx["device"])


def sync(dev) -> None:
    import torch

    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def timed(fn, dev):
    """(seconds, result) of fn(), CUDA work included (kernels are asynchronous)."""
    sync(dev)
    start = time.perf_counter()
    out = fn()
    sync(dev)
    return time.perf_counter() - start, out


def load_benchmark(name: str):
    """A sibling script of benchmarks/ as a module (they are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def accelerator(ctx: dict) -> str:
    return "gpu" if ctx["device"] == "cuda" else "cpu"


def cli(ctx: dict, argv: list[str]) -> tuple[float, list[Path]]:
    """`lightning_bench ARGV` in this process, as the console script runs it; (wall s, records written).
    Records are the JSON files under --results_dir (one per run: each call gets a fresh folder)."""
    from lightning_bench.cli import main

    results = Path(argv[argv.index("--results_dir") + 1])
    say(ctx, "lightning_bench " + shlex.join(argv))
    start = time.perf_counter()
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # a user error: one line on stderr (in the section's log) and exit 2
        code = exit_.code
    wall = time.perf_counter() - start
    if code not in (0, None):
        raise RuntimeError(f"lightning_bench {argv[0]} exited with {code} (see the log lines above)")
    return wall, sorted(p for p in results.rglob("*.json") if not p.is_symlink())


def record(paths: list[Path], stage: str) -> dict:
    found = [json.loads(p.read_text()) for p in paths]
    found = [r for r in found if r.get("stage") == stage]
    if len(found) != 1:
        raise RuntimeError(f"expected one {stage} record, found {len(found)} in {[str(p) for p in paths]}")
    return found[0]


def test_argv(ctx: dict, out: Path, bits: int, documents: int, seq_len: int, batch: int, acc: str) -> list[str]:
    return ["test", "--config", TEST_CONFIG, "--model.pretrained", ctx["model"],
            "--data.test_path", str(Path(ctx["data"]) / "wikitext-2/test.txt"),
            "--data.eval_max_documents", str(documents), "--data.seq_len", str(seq_len),
            "--data.batch_size", str(batch), "--bits", str(bits), "--trainer.accelerator", acc,
            "--results_dir", str(out), "--trainer.default_root_dir", str(out.parent / "logs")]


def peak_bf16(name: str):
    low = name.lower()
    return next((peak for key, peak in PEAK_BF16 if key in low), None)


# ---- sections ---------------------------------------------------------------------------------------
def section_setup(ctx: dict) -> dict:
    """The inputs exist (dry run: makes the tiny models first)."""
    if ctx["dry"] and not Path(ctx["model"]).exists():
        make_tiny_models(ctx)
    data = Path(ctx["data"])
    needed = [data / "wikitext-2/test.txt", data / "wikitext-2/valid.txt", data / "pg19/test/12204.txt",
              Path(ctx["model"]) / "config.json"]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        raise FileNotFoundError(f"missing inputs: {missing}")
    return {"model": ctx["model"], "mamba_model": "random init (MambaLM)", "data": ctx["data"],
            "model_config": json.loads((Path(ctx["model"]) / "config.json").read_text()).get("architectures")}


def make_tiny_models(ctx: dict) -> None:
    """A random 2-layer GQA Llama saved like a hub folder with the offline GPT-2 tokenizer (as the tests'
    tiny_hf): every SmolLM2 code path runs on it. Hidden 64 so that nf4's 64-weight blocks fit."""
    import shutil

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from lightning_bench.data.tokenization import offline_gpt2_folder

    folder = Path(ctx["model"])
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50257, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=50256, eos_token_id=50256, initializer_range=0.2)
    LlamaForCausalLM(config).save_pretrained(folder)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copyfile(Path(offline_gpt2_folder(Path(ctx["workdir"]) / "gpt2")) / name, folder / name)


def section_env(ctx: dict) -> dict:
    import torch

    dev, size = device(ctx), ctx["sizes"]["matmul"]
    out = {"device": str(dev), "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count(),
           "mamba_ssm_importable": importlib.util.find_spec("mamba_ssm") is not None,
           "causal_conv1d_importable": importlib.util.find_spec("causal_conv1d") is not None}
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        out.update(gpu=torch.cuda.get_device_name(dev), capability=list(torch.cuda.get_device_capability(dev)),
                   memory_gib=round(props.total_memory / 2**30, 1), sm_count=props.multi_processor_count,
                   peak_bf16_flops=peak_bf16(torch.cuda.get_device_name(dev)))
    # the matmul ceiling as measured (random data, median of 10 after 3 warm-ups): what MFU is relative to
    a, b = (torch.randn(size, size, device=dev, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    seconds = statistics.median(timed(lambda: a @ b, dev)[0] for _ in range(10))
    out["matmul"] = {"n": size, "dtype": str(dtype), "tflops": 2 * size**3 / seconds / 1e12}
    import bitsandbytes  # noqa: F401 - its CUDA library loads here, or the section says why not

    lib = bitsandbytes.cextension.lib  # the native library it loaded: the CUDA one, or its CPU fallback
    out["bitsandbytes"] = {"version": bitsandbytes.__version__, "backend": bitsandbytes.cextension.BNB_BACKEND,
                           "library": getattr(getattr(lib, "_lib", None), "_name", None),
                           "compiled_with_cuda": getattr(lib, "compiled_with_cuda", None)}
    return out


def section_eval(ctx: dict) -> dict:
    """eval_throughput.py's comparison on the chosen device: the CLI (fp32, bf16) and, in this process on
    the same batches, the library's route, the bare forward and the batch-1 plain transformers loop (fp32)."""
    sizes, work, acc = ctx["sizes"], Path(ctx["workdir"]) / "eval", accelerator(ctx)
    docs, seq, batch = sizes["eval_docs"], sizes["eval_seq"], sizes["eval_batch"]
    runs = {}
    for bits in (32, 16):
        argv = test_argv(ctx, work / f"bits{bits}", bits, docs, seq, batch, acc)
        wall, paths = cli(ctx, argv)
        rec = record(paths, "test")
        runs[bits] = {"tokens_per_sec": rec["scored_tokens_per_sec"], "ppl": rec["metrics"]["ppl"],
                      "scored_tokens": rec["metrics"]["scored_tokens"], "eval_time_s": rec["eval_time"],
                      "process_wall_s": wall, "eval_path": rec.get("eval_path"),
                      "command": "lightning_bench " + shlex.join(argv)}
        data_args = dict(rec["config"]["data"]["init_args"], tokenizer=ctx["model"])
    et = load_benchmark("eval_throughput")
    say(ctx, "in-process passes: library route, bare forward, plain loop (fp32)")
    ours = et.in_process(ctx["model"], data_args, ctx["device"])
    scored = ours["scored"]
    if any(r["scored_tokens"] != scored for r in runs.values()):
        raise RuntimeError(f"the CLI scored {[r['scored_tokens'] for r in runs.values()]} tokens, in-process {scored}")
    rate = {k: scored / s for k, s in ours["seconds"].items()}
    return {
        "tokens_per_sec": {"cli_fp32": runs[32]["tokens_per_sec"], "cli_bf16": runs[16]["tokens_per_sec"],
                           "route_fp32": rate["route"], "bare_forward_fp32": rate["bare"],
                           "plain_loop_fp32": rate["plain"]},
        "cli_fp32_x_plain": runs[32]["tokens_per_sec"] / rate["plain"],
        "cli_bf16_x_plain": runs[16]["tokens_per_sec"] / rate["plain"],
        "cli_fp32_x_bare": runs[32]["tokens_per_sec"] / rate["bare"],
        "ppl": {"cli_fp32": runs[32]["ppl"], "cli_bf16": runs[16]["ppl"]},
        "max_token_nll_diff_route_vs_plain": ours["max_token_nll_diff"],
        "runs": runs,
        "how": {"model": ctx["model"], "data": "WikiText-2 test.txt, first N articles, document_rolling",
                "n_documents": docs, "seq_len": seq, "batch": batch, "scored_tokens": scored,
                "dtype": "cli_fp32: --bits 32; cli_bf16: --bits 16 (bf16 weights); in-process passes fp32",
                "plain_loop": "one window at a time, unpadded: transformers forward + log_softmax + gather",
                "tokens_per_sec": "CLI: the record's scored_tokens_per_sec (test loop wall time, FLOP-counted "
                                  "first batch included); in-process: scored tokens / summed synchronised time"},
    }


def section_mfu(ctx: dict) -> dict:
    """`lightning_bench fit` in this process with a step clock added (as train_overhead.py adds its timer)."""
    import lightning as L
    import torch
    from torch import nn

    from lightning_bench import trainer_cli

    dev, fit = device(ctx), ctx["sizes"]["fit"]
    work = Path(ctx["workdir"]) / "mfu"
    work.mkdir(parents=True, exist_ok=True)
    data = Path(ctx["data"]) / "wikitext-2"
    text = (data / "valid.txt").read_text(encoding="utf-8") + (data / "test.txt").read_text(encoding="utf-8")
    train = work / "train.txt"  # WikiText-2 valid + test, twice: the timed steps stay inside epoch 1
    train.write_text(2 * text if not ctx["dry"] else text[:20_000], encoding="utf-8")

    class StepClock(L.Callback):
        """Synchronised wall time of each training step (forward, backward, optimizer, callbacks' hooks)."""

        def __init__(self):
            self.starts, self.ends, self.info = [], [], {}

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            sync(dev)
            self.starts.append(time.perf_counter())

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            sync(dev)
            self.ends.append(time.perf_counter())

        def on_train_start(self, trainer, pl_module):
            net = pl_module.net
            self.info = {"attn_implementation": getattr(net.config, "_attn_implementation", None),
                         "parameters": sum(p.numel() for p in net.parameters()),
                         "matmul_parameters": sum(m.weight.numel() for m in net.modules() if isinstance(m, nn.Linear)),
                         "precision": str(trainer.precision)}

    def fit_once(name: str, extra: list[str]) -> tuple[dict, list[str]]:
        clock = StepClock()
        original = trainer_cli.LightningBenchCLI.instantiate_trainer

        def instantiate_trainer(self, **kwargs):
            trainer = original(self, **kwargs)
            trainer.callbacks.insert(0, clock)
            return trainer

        steps = fit["warmup"] + fit["steps"]
        argv = ["fit", "--model", "transformer", "--model.n_layer", str(fit["n_layer"]), "--model.d_model",
                str(fit["d_model"]), "--model.n_head", str(fit["n_head"]), "--model.max_seq_len", str(fit["seq"]),
                "--data", "text", "--data.train_path", str(train), "--data.tokenizer", ctx["model"],
                "--data.seq_len", str(fit["seq"]), "--data.batch_size", str(fit["batch"]), "--bits", "16",
                "--trainer.accelerator", accelerator(ctx), "--trainer.max_steps", str(steps), "--trainer.max_epochs",
                "100", "--trainer.limit_val_batches", "2", "--trainer.enable_checkpointing", "false",
                "--results_dir", str(work / name / "results"), "--trainer.default_root_dir", str(work / name), *extra]
        trainer_cli.LightningBenchCLI.instantiate_trainer = instantiate_trainer
        try:
            _, paths = cli(ctx, argv)
        finally:
            trainer_cli.LightningBenchCLI.instantiate_trainer = original
        rec = record(paths, "fit")
        step_s = [e - s for s, e in zip(clock.starts, clock.ends)][fit["warmup"]:]
        if len(step_s) < fit["steps"]:
            raise RuntimeError(f"{len(step_s) + fit['warmup']} steps ran, expected {steps}")
        median = statistics.median(step_s)
        flops_step = rec.get("total_flops") or (rec["flops_per_token"] * tokens)
        six_n = 6 * clock.info["matmul_parameters"] * tokens
        return {
            "mfu": flops_step / median / peak if peak else None,
            "mfu_6n": six_n / median / peak if peak else None,
            "tokens_per_sec": tokens / median, "step_s_median": median, "step_s_min": min(step_s),
            "step_s_max": max(step_s), "first_steps_s": sum(e - s for s, e in zip(clock.starts[:fit["warmup"]],
                                                                                 clock.ends[:fit["warmup"]])),
            "achieved_tflops": flops_step / median / 1e12, "flops_per_step": flops_step,
            "library_record": {k: rec.get(k) for k in ("tokens_per_sec", "mfu", "flop_counter", "peak_memory_mb",
                                                         "training_time")},
            **clock.info}, argv

    tokens = fit["batch"] * fit["seq"]
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    peak = peak_bf16(name)
    eager, argv = fit_once("eager", [])
    # the dry run compiles with aot_eager (dynamo + AOT autograd, no code generation): inductor's C++ build
    # takes a minute on the 2-core machine
    backend = "aot_eager" if ctx["dry"] else "inductor"
    compiled, compiled_argv = fit_once("compiled", ["--compile", backend])
    compiled["speedup_x_eager"] = eager["step_s_median"] / compiled["step_s_median"]
    best = min((eager, compiled), key=lambda r: r["step_s_median"])
    return {
        **eager, "goal": MFU_GOAL, "peak_flops": peak, "peak_source": "datasheet bf16 dense, by device name",
        "goal_met": None if best["mfu"] is None else best["mfu"] >= MFU_GOAL,
        "goal_met_by": None if best["mfu"] is None or best["mfu"] < MFU_GOAL else
        ("fit" if best is eager else f"fit --compile {backend}"),
        "compiled": {**compiled, "command": "lightning_bench " + shlex.join(compiled_argv)},
        "how": {"command": "lightning_bench " + shlex.join(argv), "device_name": name,
                "model": {k: fit[k] for k in ("n_layer", "d_model", "n_head")}, "seq_len": fit["seq"],
                "batch": fit["batch"], "dtype": "bf16-mixed (--bits 16: autocast, fp32 master weights)",
                "steps": f"{fit['warmup']} warm-up steps skipped (the first is FLOP-counted; compilation happens "
                         f"in them), {fit['steps']} timed",
                "step_time": "synchronised on_train_batch_start -> on_train_batch_end (data loading excluded)",
                "mfu": "the library's counted FLOPs per step (torch FlopCounter, attention counted non-causal) "
                       "/ median step time / peak_flops; mfu_6n: 6 x Linear weights x tokens instead; top level: "
                       "the eager fit, `compiled`: the same fit with --compile"},
    }


def section_step_variants(ctx: dict) -> dict:
    """benchmarks/train_step_variants.py at the mfu section's sizes (the dry run skips torch.compile: its C++
    build takes a minute on the 2-core machine)."""
    import torch

    dev, fit = device(ctx), ctx["sizes"]["fit"]
    sizes = {k: fit[k] for k in ("n_layer", "d_model", "n_head", "seq", "batch", "warmup", "steps")}
    sizes["vocab"] = 49152 if not ctx["dry"] else 512  # SmolLM2's vocabulary, as the mfu section's tokenizer
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    variants = ("eager", "fused") if ctx["dry"] else ("eager", "fused", "compiled")
    return load_benchmark("train_step_variants").measure(sizes, dev, peak_bf16(name), variants)


def section_bnb(ctx: dict) -> dict:
    """`lightning_bench test` at --bits 32/16/8/4 on the device and 8/4 on CPU, same windows."""
    sizes, work, acc = ctx["sizes"], Path(ctx["workdir"]) / "bnb", accelerator(ctx)
    docs, seq = sizes["bnb_docs"], sizes["bnb_seq"]
    plan = [("warmup", acc, 32)] if acc == "gpu" else []  # untimed: pays the CUDA/cuBLAS start-up once
    plan += [("dev32", acc, 32), ("dev16", acc, 16), ("dev8", acc, 8), ("dev4", acc, 4), ("cpu8", "cpu", 8),
             ("cpu4", "cpu", 4)]
    runs = {}
    for key, where, bits in plan:
        if where == acc and f"dev{bits}" in runs:  # a CPU-only (dry) run: the "device" run was the CPU run
            runs[key] = runs[f"dev{bits}"]
            continue
        argv = test_argv(ctx, work / key, bits, docs, seq, 2, where)
        wall, paths = cli(ctx, argv)
        rec = record(paths, "test")
        runs[key] = {"ppl": rec["metrics"]["ppl"], "tokens_per_sec": rec["scored_tokens_per_sec"],
                     "eval_time_s": rec["eval_time"], "model_size_mb": rec.get("model_size_mb"),
                     "quantization": rec.get("quantization"), "accelerator": where, "bits": bits,
                     "command": "lightning_bench " + shlex.join(argv)}
    runs.pop("warmup", None)
    figures = {}
    for bits in (8, 4):
        dev_run, cpu_run = runs[f"dev{bits}"], runs[f"cpu{bits}"]
        figures[f"bits{bits}"] = {
            "ppl_device": dev_run["ppl"], "ppl_cpu": cpu_run["ppl"],
            "ppl_rel_diff_device_vs_cpu": dev_run["ppl"] / cpu_run["ppl"] - 1,
            "tokens_per_sec_x_bf16": dev_run["tokens_per_sec"] / runs["dev16"]["tokens_per_sec"],
            "tokens_per_sec_x_fp32": dev_run["tokens_per_sec"] / runs["dev32"]["tokens_per_sec"]}
    return {**figures, "runs": runs,
            "how": {"model": ctx["model"], "data": "WikiText-2 test.txt, first N articles, document_rolling",
                    "n_documents": docs, "seq_len": seq, "batch": 2,
                    "cpu_kernel": os.environ.get("LB_CPU_KERNEL", "auto"),
                    "dtype": "8: Linear8bitLt (W8A8), 4: Linear4bit nf4, both with fp32 activations; 16: bf16 "
                             "weights; 32: fp32", "tokens_per_sec": "the record's scored_tokens_per_sec"}}


def section_mamba(ctx: dict) -> dict:
    import torch

    from lightning_bench.models import MambaLM
    from lightning_bench.models.selective_scan import KERNEL_PACKAGES_INSTALLED

    dev, m = device(ctx), ctx["sizes"]["mamba"]
    torch.manual_seed(0)
    ours = MambaLM(d_model=m["d_model"], n_layer=m["n_layer"], vocab_size=m["vocab"]).eval()  # parallel scan
    theirs = MambaLM(d_model=m["d_model"], n_layer=m["n_layer"], vocab_size=m["vocab"], scan_impl="transformers")
    theirs.load_state_dict(ours.state_dict())
    theirs.eval()
    ids = torch.randint(0, m["vocab"], (m["batch"], m["seq"]))

    def run(module, where):
        net, where = module.net.to(where), torch.device(where)
        x = ids.to(where)
        with torch.inference_mode():
            if where.type != "cpu":  # warm-up: kernels, cuBLAS (the CPU reference is slow enough as it is)
                net(input_ids=x)
            seconds, out = timed(lambda: net(input_ids=x).logits.float().cpu(), where)
        return seconds, out

    cpu_s, reference = run(ours, "cpu")
    theirs_s, theirs_out = run(theirs, dev)
    ours_s, ours_out = run(ours, dev)
    scale = float(reference.abs().max())
    from transformers.models.mamba import modeling_mamba

    return {
        "max_abs_diff_transformers_device_vs_cpu_scan": float((theirs_out - reference).abs().max()),
        "max_abs_diff_our_scan_device_vs_cpu_scan": float((ours_out - reference).abs().max()),
        "max_abs_logit": scale,
        "forward_s": {"cpu_parallel_scan": cpu_s, "device_transformers_path": theirs_s, "device_our_scan": ours_s},
        "device_transformers_path": "mamba-ssm kernels" if getattr(modeling_mamba, "is_fast_path_available", False)
        else "transformers' PyTorch loop (mamba-ssm / causal-conv1d not importable)",
        "kernel_packages_installed": KERNEL_PACKAGES_INSTALLED,
        "how": {"model": f"MambaLM random init (seed 0), {m}", "dtype": "fp32", "seq_len": m["seq"],
                "batch": m["batch"], "device": str(dev),
                "reference": "MambaLM scan_impl=parallel on CPU (selective_scan.py)",
                "compared": "same weights: scan_impl=transformers on the device; scan_impl=parallel on the device"}}


def section_eviction(ctx: dict) -> dict:
    """Kept sets CPU vs device for every method, then kv_compress_overhead.py's measurement on the device."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lightning_bench.sparsity import METHODS, AttentionRecorder, budget, make_method, prefill

    dev, sizes = device(ctx), ctx["sizes"]
    sparsity = sizes["kv_sparsity"]
    tokenizer = AutoTokenizer.from_pretrained(ctx["model"])
    text = (Path(ctx["data"]) / "pg19/test/12204.txt").read_text(encoding="utf-8")
    stream = tokenizer(text, add_special_tokens=False)["input_ids"]
    nets = {"cpu": AutoModelForCausalLM.from_pretrained(ctx["model"], dtype=torch.float32).eval()}
    nets["device"] = AutoModelForCausalLM.from_pretrained(ctx["model"], dtype=torch.float32).to(dev).eval()

    def kept(net, ids, name):
        method = make_method(name)
        recorder = AttentionRecorder.for_method(method)
        with torch.inference_mode():
            state, _ = prefill(net, ids, torch.ones_like(ids), recorder)
            state.compress(method, budget(state.seen, sparsity), recorder)
        return torch.stack([p.cpu() for p in state.positions])  # (layers, batch, KV heads, kept): positions

    parity = {}
    ids = torch.tensor(stream[:sizes["kv_context"]])[None]
    for name in METHODS:
        a, b = kept(nets["cpu"], ids, name), kept(nets["device"], ids.to(dev), name)
        same_heads = (a == b).all(-1) if a.shape == b.shape else torch.zeros(a.shape[:3], dtype=torch.bool)
        overlap = [len(set(x.tolist()) & set(y.tolist())) / max(len(x), 1)
                   for x, y in zip(a.flatten(0, 2), b.flatten(0, 2))]
        parity[name] = {"identical": bool(same_heads.all()), "heads_identical": float(same_heads.float().mean()),
                        "min_overlap": min(overlap), "kept_per_head": a.shape[-1]}
    say(ctx, f"kept sets identical for {sum(p['identical'] for p in parity.values())}/{len(parity)} methods")

    kco = load_benchmark("kv_compress_overhead")
    kco.timed = lambda fn: timed(fn, dev)  # its timer without a CUDA synchronisation would time the launches
    net, long_ids = nets["device"], torch.tensor(stream[:sizes["kv_overhead_context"]])[None].to(dev)
    sides = ["dense", *[m for m in METHODS if m != "dense"]]
    with torch.inference_mode():
        for name in sides:  # untimed warm-up, as kv_compress_overhead.py does
            kco.run_method(net, long_ids[:, :64], name, sparsity, "ceil")
        best: dict = {}
        for rep in range(sizes["kv_repeats"]):  # rotated order, min over repeats (kv_compress_overhead.py's loop)
            for name in sides[rep % len(sides):] + sides[:rep % len(sides)]:
                figures = kco.run_method(net, long_ids, name, sparsity, "ceil")
                best[name] = [min(x, y) for x, y in zip(best[name], figures)] if name in best else list(figures)
    dense = best["dense"][0]
    overhead = {name: {"prefill_s": p, "compress_s": c, "ratio_to_dense_prefill": (p + c) / dense,
                       "stats_mib": held / 2**20} for name, (p, c, held) in best.items()}
    return {"all_identical": all(p["identical"] for p in parity.values()), "kept_parity": parity,
            "overhead": overhead, "dense_prefill_s": dense,
            "how": {"model": ctx["model"], "dtype": "fp32 both sides", "prompt": "pg19/test/12204.txt, first tokens",
                    "parity_context": sizes["kv_context"], "overhead_context": sizes["kv_overhead_context"],
                    "sparsity": sparsity, "rounding": "ceil", "repeats": sizes["kv_repeats"], "batch": 1,
                    "attention": nets["cpu"].config._attn_implementation,
                    "identical": "kept true positions equal for every (layer, KV head)",
                    "overhead": "benchmarks/kv_compress_overhead.py run_method with synchronised timing, min over "
                                "repeats; ratio = (prefill with the method's capture + compress) / dense prefill"}}


def section_downstream(ctx: dict) -> dict:
    work = Path(ctx["workdir"]) / "downstream"
    argv = ["downstream", "--config", QUICK_TEST, "--model.pretrained", ctx["model"], "--data_dir", ctx["data"],
            "--results_dir", str(work), "--accelerator", ctx["device"], *ctx["sizes"]["downstream"]]
    wall, _ = cli(ctx, argv)
    results = json.loads((work / "quick_test" / "quick_test_results.json").read_text())
    cells = results["cells"]
    return {"cells": len(cells), "wall_s": wall, "cells_per_hour": len(cells) / wall * 3600,
            "examples": sum(c.get("num_examples", 0) for c in cells.values()),
            "headline": {k: {"metric": c.get("primary_metric"),
                             "value": c.get("metrics", {}).get(c.get("primary_metric"))} for k, c in cells.items()},
            "how": {"command": "lightning_bench " + shlex.join(argv), "dtype": "fp32 (the preset's model.dtype)",
                    "batch": 1, "cells_per_hour": "cells / wall time of the whole command (model load, "
                                                  "tokenization and scoring included) x 3600"}}


def section_attention_sparsity(ctx: dict) -> dict:
    """`lightning_bench test` (fp32, WikiText-2) under masker stacks and under eviction at about the same kept
    fraction: perplexity, density and attention error (stacks), cache fraction (eviction), each run's time."""
    sizes, acc = ctx["sizes"]["attention"], accelerator(ctx)
    deadline = time.monotonic() + sizes["budget"]
    runs = {}
    for i, (label, option) in enumerate(ATTENTION_RUNS[:sizes["runs"]]):
        if time.monotonic() > deadline:
            runs[label] = {"status": "skipped: the section's time ran out"}
            continue
        extra = [] if option == [] else ["--attention_sparsity", option] if isinstance(option, str) else \
            ["--sparsity", label.split()[0], "--sparsity.ratio", str(option), "--sparsity.chunk_size", "64"]
        argv = test_argv(ctx, Path(ctx["workdir"]) / "attention" / str(i), 32, sizes["docs"], sizes["seq"],
                         sizes["batch"], acc) + extra
        wall, paths = cli(ctx, argv)
        rec = record(paths, "test")
        sparsity = rec.get("sparsity") or {}
        runs[label] = {"ppl": rec["metrics"]["ppl"], "density": sparsity.get("density"),
                       "attention_error": sparsity.get("attention_error"),
                       "cache_fraction": sparsity.get("cache_fraction"), "eval_time_s": rec["eval_time"],
                       "process_wall_s": wall, "command": "lightning_bench " + shlex.join(argv)}
    return {"runs": runs, "how": {"data": "WikiText-2 test.txt, first N articles, document_rolling", "dtype": "fp32",
                                  "n_documents": sizes["docs"], "seq_len": sizes["seq"], "batch": sizes["batch"],
                                  "density": "masker stacks: kept / visible causal entries over every query",
                                  "cache_fraction": "eviction (streamed, chunk 64): cache slots attended / dense"}}


def section_attention_ruler(ctx: dict) -> dict:
    """configs/downstream/attention_sparsity.yaml (masker stacks beside eviction on RULER niah_single_2 and vt at
    4k) on the device, from the sets gpu_pack.sh carried (LB_RULER_DATA); each cell's score, density and error,
    and the grid's folder (results, summary and the cells with their per-example rows) brought back beside the
    check's JSON (--out's folder) as attention_ruler.tar.gz. Run alone: `--only attention_ruler`."""
    import tarfile

    work = Path(ctx["workdir"]) / "attention_ruler"
    argv = ["downstream", "--config", ATTENTION_RULER, "--model.pretrained", ctx["model"], "--data_dir", ctx["data"],
            "--results_dir", str(work), "--accelerator", ctx["device"], *ctx["sizes"]["attention_ruler"]]
    if not (Path(ctx["data"]) / "ruler" / "4096").is_dir() and not ctx["dry"]:
        raise RuntimeError("no ruler/4096/ in the data: pack with LB_RULER_DATA=DATA (benchmarks/gpu_pack.sh)")
    wall, _ = cli(ctx, argv)
    results = work / "attention_sparsity" / "attention_sparsity_results.json"
    if ctx.get("out_dir"):
        with tarfile.open(Path(ctx["out_dir"]) / "attention_ruler.tar.gz", "w:gz") as tar:
            tar.add(work / "attention_sparsity", arcname="attention_sparsity")
    cells = json.loads(results.read_text())["cells"]
    return {"wall_s": wall, "cells": {k: {"score": c["metrics"].get(c["primary_metric"]), "n": c["num_examples"],
                                          "kept": c["cache"]["kept_fraction_of_compressed"],
                                          "density": (c.get("attention") or {}).get("density"),
                                          "attention_error": (c.get("attention") or {}).get("attention_error")}
                                      for k, c in cells.items()},
            "how": {"command": "lightning_bench " + shlex.join(argv), "dtype": "fp32"}}


RULER_V2_TASKS = "[ruler/niah_single_1, ruler/niah_single_2, ruler/niah_single_3, ruler/niah_multikey_1, " \
                 "ruler/niah_multivalue, ruler/niah_multiquery, ruler/fwe]"  # dense above 20 (docs/long_context.md)


def section_ruler_v2(ctx: dict) -> dict:
    """The long_context preset (protocol version 2) on the RULER tasks where dense scores above 20, on the device,
    as a subprocess stopped 20 s before the section's limit; its cells live in the tree's ignored .gpu/ruler_v2
    (kept while the machine is warm), so the same call again resumes them; every call copies what is done,
    compressed, beside the check's JSON (ruler_v2_cells.tar.gz)."""
    import tarfile

    work = ROOT / ".gpu" / "ruler_v2" if not ctx["dry"] else Path(ctx["workdir"]) / "ruler_v2"
    argv = ["downstream", "--config", "configs/downstream/long_context.yaml", "--model.pretrained", ctx["model"],
            "--data_dir", ctx["data"], "--results_dir", str(work), "--name", "long_context_v2",
            "--accelerator", ctx["device"], "--tasks", RULER_V2_TASKS, *ctx["sizes"]["ruler_v2"]]
    if not (Path(ctx["data"]) / "ruler" / "4096").is_dir() and not ctx["dry"]:
        raise RuntimeError("no ruler/4096/ in the data: pack with LB_RULER_DATA=DATA (benchmarks/gpu_pack.sh)")
    say(ctx, "lightning_bench " + shlex.join(argv))
    start, limit = time.perf_counter(), ctx["limits"]["ruler_v2"] - 20
    proc = subprocess.Popen([sys.executable, "-m", "lightning_bench.cli", *argv], cwd=ROOT)
    try:
        code = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the store keeps every finished cell and each group's examples so far
        code = proc.wait(timeout=15)
    cells = sorted((work / "long_context_v2" / "cells").glob("*.json"))
    if ctx.get("out_dir"):
        with tarfile.open(Path(ctx["out_dir"]) / "ruler_v2_cells.tar.gz", "w:gz") as tar:
            tar.add(work / "long_context_v2", arcname="long_context_v2")
    finished = (work / "long_context_v2" / "long_context_v2_results.json").exists() and code == 0
    return {"finished": finished, "exit_code": code, "wall_s": time.perf_counter() - start, "cells_done": len(cells),
            "how": {"command": "lightning_bench " + shlex.join(argv), "dtype": "fp32",
                    "resume": "run the same call again while the machine is warm"}}


SECTIONS = {"setup": section_setup, "env": section_env, "eval": section_eval, "mfu": section_mfu,
            "step_variants": section_step_variants, "bnb": section_bnb, "mamba": section_mamba, "eviction": section_eviction,
            "downstream": section_downstream, "attention_sparsity": section_attention_sparsity,
            "attention_ruler": section_attention_ruler, "ruler_v2": section_ruler_v2}
# measurements rather than checks, each most of a call: run with --only (the dry run runs them, small)
ON_REQUEST = ("attention_sparsity", "attention_ruler", "ruler_v2")


# ---- isolation --------------------------------------------------------------------------------------
def child(name: str, ctx: dict, result_path: Path, log_path: Path) -> int:
    """Runs one section with stdout/stderr sent to its log; writes {"status": ..., ...} to result_path."""
    progress = os.fdopen(os.dup(2), "w")
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    for fd in (1, 2):
        os.dup2(log, fd)
    ctx = dict(ctx, section=name, progress=progress, t0=time.monotonic())
    # LB_GPU_CHECK_INJECT=section:fail|hang|ok (the isolation's test) acts before any heavy import: "ok"
    # stands for a section that passed without running it
    inject = dict(part.split(":") for part in os.environ.get("LB_GPU_CHECK_INJECT", "").split(",") if part)
    try:
        if inject.get(name) == "fail":
            raise RuntimeError("injected failure (LB_GPU_CHECK_INJECT)")
        if inject.get(name) == "hang":
            time.sleep(3600)
        if ctx["threads"] and inject.get(name) != "ok":
            import torch

            torch.set_num_threads(ctx["threads"])
        result = {"status": "ok", "injected": True} if inject.get(name) == "ok" else {"status": "ok", **SECTIONS[name](ctx)}
        code = 0
    except BaseException as err:  # noqa: BLE001 - every failure becomes the section's record
        result = {"status": "failed", "error": f"{type(err).__name__}: {err}",
                  "traceback": traceback.format_exc().splitlines()[-12:]}
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    result_path.write_text(json.dumps(result, default=str))
    return code


def run_isolated(name: str, ctx: dict, limit: float, isolation: str) -> dict:
    work = Path(ctx["workdir"])
    result_path, log_path = work / f"{name}.result.json", work / f"{name}.log"
    result_path.unlink(missing_ok=True)  # a --workdir used before: no stale result may stand for this run
    start = time.monotonic()
    if isolation == "fork":
        pid = os.fork()
        if pid == 0:  # the child: its own process group, so a timeout kills whatever it started too
            os.setsid()
            code = 1
            try:
                code = child(name, ctx, result_path, log_path)
            finally:
                os._exit(code)  # no atexit handlers of the parent in the child

        def finished(block: bool = False) -> bool:
            return os.waitpid(pid, 0 if block else os.WNOHANG)[0] != 0
    else:
        ctx_path = work / "ctx.json"
        ctx_path.write_text(json.dumps(ctx))
        proc = subprocess.Popen([sys.executable, __file__, "--child", name, "--ctx", str(ctx_path)],
                                start_new_session=True)
        pid = proc.pid

        def finished(block: bool = False) -> bool:
            return (proc.wait() if block else proc.poll()) is not None
    timed_out = False
    while not finished():
        if time.monotonic() - start > limit:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # the section and whatever it started
            finished(block=True)
            break
        time.sleep(0.1)
    seconds = time.monotonic() - start
    if timed_out:
        result = {"status": "failed", "error": f"timed out after {limit:.0f} s"}
    elif result_path.exists():
        result = json.loads(result_path.read_text())
    else:
        result = {"status": "failed", "error": "the section's process ended without a result (killed or crashed)"}
    if result["status"] != "ok" and log_path.exists() and log_path.stat().st_size:
        result["log_tail"] = log_path.read_text(errors="replace").splitlines()[-15:]
    return {**result, "seconds": round(seconds, 2), "limit_s": limit}


def preload() -> None:
    """What the sections import, imported once before the forks (nothing here may initialise CUDA)."""
    import lightning  # noqa: F401
    import transformers.models.llama.modeling_llama  # noqa: F401
    import transformers.models.mamba.modeling_mamba  # noqa: F401

    import lightning_bench.cli  # noqa: F401
    import lightning_bench.experiments.downstream  # noqa: F401
    import lightning_bench.models  # noqa: F401
    import lightning_bench.sparsity  # noqa: F401
    import lightning_bench.trainer_cli  # noqa: F401


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for name in ("torch", "transformers", "lightning", "pytorch-lightning", "torchmetrics", "bitsandbytes",
                 "jsonargparse", "gguf", "tokenizers", "accelerate", "mamba-ssm", "causal-conv1d"):
        with contextlib.suppress(md.PackageNotFoundError):
            out[name] = md.version(name)
    import torch

    out["torch_cuda"] = torch.version.cuda
    return out


def revision() -> dict:
    """The git revision of this tree; where the tree travelled without .git, the one gpu_pack.sh wrote.
    LB_GPU_CHECK_COMMIT (set in the device call's command) overrides both: the device's copy of the tree
    has carried stale git metadata."""
    from lightning_bench.results.meta import git_revision

    if os.environ.get("LB_GPU_CHECK_COMMIT"):
        return {"commit": os.environ["LB_GPU_CHECK_COMMIT"], "source": "LB_GPU_CHECK_COMMIT"}
    rev = git_revision()
    if rev.get("commit"):
        return {**rev, "source": "git"}
    packed = sorted((ROOT / ".gpu").glob("part*/commit.json"))
    return {**json.loads(packed[0].read_text()), "source": str(packed[0].relative_to(ROOT))} if packed \
        else {**rev, "source": "unknown"}


def write_json(path: Path, report: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, default=str))
    tmp.replace(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny models and sizes: the test suite's run")
    parser.add_argument("--model", default=None, help="SmolLM2 folder (default $LB_SMOLLM2_DIR or its cache; "
                        "with --dry-run a tiny random Llama unless given)")
    parser.add_argument("--data", default=str(SHARED / "data"), help="a folder laid out like ../shared/data")
    parser.add_argument("--workdir", default=None, help="scratch folder (default: a new temporary one)")
    parser.add_argument("--only", default=None, help="comma-separated sections (setup always runs)")
    parser.add_argument("--limit", action="append", default=[], metavar="SECTION=SECONDS")
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for all sections together")
    parser.add_argument("--isolation", choices=["auto", "fork", "process"], default="auto",
                        help="auto: fork for --dry-run (imports paid once), a fresh interpreter per section on the GPU "
                             "(no CUDA state can leak from the parent into a child)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--ctx", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:  # --isolation process: one section in this fresh interpreter
        ctx = json.loads(Path(args.ctx).read_text())
        work = Path(ctx["workdir"])
        return child(args.child, ctx, work / f"{args.child}.result.json", work / f"{args.child}.log")

    started, t0 = time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.monotonic()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="lb_gpu_check_")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ.update(LB_CACHE_DIR=str(workdir / "cache"), WANDB_MODE="offline", HF_HUB_OFFLINE="1")
    model = args.model or (str(workdir / "tiny_llama") if args.dry_run else DEFAULT_MODEL)
    ctx = {"device": "cpu" if args.dry_run else "cuda", "dry": args.dry_run, "model": model,
           "data": str(Path(args.data).resolve()), "workdir": str(workdir), "out_dir": str(Path(args.out).resolve().parent),
           "sizes": SIZES["dry" if args.dry_run else "gpu"],
           # tiny tensors on a shared CPU: intra-op threads only wait on each other (tests/conftest.py)
           "threads": 1 if args.dry_run else None}
    limits = dict(LIMITS)
    limits.update({k: float(v) for k, v in (item.split("=") for item in args.limit)})
    ctx["limits"] = limits
    default = [n for n in SECTIONS if args.dry_run or n not in ON_REQUEST]  # the long ones run when named
    names = default if not args.only else ["setup", *[n for n in args.only.split(",") if n != "setup"]]
    unknown = sorted(set(names) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections {unknown}; valid: {', '.join(SECTIONS)}")

    isolation = args.isolation if args.isolation != "auto" else ("fork" if args.dry_run else "process")
    if isolation == "fork":
        preload()
        import torch

        if torch.cuda.is_initialized():  # a forked child could not use CUDA then
            isolation = "process"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = {"dry_run": args.dry_run, "started": started, "command": shlex.join(sys.argv),
              "revision": revision(), "versions": versions(), "platform": platform.platform(),
              "isolation": isolation, "workdir": str(workdir), "budget_s": args.budget, "sections": {}}
    for name in names:
        left = args.budget - (time.monotonic() - t0)
        if left < 5:
            report["sections"][name] = {"status": "failed", "error": "not run: the time budget was spent"}
            continue
        print(f"[gpu_check] {name}: starting (limit {min(limits[name], left):.0f} s)", flush=True)
        result = run_isolated(name, ctx, min(limits[name], left), isolation)
        report["sections"][name] = result
        print(f"[gpu_check] {name}: {result['status']} in {result['seconds']:.1f} s"
              + (f" -- {result['error']}" if result["status"] != "ok" else ""), flush=True)
        report["wall_s"] = round(time.monotonic() - t0, 1)
        write_json(out, report)  # after every section: a run stopped from outside keeps what it measured
    write_json(out, report)
    failed = [n for n, r in report["sections"].items() if r["status"] != "ok"]
    print(f"[gpu_check] wrote {out}; {len(names) - len(failed)}/{len(names)} sections ok"
          + (f"; failed: {', '.join(failed)}" if failed else "") + f"; {report['wall_s']} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
