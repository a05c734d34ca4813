"""DownstreamRecorder: turns a downstream test run into `{results_dir}/{model}_downstream.json`.

One file per model (and bits / sparsity setting / protocol), in the reference shape
({"glue": {"cola": ..., "average": ...}, "squad": {...}, "mmlu": {"accuracy", "subject_scores", ...}})
with the full metrics, sample counts, protocol and the run that produced each benchmark. That file is
the merged view: a later run of other tasks adds to it, a re-run task replaces its entry there (averages
are recomputed). Each run also writes its own `{model}_downstream_{run_id}.json` (and
`..._{run_id}.samples.jsonl`), which no later run touches, so a replaced entry is never lost.
Per-sample predictions go to `{model}_downstream.samples.jsonl` beside it, merged the same way.
Every file is replaced atomically. The scores come from the TaskEvaluator (evaluation/evaluator.py);
this callback only writes them with their provenance.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Optional

import lightning as L

from lightning_bench.errors import DivergedError
from lightning_bench.tasks.benchmark_scores import merge_results
from lightning_bench.results.io import read_json, write_json_atomic, write_text_atomic
from lightning_bench.results.meta import processes, run_meta
from lightning_bench.results.naming import new_run_id, point_latest, run_path
from lightning_bench.results.recorder import model_size, sparsity_summary

NON_BENCHMARK_KEYS = ("model", "runs", "note")
# protocol settings that must agree for results to share an average
COMPARABLE = ("name", "num_fewshot", "fewshot_source", "fewshot_seed", "max_samples", "max_length", "max_new_tokens",
              "split_rule", "chat_template_option")

def record_stem(pl_module, bits: int, sparsity: Optional[dict], protocol: str) -> str:
    stem = pl_module.model_name + (f"_bits{bits}" if bits != 32 else "")
    if sparsity:
        level = sparsity["ratio"] if sparsity.get("ratio") is not None else f"b{sparsity.get('budget_tokens')}"
        stem += f"_{sparsity['method']}_s{level}"
    return stem + ("_finetune" if protocol == "finetune" else "")


class DownstreamRecorder(L.Callback):
    """Writes what `evaluator` (the TaskEvaluator collecting the same test loop) scored."""

    def __init__(self, evaluator, results_dir: str = "benchmark_results", bits: int = 32,
                 config: Optional[dict] = None, seed: Optional[int] = None, precision_note: Optional[str] = None,
                 run_id: Optional[str] = None):
        self.evaluator = evaluator
        self.run_id = run_id or new_run_id()
        self.results_dir, self.bits, self.config = Path(results_dir), bits, config or {}
        self.seed, self.precision_note = seed, precision_note
        self.written: Optional[Path] = None
        self.table: str = ""  # the scores of the last test, as the end of the run's screen shows them
        self.fit_summary: dict = {}

    # ---- fine-tuning: remember how the head was trained ---------------------------------------
    def on_train_start(self, trainer, pl_module):
        self._fit_t0 = time.perf_counter()

    def _snapshot(self, trainer) -> None:
        # taken whenever a checkpoint may be written (validation end, epoch end) and at the end
        logged = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(("val/", "train/"))}
        per_epoch = trainer.num_training_batches
        self.fit_summary = {"global_steps": trainer.global_step, "steps_per_epoch": per_epoch,
                            "epochs": trainer.global_step / per_epoch if per_epoch else None,
                            "training_time": time.perf_counter() - self._fit_t0, "last_logged": logged}

    def on_validation_end(self, trainer, pl_module):
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self._snapshot(trainer)

    def on_train_epoch_end(self, trainer, pl_module):
        self._snapshot(trainer)

    def on_train_end(self, trainer, pl_module):
        self._snapshot(trainer)

    # the training summary travels in the checkpoint, so a later `test --ckpt_path` record keeps it
    def state_dict(self) -> dict:
        return {"fit_summary": self.fit_summary}

    def load_state_dict(self, state: dict) -> None:
        self.fit_summary = state.get("fit_summary", {}) or self.fit_summary

    # ---- divergence: a fine-tuning run that stopped on a non-finite loss still leaves a record ------
    def on_exception(self, trainer, pl_module, exception):
        if not isinstance(exception, DivergedError) or not trainer.is_global_zero:
            return
        if trainer.state.fn == "fit" and getattr(self, "_fit_t0", None) is not None:
            self._snapshot(trainer)  # the last finite figures (callback_metrics hold only finite logged values)
        dm = trainer.datamodule
        stem = record_stem(pl_module, self.bits, sparsity_summary(trainer), getattr(dm, "protocol", "finetune"))
        record = {"model": pl_module.model_name, "status": "diverged",
                  "divergence": {"quantity": exception.quantity, "value": str(exception.value),
                                 "step": exception.step},
                  "training": self.fit_summary, "tasks": list(getattr(dm, "task_names", [])),
                  "meta": run_meta(seed=self.seed, datamodule=dm, precision_note=self.precision_note,
                                extra={"processes": processes(trainer)}),
                  "config": self.config}
        # its own file: the benchmark record merges finished runs' scores, and a diverged run has none
        self.written = write_json_atomic(run_path(self.results_dir, f"{stem}_downstream_diverged", self.run_id), record)
        point_latest(self.written, self.results_dir / f"{stem}_downstream_diverged.json")
        print(f"lightning_bench: wrote {self.written}")

    # ---- test ------------------------------------------------------------------------------------
    def on_test_start(self, trainer, pl_module):
        self._t0 = time.perf_counter()

    def on_test_end(self, trainer, pl_module):
        if trainer.interrupted or not trainer.is_global_zero:
            return
        dm = trainer.datamodule
        seconds = time.perf_counter() - self._t0
        results, samples = self.evaluator.evaluate(dm)
        if dm.protocol == "finetune":
            protocol = self._finetune_protocol(dm, pl_module)
        else:
            protocol = {**dm.protocol_record(), **self.evaluator.protocol_record(dm)}
        sparsity = sparsity_summary(trainer)
        run = {"protocol": protocol, "eval_time": seconds, **model_size(trainer, pl_module),
               "parameters": pl_module.parameter_counts(),
               "meta": run_meta(seed=self.seed, datamodule=dm, precision_note=self.precision_note,
                                extra={"processes": processes(trainer)}),
               "config": self.config}
        if sparsity:
            run["sparsity"] = sparsity
        run_id = self.run_id
        for benchmark, entry in results.items():
            holder = entry["tasks"].values() if "tasks" in entry else [entry]
            for item in holder:  # each task (GLUE/SuperGLUE) or benchmark names the run that produced it
                item["run"] = run_id
            if benchmark == "mmlu":
                entry["subject_runs"] = {s: run_id for s in entry["subject_counts"]}
        for logger in trainer.loggers:  # the dashboard gets the same figures (downstream/<benchmark>/<task>/<metric>)
            logger.log_metrics(flat_scores(results), step=trainer.global_step)
        stem = record_stem(pl_module, self.bits, sparsity, dm.protocol)
        self.written = self._write(stem, results, samples, pl_module.model_name, run_id, run)
        self.table = score_table(results) + f"\nrecord {self.written} (this run alone: {run_path(self.results_dir, f'{stem}_downstream', run_id)})"
        print(f"lightning_bench: wrote {self.written}")

    def _finetune_protocol(self, dm, pl_module) -> dict:
        hp = pl_module.hparams
        labels = [r["label"] for r in dm.finetune["train"]]
        baseline = None
        if dm.finetune_num_labels > 1:  # classification: predict train's majority
            majority = max(set(labels), key=labels.count)
            baseline = sum(r["label"] == majority for r in dm.finetune["test"]) / len(dm.finetune["test"])
        return {"name": "finetune", "task": dm.task.name, "split_rule": dm.split_rule,
                "majority_class_test_accuracy": baseline,
                "split_sizes": {k: len(v) for k, v in dm.finetune.items()},
                "head": "dropout + linear on the last real token's final hidden state; cross-entropy "
                        "(classification) or MSE (regression); the whole network is trained",
                "optimizer": {"name": "AdamW", "learning_rate": hp.get("learning_rate"),
                              "weight_decay": hp.get("weight_decay"), "warmup_steps": hp.get("warmup_steps")},
                "batch_size": dm.hparams.batch_size, "max_length": dm.seq_len, "training": self.fit_summary}

    def _write(self, stem: str, results: dict, samples: list[dict], model_name: str, run_id: str,
               run: dict) -> Path:
        path = self.results_dir / f"{stem}_downstream.json"
        old = read_json(path) if path.exists() else {}
        self.keep_runs_without_own_file(path, old, stem)
        benchmarks = merge_results({k: v for k, v in old.items() if k not in NON_BENCHMARK_KEYS}, results)
        runs = {**old.get("runs", {}), run_id: run}
        runs = {k: v for k, v in runs.items() if k in set(_run_ids(benchmarks))}  # fully replaced runs go
        for entry in benchmarks.values():
            # an average over results obtained with different settings (k-shot, sample limits, ...) is
            # not one protocol's figure: say so where the average is
            settings = {json.dumps({k: runs[r]["protocol"].get(k) for k in COMPARABLE}, sort_keys=True)
                        for r in _entry_runs(entry)}
            entry["mixed_protocols"] = len(settings) > 1
        record = {"model": model_name, **benchmarks, "runs": runs,
                  "note": "GLUE/SuperGLUE/MMLU scores are fractions in [0, 1]; SQuAD scores are percentages "
                          "(the official scripts' scale), as are the generative tasks' (ROUGE, EM/F1, joint goal "
                          "and slot accuracy, smoothed BLEU-4, edit similarity, pass@k). Each result's `run` names the entry of `runs` "
                          "(protocol, data provenance, versions, config) that produced it; `mixed_protocols` "
                          "marks a benchmark whose results came from runs with different settings."}
        own = run_path(self.results_dir, f"{stem}_downstream", run_id)
        write_text_atomic(own.with_suffix(".samples.jsonl"), "".join(json.dumps(s) + "\n" for s in samples))
        write_json_atomic(own, {"model": model_name, **results, "runs": {run_id: run}, "note": record["note"]})
        samples_path = self.results_dir / f"{stem}_downstream.samples.jsonl"
        tasks = {s["task"] for s in samples}
        kept = []
        if samples_path.exists():
            kept = [line for line in samples_path.read_text().splitlines()
                    if line.strip() and json.loads(line)["task"] not in tasks]
        write_text_atomic(samples_path, "\n".join(kept + [json.dumps(s) for s in samples]) + "\n")
        return write_json_atomic(path, record)


    def keep_runs_without_own_file(self, path: Path, old: dict, stem: str) -> None:
        """Runs merged before each run had its own file live only in the merged view, where a re-run task
        replaces them: the view is copied once, as it was, before anything merges into it."""
        kept = self.results_dir / f"{stem}_downstream_before_run_ids.json"
        if kept.exists() or not any(not run_path(self.results_dir, f"{stem}_downstream", r).exists()
                                    for r in old.get("runs", {})):
            return
        samples = path.with_suffix(".samples.jsonl")
        if samples.exists():
            write_text_atomic(kept.with_suffix(".samples.jsonl"), samples.read_text())
        write_text_atomic(kept, path.read_text())


def _entry_runs(entry: dict) -> set:
    if "tasks" in entry:
        return {t["run"] for t in entry["tasks"].values()}
    if "subject_runs" in entry:
        return set(entry["subject_runs"].values())
    return {entry["run"]}


def _run_ids(benchmarks: dict):
    for entry in benchmarks.values():
        yield from _entry_runs(entry)


def flat_scores(results: dict) -> dict[str, float]:
    flat = {}
    for benchmark, entry in results.items():
        for task, detail in entry.get("tasks", {}).items():
            flat.update({f"downstream/{benchmark}/{task}/{k}": v for k, v in detail["metrics"].items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool)})
        flat.update({f"downstream/{benchmark}/{k}": v for k, v in entry.items()
                     if isinstance(v, (int, float)) and not isinstance(v, bool)})
    return flat


def _figures(metrics: dict, limit: int = 4) -> str:
    numbers = [(k, v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return ", ".join(f"{k} {v:.4g}" for k, v in numbers[:limit])


def score_table(results: dict) -> str:
    """One line per scored task (its score, n and main metrics), then each benchmark's average."""
    lines = []
    for benchmark, entry in results.items():
        if "tasks" in entry:
            for task, detail in entry["tasks"].items():
                score = detail.get("score")
                lines.append(f"{benchmark}/{task:<24s} " + (f"score {score:.4f}  " if score is not None else "")
                             + f"n={detail.get('num_samples')}  ({_figures(detail.get('metrics', {}))})")
            if entry.get("average") is not None:
                lines.append(f"{benchmark:<31s} average {entry['average']:.4f} over {', '.join(entry.get('average_over', []))}")
        elif "subject_counts" in entry:
            total = sum(c["total"] for c in entry["subject_counts"].values())
            lines.append(f"{benchmark:<31s} accuracy {entry.get('accuracy', float('nan')):.4f}  n={total} questions, "
                         f"{len(entry['subject_counts'])} subjects")
        else:
            lines.append(f"{benchmark:<31s} n={entry.get('dataset_size')}  ({_figures(entry, 6)})")
    return "\n".join(lines)
