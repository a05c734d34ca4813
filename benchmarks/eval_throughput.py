"""Perplexity evaluation speed: `lightning_bench test` against a batch-1 plain loop and the bare forward.

All three score the same windows (the CLI's own data config, rebuilt from its record: WikiText-2 test,
first N articles, `document_rolling`) with the same SmolLM2 weights:

  lightning_bench test   the CLI, in a subprocess, as users run it (progress bar, profiling, recorder);
                         speed = the record's scored_tokens_per_sec (scored tokens / test-loop wall time,
                         the FLOP-counted first batch included). Once per --bits value.
  library route          in-process, the test step's own code on the CLI's batches (hidden states, head
                         fused with the loss): the route without Lightning around it.
  bare forward           in-process, fp32, torch.inference_mode, the CLI's batches (batch --batch-size),
                         full logits, no loss: the ceiling.
  plain loop             in-process, one window at a time, unpadded, transformers forward +
                         log_softmax + gather: what an established harness does (lm-eval's HFLM).

The three in-process passes are interleaved batch by batch (this machine is shared and noisy), and
the library route's per-token NLL is compared with the plain loop's: the max per-token difference.

    python benchmarks/eval_throughput.py [--model DIR] [--documents 7] [--seq-len 512] [--bits 32 16] [--device cuda]

--device cuda runs the CLI with --trainer.accelerator gpu and the in-process passes on the GPU (synchronised
before each clock read); the default, cpu, is the measured CPU setup above.

DIR defaults to $LB_SMOLLM2_DIR or ~/.cache/lightning_bench/smollm2-135m-instruct
(make it with ../shared/scripts/smollm2.sh). Prints a table and one JSON line.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from lightning_bench.data import LMDataModule
from lightning_bench.models.token_nll import IGNORE_INDEX, head_nll
from lightning_bench.models import HFLanguageModel

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = os.environ.get("LB_SMOLLM2_DIR", str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))
CONFIG = ROOT / "configs/test/smollm2_wikitext2.yaml"


def run_cli(model: str, documents: int, seq_len: int, batch_size: int, bits: int, out: Path,
            device: str = "cpu") -> dict:
    cmd = [sys.executable, "-c", "from lightning_bench.cli import main; main()", "test", "--config", str(CONFIG), "--model.pretrained", model,
           "--data.eval_max_documents", str(documents), "--data.seq_len", str(seq_len),
           "--data.batch_size", str(batch_size), "--bits", str(bits), "--results_dir", str(out / f"bits{bits}"),
           "--trainer.default_root_dir", str(out / "logs")]
    if torch.device(device).type == "cuda":
        cmd += ["--trainer.accelerator", "gpu"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"lightning_bench test --bits {bits} failed:\n{proc.stderr[-3000:]}")
    record = json.loads(next((out / f"bits{bits}").glob("*_test.json")).read_text())
    return {"record": record, "process_wall_s": wall, "command": "lightning_bench " + " ".join(cmd[3:])}


def per_token(windows_nll: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(windows_nll) if windows_nll else torch.empty(0)


def in_process(model_dir: str, data_args: dict, device: str = "cpu") -> dict:
    device = torch.device(device)
    dm = LMDataModule(**data_args)
    dm.setup("test")
    batches = [{k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in b.items()}
               for b in dm.test_dataloader()]
    module = HFLanguageModel(model_dir)
    module.build(dm.vocab_size)
    module.eval().to(device)
    module._check_head_fusion()
    net = module.net

    def clock() -> float:  # CUDA runs asynchronously: wait for the queued work before reading the time
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    seconds = {"bare": 0.0, "route": 0.0, "plain": 0.0}
    route_nll, plain_nll, scored, computed = [], [], 0, 0
    with torch.inference_mode():
        # warm-up (oneDNN primitives; on CUDA the kernels and cuBLAS handles, at the real shapes)
        net(input_ids=batches[0]["input_ids"] if device.type == "cuda" else batches[0]["input_ids"][:, :16],
            use_cache=False)
        for batch in batches:
            ids, labels = batch["input_ids"], batch["labels"]
            mask = labels != IGNORE_INDEX
            scored += int(mask.sum())
            computed += ids.numel()

            t = clock()
            net(input_ids=ids, use_cache=False)
            seconds["bare"] += clock() - t

            t = clock()
            hidden = module.hidden_states(ids)[mask]  # the test step's route (LanguageModule._eval_step)
            head = module._fused_head[0]
            route = head_nll(hidden, head.weight, head.bias, labels[mask])
            seconds["route"] += clock() - t
            route_nll.append(route)

            t = clock()
            for row_ids, row_labels in zip(ids, labels):
                n = int((row_labels != IGNORE_INDEX).nonzero().max()) + 1  # the window without its padding
                logits = net(input_ids=row_ids[None, :n], use_cache=False).logits[0]
                logprobs = F.log_softmax(logits.float(), dim=-1)
                keep = row_labels[:n] != IGNORE_INDEX
                plain_nll.append(-logprobs[keep].gather(1, row_labels[:n][keep, None]).squeeze(1))
            seconds["plain"] += clock() - t
    route_all, plain_all = per_token(route_nll), per_token(plain_nll)
    return {"seconds": seconds, "scored": scored, "computed": computed, "batches": len(batches),
            "route_nll_sum": float(route_all.double().sum()), "plain_nll_sum": float(plain_all.double().sum()),
            "max_token_nll_diff": float((route_all - plain_all).abs().max()),
            "threads": torch.get_num_threads(), "eval_path": module.eval_path}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--documents", type=int, default=7)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--bits", type=int, nargs="+", default=[32, 16])
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        cli = {bits: run_cli(args.model, args.documents, args.seq_len, args.batch_size, bits, Path(tmp) / "a",
                             args.device)
               for bits in args.bits}
        first = next(iter(cli.values()))["record"]
        data_args = dict(first["config"]["data"]["init_args"], tokenizer=args.model)
        data_args["test_path"] = str((ROOT / data_args["test_path"]).resolve())
        ours = in_process(args.model, data_args, args.device)
        if 32 in cli:  # the CLI cannot be interleaved with the in-process passes: run it on both sides of them
            again = run_cli(args.model, args.documents, args.seq_len, args.batch_size, 32, Path(tmp) / "b",
                            args.device)
            before, after = (r["record"]["scored_tokens_per_sec"] for r in (cli[32], again))
            print(f"lightning_bench test --bits 32: {before:.1f} tokens/s before the in-process passes, "
                  f"{after:.1f} after; the table uses their mean")
            cli[32]["record"]["scored_tokens_per_sec"] = (before + after) / 2
    scored = ours["scored"]
    for bits, run in cli.items():
        assert run["record"]["metrics"]["scored_tokens"] == scored, (bits, run["record"]["metrics"], scored)

    rate = {k: scored / s for k, s in ours["seconds"].items()}
    print(f"model {args.model}; {args.documents} WikiText-2 test articles, document_rolling, window {args.seq_len}, "
          f"batch {args.batch_size}; {scored} scored tokens, {ours['computed']} computed; "
          f"{ours['threads']} threads; {torch.backends.cpu.get_cpu_capability()}")
    print(f"{'':34s}{'tokens/s':>10s}{'x plain':>9s}{'x bare':>8s}{'ppl':>10s}{'seconds':>9s}")
    rows = {}
    for bits, run in cli.items():
        rec = run["record"]
        tps = rec["scored_tokens_per_sec"]
        rows[f"cli_bits{bits}"] = tps
        print(f"{'lightning_bench test --bits ' + str(bits):34s}{tps:10.1f}{tps / rate['plain']:9.2f}"
              f"{tps / rate['bare']:8.2f}{rec['metrics']['ppl']:10.4f}{rec['eval_time']:9.1f}")
    for key, label, nll in (("route", "library route, in-process (fp32)", ours["route_nll_sum"]),
                            ("bare", "bare forward (fp32, no loss)", None),
                            ("plain", "plain loop, batch 1 (fp32)", ours["plain_nll_sum"])):
        ppl = f"{math.exp(nll / scored):10.4f}" if nll is not None else f"{'':10s}"
        print(f"{label:34s}{rate[key]:10.1f}{rate[key] / rate['plain']:9.2f}{rate[key] / rate['bare']:8.2f}"
              f"{ppl}{ours['seconds'][key]:9.1f}")
    fp32 = cli.get(32, {}).get("record")
    print(f"max per-token |NLL(library route) - NLL(plain loop)|: {ours['max_token_nll_diff']:.2e} nats")
    if fp32 is not None:
        cli_nll = fp32["metrics"]["loss"] * scored
        print(f"summed NLL: lightning_bench test {cli_nll:.4f}, plain loop {ours['plain_nll_sum']:.4f} "
              f"(|diff| per token {abs(cli_nll - ours['plain_nll_sum']) / scored:.2e})")
    if 16 in cli and fp32 is not None:
        change = cli[16]["record"]["metrics"]["ppl"] / fp32["metrics"]["ppl"] - 1
        print(f"--bits 16 perplexity vs --bits 32: {100 * change:+.3f}%  ({cli[16]['record'].get('eval_path')})")
    print(json.dumps({"scored_tokens": scored, "tokens_per_sec": {**rows, **rate},
                      "max_token_nll_diff": ours["max_token_nll_diff"],
                      "ppl": {f"cli_bits{b}": r["record"]["metrics"]["ppl"] for b, r in cli.items()},
                      "commands": {b: r["command"] for b, r in cli.items()}}))


if __name__ == "__main__":
    main()
