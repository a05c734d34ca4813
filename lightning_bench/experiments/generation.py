"""`lightning_bench generation`: KV-cache eviction methods on language generation (teacher-forced).

    lightning_bench generation --model.pretrained DIR|HUB_ID --methods dense h2o cab --sparsity 0.5 0.9 \
        --context-length 1024 --continuation-length 64 --num-samples 10 --seeds 42 43 \
        --data wikitext2=../shared/data/wikitext-2 --experiment-name quick_test \
        [--results_dir benchmark_results/generation] [--interval 1] [--rerotate] \
        [--method-param h2o.recent_ratio=0.2 ...] [--device auto|cpu|cuda] [--model.dtype float32] [--threads N]

Protocol, per cell (method, sparsity, context length C, seed):

1. Data: the TEST split of `--data` is tokenized as one stream with the model's own tokenizer (no
   special tokens added) and cut into non-overlapping windows of C + N tokens (N =
   `--continuation-length`), window k = stream[k(C+N) : (k+1)(C+N)]. `--num-samples` windows are
   drawn without replacement by `torch.randperm` seeded with the cell's seed, so the samples depend
   on (seed, C) only: every method and sparsity of a (seed, C) sees the same samples (paired).
2. Each sample, alone (batch 1): the first C tokens are prefilled densely, the cache is compressed to
   ceil((1 - sparsity) * tokens seen) slots by the method (`sparsity.generate_with_eviction`), and
   the continuation (the window's last N tokens, the reference) is teacher-forced one token at a
   time on the pruned cache, re-compressing every `--interval` steps. Its per-token NLL is kept.
   The first continuation token is predicted from the dense prefill (the same for every method).
   `dense` runs once per (C, seed), at sparsity 0.0; the others at every `--sparsity`.
3. Per sample we record: `nll` (mean nats/token of the continuation) and `ppl` = exp(nll);
   `decode_tokens_per_s` = (N - 1) / (wall time after the prefill forward: compressions + N - 1
   one-token forwards) and `tokens_per_s` = N / (whole call, prefill included); `peak_memory_mb`
   and `peak_memory_increase_mb` (above the level just before the call): CUDA
   `max_memory_allocated`, or on CPU the process's peak RSS (VmHWM, reset before each sample through
   /proc/self/clear_refs; best effort: the allocator may reuse memory it did not give back);
   `avg_cache_length` (mean cache slots attended over the N - 1 decoding steps, i.e. on the pruned
   cache), `kv_bytes_peak` / `kv_bytes_mean` over those steps, `dense_kv_bytes_peak` (what a dense
   cache would hold) and `kv_fraction` = kv_bytes_peak / dense_kv_bytes_peak.

Files, in `{results_dir}/{experiment_name}/` (each written atomically, each with `config`, `meta`
(`run_meta`: versions, git, seed, command) and `meta.data` (origin and sha256 of the split text,
tokenizer, sha256 of the token stream)):

- `{method}_s{sparsity}_ctx{C}_seed{seed}.json`: the cell, with every sample's values (`samples`,
  each with its window `start` in the token stream and its `token_nll`) and their means (`summary`).
- `aggregated_results.json`: per `{method}_s{sparsity}_ctx{C}`, for every metric, the mean, sample
  standard deviation (ddof=1; null with one value), min and max over all samples of all its seeds,
  plus `ppl_of_mean_nll` = exp(mean nll) (= the token perplexity of all its continuations, since
  every sample has N tokens).
- `significance_tests.json`: at each (sparsity, C), a paired t-test (`scipy.stats.ttest_rel`,
  two-sided) on the per-sample NLL between every two of: the methods at that sparsity and dense
  (sparsity 0). Pairs are matched by (seed, window start); `mean_difference` = mean(a - b), so a
  negative value means `a` predicts the continuation better. No multiple-comparison correction.

Both summaries are computed from every cell file in the folder, so a later run that adds methods,
sparsities, contexts or seeds extends them. Resuming: a cell whose file exists is skipped. A cell
file made under another protocol (model, dtype, data, tokenizer, continuation length, number of
samples, interval, rerotate, method parameters, device) is refused: use another --experiment-name.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import math
import re
import shlex
import statistics
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import torch

from lightning_bench.errors import ConfigError, unknown_name
from lightning_bench.results.io import read_json, write_json_atomic
from lightning_bench.results.meta import run_meta

COMMAND = "generation"
DEFAULT_METHODS = ("dense", "h2o", "cab")
DATA_NAMES = ("wikitext2", "wikitext103", "ptb", "c4", "pile", "pg19")
DATA_SYNONYMS = {"wikitext": "wikitext2"}  # the reference driver's name
# per-sample metrics, aggregated over seeds and samples
METRICS = ("nll", "ppl", "decode_tokens_per_s", "tokens_per_s", "seconds", "prefill_seconds", "peak_memory_mb",
           "peak_memory_increase_mb", "avg_cache_length", "final_cache_length", "kv_bytes_peak", "kv_bytes_mean",
           "dense_kv_bytes_peak", "kv_fraction")
STD_KIND = "sample standard deviation (ddof=1); null with fewer than two values"
CELL_FILE = re.compile(r"^[a-z0-9_]+_s[0-9.e+-]+_ctx\d+_seed-?\d+\.json$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


# ---- the grid ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    method: str
    sparsity: float
    context_length: int
    seed: int

    @property
    def name(self) -> str:
        return f"{self.method}_s{self.sparsity}_ctx{self.context_length}_seed{self.seed}"

    @property
    def group(self) -> str:
        return f"{self.method}_s{self.sparsity}_ctx{self.context_length}"


def build_grid(methods: list[str], sparsities: list[float], contexts: list[int], seeds: list[int]) -> list[Cell]:
    """Every cell, contexts and seeds outermost; dense once per (context, seed) at sparsity 0.0."""
    cells = []
    for ctx, seed in itertools.product(contexts, seeds):
        for method in methods:
            for s in ([0.0] if method == "dense" else sparsities):
                cells.append(Cell(method, float(s), int(ctx), int(seed)))
    return cells


# ---- command line -----------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one `lightning_bench: error:` line (cli.main), not argparse's usage block
        raise ConfigError(f"{COMMAND}: {message}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog=f"lightning_bench {COMMAND}",
                description="KV-cache eviction on generation: perplexity of a reference continuation under "
                            "the pruned cache, throughput, memory, cache size; resumable, with t-tests.")
    p.add_argument("--model", default="hf", help="only `hf` (a pretrained attention model)")
    p.add_argument("--model.pretrained", dest="pretrained", required=True, help="hub id or local folder")
    p.add_argument("--model.dtype", dest="dtype", default="float32", help="float32, bfloat16, float16, auto")
    p.add_argument("--model.revision", dest="revision", default=None)
    p.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS), metavar="METHOD")
    p.add_argument("--sparsity", nargs="+", type=float, default=[0.9], metavar="RATIO",
                   help="fractions of the KV cache evicted, each in [0, 1) (dense always runs at 0)")
    p.add_argument("--context-length", "--context_length", dest="context_length", nargs="+", type=int,
                   default=[1024], metavar="TOKENS")
    p.add_argument("--continuation-length", "--continuation_length", dest="continuation_length", type=int,
                   default=64, metavar="TOKENS")
    p.add_argument("--num-samples", "--num_samples", dest="num_samples", type=int, default=10)
    p.add_argument("--seeds", nargs="+", type=int, default=None,
                   help="sample-selection seeds (default 42; or --num-runs N: 42 .. 42+N-1)")
    p.add_argument("--num-runs", "--num_runs", dest="num_runs", type=int, default=None)
    p.add_argument("--data", "--dataset", dest="data", default="wikitext2",
                   help="wikitext2, ptb, ... (HF hub; ptb offline) or NAME=DIR|FILE (a local test split)")
    p.add_argument("--experiment-name", "--experiment_name", dest="experiment_name", default=None,
                   help="results folder name (default: {model}_{data})")
    p.add_argument("--results_dir", "--results-dir", dest="results_dir", default="benchmark_results/generation")
    p.add_argument("--interval", type=int, default=1, help="re-compress every INTERVAL decoding steps (0: once)")
    p.add_argument("--rerotate", action="store_true", help="re-rotate kept keys to contiguous positions")
    p.add_argument("--method-param", "--method_param", dest="method_params", action="append", default=[],
                   metavar="METHOD.KEY=VALUE", help="e.g. h2o.recent_ratio=0.2 (repeatable)")
    p.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:N")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default: torch's); 1 on a shared CPU steadies the timings")
    return p


def parse_method_params(items: list[str], methods: list[str]) -> dict[str, dict]:
    import yaml

    params: dict[str, dict] = {}
    for item in items:
        key, sep, value = item.partition("=")
        method, dot, name = key.partition(".")
        if not sep or not dot or not method or not name:
            raise ConfigError(f"--method-param {item!r} must look like METHOD.KEY=VALUE (e.g. h2o.recent_ratio=0.2)")
        if method not in methods:
            raise ConfigError(f"--method-param {item!r} is for {method!r}, which is not in --methods")
        params.setdefault(method, {})[name] = yaml.safe_load(value)
    return params


def check_arguments(args) -> tuple[list[int], dict[str, dict]]:
    """Everything that can be checked before loading anything; (seeds, method parameters)."""
    from lightning_bench.sparsity import make_method

    if args.model != "hf":
        raise ConfigError(f"{COMMAND} evaluates pretrained attention models: --model hf --model.pretrained DIR "
                          f"(got --model {args.model})")
    if args.seeds is not None and args.num_runs is not None:
        raise ConfigError("give --seeds or --num-runs, not both")
    if args.num_runs is not None and args.num_runs < 1:
        raise ConfigError(f"--num-runs must be >= 1, got {args.num_runs}")
    seeds = args.seeds if args.seeds is not None else list(range(42, 42 + (args.num_runs or 1)))
    for flag, values in (("methods", args.methods), ("sparsity", args.sparsity),
                         ("context-length", args.context_length), ("seeds", seeds)):
        if len(set(values)) != len(values):
            raise ConfigError(f"--{flag} lists a value twice: {' '.join(map(str, values))}")
    params = parse_method_params(args.method_params, args.methods)
    for method in args.methods:
        make_method(method, **params.get(method, {}))  # unknown name / bad parameters: one line
    for s in args.sparsity:
        if not 0.0 <= s < 1.0:
            raise ConfigError(f"--sparsity {s} is outside [0, 1) (the fraction of the KV cache evicted)")
    for ctx in args.context_length:
        if ctx < 1:
            raise ConfigError(f"--context-length must be >= 1, got {ctx}")
    if args.continuation_length < 1:
        raise ConfigError(f"--continuation-length must be >= 1, got {args.continuation_length}")
    if args.num_samples < 1:
        raise ConfigError(f"--num-samples must be >= 1, got {args.num_samples}")
    if args.interval < 0:
        raise ConfigError(f"--interval must be >= 0, got {args.interval}")
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads must be >= 1, got {args.threads}")
    return seeds, params


# ---- data -------------------------------------------------------------------------------------
def load_test_text(spec: str):
    """(dataset name, source, SplitText of its test split) for `wikitext2` / `ptb` / NAME=DIR|FILE."""
    from lightning_bench.data.sources import find_split_file, load_split

    if "=" in spec:
        name, path = spec.split("=", 1)
        if not _NAME.match(name):
            raise ConfigError(f"dataset name {name!r} in {spec!r} must be letters, digits, '_', '-' or '.'")
        if not Path(path).exists():
            raise ConfigError(f"dataset {name!r}: {path!r} does not exist")
        file = find_split_file(path, "test")
        if file is None:
            raise ConfigError(f"dataset {name!r}: no test split in {path!r} (test.txt, wiki.test.tokens, ...)")
        return name, path, load_split("text", "test", split_path=str(file))
    alias = DATA_SYNONYMS.get(spec, spec)
    if alias not in DATA_NAMES:
        raise unknown_name("dataset", spec, [*DATA_NAMES, "NAME=DIR"])
    try:
        return alias, alias, load_split(alias, "test")
    except ConfigError as err:
        raise ConfigError(f"{str(err).split(';')[0]}; offline, give a local copy: --data {alias}=DIR "
                          "(e.g. wikitext2=../shared/data/wikitext-2)") from err


def token_stream(split, tokenizer) -> torch.Tensor:
    """The split's text as one token tensor (cached on disk like LMDataModule's streams)."""
    from lightning_bench.data.cache import cache_key, cached
    from lightning_bench.data.tokenization import default_cache_dir

    key = cache_key(origin=split.origin, sha256=split.sha256, tokenizer=tokenizer.identity, kind="stream",
                    n_docs=len(split.documents))
    stream, _ = cached(default_cache_dir() / "tokenized",  key,
                       lambda: torch.tensor(tokenizer.encode(split.text), dtype=torch.int32))
    return stream


def sample_starts(n_tokens: int, window: int, num_samples: int, seed: int) -> list[int]:
    """Start offsets of `num_samples` distinct non-overlapping windows, drawn with `seed` (sorted)."""
    n_windows = n_tokens // window
    if n_windows < num_samples:
        raise ConfigError(f"the test split has {n_tokens} tokens: {n_windows} non-overlapping windows of "
                          f"context + continuation = {window} tokens, fewer than --num-samples {num_samples}; "
                          "lower --num-samples, --context-length or --continuation-length")
    drawn = torch.randperm(n_windows, generator=torch.Generator().manual_seed(seed))[:num_samples]
    return sorted(int(k) * window for k in drawn)


# ---- measuring one call -----------------------------------------------------------------------
class ForwardTimer:
    """Start time and duration of every forward of `net` (hooks); a generate call's first is the prefill."""

    def __init__(self, net, device: torch.device):
        self.net, self.sync = net, device.type == "cuda"
        self.starts: list[float] = []
        self.calls: list[float] = []

    def _now(self) -> float:
        if self.sync:
            torch.cuda.synchronize()
        return time.perf_counter()

    def __enter__(self):
        def pre(*_):
            self.starts.append(self._now())

        def post(*_):
            self.calls.append(self._now() - self.starts[-1])

        self._handles = [self.net.register_forward_pre_hook(pre), self.net.register_forward_hook(post)]
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()


def _proc_status_kb(field: str) -> Optional[int]:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


class PeakMemory:
    """Peak memory of a block: CUDA max_memory_allocated, or CPU peak RSS reset through clear_refs."""

    def __init__(self, device: torch.device):
        self.device = device
        self.kind = ("cuda_max_memory_allocated" if device.type == "cuda" else
                     "cpu_peak_rss (VmHWM, reset before each sample via /proc/self/clear_refs)"
                     if self._can_reset_rss() else "cpu_peak_rss_process (ru_maxrss: whole process, not reset)")

    @staticmethod
    def _can_reset_rss() -> bool:
        try:
            Path("/proc/self/clear_refs").write_text("5")
            return _proc_status_kb("VmHWM") is not None
        except OSError:
            return False

    def _current_mb(self) -> float:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device) / 2**20
        rss = _proc_status_kb("VmRSS")
        return rss / 1024 if rss is not None else float("nan")

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self.kind.startswith("cpu_peak_rss (VmHWM"):
            Path("/proc/self/clear_refs").write_text("5")
        self.before_mb = self._current_mb()
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_mb = torch.cuda.max_memory_allocated(self.device) / 2**20
        elif self.kind.startswith("cpu_peak_rss (VmHWM"):
            self.peak_mb = _proc_status_kb("VmHWM") / 1024
        else:
            import resource

            self.peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        self.increase_mb = self.peak_mb - self.before_mb


def run_sample(net, stream: torch.Tensor, start: int, context_length: int, continuation_length: int,
               method, sparsity: float, interval: int, rerotate: bool, device: torch.device,
               memory: PeakMemory) -> dict:
    """One window: prefill, compress, teacher-force the reference continuation; its measurements."""
    from lightning_bench.sparsity import generate_with_eviction

    window = stream[start:start + context_length + continuation_length].long()
    ids, reference = window[None, :context_length], window[None, context_length:]
    kwargs = {"sparsity": sparsity} if method.evicts else {}
    with ForwardTimer(net, device) as timer, memory:
        res = generate_with_eviction(net, ids, None, method, interval=interval, rerotate=rerotate,
                                     reference_continuation=reference, **kwargs)
    n = continuation_length
    nll = res.nll[0].double()
    prefill_s = timer.calls[0]
    decode_s = res.seconds - prefill_s
    steps = slice(1, None) if n > 1 else slice(0, None)  # the decoding steps, on the pruned cache
    cache, kv, dense = res.cache_lengths[steps], res.kv_bytes[steps], res.dense_kv_bytes[steps]
    return {
        "start": start,
        "nll": float(nll.mean()),
        "ppl": math.exp(float(nll.mean())),
        "decode_tokens_per_s": (n - 1) / decode_s if n > 1 and decode_s > 0 else None,
        "tokens_per_s": n / res.seconds,
        "seconds": res.seconds,
        "prefill_seconds": prefill_s,
        "peak_memory_mb": memory.peak_mb,
        "peak_memory_increase_mb": memory.increase_mb,
        "avg_cache_length": statistics.fmean(cache),
        "final_cache_length": res.cache_lengths[-1],
        "kv_bytes_peak": max(kv),
        "kv_bytes_mean": statistics.fmean(kv),
        "dense_kv_bytes_peak": max(dense),
        "kv_fraction": max(kv) / max(dense),
        "compressions": res.compressions,
        "token_nll": res.nll[0].tolist(),
    }


# ---- summaries --------------------------------------------------------------------------------
def describe(values: list[float]) -> dict:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else None,
            "min": min(values), "max": max(values), "n": len(values)}


def read_cells(folder: Path) -> list[dict]:
    return [read_json(p) for p in sorted(folder.glob("*.json")) if CELL_FILE.match(p.name)]


def _group_order(item) -> tuple:
    """Per context length: dense first, then by sparsity and method."""
    cell = item[1][0]
    return cell["context_length"], cell["method"] != "dense", cell["sparsity"], cell["method"]


def aggregate(cells: list[dict]) -> dict:
    groups: dict[str, list[dict]] = {}
    for cell in cells:
        c = Cell(cell["method"], cell["sparsity"], cell["context_length"], cell["seed"])
        groups.setdefault(c.group, []).append(cell)
    out = {}
    for group, members in sorted(groups.items(), key=_group_order):
        first = members[0]
        samples = [s for cell in members for s in cell["samples"]]
        metrics = {m: describe([s[m] for s in samples]) for m in METRICS}
        out[group] = {"method": first["method"], "sparsity": first["sparsity"],
                      "context_length": first["context_length"],
                      "seeds": sorted(cell["seed"] for cell in members), "n_samples": len(samples),
                      "cells": sorted(Cell(c["method"], c["sparsity"], c["context_length"], c["seed"]).name + ".json"
                                      for c in members),
                      "ppl_of_mean_nll": math.exp(metrics["nll"]["mean"]),
                      "metrics": metrics}
    return out


def paired_nll(cells: list[dict], method: str, sparsity: float, ctx: int) -> dict:
    """{(seed, window start): per-sample NLL} of one (method, sparsity, context)."""
    return {(c["seed"], s["start"]): s["nll"] for c in cells
            if (c["method"], c["sparsity"], c["context_length"]) == (method, sparsity, ctx) for s in c["samples"]}


def significance(cells: list[dict]) -> list[dict]:
    from scipy.stats import ttest_rel

    tests = []
    contexts = sorted({c["context_length"] for c in cells})
    for ctx in contexts:
        here = [c for c in cells if c["context_length"] == ctx]
        has_dense = any(c["method"] == "dense" for c in here)
        for s in sorted({c["sparsity"] for c in here if c["method"] != "dense"}):
            who = sorted({c["method"] for c in here if c["method"] != "dense" and c["sparsity"] == s})
            arms = [(m, s) for m in who] + ([("dense", 0.0)] if has_dense else [])
            for (a, sa), (b, sb) in itertools.combinations(arms, 2):
                na, nb = paired_nll(here, a, sa, ctx), paired_nll(here, b, sb, ctx)
                keys = sorted(set(na) & set(nb))
                xa, xb = [na[k] for k in keys], [nb[k] for k in keys]
                t = p = None
                if len(keys) > 1:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # identical arms: t is nan (written as null)
                        result = ttest_rel(xa, xb)
                    t, p = float(result.statistic), float(result.pvalue)
                tests.append({"sparsity": s, "context_length": ctx, "a": a, "a_sparsity": sa, "b": b,
                              "b_sparsity": sb, "n": len(keys), "t": t, "p": p,
                              "mean_difference": statistics.fmean(x - y for x, y in zip(xa, xb)) if keys else None,
                              "mean_a": statistics.fmean(xa) if keys else None,
                              "mean_b": statistics.fmean(xb) if keys else None})
    return tests


# ---- the command ------------------------------------------------------------------------------
def _protocol(config: dict, data: dict, cell: Cell, params: dict) -> dict:
    """What must be equal for a cell file to be reused."""
    return {"model": config["model"], "data_sha256": data["sha256"], "tokenizer": data["tokenizer"]["identity"],
            "continuation_length": config["continuation_length"], "num_samples": config["num_samples"],
            "interval": config["interval"], "rerotate": config["rerotate"],
            "method_params": params.get(cell.method, {}), "device": config["device_type"]}


def _device(spec: str) -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(spec)
    except RuntimeError as err:
        raise ConfigError(f"--device {spec!r} is not a device (cpu, cuda, cuda:N, auto)") from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device here; use --device cpu")
    return device


def generation(argv: list[str]) -> int:
    from lightning_bench.data.tokenization import build_tokenizer
    from lightning_bench.models import HFLanguageModel
    from lightning_bench.sparsity import make_method

    args = _parser().parse_args(list(argv))
    seeds, params = check_arguments(args)
    device = _device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    module = HFLanguageModel(args.pretrained, dtype=args.dtype, revision=args.revision)
    max_len = module.max_seq_len
    longest = max(args.context_length) + args.continuation_length
    if max_len is not None and longest > max_len:
        raise ConfigError(f"context + continuation = {max(args.context_length)} + {args.continuation_length} = "
                          f"{longest} tokens is longer than the model's max context ({max_len}); "
                          "lower --context-length or --continuation-length")
    data_name, data_source, split = load_test_text(args.data)
    source = module.tokenizer_source
    tokenizer = build_tokenizer(source["name"], **source["kwargs"])
    stream = token_stream(split, tokenizer)
    if longest > len(stream):
        raise ConfigError(f"context + continuation = {longest} tokens is longer than the data ({data_name}'s "
                          f"test split: {len(stream)} tokens); lower --context-length or --continuation-length")
    starts = {(ctx, seed): sample_starts(len(stream), ctx + args.continuation_length, args.num_samples, seed)
              for ctx in args.context_length for seed in seeds}
    data = {"name": data_name, "source": data_source, "split": "test", "origin": split.origin,
            "sha256": split.sha256, "tokenizer": tokenizer.describe(), "stream_tokens": len(stream),
            "stream_sha256": hashlib.sha256(stream.numpy().tobytes()).hexdigest()}

    name = args.experiment_name or f"{module.model_name}_{data_name}"
    if not _NAME.match(name):
        raise ConfigError(f"--experiment-name {name!r} must be letters, digits, '_', '-' or '.'")
    folder = Path(args.results_dir) / name
    memory = PeakMemory(device)
    config = {"command": COMMAND, "model": {"pretrained": args.pretrained, "dtype": args.dtype,
                                            "revision": args.revision, "max_position_embeddings": max_len},
              "methods": args.methods, "sparsity": args.sparsity, "context_lengths": args.context_length,
              "continuation_length": args.continuation_length, "num_samples": args.num_samples, "seeds": seeds,
              "data": args.data, "interval": args.interval, "rerotate": args.rerotate, "method_params": params,
              "device": str(device), "device_type": device.type, "batch_size": 1, "threads": torch.get_num_threads(),
              "memory_kind": memory.kind, "experiment_name": name, "results_dir": args.results_dir}
    command = shlex.join(["lightning_bench", COMMAND, *argv])

    grid = build_grid(args.methods, args.sparsity, args.context_length, seeds)
    todo = []
    for cell in grid:  # refuse before running anything if an existing cell was made differently
        path = folder / f"{cell.name}.json"
        if path.exists():
            old = read_json(path).get("protocol")
            if old != _protocol(config, data, cell, params):
                raise ConfigError(f"{path} was made under another protocol (model, data, continuation length, "
                                  "samples, interval, method parameters or device); use another --experiment-name")
        else:
            todo.append(cell)

    net = None
    warmed: set[str] = set()
    for i, cell in enumerate(grid, 1):
        label = f"lightning_bench {COMMAND}: [{i}/{len(grid)}] {cell.name}"
        path = folder / f"{cell.name}.json"
        if cell not in todo:
            print(f"{label}: skipped (exists: {path})", flush=True)
            continue
        if net is None:
            net = module.build_network(tokenizer.vocab_size).to(device).eval()
        method_params = dict(params.get(cell.method, {}))
        if cell.method == "random":
            method_params.setdefault("seed", cell.seed)
        torch.manual_seed(cell.seed)
        if cell.method not in warmed:  # one untimed short call per method: lazy initialisation, thread pools
            w = min(64, cell.context_length)
            run_sample(net, stream, 0, w, min(4, args.continuation_length), make_method(cell.method, **method_params),
                       cell.sparsity, args.interval, args.rerotate, device, memory)
            warmed.add(cell.method)
        method = make_method(cell.method, **method_params)
        samples = [run_sample(net, stream, start, cell.context_length, args.continuation_length, method,
                              cell.sparsity, args.interval, args.rerotate, device, memory)
                   for start in starts[(cell.context_length, cell.seed)]]
        summary = {m: describe([s[m] for s in samples])["mean"] for m in METRICS}
        record = {"method": cell.method, "sparsity": cell.sparsity, "context_length": cell.context_length,
                  "continuation_length": args.continuation_length, "seed": cell.seed,
                  "method_params": method.describe(), "num_samples": len(samples),
                  "summary": summary, "samples": samples,
                  "protocol": _protocol(config, data, cell, params), "config": config,
                  "meta": run_meta(seed=cell.seed, extra={"command": command, "data": data})}
        write_json_atomic(path, record)
        print(f"{label}: ppl {math.exp(summary['nll']):.3f}  decode {summary['decode_tokens_per_s'] or 0:.1f} tok/s  "
              f"cache {summary['avg_cache_length']:.0f} slots  kv {summary['kv_bytes_peak'] / 2**20:.2f} MiB "
              f"({sum(s['seconds'] for s in samples):.1f} s)", flush=True)

    cells = read_cells(folder)
    for cell in cells:
        if cell.get("protocol", {}).get("data_sha256") != data["sha256"] or \
                cell.get("protocol", {}).get("model") != config["model"]:
            raise ConfigError(f"{folder} holds cells of another model or data ({cell['method']} s{cell['sparsity']} "
                              f"ctx{cell['context_length']} seed{cell['seed']}); use another --experiment-name")
    meta = run_meta(seed=seeds, extra={"command": command, "data": data})
    aggregated = aggregate(cells)
    write_json_atomic(folder / "aggregated_results.json",
                      {"results": aggregated, "statistics": "mean, std, min, max over every sample of every seed",
                       "std_kind": STD_KIND, "memory_kind": memory.kind, "config": config, "meta": meta})
    write_json_atomic(folder / "significance_tests.json",
                      {"test": "scipy.stats.ttest_rel, two-sided, paired by (seed, window start)",
                       "metric": "per-sample mean NLL of the continuation (nats/token)",
                       "mean_difference": "mean(a - b): negative = a is better", "correction": None,
                       "tests": significance(cells), "config": config, "meta": meta})
    print(f"lightning_bench {COMMAND}: wrote {folder}/aggregated_results.json and significance_tests.json")
    print(f"  {'method':<14}{'sparsity':>9}{'ctx':>7}{'ppl':>10}{'nll':>16}{'decode tok/s':>14}{'cache':>8}"
          f"{'kv MiB':>9}")
    for row in aggregated.values():
        m = row["metrics"]
        std = m["nll"]["std"]
        print(f"  {row['method']:<14}{row['sparsity']:>9}{row['context_length']:>7}{row['ppl_of_mean_nll']:>10.3f}"
              f"{m['nll']['mean']:>9.4f} +- {std if std is not None else float('nan'):.3f}"
              f"{m['decode_tokens_per_s']['mean'] or float('nan'):>14.1f}{m['avg_cache_length']['mean']:>8.0f}"
              f"{m['kv_bytes_peak']['mean'] / 2**20:>9.2f}")
    return 0
