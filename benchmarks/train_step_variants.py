"""Training-step time of `fit --model transformer`'s network under three step settings, same model and batch:

  eager     bf16 autocast, fp32 master weights, torch.optim.AdamW (foreach): the step `fit --bits 16` runs
  fused     the same with AdamW(fused=True) (one kernel for the whole update on CUDA)
  compiled  torch.compile (inductor) of forward + loss, AdamW(fused=True)

    python benchmarks/train_step_variants.py --device cuda        # the GPU check's sizes (~200M parameters)
    python benchmarks/train_step_variants.py --device cpu --n_layer 1 --d_model 64 --n_head 4 --seq 32 \
        --batch 2 --vocab 512 --warmup 2 --steps 3                  # a smoke run

Outside Lightning on purpose: it asks how much of the step the library could win by changing how it steps,
not what the library's fit does (benchmarks/gpu_check.py's mfu section measures that). FLOPs per step are
the library's own count (profiling.measure_flops: torch's FlopCounter, attention counted non-causal), the
same number the mfu section divides by; the batch is random token ids (the step's cost does not depend on
which tokens). Step times are synchronised wall times of whole steps after `warmup` untimed ones (the
compile happens in those); the median is reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lightning_bench.models import TransformerLM  # noqa: E402
from lightning_bench.profiling.flops import measure_flops  # noqa: E402

VARIANTS = ("eager", "fused", "compiled")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build(n_layer: int, d_model: int, n_head: int, seq: int, vocab: int, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    module = TransformerLM(n_layer=n_layer, d_model=d_model, n_head=n_head, max_seq_len=seq, vocab_size=vocab)
    return module.net.to(device).train()


def time_variant(variant: str, sizes: dict, device: torch.device, batch: dict) -> dict:
    net = build(sizes["n_layer"], sizes["d_model"], sizes["n_head"], sizes["seq"], sizes["vocab"], device)
    fused = variant != "eager" and device.type == "cuda"  # fused AdamW is a CUDA kernel
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4, weight_decay=0.1, fused=fused or None)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)

    def loss_of(input_ids, labels):
        with autocast:
            logits = net(input_ids).logits
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())

    step_loss = torch.compile(loss_of) if variant == "compiled" else loss_of
    times, losses = [], []
    start_all = time.perf_counter()
    for i in range(sizes["warmup"] + sizes["steps"]):
        _sync(device)
        start = time.perf_counter()
        loss = step_loss(batch["input_ids"], batch["labels"])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _sync(device)
        times.append(time.perf_counter() - start)
        losses.append(float(loss.detach()))
    timed = times[sizes["warmup"]:]
    return {"step_s_median": statistics.median(timed), "step_s_min": min(timed), "step_s_max": max(timed),
            "first_step_s": times[0], "setup_and_warmup_s": sum(times[:sizes["warmup"]]),
            "wall_s": time.perf_counter() - start_all, "optimizer": f"AdamW(fused={bool(fused)})",
            "losses_first_last": [losses[0], losses[-1]]}


def measure(sizes: dict, device: torch.device, peak_flops: float | None = None,
            variants=VARIANTS) -> dict:
    """Every variant on the same batch: step times, tokens/s, MFU (None without a peak) and speed-ups
    over eager."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, sizes["vocab"], (sizes["batch"], sizes["seq"] + 1), generator=generator)
    batch = {"input_ids": ids[:, :-1].to(device), "labels": ids[:, 1:].to(device)}
    flops = measure_flops(build(sizes["n_layer"], sizes["d_model"], sizes["n_head"], sizes["seq"], sizes["vocab"],
                                device), batch).total_flops
    tokens = sizes["batch"] * sizes["seq"]
    results = {}
    for variant in variants:
        r = time_variant(variant, sizes, device, batch)
        r["tokens_per_sec"] = tokens / r["step_s_median"]
        r["mfu"] = flops / r["step_s_median"] / peak_flops if peak_flops else None
        results[variant] = r
        if device.type == "cuda":
            torch.cuda.empty_cache()
    for variant in variants:
        if "eager" in results:
            results[variant]["speedup_x_eager"] = results["eager"]["step_s_median"] / results[variant]["step_s_median"]
    return {"variants": results, "flops_per_step": flops, "tokens_per_step": tokens, "peak_flops": peak_flops,
            "how": {"sizes": sizes, "device": str(device), "torch": torch.__version__,
                    "variants": {"eager": "bf16 autocast, fp32 weights, AdamW foreach (what fit --bits 16 runs)",
                                 "fused": "eager + AdamW(fused=True) on CUDA",
                                 "compiled": "torch.compile(forward + loss), AdamW(fused=True) on CUDA"},
                    "flops": "profiling.measure_flops on the same batch (the mfu section's count)",
                    "timing": f"synchronised whole steps, {sizes['warmup']} untimed first (compilation in them), "
                              f"median of {sizes['steps']}"}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    for name, default in (("n_layer", 12), ("d_model", 1024), ("n_head", 16), ("seq", 1024), ("batch", 16),
                          ("vocab", 49152), ("warmup", 10), ("steps", 30)):
        p.add_argument(f"--{name}", type=int, default=default)
    p.add_argument("--peak_flops", type=float, default=None, help="bf16 dense peak for the MFU (FLOP/s)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    args = p.parse_args()
    sizes = {k: getattr(args, k) for k in ("n_layer", "d_model", "n_head", "seq", "batch", "vocab", "warmup", "steps")}
    out = measure(sizes, torch.device(args.device), args.peak_flops, tuple(args.variants.split(",")))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
