"""`lightning_bench results`: one table over every kind of record the library writes, each record once,
newest first; --filter, --csv and the one-line errors."""

import csv
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from lightning_bench.experiments.core.store import CellStore
from lightning_bench.reports.results_table import WIDTHS
from lightning_bench.results.io import write_json_atomic
from lightning_bench.results.meta import run_meta
from lightning_bench.results.naming import point_latest, run_path
from lightning_bench.results.recorder import PERF_FIELDS
from tests.test_cli import run

MEASURED_CELL = (Path(__file__).resolve().parent.parent / "measurements" / "long_context" / "cells"
                 / "ruler-cwe__h2o_s0.5_query_aware_seed1234.json")


def meta(day: int) -> dict:
    """The meta block every writer adds, dated 2026-11-{day} so the order of the rows is known."""
    return {**run_meta(seed=1), "created_utc": f"2026-11-{day:02d}T10:00:00+00:00",
            "git": {"commit": "0123456789abcdef", "dirty": day % 2 == 1}}


def trainer_record(stage: str, run_id: str, day: int, ppl: float, sparsity=None) -> dict:
    """A record as ResultsRecorder._write lays it out (fit: the fit body; validate/test: the metrics)."""
    body = ({"status": "completed", "divergence": None, "final_loss": 4.0, "final_perplexity": ppl,
             "best_perplexity": ppl, "training_time": 1.0, "epoch_losses": [4.2], "epoch_perplexities": [ppl],
             "validation_curve": [{"epoch": 0, "step": 12, "ppl": ppl}], "global_steps": 12, "trained_tokens": 96}
            if stage == "fit" else
            {"status": "completed", "metrics": {"loss": 4.0, "ppl": ppl, "scored_tokens": 100}, "eval_time": 2.0,
             "scored_tokens_per_sec": 50.0, "eval_path": "windows"})
    record = {"run_id": run_id, "model_name": "transformer", "dataset": "ptb", "seq_len": 16, "bits": 32,
              "stage": stage, **body, **{k: None for k in PERF_FIELDS}, "model_size_mb": 0.1,
              "parameters": {"total": 10}, "baselines": {}, "config": {}, "meta": meta(day)}
    record.update(tokens_per_sec=900.0, peak_memory_mb=120.0)
    record["meta"]["evaluation_protocol"] = {"name": "token_windows", "split": "test", "window": 16, "stride": 16}
    if sparsity:
        record["sparsity"] = {"method": "h2o", "ratio": sparsity, "budget_tokens": None, "peak_kv_bytes": 2**20}
    return record


def write_run(folder: Path, stem: str, record: dict) -> Path:
    """The run's own file and the latest-run link beside it, as the recorders write them."""
    path = write_json_atomic(run_path(folder, stem, record["run_id"]), record)
    point_latest(path, folder / f"{stem}.json")
    return path


def task_record(run_id: str, day: int) -> dict:
    """`test --task glue/sst2 mmlu/anatomy` as DownstreamRecorder writes it (scores in [0, 1])."""
    run = {"protocol": {"name": "prompted", "num_fewshot": 5}, "eval_time": 30.0, "model_size_mb": 1.0,
           "parameters": {"total": 10}, "meta": meta(day), "config": {"bits": 8}}
    return {"model": "hf-tiny",
            "glue": {"sst2": 0.75, "average": 0.75, "average_over": ["sst2"], "mixed_protocols": False,
                     "tasks": {"sst2": {"metrics": {"accuracy": 0.75}, "score": 0.75, "num_samples": 8,
                                        "run": run_id}}},
            "mmlu": {"accuracy": 0.25, "macro_accuracy": 0.25, "mixed_protocols": False,
                     "subject_counts": {"anatomy": {"correct": 2, "correct_norm": 2, "total": 8}},
                     "subject_runs": {"anatomy": run_id}},
            "runs": {run_id: run}, "note": "scores are fractions"}


def write_merged_tasks(root: Path) -> None:
    """A run's own `test --task` file, and the merged view over it and a run from before run ids (no file
    of its own): the view's figures of the newer run are its own file's, and its MMLU mixes both runs."""
    new, old = "20261110-100000-dddd", "20261020-100000-ffff"
    write_json_atomic(run_path(root, "hf-tiny_bits8_downstream", new), task_record(new, 10))
    merged = task_record(new, 10)
    merged["glue"]["tasks"]["cola"] = {"metrics": {"mcc": 0.5}, "score": 0.5, "num_samples": 8, "run": old}
    merged["mmlu"].update(accuracy=0.3, subject_runs={"anatomy": new, "astronomy": old})
    merged["runs"][old] = {**merged["runs"][new], "meta": {**meta(1), "created_utc": "2026-10-20T10:00:00+00:00"}}
    write_json_atomic(root / "hf-tiny_bits8_downstream.json", merged)


def measured_cell() -> dict:
    if not MEASURED_CELL.exists():
        pytest.skip(f"{MEASURED_CELL} is not in this checkout")
    return json.loads(MEASURED_CELL.read_text())


def write_experiments(root: Path) -> None:
    """A downstream grid with its results file, one still running (cells and progress only), a sweep, a
    generation folder with its aggregate and one without, and a multi_dataset summary."""
    cell, key = measured_cell(), SimpleNamespace(key=MEASURED_CELL.stem)
    settings, cell_file = cell.pop("protocol"), re.compile(r".*\.json$")
    cell.pop("checksum")
    done = root / "done"
    CellStore(done / "cells", cell_file, "refused").write(key, settings, {**cell, "meta": meta(3)})
    write_json_atomic(done / "done_results.json", {
        "name": "done", "config": {"command": "downstream", "bits": 32}, "meta": meta(3), "statistics": {},
        "cells": {key.key: {**cell, "meta": meta(3), "protocol": settings, "comparisons": {}}}})
    running = CellStore(root / "running" / "cells", cell_file, "refused", root / "running" / "partial")
    running.write(key, settings, {**cell, "meta": meta(4)})
    running.progress("ruler-cwe__query_aware_seed1234", {"a": 1}).save(3, {key.key: []})

    point = {"perplexity": 30.5, "context_length": 256, "sparsity": 0.9, "tokens_per_second": 40.0,
             "peak_kv_bytes": 2**21, "method_params": {}}
    write_json_atomic(root / "sweep.json", {  # the ratio-0.9 cell at 256 tokens is on both axes: listed once
        "results": {"wikitext2": {"h2o": {"sparsity_sweep": {"0.9": point},
                                          "context_length_sweep": {"256": dict(point)}}}},
        "config": {"model": {"class_path": "lightning_bench.models.HFLanguageModel",
                             "init_args": {"pretrained": "/models/smollm2-135m/"}}},
        "grid": [], "fingerprint": "f", "cells_done": 1, "cells_total": 1, "complete": True,
        "meta": {**meta(5), "evaluation_protocol": {"wikitext2": {"name": "token_windows"}}}})

    config = {"command": "generation", "model": {"pretrained": "/models/smollm2-135m"}, "continuation_length": 64,
              "data": "wikitext2=../shared/data/wikitext-2"}
    means = {m: {"mean": v} for m, v in (("decode_tokens_per_s", 12.0), ("kv_bytes_peak", 2**22),
                                         ("peak_memory_mb", 900.0))}
    gen_cell = {"method": "tova", "sparsity": 0.5, "context_length": 1024, "seed": 42, "num_samples": 2,
                "summary": {"nll": 3.0, "decode_tokens_per_s": 11.0}, "samples": [], "config": config,
                "meta": meta(7)}
    write_json_atomic(root / "gen" / "tova_s0.5_ctx1024_seed42.json", gen_cell)  # covered by the aggregate
    write_json_atomic(root / "gen" / "aggregated_results.json", {
        "results": {"tova_s0.5_ctx1024": {"method": "tova", "sparsity": 0.5, "context_length": 1024,
                                          "ppl_of_mean_nll": 20.1, "metrics": means}},
        "config": config, "meta": meta(6)})
    write_json_atomic(root / "gen" / "significance_tests.json", {"tests": [], "config": config, "meta": meta(6)})
    write_json_atomic(root / "gen_running" / "tova_s0.5_ctx1024_seed42.json", gen_cell)

    write_json_atomic(root / "transformer_multi_dataset.json", {
        "model_name": "transformer", "perplexities": {"ptb": 150.0}, "per_seed": {"ptb": {"1": 149.0, "2": 151.0}},
        "records": {}, "config": {"preset": "p.yaml"}, "meta": meta(8)})


@pytest.fixture
def results(tmp_path) -> Path:
    """`results/` (the tests run in tmp_path) holding one record of every kind, a link, a merged view and two
    files that are no records."""
    root = tmp_path / "results"
    write_run(root, "transformer_ptb_seq16_bits32", trainer_record("fit", "20261101-100000-aaaa", 1, 120.0))
    write_run(root, "transformer_ptb_seq16_bits32_test", trainer_record("test", "20261102-100000-bbbb", 2, 130.0))
    write_run(root, "transformer_ptb_seq16_bits32_test_h2o_s0.5",
              trainer_record("test", "20261109-100000-cccc", 9, 140.0, sparsity=0.5))
    write_merged_tasks(root)
    write_experiments(root / "experiments")
    (root / "notes.json").write_text('{"hello": "not a record"}')
    (root / "broken.json").write_text('{"run_id": "20261')
    return root


def table_rows(out: str) -> list[dict]:
    """The printed table as {column: text}, cut at the columns' header positions."""
    lines = [line for line in out.splitlines() if line.strip()]
    starts = [(m.start(), m.group()) for m in re.finditer(r"\S+", lines[0])]
    ends = [s for s, _ in starts[1:]] + [None]
    return [{name: line[start:end].strip() for (start, name), end in zip(starts, ends)}
            for line in lines[2:] if not line.startswith(("skipped ", "no records"))]


def test_every_kind_once_newest_first(results, capsys):
    code, out, err = run(["results", "results"], capsys)
    assert code == 0, err
    rows = table_rows(out)
    got = [(r["kind"], r["model"], r["data"], r["sparsity"], r["metric"], r["value"]) for r in rows]
    assert got == [  # newest first: the days 10, 9, 8, ..., 1 of the records' meta
        ("task", "hf-tiny", "glue/sst2", "", "score", "0.75"),
        ("task", "hf-tiny", "mmlu", "", "accuracy", "0.25"),
        ("test", "transformer", "ptb", "h2o 0.5", "test_ppl", "140"),
        ("multi_dataset", "transformer", "ptb", "", "test_ppl_mean", "150"),
        ("generation", "hf-smollm2-135m", "wikitext2", "tova 0.5", "ppl_of_mean_nll", "20.086"),  # exp(3)
        ("generation", "hf-smollm2-135m", "wikitext2", "tova 0.5", "ppl_of_mean_nll", "20.1"),
        ("sweep", "hf-smollm2-135m", "wikitext2", "h2o 0.9", "ppl", "30.5"),
        ("downstream", "hf-smollm2-135m-instruct", "ruler/cwe", "h2o 0.5", "string_match", "6"),
        ("downstream", "hf-smollm2-135m-instruct", "ruler/cwe", "h2o 0.5", "string_match", "6"),
        ("test", "transformer", "ptb", "", "test_ppl", "130"),
        ("fit", "transformer", "ptb", "", "val_ppl_final", "120"),
        ("task", "hf-tiny", "glue/cola", "", "score", "0.5"),  # only the merged view holds it
    ]
    by_kind = {r["kind"] + r["sparsity"]: r for r in rows}
    assert by_kind["task"]["protocol"] == "prompted 5-shot" and by_kind["task"]["bits"] == "8"
    assert by_kind["testh2o 0.5"]["cost"] == "50 tok/s; KV 1 MiB; peak 120 MB"
    assert by_kind["fit"]["date"] == "2026-11-01 10:00:00" and by_kind["fit"]["revision"] == "0123456789+dirty"
    # the run's own file, not the latest link to it; the grid's results file, not its cells; never partial/
    assert by_kind["fit"]["path"] == "results/transformer_ptb_seq16_bits32_20261101-100000-aaaa.json"
    downstream = [r["path"] for r in rows if r["kind"] == "downstream"]
    assert downstream == [f"results/experiments/running/cells/{MEASURED_CELL.name}",
                          "results/experiments/done/done_results.json"]
    assert out.strip().splitlines()[-1].startswith("skipped 2 files (not a lightning_bench record, or unreadable): ")
    assert "notes.json" in out and "broken.json" in out and "Traceback" not in err


def test_filter_narrows_and_names_the_columns(results, capsys):
    code, out, _ = run(["results", "results", "--filter", "kind=test", "--filter", "sparsity=h2o 0.5"], capsys)
    assert code == 0 and [r["value"] for r in table_rows(out)] == ["140"]
    code, out, _ = run(["results", "results", "--filter", "kind=test", "model=bk"], capsys)
    assert code == 0 and "no records found under results matching kind=test model=bk" in out
    code, out, err = run(["results", "results", "--filter", "ppl=140"], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["lightning_bench: error: results: --filter 'ppl' is no column; valid: "
                                        "kind, model, data, protocol, bits, sparsity, metric, value, cost, date, "
                                        "revision, path"]


def test_csv_holds_the_printed_rows_and_is_never_replaced(results, capsys):
    long_name = trainer_record("fit", "20261111-100000-eeee", 11, 99.0)
    long_name["dataset"] = "a_corpus_whose_name_is_wider_than_its_column"
    write_run(results, "transformer_long_seq16_bits32", long_name)
    code, out, err = run(["results", "results", "--csv", "table.csv"], capsys)
    assert code == 0, err
    with open("table.csv", newline="") as f:
        written = list(csv.DictReader(f))
    printed = table_rows(out)
    assert len(written) == len(printed) == 13
    for whole, shown in zip(written, printed):  # the same rows; a value too wide for the screen is cut with …
        assert whole.keys() == shown.keys()
        assert all(shown[c] == v or (shown[c].endswith("…") and v.startswith(shown[c][:-1]))
                   for c, v in whole.items())
    assert written[0]["data"] == long_name["dataset"]
    assert printed[0]["data"] == long_name["dataset"][:WIDTHS["data"] - 1] + "…"
    before = Path("table.csv").read_text()
    code, out, err = run(["results", "missing_folder", "--csv", "table.csv"], capsys)  # checked before any folder
    assert code == 2 and out == "" and Path("table.csv").read_text() == before
    assert err.strip().splitlines() == ["lightning_bench: error: results: --csv table.csv exists; name a new file "
                                        "(it is never replaced)"]


def test_missing_and_empty_folders(tmp_path, capsys):
    code, out, err = run(["results", "nowhere"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "results: nowhere: no such folder" in err
    code, out, err = run(["results"], capsys)  # the default folder, benchmark_results, is not there either
    assert code == 2 and "benchmark_results: no such folder" in err
    (tmp_path / "benchmark_results").mkdir()
    code, out, err = run(["results"], capsys)
    assert code == 0 and out.strip() == "no records found under benchmark_results"
