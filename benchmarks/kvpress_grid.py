"""Side by side with kvpress: one grid of RULER rows x presses x ratios through kvpress's pipeline and through
`lightning_bench downstream`, and dense decode tokens/s against transformers' `generate`.

    /tmp/kvpress_venv/bin/python benchmarks/kvpress_grid.py [--rows 6] [--context 2048] [--max-new-tokens 32] \
        [--methods knorm snapkv streaming_llm tova] [--ratios 0.5 0.9] [--repeats 3] [--threads 2] \
        [--protocol query_agnostic] [--max-batch-rows N] [--skip grid|decode] \
        [--out FILE.json]

kvpress pins its own transformers, so this runs in its virtual environment with the project on the path
(docs/sparsity.md, "Parity with kvpress"; `lightning_bench downstream` also needs scipy there); without
kvpress it says so and exits 0. Everything runs in one process, on one CPU, fp32, sdpa.

1. Rows: `--rows` RULER rows (`lightning_bench.tasks.ruler.generate`, offline; `--context` is RULER's length:
   prompt + the task's tokens to generate), the tasks taken in turn, written as kvpress's unified rows
   (context, question, answer_prefix, answer, max_new_tokens).
2. The grid, timed whole, model load INCLUDED on both sides (each side loads its own copy; kvpress's load
   is printed so it can be subtracted), sides interleaved over `--repeats`, median:
   - kvpress: `pipeline("kv-press-text-generation")(context, question=..., answer_prefix=..., press=...,
     max_new_tokens=...)` per row and per (press, ratio), dense = press None: it prefills each row again for
     every press, which is what the comparison measures;
   - ours: `lightning_bench downstream` in-process over the same rows file, same methods and ratios,
     `--rounding floor` (kvpress's count), snapkv with kvpress's window 64 / kernel 5, into a temp folder.
   The protocols are the same on both sides (version 2, docs/downstream.md): `query_agnostic` compresses the
   context (chat template head + context) and feeds question + the template's closing turn + answer prefix;
   `query_aware` is kvpress's evaluation's `query_aware` (the question moved into the context, compressed)
   and feeds the closing turn + answer prefix. observed_attention needs eager attention in kvpress: its
   cells run on a second, eager copy of the model there (its load is counted too).
3. Answers: per (method, ratio), the fraction of rows whose generated text is identical (whitespace
   stripped); the first row's prompt tokens on both sides (the same, tests/test_kvpress_prompts.py); our
   kept counts against kvpress's rule.
4. Dense decode: `sparsity.generate_with_eviction(method="dense")` against `model.generate(do_sample=False)`
   at batch 1 and 8, on `--context`-token windows of WikiText-2, `--decode-tokens` new tokens (EOS not a
   stop on either side), same model object, interleaved repeats, median. Decode tok/s = rows x (new - 1) /
   (the call's time after its first forward, the prefill, returned); forward hooks, the same on both sides.
"""

import argparse
import contextlib
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the project, from kvpress's environment

SHARED = Path(os.environ.get("LB_SHARED_DIR", ROOT.parent / "shared"))
DEFAULT_MODEL = os.environ.get("LB_SMOLLM2_DIR", str(Path.home() / ".cache/lightning_bench/smollm2-135m-instruct"))
# RULER tasks that generate offline at any length from 512 tokens (vt and cwe need more; fwe needs scipy's zeta)
RULER_TASKS = ("niah_single_1", "niah_single_2", "niah_multikey_1", "niah_multivalue", "niah_multiquery", "qa_1")
OUR_PARAMS = {"snapkv": {"window": 64, "kernel": 5, "pooling": "avg"}}  # kvpress's SnapKVPress defaults
METHODS = ("knorm", "snapkv", "streaming_llm", "tova", "observed_attention")
EAGER = ("observed_attention",)  # kvpress's press reads the attention weights: attn_implementation="eager"


def presses(ratio: float) -> dict:
    """Our method name -> the kvpress press that computes the same score (docs/sparsity.md for snapkv / tova)."""
    from kvpress import KnormPress, ObservedAttentionPress, SnapKVPress, StreamingLLMPress, TOVAPress

    return {"knorm": KnormPress(compression_ratio=ratio),
            "snapkv": SnapKVPress(compression_ratio=ratio, window_size=64, kernel_size=5),
            "streaming_llm": StreamingLLMPress(compression_ratio=ratio, n_sink=4),
            "tova": TOVAPress(compression_ratio=ratio),
            "observed_attention": ObservedAttentionPress(compression_ratio=ratio)}


# ---- rows ------------------------------------------------------------------------------------------------
def ruler_rows(model_dir: str, n: int, context: int, max_new_tokens: int) -> list[dict]:
    from lightning_bench.tasks.ruler.generate import generate_task
    from lightning_bench.data.tokenization import build_tokenizer

    tokenizer = build_tokenizer(model_dir)
    per_task = {t: len(range(i, n, len(RULER_TASKS))) for i, t in enumerate(RULER_TASKS)}
    made = {t: generate_task(t, tokenizer, context, k) for t, k in per_task.items() if k}
    rows = []
    for i in range(n):  # task i % 6, its sample i // 6: the same rows whatever n is
        r = made[RULER_TASKS[i % len(RULER_TASKS)]][i // len(RULER_TASKS)]
        rows.append({"id": f"{r['task']}-{r['index']}", "task": r["task"], "context": r["context"],
                     "question": r["question"], "answer_prefix": r["answer_prefix"], "answer": r["outputs"],
                     "max_new_tokens": max_new_tokens})
    return rows


# ---- the two grids ---------------------------------------------------------------------------------------
def kvpress_grid(model_dir: str, rows: list[dict], cells: list, protocol: str,
                 max_new: int) -> tuple[float, float, dict]:
    """(wall s, of which model load s, {(method, ratio): [answer per row]})."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline

    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    pipes = {}
    for attention in ("sdpa", *(("eager",) if any(m in EAGER for m, _ in cells) else ())):
        net = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation=attention)
        pipes[attention] = pipeline("kv-press-text-generation", model=net.eval(), tokenizer=tokenizer, device="cpu")
    load = time.perf_counter() - start
    answers = {cell: [] for cell in cells}
    for row in rows:
        context, question = row["context"], row["question"]
        if protocol == "query_aware":  # kvpress's "compress questions": the question is part of the context
            context, question = context + question, ""
        for method, ratio in cells:
            press = None if method == "dense" else presses(ratio)[method]
            pipe = pipes["eager" if method in EAGER else "sdpa"]
            out = pipe(context, question=question, answer_prefix=row["answer_prefix"], press=press,
                       max_new_tokens=max_new)
            answers[(method, ratio)].append(out["answer"])
    return time.perf_counter() - start, load, answers


def our_argv(args, rows_file: Path, folder: Path) -> list[str]:
    argv = ["downstream", "--model.pretrained", args.model, "--tasks", "long_context_rows",
            "--paths", json.dumps({"long_context_rows": str(rows_file)}), "--max_samples", str(args.rows),
            "--methods", "dense", *args.methods, "--ratios", *map(str, args.ratios), "--protocols", args.protocol,
            "--rounding", "floor", "--max_new_tokens", str(args.max_new_tokens), "--accelerator", "cpu",
            "--results_dir", str(folder), "--name", "grid"]
    params = {m: p for m, p in OUR_PARAMS.items() if m in args.methods}
    if params:  # one JSON value: repeated dotted flags (--method_params.snapkv.window ...) keep only the last key
        argv += ["--method_params", json.dumps(params)]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    if args.max_batch_rows:
        argv += ["--max_batch_rows", str(args.max_batch_rows)]
    return argv


def our_grid(argv: list[str], folder: Path) -> tuple[float, float, dict, dict]:
    """(wall s, of which the groups' prefill + decoding s, {(method, ratio): [generated text per row]}, the
    per-row samples of every cell); the command's own output goes to folder/log.txt (its summary is long)."""
    from lightning_bench.cli import main as cli

    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "log.txt"
    start = time.perf_counter()
    with open(log, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        try:
            code = cli(argv)
        except SystemExit as stop:
            code = stop.code
    wall = time.perf_counter() - start
    if code:
        sys.exit(f"lightning_bench downstream failed ({code}); its output: {log}\n{log.read_text()[-3000:]}")
    groups = sum(float(s) for s in re.findall(r"cells of \S+ in ([0-9.]+) s", log.read_text()))
    answers, samples = {}, {}
    for path in sorted((folder / "grid" / "cells").glob("*.json")):
        cell = json.loads(path.read_text())
        key = (cell["method"], 0.0 if cell["method"] == "dense" else float(cell["level"]))
        wanted = OUR_PARAMS.get(cell["method"], {})
        if any(cell["method_params"].get(k) != v for k, v in wanted.items()):  # the run used what we asked
            sys.exit(f"{path.name} ran with {cell['method_params']}, not {wanted}")
        answers[key] = [s["generated"] for s in cell["samples"]]
        samples[key] = cell["samples"]
    return wall, groups, answers, samples


def first_prompt(args, rows_file: Path, row: dict, max_length: int, tokenizer) -> dict:
    """The first row's tokens on both sides: kvpress's preprocess of `row` (the row as kvpress gets it) and
    our downstream's prompt builder on the first row of `rows_file`."""
    from lightning_bench.data.tokenization import build_tokenizer
    from lightning_bench.experiments.downstream.setup import build_prompts
    from lightning_bench.sparsity.task_decode import span_length

    cfg = SimpleNamespace(tasks=["long_context_rows"], data_dir=None, paths={"long_context_rows": str(rows_file)},
                          max_samples=1, max_new_tokens=args.max_new_tokens, chat_template="auto", samples=None,
                          temperature=None, top_p=None, max_context=None)
    parts = build_prompts(cfg, build_tokenizer(args.model), max_length)[0]["long_context_rows"].samples[0].parts
    ours = [token for part in parts[args.protocol] for token in part]
    context, question = row["context"], row["question"]
    if args.protocol == "query_aware":
        context, question = context + question, ""
    from kvpress.pipeline import KVPressTextGenerationPipeline

    theirs = KVPressTextGenerationPipeline.preprocess(SimpleNamespace(tokenizer=tokenizer), context, [question],
                                                      row["answer_prefix"], 10 ** 10)
    kv_context, kv_question = theirs["context_ids"][0].tolist(), theirs["questions_ids"][0][0].tolist()
    span = span_length(*map(len, parts[args.protocol]), args.protocol)
    return {"ours_tokens": len(ours), "ours_span": span,
            "kvpress_tokens": len(kv_context) + len(kv_question), "kvpress_span": len(kv_context),
            "equal": ours == kv_context + kv_question, "equal_split": ours[:span] == kv_context}


# ---- dense decode ----------------------------------------------------------------------------------------
class ForwardClock:
    """The end time of every forward of `net` (hooks): the first is the prefill."""

    def __init__(self, net):
        self.net, self.ends = net, []

    def __enter__(self):
        self.handle = self.net.register_forward_hook(lambda *_: self.ends.append(time.perf_counter()))
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def decode_once(net, ids, new: int, side: str) -> tuple[float, float, torch.Tensor]:
    """(prefill s, decode tok/s, tokens (B, new)) of one greedy call."""
    from lightning_bench.sparsity import generate_with_eviction

    with ForwardClock(net) as clock:
        start = time.perf_counter()
        if side == "ours":
            tokens = generate_with_eviction(net, ids, None, "dense", max_new_tokens=new).tokens
        else:
            config = net.generation_config.__class__(do_sample=False, max_new_tokens=new, min_new_tokens=0,
                                                     eos_token_id=None, pad_token_id=0)  # no stop: `new` tokens
            tokens = net.generate(ids, attention_mask=torch.ones_like(ids), generation_config=config)[:, ids.shape[1]:]
        end = time.perf_counter()
    return clock.ends[0] - start, ids.shape[0] * (new - 1) / (end - clock.ends[0]), tokens


def decode_bench(args) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    net = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa").eval()
    text = (SHARED / "data/wikitext-2/test.txt").read_text(encoding="utf-8")
    stream = tokenizer(text[:12 * 8 * args.context], add_special_tokens=False)["input_ids"]
    windows = torch.tensor(stream[:8 * args.context]).view(8, args.context)  # 8 different prompts, no padding
    for side in ("ours", "hf"):  # untimed warm-up
        decode_once(net, windows[:1, :64], 4, side)
    out = {}
    for batch in (1, 8):
        ids, runs = windows[:batch], {"ours": [], "hf": []}
        for r in range(args.repeats):
            for side in (("ours", "hf") if r % 2 == 0 else ("hf", "ours")):  # interleaved, alternating first
                runs[side].append(decode_once(net, ids, args.decode_tokens, side))
        same = [bool(torch.equal(a, b)) for a, b in zip(runs["ours"][0][2], runs["hf"][0][2])]
        ours, hf = (statistics.median(x[1] for x in runs[s]) for s in ("ours", "hf"))
        out[f"batch{batch}"] = {"ours_tok_s": ours, "hf_tok_s": hf, "ratio": ours / hf,
                                "ours_prefill_s": statistics.median(x[0] for x in runs["ours"]),
                                "hf_prefill_s": statistics.median(x[0] for x in runs["hf"]),
                                "identical_rows": f"{sum(same)}/{batch}"}
        print(f"  batch {batch}: ours {ours:.1f} tok/s, generate {hf:.1f} tok/s, ratio {ours / hf:.2f}; "
              f"identical tokens {sum(same)}/{batch}", flush=True)
    return out


# ---- main ------------------------------------------------------------------------------------------------
def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--rows", type=int, default=6)
    parser.add_argument("--context", type=int, default=2048, help="RULER length (prompt + tokens to generate); "
                        "also the decode benchmark's prompt length")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    parser.add_argument("--ratios", nargs="+", type=float, default=[0.5, 0.9])
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--decode-tokens", type=int, default=64, help="new tokens of the dense decode comparison")
    parser.add_argument("--repeats", type=int, default=3, help="of the grid and of each decode measurement (median)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads, both sides (default: torch's)")
    parser.add_argument("--protocol", choices=["query_agnostic", "query_aware"], default="query_agnostic")
    parser.add_argument("--max-batch-rows", type=int, help="ours: continuations decoded as one batch "
                        "(downstream's --max_batch_rows; default its own, 16)")
    parser.add_argument("--skip", choices=["grid", "decode"], help="leave out one part")
    parser.add_argument("--out", help="write the summary here as JSON")
    args = parser.parse_args()
    if args.out and Path(args.out).exists():  # a measurement of an earlier run is never replaced
        parser.error(f"--out {args.out} exists; give a new file name")
    try:
        import kvpress  # noqa: F401  (registers the kv-press-text-generation pipeline)
        from kvpress.utils import compute_n_kept
    except ImportError:
        print("kvpress is not installed here: nothing to compare (see docs/sparsity.md, 'Parity with kvpress')")
        return 0
    import transformers
    from importlib.metadata import version

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"kvpress {version('kvpress')}  transformers {transformers.__version__}  torch {torch.__version__}  "
          f"threads {torch.get_num_threads()}  load {os.getloadavg()[0]:.2f}  model {args.model}")
    summary = {"benchmark": "kvpress_grid", "rows": args.rows, "context": args.context, "methods": args.methods,
               "ratios": args.ratios, "max_new_tokens": args.max_new_tokens, "protocol": args.protocol,
               "kv_protocol_version": 2, "repeats": args.repeats, "max_batch_rows": args.max_batch_rows,
               "threads": torch.get_num_threads(),
               "model_load": "included on both sides", "versions": {"kvpress": version("kvpress"),
               "transformers": transformers.__version__, "torch": torch.__version__}}
    start = time.perf_counter()
    if args.skip != "grid":
        summary.update(grid(args, compute_n_kept))
    if args.skip != "decode":
        print(f"\ndense decode, {args.context}-token prompts, {args.decode_tokens} new tokens, median of "
              f"{args.repeats} (interleaved):", flush=True)
        summary["decode"] = decode_bench(args)
    summary["total_s"] = time.perf_counter() - start
    print(f"total {summary['total_s']:.0f} s; load {os.getloadavg()[0]:.2f}")
    print(json.dumps(summary))
    if args.out:
        from lightning_bench.results.io import write_json_atomic

        write_json_atomic(Path(args.out), summary)
    return 0


def grid(args, compute_n_kept) -> dict:
    from transformers import AutoTokenizer

    import lightning_bench.cli  # noqa: F401  (untimed: the imports of both sides happen before any timing)
    import lightning_bench.experiments.downstream.command  # noqa: F401

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    cells = [("dense", 0.0)] + [(m, r) for m in args.methods for r in args.ratios]
    rows = ruler_rows(args.model, args.rows, args.context, args.max_new_tokens)
    with tempfile.TemporaryDirectory(prefix="kvpress_grid_") as tmp:
        rows_file = Path(tmp) / "rows.jsonl"
        rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"grid: {args.rows} RULER rows of {args.context} tokens ({', '.join(RULER_TASKS[:args.rows])}"
              f"{', ...' if args.rows > len(RULER_TASKS) else ''}), {len(cells)} cells (dense + {len(args.methods)} "
              f"methods x {len(args.ratios)} ratios), {args.max_new_tokens} new tokens, {args.protocol}; model load "
              f"included on both sides", flush=True)
        walls = {"kvpress": [], "ours": []}
        for r in range(args.repeats):  # interleaved, alternating which side goes first
            for side in (("kvpress", "ours") if r % 2 == 0 else ("ours", "kvpress")):
                if side == "kvpress":
                    wall, load, kv_answers = kvpress_grid(args.model, rows, cells, args.protocol, args.max_new_tokens)
                else:
                    folder = Path(tmp) / f"ours{r}"
                    argv = our_argv(args, rows_file, folder)
                    wall, groups, our_answers, samples = our_grid(argv, folder)
                walls[side].append(wall)
                print(f"  repeat {r + 1}: {side} {wall:.1f} s" + (f" (model load {load:.1f} s)" if side == "kvpress"
                      else f" (prefill + compression + decoding {groups:.1f} s; the rest: load, prompts, report)"),
                      flush=True)
        max_length = json.loads((folder / "grid" / "grid_results.json").read_text())["config"]["max_length"]
        prompt = first_prompt(args, rows_file, rows[0], max_length, tokenizer)
    kv_s, our_s = statistics.median(walls["kvpress"]), statistics.median(walls["ours"])
    same = {}
    print(f"\n{'method':<14}{'ratio':>6}{'identical answers':>19}{'kept (ours = kvpress rule)':>28}")
    for cell in cells:
        hits = sum(a.strip() == b.strip() for a, b in zip(our_answers[cell], kv_answers[cell]))
        same[f"{cell[0]}@{cell[1]}"] = hits / len(rows)
        rule = "—" if cell[0] == "dense" else "{}/{}".format(
            sum(s["kept_tokens"] == compute_n_kept(s["compressed_tokens"], cell[1]) for s in samples[cell]), len(rows))
        print(f"{cell[0]:<14}{cell[1]:>6}{hits:>13}/{len(rows):<5}{rule:>28}")
    print(f"\nfirst row's prompt: ours {prompt['ours_tokens']} tokens (span {prompt['ours_span']}), kvpress "
          f"{prompt['kvpress_tokens']} (span {prompt['kvpress_span']}); same tokens: {prompt['equal']}, same "
          f"span: {prompt['equal_split']}")
    disagree = [(cell, i) for cell in cells for i in range(len(rows))
                if our_answers[cell][i].strip() != kv_answers[cell][i].strip()]
    for (method, ratio), i in disagree[:4]:  # a few, to read why
        print(f"  {method}@{ratio} row {i}: ours {our_answers[(method, ratio)][i].strip()[:70]!r}\n"
              f"  {' ' * len(f'{method}@{ratio} row {i}')}  kvpress {kv_answers[(method, ratio)][i].strip()[:70]!r}")
    print(f"\nkvpress {kv_s:.1f} s, lightning_bench downstream {our_s:.1f} s (median of {args.repeats}): "
          f"kvpress / ours = {kv_s / our_s:.2f}x (goal >= 10x)", flush=True)
    return {"kvpress_s": kv_s, "ours_s": our_s, "speedup": kv_s / our_s, "kvpress_walls": walls["kvpress"],
            "ours_walls": walls["ours"], "kvpress_model_load_s": load, "identical_answers": same,
            "first_prompt": prompt,
            "answers": {f"{m}@{r}": {"ours": our_answers[(m, r)], "kvpress": kv_answers[(m, r)]} for m, r in cells}}


if __name__ == "__main__":
    sys.exit(main())
