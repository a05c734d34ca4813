"""Tokens/s of test-time perplexity on SmolLM2: lightning_bench's batched windows vs a plain loop.

Both score the same windows (token_windows protocol over the first N WikiText-2 test articles) with
the same model in fp32; the script checks they agree on the summed NLL and prints throughput.

    python benchmarks/eval_throughput.py [--model DIR] [--documents 3] [--seq-len 512] [--batch-size 2]

DIR defaults to $LB_SMOLLM2_DIR or ~/.cache/lightning_bench/smollm2-135m-instruct
(make it with ../shared/scripts/smollm2.sh).
"""

import argparse
import math
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from lightning_bench.data import LMDataModule
from lightning_bench.evaluation.windows import IGNORE_INDEX
from lightning_bench.models import HFLanguageModel

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = os.environ.get("LB_SMOLLM2_DIR", str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))


def plain_loop(net, loader) -> tuple[float, int, float]:
    """One window at a time, no padding, no Lightning: (nll sum, scored tokens, seconds)."""
    windows = [(ids[:n], lab[:n]) for batch in loader
               for ids, lab in zip(batch["input_ids"], batch["labels"])
               for n in [int((lab != IGNORE_INDEX).nonzero().max()) + 1]]
    nll, scored = 0.0, 0
    start = time.perf_counter()
    with torch.inference_mode():
        for ids, labels in windows:
            logits = net(input_ids=ids[None], use_cache=False).logits[0]
            nll += F.cross_entropy(logits.float(), labels, ignore_index=IGNORE_INDEX, reduction="sum").item()
            scored += int((labels != IGNORE_INDEX).sum())
    return nll, scored, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/wikitext-2"))
    parser.add_argument("--documents", type=int, default=3)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=2)
    args = parser.parse_args()

    import lightning as L

    dm = LMDataModule(source="text", test_path=str(Path(args.data) / "test.txt"), tokenizer=args.model,
                      seq_len=args.seq_len, batch_size=args.batch_size, eval_max_documents=args.documents)
    module = HFLanguageModel(args.model)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.test(module, datamodule=dm, verbose=False)  # warm-up: loads weights, tokenizes, caches
    start = time.perf_counter()
    trainer.test(module, datamodule=dm, verbose=False)
    batched_s = time.perf_counter() - start
    ours = module.last_eval["test"]

    nll, scored, loop_s = plain_loop(module.net.eval(), dm.test_dataloader())
    assert scored == ours["scored_tokens"], (scored, ours["scored_tokens"])
    print(f"model {args.model}  data {dm.provenance()['splits']['test'].get('evaluated_origin')}")
    print(f"threads {torch.get_num_threads()}  window {args.seq_len}  scored tokens {scored}")
    print(f"lightning_bench test (batch {args.batch_size}): {scored / batched_s:8.1f} tokens/s  "
          f"ppl {ours['ppl']:.4f}  ({batched_s:.1f} s)")
    print(f"plain PyTorch loop (batch 1):     {scored / loop_s:8.1f} tokens/s  "
          f"ppl {math.exp(nll / scored):.4f}  ({loop_s:.1f} s)")
    print(f"speed-up: {loop_s / batched_s:.2f}x   |delta NLL|/token: {abs(nll / scored - ours['loss']):.2e}")


if __name__ == "__main__":
    main()
