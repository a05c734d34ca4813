"""Side by side with kvpress: the tokens our snapkv / tova keep and kvpress's SnapKVPress / TOVAPress keep.

    python benchmarks/kvpress_parity.py [--model DIR] [--data FILE] [--context 4096] [--ratio 0.9] [--repeats 3]

kvpress pins its own transformers range, so it lives in a separate virtual environment; this script runs
there with the project on the path (docs/sparsity.md says how it was set up) and stops with a note when
kvpress is not installed. In ONE process, on the same SmolLM2 context (fp32, sdpa):
- kvpress: `with press(model): model(ids, past_key_values=cache)` compresses each layer during the prefill;
  which token each kept key is, is found by matching it against the keys of a dense prefill;
- ours: `prefill` with the method's recorder, then one `EvictionState.compress` with rounding "floor"
  (kvpress keeps max(1, int(n * (1 - ratio))));
- kept-token overlap |ours & kvpress| / kept, per (layer, KV head): mean, min, and how many are identical;
- time: min over repeats (sides interleaved) of each side's prefill + compression, and its ratio to the
  dense prefill of the same run.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the project, from kvpress's environment

from lightning_bench.sparsity import AttentionRecorder, budget, make_method, prefill  # noqa: E402

SHARED = Path(os.environ.get("LB_SHARED_DIR", ROOT.parent / "shared"))
DEFAULT_MODEL = os.environ.get("LB_SMOLLM2_DIR", str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))


def dense_prefill(net, ids, press=None):
    """The DynamicCache of one prefill, under `press` (a kvpress press) or not."""
    from contextlib import nullcontext

    from transformers import DynamicCache

    cache = DynamicCache(config=net.config)
    with torch.no_grad(), (press(net) if press is not None else nullcontext()):
        net(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return cache


def kept_by_matching(cache, dense_cache) -> list[torch.Tensor]:
    """Per layer (Hkv, kept) token indices of a compressed cache, found among the dense prefill's keys."""
    kept = []
    for layer, dense in zip(cache.layers, dense_cache.layers):
        dist = torch.cdist(layer.keys[0].float(), dense.keys[0].float(),  # (Hkv, kept, T); exact, not via matmul
                           compute_mode="donot_use_mm_for_euclid_dist")
        best = dist.min(-1)
        assert float(best.values.max()) < 1e-3, f"a kept key matches no key of the dense prefill ({best.values.max()})"
        kept.append(best.indices)
    return kept


def ours(net, ids, method, ratio):
    recorder = AttentionRecorder.for_method(method)
    state, _ = prefill(net, ids, torch.ones_like(ids), recorder)
    state.compress(method, budget(state.seen, ratio, rounding="floor"), recorder)
    return [positions[0] for positions in state.positions]  # (Hkv, kept) token positions = indices here


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--data", default=str(SHARED / "data/pg19/test/12204.txt"))
    parser.add_argument("--context", type=int, default=4096)
    parser.add_argument("--ratio", type=float, default=0.9, help="compression ratio (our sparsity)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    try:
        import kvpress
        from kvpress import SnapKVPress, TOVAPress
    except ImportError:
        print("kvpress is not installed here: nothing to compare (see docs/sparsity.md, 'Parity with kvpress')")
        return

    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    net = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa").eval()
    stream = tokenizer(Path(args.data).read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]
    ids = torch.tensor(stream[:args.context])[None]
    from importlib.metadata import version

    print(f"kvpress {version('kvpress')}  transformers "
          f"{transformers.__version__}  torch {torch.__version__}  threads {torch.get_num_threads()}  "
          f"context {ids.shape[1]}  ratio {args.ratio}  load {os.getloadavg()[0]:.2f}")
    pairs = {  # our method, the kvpress press, at the same settings (kvpress's SnapKV defaults: window 64, kernel 5)
        "snapkv": (make_method("snapkv", window=64, kernel=5, pooling="avg"),
                   SnapKVPress(compression_ratio=args.ratio, window_size=64, kernel_size=5)),
        "tova": (make_method("tova"), TOVAPress(compression_ratio=args.ratio)),
    }
    dense_cache = dense_prefill(net, ids)
    dense_prefill(net, ids[:, :256])  # warm-up
    times: dict[str, float] = {}
    kept: dict[str, list] = {}
    for _ in range(args.repeats):
        seconds, _ = timed(lambda: dense_prefill(net, ids))
        times["dense"] = min(times.get("dense", seconds), seconds)
        for name, (method, press) in pairs.items():
            seconds, kept[f"{name} ours"] = timed(lambda: ours(net, ids, method, args.ratio))
            times[f"{name} ours"] = min(times.get(f"{name} ours", seconds), seconds)
            seconds, cache = timed(lambda: dense_prefill(net, ids, press))
            times[f"{name} kvpress"] = min(times.get(f"{name} kvpress", seconds), seconds)
            kept[f"{name} kvpress"] = kept_by_matching(cache, dense_cache)  # untimed: this matching is ours

    print(f"\n{'method':<8}{'kept':>6}{'overlap mean':>14}{'min':>7}{'identical':>11}"
          f"{'ours s':>9}{'ratio':>7}{'kvpress s':>11}{'ratio':>7}")
    dense = times["dense"]
    for name in pairs:
        overlaps, identical, total = [], 0, 0
        for a, b in zip(kept[f"{name} ours"], kept[f"{name} kvpress"]):
            for head_a, head_b in zip(a.tolist(), b.tolist()):
                shared = len(set(head_a) & set(head_b)) / len(head_b)
                overlaps.append(shared)
                identical += shared == 1.0
                total += 1
        n_kept = len(kept[f"{name} kvpress"][0][0])
        print(f"{name:<8}{n_kept:>6}{sum(overlaps) / total:>14.4f}{min(overlaps):>7.3f}{identical:>6}/{total:<4}"
              f"{times[f'{name} ours']:>9.2f}{times[f'{name} ours'] / dense:>7.3f}"
              f"{times[f'{name} kvpress']:>11.2f}{times[f'{name} kvpress'] / dense:>7.3f}")
    print(f"dense prefill {dense:.2f} s; min of {args.repeats} repeats; load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
