"""The result records the library writes, found under folders and read as table rows (one per record, or
one per cell of an experiment). What is a record is read from its writers (docs/results.md):

  fit, validate, test  results/recorder.py, one record per run; `{stem}.json` links to the latest run
  task                 results/downstream.py (`test --task`), one row per scored task; the merged view
                       `{stem}_downstream.json` adds only the runs that have no file of their own
  downstream           `{name}/{name}_results.json`, one row per cell; before it exists, `{name}/cells/`
  sweep                `{name}.json`, one row per (dataset, method, context length, sparsity)
  generation           `aggregated_results.json`, one row per (method, sparsity, context) over seeds;
                       before it exists, the seed cells beside it
  multi_dataset        `{model}_multi_dataset.json`, one row per dataset: the mean test ppl over seeds
                       (each seed's fit and test records are rows of their own)
  scaling              `benchmarks/scaling.py --out FILE`, one row per model: microseconds per token at the
                       longest length measured

A row reached by several paths (a latest link, a copy, the merged view) is listed once. Progress files
(`partial/`) and significance tests are never rows; any other JSON file, or one that cannot be read, is
returned as skipped.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lightning_bench.results.naming import RUN_ID

COLUMNS = ("kind", "model", "data", "protocol", "bits", "sparsity", "metric", "value", "cost", "date",
           "revision", "path")
IGNORED = object()  # a file the library writes that is no row: progress, significance tests


@dataclass
class Row:
    values: dict  # column -> text
    created: str  # meta.created_utc (ISO, UTC): the order
    source: str  # what makes two equal rows one record: the run id, else the file the row came from


# ---- reading one value -------------------------------------------------------------------------------
def _text(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    return format(value, ".5g") if isinstance(value, float) else str(value)


def _model_name(model) -> str:
    """A model as records name it: a pretrained one `hf-{folder}` (HFLanguageModel.model_name's rule)."""
    if not isinstance(model, dict):
        return _text(model)
    pretrained = (model.get("init_args") or model).get("pretrained")
    if pretrained:
        return "hf-" + Path(str(pretrained).rstrip("/")).name.replace(".gguf", "")
    return str(model.get("class_path", "")).rpartition(".")[2]


def _sparsity(method, ratio=None, budget_tokens=None) -> str:
    if not method or method == "dense":
        return method or ""
    return f"{method} b{budget_tokens}" if budget_tokens is not None else f"{method} {_text(ratio)}"


def _cost(tokens_per_s=None, kv_bytes=None, peak_mb=None, seconds=None) -> str:
    parts = [f"{tokens_per_s:.4g} tok/s" if tokens_per_s is not None else "",
             f"KV {kv_bytes / 2**20:.4g} MiB" if kv_bytes is not None else "",
             f"peak {peak_mb:.4g} MB" if peak_mb is not None else "",
             f"{seconds:.4g} s" if seconds is not None else ""]
    return "; ".join(p for p in parts if p)


def _row(kind: str, meta: Optional[dict], path: Path, source: str, **columns) -> Row:
    meta = meta or {}
    git, created = meta.get("git") or {}, meta.get("created_utc") or ""
    commit = git.get("commit")
    values = {c: _text(columns.get(c)) for c in COLUMNS}
    values.update(kind=kind, date=created[:19].replace("T", " "), path=str(path),
                  revision=f"{commit[:10]}{'+dirty' if git.get('dirty') else ''}" if commit else "")
    return Row(values, created, source)


# ---- the records, kind by kind -----------------------------------------------------------------------
def trainer_rows(record: dict, path: Path) -> list[Row]:
    stage, sparsity = record["stage"], record.get("sparsity") or {}
    protocol = (record.get("meta") or {}).get("evaluation_protocol") or {}
    if stage == "fit":
        metric, value, speed = "val_ppl_final", record.get("final_perplexity"), record.get("tokens_per_sec")
    else:
        metric, value = f"{'val' if stage == 'validate' else 'test'}_ppl", (record.get("metrics") or {}).get("ppl")
        speed = record.get("scored_tokens_per_sec")
    return [_row(stage, record.get("meta"), path, record.get("run_id") or str(path.resolve()),
                 model=record.get("model_name"), data=record.get("dataset"), bits=record.get("bits"),
                 protocol=f"{protocol.get('name', '')} {_text(protocol.get('window'))}".strip(),
                 sparsity=_sparsity(sparsity.get("method"), sparsity.get("ratio"), sparsity.get("budget_tokens")),
                 metric=metric, value="diverged" if record.get("status") == "diverged" else value,
                 cost=_cost(speed, sparsity.get("peak_kv_bytes"), record.get("peak_memory_mb")))]


def _task_scores(benchmark: str, entry: dict):
    """(task, metric, value, run ids) of one benchmark entry of a `test --task` record."""
    if "tasks" in entry:
        for name, task in entry["tasks"].items():
            metric = "score" if task.get("score") is not None else _headline(task.get("metrics") or {})
            value = task.get("score") if metric == "score" else (task.get("metrics") or {}).get(metric)
            yield f"{benchmark}/{name}", metric, value, {task.get("run")} - {None}
    elif "subject_counts" in entry:  # MMLU: accuracy over every question of the subjects scored
        yield benchmark, "accuracy", entry.get("accuracy"), set((entry.get("subject_runs") or {}).values())
    else:  # one task's own figures (SQuAD)
        metric, runs = _headline(entry), entry.get("run")
        yield benchmark, metric, entry.get(metric), set(runs if isinstance(runs, list) else [runs]) - {None}


def _headline(metrics: dict) -> str:
    """The first of a task's figures that is some task's headline metric (TaskDefinition.headline), imported
    only here: it loads the task registry, which takes seconds."""
    from lightning_bench.tasks import TASKS

    return next((k for k in metrics if k in {t.headline for t in TASKS.values() if t.headline}), "")


def task_rows(record: dict, path: Path) -> list[Row]:
    runs, rows = record.get("runs") or {}, []
    if record.get("status") == "diverged":  # its own file: a fine-tuning that stopped, no scores
        return [_row("task", record.get("meta"), path, str(path.resolve()), model=record.get("model"),
                     data=" ".join(record.get("tasks") or []), value="diverged")]
    merged_view = not RUN_ID.search(path.name)
    own_stem = path.stem.removesuffix("_before_run_ids")
    for benchmark, entry in record.items():
        if benchmark in ("model", "runs", "note") or not isinstance(entry, dict):
            continue
        for data, metric, value, run_ids in _task_scores(benchmark, entry):
            if merged_view and any((path.parent / f"{own_stem}_{r}.json").exists() for r in run_ids):
                continue  # the run's own file lists it
            run = runs.get(min(run_ids, default=None)) or {}
            protocol, sparsity = run.get("protocol") or {}, run.get("sparsity") or {}
            shots = protocol.get("num_fewshot")
            source = ",".join(sorted(run_ids)) or str(path.resolve())
            rows.append(_row("task", run.get("meta"), path, source, model=record.get("model"),
                             data=data, bits=(run.get("config") or {}).get("bits"), metric=metric, value=value,
                             protocol=f"{protocol.get('name', '')}{f' {shots}-shot' if shots else ''}",
                             sparsity=_sparsity(sparsity.get("method"), sparsity.get("ratio"),
                                                sparsity.get("budget_tokens")),
                             cost=_cost(seconds=run.get("eval_time"))))
    return rows


def downstream_cell_row(cell: dict, path: Path, fallback_meta: Optional[dict] = None) -> Row:
    model = (cell.get("protocol") or {}).get("model") or {}
    metric, timing, cache = cell["primary_metric"], cell.get("timing") or {}, cell.get("cache") or {}
    budget = cell["level"] if cell.get("budget_kind") == "budget_tokens" else None
    return _row("downstream", cell.get("meta") or fallback_meta, path, str(path.resolve()),
                model=_model_name(model), data=cell["task"], protocol=cell.get("compression_protocol"),
                bits=model.get("bits", 32),  # the cells name bits only when not 32 (downstream/setup.py)
                sparsity=_sparsity(cell["method"], cell["level"], budget and int(budget)),
                metric=metric, value=cell["metrics"].get(metric),
                cost=_cost(timing.get("decode_tokens_per_s"), cache.get("kv_bytes_peak_mean"),
                           timing.get("peak_memory_mb")))


def downstream_rows(record: dict, path: Path) -> list[Row]:
    return [downstream_cell_row(cell, path, record.get("meta")) for cell in record["cells"].values()]


def sweep_rows(record: dict, path: Path) -> list[Row]:
    meta, rows = record.get("meta") or {}, []
    model = _model_name((record.get("config") or {}).get("model"))
    for dataset, methods in record["results"].items():
        name = ((meta.get("evaluation_protocol") or {}).get(dataset) or {}).get("name", "")
        for method, sweeps in methods.items():
            for cell in (c for points in sweeps.values() for c in points.values()):
                rows.append(_row("sweep", meta, path, str(path.resolve()), model=model, data=dataset,
                                 protocol=f"{name} {cell['context_length']}".strip(),
                                 sparsity=_sparsity(method, cell["sparsity"]), metric="ppl",
                                 value=cell["perplexity"],
                                 cost=_cost(cell.get("tokens_per_second"), cell.get("peak_kv_bytes"))))
    return rows  # a cell on both axes is in both sweeps: its two rows are equal, and listed once


def _generation_row(config: dict, meta: dict, path: Path, method, sparsity, context, ppl, mean) -> Row:
    data = (meta.get("data") or {}).get("name") or str(config.get("data", "")).partition("=")[0]
    return _row("generation", meta, path, str(path.resolve()), model=_model_name(config.get("model")), data=data,
                protocol=f"teacher_forced {context}+{config.get('continuation_length')}",
                sparsity=_sparsity(method, sparsity), metric="ppl_of_mean_nll", value=ppl,
                cost=_cost(mean("decode_tokens_per_s"), mean("kv_bytes_peak"), mean("peak_memory_mb")))


def generation_rows(record: dict, path: Path) -> list[Row]:
    if "summary" in record:  # one seed's cell, listed while no aggregated_results.json covers it
        s = record["summary"]
        return [_generation_row(record["config"], record.get("meta") or {}, path, record["method"],
                                record["sparsity"], record["context_length"], math.exp(s["nll"]), s.get)]
    return [_generation_row(record["config"], record.get("meta") or {}, path, g["method"], g["sparsity"],
                            g["context_length"], g["ppl_of_mean_nll"], lambda m: g["metrics"][m]["mean"])
            for g in record["results"].values()]


def multi_dataset_rows(record: dict, path: Path) -> list[Row]:
    return [_row("multi_dataset", record.get("meta"), path, str(path.resolve()), model=record.get("model_name"),
                 data=name, protocol=f"{len(record['per_seed'].get(name) or {})} seeds", metric="test_ppl_mean",
                 value=mean) for name, mean in record["perplexities"].items()]


def scaling_rows(record: dict, path: Path) -> list[Row]:
    how, rows = record.get("how") or {}, []
    for model in dict.fromkeys(r["model"] for r in record["rows"]):
        done = [r for r in record["rows"] if r["model"] == model and "skipped" not in r]
        last = max(done, key=lambda r: r["seq_len"]) if done else {}
        cost = (_cost(last["seq_len"] * 1e3 / last["ms"]) + f"; mem {last['mem_mib']:.4g} MiB") if last else "skipped"
        rows.append(_row("scaling", record.get("meta"), path, str(path.resolve()), model=model,
                         protocol=f"fwd+bwd batch {how.get('batch', 1)} {how.get('device', '')}".strip(),
                         metric=f"us/token @ {last['seq_len']}" if last else "us/token", value=last.get("us_per_token"),
                         cost=cost))
    return rows


def reader_of(record):
    """The function that reads `record`'s rows, IGNORED for a file that is no row, None if unknown."""
    if not isinstance(record, dict):
        return None
    config = record.get("config")
    command = config.get("command") if isinstance(config, dict) else None
    if record.get("stage") in ("fit", "validate", "test") and "model_name" in record:
        return trainer_rows
    if "model" in record and ("runs" in record or {"divergence", "training"} <= set(record)):
        return task_rows
    if command == "downstream" and isinstance(record.get("cells"), dict):
        return downstream_rows
    if "primary_metric" in record and "compression_protocol" in record:
        return lambda cell, where: [downstream_cell_row(cell, where)]
    if {"results", "grid", "fingerprint"} <= set(record):
        return sweep_rows
    if command == "generation":
        return IGNORED if "tests" in record else generation_rows
    if {"per_seed", "perplexities", "model_name"} <= set(record):
        return multi_dataset_rows
    if record.get("kind") == "scaling" and isinstance(record.get("rows"), list):
        return scaling_rows
    if set(record) == {"fingerprint", "examples", "cells"}:  # a group's progress (core/store.py)
        return IGNORED
    return None


def covered(path: Path) -> bool:
    """A cell file its experiment's results file lists (decided by name: the cells are not read)."""
    folder = path.parent
    if folder.name == "cells" and (folder.parent / f"{folder.parent.name}_results.json").exists():
        return True
    return (folder / "aggregated_results.json").exists() and path.name not in (
        "aggregated_results.json", "significance_tests.json")


def json_files(folder: Path):
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # .locks; temporary files are hidden too
        yield from (Path(root) / f for f in sorted(files) if f.endswith(".json") and not f.startswith("."))


def collect(folders: list[Path]) -> tuple[list[Row], list[Path]]:
    """(every row once, newest first; the files skipped as unknown or unreadable)."""
    rows, seen, skipped = [], set(), []
    # each file once, though two folders given may hold it (`results A A/sub`); links are kept, and read
    # after the run's own file (or the copy made where links fail) that they name again
    found = {Path(os.path.realpath(p.parent), p.name): p for folder in folders for p in json_files(folder)}
    paths = sorted(found.values(), key=lambda p: (p.is_symlink(), RUN_ID.search(p.name) is None))
    for path in paths:
        if covered(path):
            continue
        try:
            record = json.loads(path.read_text())
            reader = reader_of(record)
            found = [] if reader is IGNORED else reader(record, path) if reader else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # damaged, or not the shape it claims
            found = None
        if found is None:
            skipped.append(path)
        for row in found or []:
            identity = (row.source, *(v for c, v in row.values.items() if c != "path"))
            if identity not in seen:
                seen.add(identity)
                rows.append(row)
    rows.sort(key=lambda r: r.created, reverse=True)  # stable: one file's rows keep their order
    return rows, skipped
