"""Training overhead: `lightning_bench fit` steps/s against a plain PyTorch loop, and what each callback costs.

Both sides train the same network (the fit's own initial weights; the plain side also rebuilds them
from the seed and says whether they match), on the same batches in the same order (the fit's
token stream, chunked and shuffled exactly as LMDataModule's train loader does; the batch sums are
compared), with the same AdamW (same parameter groups, decay, betas), the same warmup + cosine LR
schedule (stepped every step, total = the fit's max_steps) and the same precision (--bits 32: fp32;
--bits 16: bf16 autocast around forward + loss, as Lightning's bf16-mixed does on CPU).

  lightning_bench fit   in-process through the real entry point (`trainer_cli.run_cli`, the function
                        `lightning_bench fit` calls), with every callback the CLI adds (progress bar,
                        model summary, ModelCheckpoint, ProfilingCallback, ResultsRecorder, CSV logger);
                        arguments: the default fit config plus --trainer.max_steps, a short
                        --data.seq_len, --trainer.limit_val_batches 2 and temporary output folders.
  plain loop            `batch = next(DataLoader); forward (the model's network_forward), cross-entropy,
                        backward, optimizer.step(), scheduler.step(), zero_grad()`.

Lockstep (default): this machine is shared, so the two sides alternate step by step inside one run.
A timer callback, first in trainer.callbacks, runs one plain step at the start of every fit step
(`on_train_batch_start`, the fit's batch already fetched) and timestamps before and after it:
  fit step i   = from after plain step i to the start of fit step i+1's hooks: every callback hook,
                 training_step (forward, loss, its self.log calls), backward, optimizer step, the LR
                 scheduler, logging, Lightning's loop and fetching the next batch;
  plain step i = fetching its batch + forward + loss + backward + optimizer + scheduler + zero_grad.
The first --warmup steps are excluded (step 1 is FLOP-counted; first-call allocations); --steps are
timed. Process start-up, data setup, the sanity check, the final validation and the record writing
are not timed. Figures: mean ms/step per run (steps/s = what a user gets), and the median over steps
of plain_i / fit_i (adjacent in time: robust to bursts of load); medians over --repeats.
--no-lockstep runs the plain loop as runs of its own instead.

Attribution, two ways:
  * removal (--parts): the fit run again with one part removed at a time (the flags a user would pass:
    --profile false, --trainer.enable_progress_bar false, --trainer.enable_model_summary false,
    --trainer.enable_checkpointing false, --trainer.logger false; the ResultsRecorder has no flag and
    is taken out of trainer.callbacks) and with all removed ("bare": Lightning's loop alone). Cost =
    fit step - fit step without the part, paired per repeat and scaled by each run's own plain steps.
    Noisy here (differences of ~1 ms in ~150 ms steps).
  * direct: in the full fit, the self time spent inside each callback's hooks, the loggers'
    log_metrics/save, the module's self.log calls and the Rich bar's render thread, during the timed
    steps (wrappers of ~1 us per call). Precise; it cannot see costs outside those functions.
`--wandb` adds a run with `--wandb true` (W&B offline) in place of the CSV logger. The variants run in
a rotating order per repeat. QuantizationCallback only exists at --bits 8/4 (QAT: a different
computation, not an overhead) and is not part of the default fit.

The progress bar renders as in a terminal (Rich's TTY_COMPATIBLE=1 / TTY_INTERACTIVE=1) into each
run's console.log, so its cost is the one a user at a terminal pays; --no-tty: as when redirected.

Check: the first fit and its plain loop (run to the same step) - whether the batches are the same (sums),
whether the seeded rebuild equals the fit's initial weights, and the max |difference| of the per-step
training losses and of the final weights.

    python benchmarks/train_overhead.py [--steps 30] [--warmup 5] [--repeats 3] [--model transformer]
        [--seq-len 32] [--batch-size 16] [--bits 32] [--threads 1] [--parts all] [--wandb]
        [--fit-args "--model.n_layer 4"]

Default: the full fit and the bare fit, 3 repeats each (~2-3 min here); `--parts all --wandb` adds the
removal runs (~8 min).

--threads 1 (default) because on a shared 2-core machine two intra-op threads wait on each other
(steps 5-10x slower and erratic); --threads 0 keeps torch's default. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import json
import os
import shlex
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import lightning as L

from lightning_bench.models.base import decay_groups

# part name -> (CLI arguments that remove it, callback class names taken out of trainer.callbacks)
PARTS = {
    "profiling": (["--profile", "false"], ()),
    "results_recorder": ([], ("ResultsRecorder",)),
    "progress_bar": (["--trainer.enable_progress_bar", "false"], ()),
    "model_summary": (["--trainer.enable_model_summary", "false"], ()),
    "checkpointing": (["--trainer.enable_checkpointing", "false"], ()),
    "csv_logger": (["--trainer.logger", "false"], ()),
}


class StepTimer(L.Callback):
    """First callback of the fit. At every step's `on_train_batch_start` (the batch is fetched): a
    timestamp that closes the previous fit step, then one step of the plain loop (timed on its own),
    then the timestamp that opens this fit step. Also each step's batch sum and loss, and the network's
    weights when training starts (the plain loop starts from them)."""

    def __init__(self, args, total_steps: int):
        self.args, self.total_steps = args, total_steps
        self.fit_ends, self.fit_starts, self.sums, self.losses = [], [], [], []
        self.plain = None
        self.callbacks = []
        self.marks = {"before_backward": [], "after_backward": [], "batch_end": []}
        self.clock = HookClock()
        self.in_plain = False

    def on_train_start(self, trainer, pl_module):
        self.callbacks = [type(c).__name__ for c in trainer.callbacks if c is not self]
        initial = {k: v.detach().clone() for k, v in pl_module.net.state_dict().items()}
        self.plain = PlainLoop(self.args, pl_module, initial, int(os.environ.get("PL_GLOBAL_SEED", 0)),
                               self.total_steps)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.fit_ends.append(time.perf_counter())
        timed = self.args.warmup <= len(self.fit_starts) <= self.args.warmup + self.args.steps - 1
        self.clock.active = False
        if self.args.lockstep:
            self.in_plain = timed
            self.plain.step()
            self.in_plain = False
        self.clock.active = self.args.warmup <= len(self.fit_starts) < self.args.warmup + self.args.steps
        self.fit_starts.append(time.perf_counter())
        self.sums.append(batch["input_ids"].sum())

    def on_before_backward(self, trainer, pl_module, loss):
        self.marks["before_backward"].append(time.perf_counter())

    def on_after_backward(self, trainer, pl_module):
        self.marks["after_backward"].append(time.perf_counter())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.marks["batch_end"].append(time.perf_counter())
        self.losses.append(outputs["loss"].detach())

    def phases(self, warmup: int) -> dict:
        """Median ms per phase of the timed fit steps: forward + loss (training_step, its self.log calls and
        the hooks before it), backward, optimizer (on_after_backward -> the first on_train_batch_end: the
        optimizer step, Lightning's closure), after (the other on_train_batch_end hooks, the LR scheduler,
        logging, the next batch's fetch and the hooks before this timer's on_train_batch_start)."""
        m, n = self.marks, warmup + len(self.fit_ms(warmup))
        spans = {"forward+loss": (self.fit_starts, m["before_backward"]), "backward": (m["before_backward"], m["after_backward"]),
                 "optimizer": (m["after_backward"], m["batch_end"]), "after": (m["batch_end"], self.fit_ends[1:])}
        return {k: statistics.median(1000 * (b - a) for a, b in zip(x[warmup:n], y[warmup:n])) for k, (x, y) in spans.items()}

    def fit_ms(self, warmup: int) -> list[float]:
        """Fit steps warmup+1 .. warmup+steps: from after the plain step to the next step's first hook."""
        return [1000 * (e - s) for s, e in zip(self.fit_starts[warmup:-1], self.fit_ends[warmup + 1:])]


@contextlib.contextmanager
def output_to(path: Path, tty: bool):
    """fd 1 and 2 (and so Python's, Rich's and logging's output) into `path`; Rich renders as on a terminal."""
    sys.stdout.flush(), sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    env = {"TTY_COMPATIBLE": "1", "TTY_INTERACTIVE": "1", "COLUMNS": "120"} if tty else {"TTY_COMPATIBLE": "0"}
    old_env = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    with open(path, "a") as f:
        os.dup2(f.fileno(), 1), os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os.dup2(saved[0], 1), os.dup2(saved[1], 2)
            os.close(saved[0]), os.close(saved[1])
            for k, v in old_env.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


class HookClock:
    """Wall time inside each callback's hooks, the loggers' log_metrics/save, the module's self.log and the
    Rich progress bar's render thread, while `active` (the timed steps). Self time: a logger called from a
    callback's hook counts for the logger, not twice."""

    CALLBACK_HOOKS = [n for n in dir(L.Callback) if n.startswith("on_") or n in ("setup", "teardown")]

    def __init__(self):
        self.active, self.ms, self.local = False, collections.defaultdict(float), threading.local()

    def wrap(self, obj, name: str, key: str) -> None:
        fn, clock = getattr(obj, name), self

        def timed(*a, **k):
            if not clock.active:
                return fn(*a, **k)
            stack = clock.local.__dict__.setdefault("stack", [])
            stack.append(0.0)
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent = time.perf_counter() - t0
                children = stack.pop()
                clock.ms[key] += 1000 * (spent - children)
                if stack:
                    stack[-1] += spent

        setattr(obj, name, timed)

    def install(self, trainer, pl_module, skip) -> None:
        for c in trainer.callbacks:
            if c is skip:
                continue
            for hook in self.CALLBACK_HOOKS:
                if getattr(type(c), hook, None) is not getattr(L.Callback, hook):
                    self.wrap(c, hook, type(c).__name__)
        for lg in trainer.loggers:
            for name in ("log_metrics", "save"):
                self.wrap(lg, name, type(lg).__name__)
        self.wrap(pl_module, "log", "LightningModule.log (training_step)")

    @contextlib.contextmanager
    def garbage_collector(self, timer):
        """Python's cyclic GC: time per side (fit / plain step) during the timed steps."""
        start = {}

        def callback(phase, info):
            if phase == "start":
                start["t"] = time.perf_counter()
            elif "t" in start:
                side = "plain" if timer.in_plain else ("fit" if self.active else None)
                if side:
                    self.ms[f"python gc during {side} steps"] += 1000 * (time.perf_counter() - start.pop("t"))

        gc.callbacks.append(callback)
        try:
            yield
        finally:
            gc.callbacks.remove(callback)

    @contextlib.contextmanager
    def render_thread(self):
        """Rich's Live.refresh when called by the progress bar's refresh thread (off the main thread)."""
        try:
            from rich.live import Live
        except ImportError:
            yield
            return
        original, clock = Live.refresh, self

        def refresh(live, *a, **k):
            if not clock.active or threading.current_thread() is threading.main_thread():
                return original(live, *a, **k)
            t0 = time.perf_counter()
            try:
                return original(live, *a, **k)
            finally:
                clock.ms["progress bar render (its own thread)"] += 1000 * (time.perf_counter() - t0)

        Live.refresh = refresh
        try:
            yield
        finally:
            Live.refresh = original


@contextlib.contextmanager
def patched_trainer(timer: StepTimer, drop: tuple[str, ...]):
    """The CLI's trainer with `timer` as its first callback, the callbacks named in `drop` removed, and
    the timer's HookClock on the others, the loggers and the module's self.log."""
    from lightning_bench import trainer_cli

    original = trainer_cli.LightningBenchCLI.instantiate_trainer

    def instantiate_trainer(self, **kwargs):
        trainer = original(self, **kwargs)
        trainer.callbacks = [timer, *(c for c in trainer.callbacks if type(c).__name__ not in drop)]
        timer.clock.install(trainer, self.model, timer)
        return trainer

    trainer_cli.LightningBenchCLI.instantiate_trainer = instantiate_trainer
    try:
        with timer.clock.render_thread(), timer.clock.garbage_collector(timer):
            yield
    finally:
        trainer_cli.LightningBenchCLI.instantiate_trainer = original


def fit_argv(args, total_steps: int, out: Path, extra: list[str]) -> list[str]:
    return ["fit", "--model", args.model, "--data.seq_len", str(args.seq_len),
            "--data.batch_size", str(args.batch_size), "--bits", str(args.bits),
            "--trainer.max_steps", str(total_steps), "--trainer.limit_val_batches", "2",
            "--results_dir", str(out / "results"), "--trainer.default_root_dir", str(out),
            "--wandb_dir", str(out / "wandb"), *shlex.split(args.fit_args), *extra]


def run_fit(args, variant: str, total_steps: int, workdir: Path, run_id: int) -> dict:
    from lightning_bench.trainer_cli import finish_loggers, run_cli

    if variant == "full":
        extra, drop = [], ()
    elif variant == "bare":
        extra = [a for part in PARTS.values() for a in part[0]]
        drop = tuple(c for part in PARTS.values() for c in part[1])
    elif variant == "wandb":
        extra, drop = ["--wandb", "true"], ()
    else:
        extra, drop = PARTS[variant.removeprefix("-")]
    out = workdir / f"run{run_id:03d}_{variant}"
    argv = fit_argv(args, total_steps, out, extra)
    timer = StepTimer(args, total_steps)
    saved_argv = sys.argv
    out.mkdir(parents=True)
    try:
        with output_to(out / "console.log", args.tty), patched_trainer(timer, drop):
            cli = run_cli(argv)
            finish_loggers(cli.trainer)
    finally:
        sys.argv = saved_argv
    if len(timer.fit_starts) != total_steps:
        sys.exit(f"{variant}: {len(timer.fit_starts)} steps ran, expected {total_steps}; see {out / 'console.log'}")
    records = list((out / "results").glob("*.json"))
    return {"variant": variant, "fit_ms": timer.fit_ms(args.warmup),
            "plain_ms": timer.plain.ms[args.warmup:args.warmup + args.steps] if args.lockstep else None,
            "sums": [int(s) for s in timer.sums], "losses": [float(x) for x in timer.losses],
            "plain": timer.plain, "callbacks": timer.callbacks,
            "hook_ms": {k: v / args.steps for k, v in timer.clock.ms.items()}, "cli": cli, "fit_phases": timer.phases(args.warmup),
            "plain_phases": timer.plain.phases(args.warmup, args.steps) if args.lockstep else None,
            "record": json.loads(records[0].read_text()) if records else None,
            "command": "lightning_bench " + shlex.join(argv)}


def run_plain_alone(args, fit: dict, total_steps: int) -> PlainLoop:
    """--no-lockstep: the plain loop as a run of its own (from the first fit's initial weights)."""
    first = fit["plain"]
    plain = PlainLoop(args, fit["cli"].model, first.initial_state, first.seed, total_steps)
    for _ in range(total_steps):
        plain.step()
    return plain


# ---- the plain loop ---------------------------------------------------------------------------
class Chunks(torch.utils.data.Dataset):
    """Chunk k of the train stream: inputs stream[kL : kL+L], labels shifted by one."""

    def __init__(self, stream: torch.Tensor, seq_len: int):
        self.stream, self.seq_len = stream, seq_len

    def __len__(self):
        return (len(self.stream) - 1) // self.seq_len

    def __getitem__(self, k):
        x = self.stream[k * self.seq_len: (k + 1) * self.seq_len + 1].long()
        return {"input_ids": x[:-1], "labels": x[1:]}


class PlainLoop:
    """A plain PyTorch training loop, one `step()` at a time: the fit's model class and hyperparameters
    rebuilt from the seed (the fit's initial weights loaded into it, so the comparison holds even if the
    seeded build differed; `same_init` says whether it did), AdamW with the library's parameter groups,
    LambdaLR warmup + cosine over `total_steps`, the train split's chunks in the fit's shuffled order."""

    def __init__(self, args, reference, initial_state: dict, seed: int, total_steps: int):
        from lightning_bench.models.base import warmup_cosine

        dm = reference.trainer.datamodule
        hp = {k: v for k, v in reference.hparams.items() if not k.startswith("_")}
        with torch.random.fork_rng():  # the fit's RNG stream is left as it was
            torch.manual_seed(seed)
            model = type(reference)(**hp)
            if model.net is None:
                model.build(dm.vocab_size)
        own = model.net.state_dict()
        self.same_init = own.keys() == initial_state.keys() and all(torch.equal(own[k], initial_state[k])
                                                                    for k in own)
        model.net.load_state_dict(initial_state)
        model.train()
        self.initial_state, self.seed = initial_state, seed
        hp = model.hparams
        decay, no_decay = decay_groups(model)  # the fit's own grouping (LanguageModule.configure_optimizers)
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": hp.weight_decay},
                                            {"params": no_decay, "weight_decay": 0.0}], lr=hp.learning_rate,
                                           betas=tuple(hp.betas))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: warmup_cosine(step, hp.warmup_steps, total_steps, hp.min_lr_ratio))
        data = Chunks(dm.token_stream("train"), dm.seq_len)
        order = torch.randperm(len(data), generator=torch.Generator().manual_seed(seed * 100_003 + 0)).tolist()
        self.batches = iter(torch.utils.data.DataLoader(data, batch_size=dm.hparams.batch_size, sampler=order))
        self.autocast = args.bits == 16
        self.aux_weight = getattr(model, "aux_loss_weight", 0.0)
        self.model = model
        self.ms, self.sums, self.losses, self.spans = [], [], [], []

    def phases(self, warmup: int, steps: int) -> dict:
        """Median ms per phase: forward+loss, backward, optimizer (step), after (scheduler, zero_grad, fetch)."""
        rows = self.spans[warmup:warmup + steps]
        return {k: statistics.median(1000 * r[i] for r in rows)
                for i, k in enumerate(("forward+loss", "backward", "optimizer", "after"))}

    def step(self) -> None:
        t0 = time.perf_counter()
        batch = next(self.batches)
        t1 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
            out = self.model.network_forward(batch["input_ids"])
            loss = F.cross_entropy(out.logits.flatten(0, 1).float(), batch["labels"].flatten(), ignore_index=-100)
            if out.aux_loss is not None:
                loss = loss + self.aux_weight * out.aux_loss
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        self.optimizer.step()
        t4 = time.perf_counter()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        t5 = time.perf_counter()
        self.ms.append(1000 * (t5 - t0))
        self.spans.append((t2 - t1, t3 - t2, t4 - t3, t5 - t4 + t1 - t0))
        self.sums.append(batch["input_ids"].sum())
        self.losses.append(loss.detach())


# ---- figures --------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (step 1 is FLOP-counted)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="transformer", help="--model alias or class path (default preset)")
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--bits", type=int, default=32, choices=(32, 16))
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (0: torch's default)")
    parser.add_argument("--parts", nargs="*", default=[], choices=["all", *PARTS],
                        help="also run the fit with each of these parts removed in turn ('all': every one; "
                             "~20 s per part and repeat; default: none, the direct hook timing attributes costs)")
    parser.add_argument("--no-bare", action="store_true", help="skip the run with every part removed")
    parser.add_argument("--wandb", action="store_true", help="also a run with W&B offline instead of CSV")
    parser.add_argument("--no-tty", dest="tty", action="store_false",
                        help="progress bar output as to a file, not as to a terminal")
    parser.add_argument("--fit-args", default="", help="more `lightning_bench fit` arguments, both sides follow")
    parser.add_argument("--workdir", default=None, help="where runs write (default: a temporary folder)")
    parser.add_argument("--no-lockstep", dest="lockstep", action="store_false",
                        help="run the plain loop as separate runs instead of one plain step before each fit step")
    args = parser.parse_args()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ["WANDB_MODE"] = "offline"
    os.environ.setdefault("WANDB_SILENT", "true")
    if "all" in args.parts:
        args.parts = list(PARTS)
    total = args.warmup + args.steps + 1
    variants = ["full", *(f"-{p}" for p in args.parts), *([] if args.no_bare else ["bare"]),
                *(["wandb"] if args.wandb else [])]
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="train_overhead_"))
    workdir.mkdir(parents=True, exist_ok=True)
    fit_ms: dict[str, list[float]] = {v: [] for v in variants}  # mean ms/step per run
    plain_ms: dict[str, list[float]] = {v: [] for v in variants}  # the plain steps of the same run (lockstep)
    alone_ms: list[float] = []  # --no-lockstep
    phases: dict[str, list] = {}
    hook_ms: dict[str, list[dict]] = {}
    step_ratios: dict[str, list[float]] = {}  # lockstep: median over steps of plain step i / fit step i
    first_fit, run_id = None, 0
    t_start = time.perf_counter()
    for r in range(args.repeats):
        order = [*variants, *([] if args.lockstep else ["plain"])]
        k = r % len(order)
        order = order[k:] + order[:k]  # rotate: no variant always runs first / after the same one
        if first_fit is None:
            order.remove("full"), order.insert(0, "full")  # the first run gives the reference and the check
        for variant in order:
            run_id += 1
            if variant == "plain":
                plain = run_plain_alone(args, first_fit, total)
                alone_ms.append(statistics.mean(plain.ms[args.warmup:args.warmup + args.steps]))
                print(f"repeat {r + 1}/{args.repeats} {'plain (own run)':18s} {alone_ms[-1]:8.1f} ms/step",
                      file=sys.stderr, flush=True)
                continue
            run = run_fit(args, variant, total, workdir, run_id)
            if first_fit is None:
                first_fit = run
            fit_ms[variant].append(statistics.mean(run["fit_ms"]))
            phases.setdefault(variant, []).append((run["fit_phases"], run["plain_phases"]))
            hook_ms.setdefault(variant, []).append(run["hook_ms"])
            note = ""
            if args.lockstep:
                plain_ms[variant].append(statistics.mean(run["plain_ms"]))
                step_ratios.setdefault(variant, []).append(
                    statistics.median(p / f for p, f in zip(run["plain_ms"], run["fit_ms"])))
                note = f", plain {plain_ms[variant][-1]:.1f} ms/step in lockstep: {plain_ms[variant][-1] / fit_ms[variant][-1]:.3f}x"
            print(f"repeat {r + 1}/{args.repeats} {variant:18s} fit {fit_ms[variant][-1]:8.1f} ms/step{note}",
                  file=sys.stderr, flush=True)

    # ---- do both sides do the same thing? -------------------------------------------------------
    plain = first_fit["plain"]
    if not args.lockstep:  # the check compares the fit with a plain loop run to the same step
        plain = run_plain_alone(args, first_fit, total)
    fit_state, plain_state = first_fit["cli"].model.net.state_dict(), plain.model.net.state_dict()
    weight_diff = max(float((fit_state[k].float() - plain_state[k].float()).abs().max()) for k in fit_state
                      if fit_state[k].is_floating_point())
    plain_losses = [float(x) for x in plain.losses]
    loss_diff = max(abs(a - b) for a, b in zip(first_fit["losses"], plain_losses))
    same_batches = first_fit["sums"] == [int(s) for s in plain.sums]

    # ---- figures --------------------------------------------------------------------------------
    med = statistics.median
    if args.lockstep:
        ref_plain = med(plain_ms["full"])
        ratios = [p / f for p, f in zip(plain_ms["full"], fit_ms["full"])]  # paired: the same run
    else:
        ref_plain = med(alone_ms)
        ratios = [p / f for p, f in zip(alone_ms, fit_ms["full"])]
    fit_ref = med(fit_ms["full"])
    ratio = med(ratios)

    def normalised(v):  # a run's fit ms/step on the plain loop's scale (lockstep: its own plain steps)
        if not args.lockstep:
            return fit_ms[v]
        return [f / p * ref_plain for f, p in zip(fit_ms[v], plain_ms[v])]

    print(f"\n# lightning_bench fit vs a plain PyTorch loop: --model {args.model}, seq_len {args.seq_len}, batch "
          f"{args.batch_size}, --bits {args.bits}, {torch.get_num_threads()} thread(s), {args.steps} timed steps "
          f"after {args.warmup}, {args.repeats} repeats, {'lockstep' if args.lockstep else 'separate runs'} (medians)")
    print(f"fit command: {first_fit['command']}")
    print(f"fit callbacks: {', '.join(first_fit['callbacks'])}; logger: "
          f"{', '.join(type(lg).__name__ for lg in first_fit['cli'].trainer.loggers) or 'none'}")
    print(f"{'run':34s} {'fit ms/step':>11s} {'plain ms/step':>13s} {'fit/plain steps/s':>17s}"
          + (f" {'per-step pairs':>16s}" if args.lockstep else ""))
    for v in variants:
        label = {"full": "lightning_bench fit", "bare": "fit, all parts removed", "wandb": "fit, W&B offline"}.get(
            v, f"fit without {v[1:]}")
        p = med(plain_ms[v]) if args.lockstep else med(alone_ms)
        rs = [pp / f for pp, f in zip(plain_ms[v] if args.lockstep else alone_ms, fit_ms[v])]
        pairs = f" {med(step_ratios[v]):15.3f}x" if args.lockstep else ""
        print(f"{label:34s} {med(fit_ms[v]):11.1f} {p:13.1f} {med(rs):16.3f}x{pairs}")
    print(f"\nfit {1000 / fit_ref:.2f} steps/s, plain loop {1000 / ref_plain:.2f} steps/s: fit = {ratio:.3f}x the plain "
          f"loop (per repeat {', '.join(f'{x:.3f}' for x in ratios)}); goal >= 0.95x")
    step_ratio = med(step_ratios["full"]) if args.lockstep else None
    if args.lockstep:
        print(f"per-step pairs (plain step i / the fit step i next to it, median over steps; robust to this machine's "
              f"bursts of load): {step_ratio:.3f}x (per repeat {', '.join(f'{x:.3f}' for x in step_ratios['full'])})")
    costs = {}
    print("\nper-part cost = fit step - fit step without the part (paired per repeat, on the plain loop's scale; "
          "raw difference in brackets):")
    for v in variants:
        if v == "full":
            continue
        sign = -1 if v == "wandb" else 1  # wandb: what it adds over the CSV logger
        norm = med([sign * (a - b) for a, b in zip(normalised("full"), normalised(v))])
        raw = med([sign * (a - b) for a, b in zip(fit_ms["full"], fit_ms[v])])
        label = {"bare": "all parts together", "wandb": "W&B offline instead of CSV"}.get(v, v[1:])
        costs[label] = {"ms_per_step": norm, "pct_of_fit_step": 100 * norm / fit_ref, "raw_ms_per_step": raw}
        print(f"  {label:28s} {norm:+7.2f} ms/step {100 * norm / fit_ref:+6.1f}% of a fit step   ({raw:+.2f} ms raw)")
    if "bare" in variants and args.lockstep:
        loop = med([b - ref_plain for b in normalised("bare")])
        costs["lightning loop (bare - plain)"] = {"ms_per_step": loop, "pct_of_fit_step": 100 * loop / fit_ref}
        print(f"  {'Lightning loop (bare - plain)':28s} {loop:+7.2f} ms/step {100 * loop / fit_ref:+6.1f}% of a fit step"
              "   (loop, hooks, training_step's self.log calls)")
    direct = {k: med([h.get(k, 0.0) for h in hook_ms["full"]]) for h0 in hook_ms["full"] for k in h0}
    print("\ntime inside each part's own code during the timed steps of the full fit (self time, ms per step, median "
          "over repeats):")
    for k, v in sorted(direct.items(), key=lambda kv: -kv[1]):
        print(f"  {k:38s} {v:7.3f} ms/step {100 * v / fit_ref:6.2f}% of a fit step")
    if args.lockstep:
        print("\nwhere a step's time goes (median ms over steps, median over repeats; fit phases between hooks, see "
              "StepTimer.phases):")
        print(f"  {'phase':14s} " + "  ".join(f"{v[:16]:>16s}" for v in ("plain", *variants)))
        for k in ("forward+loss", "backward", "optimizer", "after"):
            cells = [med([p[k] for _, p in phases["full"]])] + [med([f[k] for f, _ in phases[v]]) for v in variants]
            print(f"  {k:14s} " + "  ".join(f"{c:16.2f}" for c in cells))
    rec = first_fit["record"] or {}
    train = (rec.get("per_stage") or {}).get("train") or {}
    if train:
        print(f"\nthe first fit's record: ThroughputCallback {1000 * train['seconds'] / train['batches']:.1f} ms/batch over "
              f"{train['batches']} batches (its on_train_batch_start -> on_train_batch_end: no data fetch, no plain step), "
              f"training_time {rec.get('training_time'):.2f} s for {rec.get('global_steps')} steps")
    print(f"same batches in the same order: {same_batches}; the plain model rebuilt from the seed has the fit's initial "
          f"weights: {plain.same_init}")
    print(f"max |loss difference| over {total} steps: {loss_diff:.3g}; max |weight difference| after {total} steps: "
          f"{weight_diff:.3g} (last loss: fit {first_fit['losses'][-1]:.6f}, plain {plain_losses[-1]:.6f})")
    print(f"wall time {time.perf_counter() - t_start:.0f} s; run folders under {workdir}")
    summary = {"benchmark": "train_overhead", "model": args.model, "seq_len": args.seq_len, "batch_size": args.batch_size,
               "bits": args.bits, "threads": torch.get_num_threads(), "steps": args.steps, "warmup": args.warmup,
               "repeats": args.repeats, "lockstep": args.lockstep, "tty": args.tty,
               "fit_steps_per_sec": 1000 / fit_ref, "plain_steps_per_sec": 1000 / ref_plain, "ratio": ratio,
               "ratios": ratios, "ratio_step_pairs": step_ratio, "fit_ms_per_step": {v: med(x) for v, x in fit_ms.items()},
               "plain_ms_per_step": {v: med(x) for v, x in plain_ms.items() if x} or med(alone_ms),
               "costs": costs, "hook_ms_per_step": direct, "phases_ms": {v: {k: med([f[k] for f, _ in x]) for k in x[0][0]} for v, x in phases.items()},
               "same_batches": same_batches, "same_init_from_seed": plain.same_init,
               "max_loss_diff": loss_diff, "max_weight_diff": weight_diff, "fit_command": first_fit["command"],
               "callbacks": first_fit["callbacks"]}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
