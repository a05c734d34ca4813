"""The experiment commands (downstream, generation, sweep, multi_dataset) are safe to run as a researcher
runs them: two runs into one store compute each cell once (into the sweep's one JSON too), a lock never
outlives its process, an output that cannot be written fails before any model loads, a value outside an
option's declared range fails while parsing, and a bad --config file is one line naming the file. Each
failure is one line, exit 2."""

import dataclasses
import json
import re
import signal
import subprocess
import sys
import threading
import time
import typing
from pathlib import Path
from typing import Union

import pytest
from filelock import FileLock

from lightning_bench.experiments.core.store import claim
from lightning_bench.experiments.sweep.store import CellDocument
from lightning_bench.experiments.downstream.config import DownstreamConfig
from lightning_bench.experiments.generation.config import GenerationConfig
from lightning_bench.experiments.multi_dataset import MultiDatasetConfig
from lightning_bench.experiments.sweep.config import SweepConfig
from tests.test_cli import run

ROOT = Path(__file__).resolve().parent.parent
NO_MODEL = "/nonexistent/model"  # loading it fails: an output error instead says the check came first
LONG_NAME = "x" * 300


def one_error_line(code, err: str) -> str:
    """The single `lightning_bench: error:` line of a failed call (exit 2, no traceback)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, err
    assert lines and lines[-1].startswith("lightning_bench: error: "), err
    assert [line for line in lines if "error" in line.lower()] == [lines[-1]], err
    return lines[-1]


# ---- two runs into one store ------------------------------------------------------------------------
def test_two_concurrent_downstream_runs_compute_each_cell_once(tiny_hf, shared_data, tmp_path, cli_process):
    """Two runs, each a process of its own. The test holds the first group's lock until both runs have found
    it taken (the contended path, deterministically); they share the other groups, then one computes the
    first while the other waits for it and reuses it."""
    grid = ["downstream", "--model.pretrained", str(tiny_hf), "--data_dir", str(shared_data), "--results_dir",
            str(tmp_path / "r"), "--name", "t", "--tasks", "xsum", "squad_v2", "--methods", "dense", "h2o",
            "--ratios", "0.5", "--protocols", "query_aware", "query_agnostic", "--max_samples", "1",
            "--max_new_tokens", "2", "--max_length", "192", "--accelerator", "cpu", "--threads", "1"]
    logs = [tmp_path / "first.log", tmp_path / "second.log"]
    (tmp_path / "r" / "t" / ".locks" / "cells").mkdir(parents=True)
    with FileLock(tmp_path / "r" / "t" / ".locks" / "cells" / "xsum__query_aware_seed1234.lock"):
        runs = [cli_process(grid, log, log.with_suffix(".err")) for log in logs]
        errors = lambda: [log.with_suffix(".err").read_text() for log in logs]  # noqa: E731
        deadline = time.time() + 300
        while not all("xsum__query_aware_seed1234: another run is computing it" in log.read_text()
                      for log in logs):
            assert time.time() < deadline and all(r.is_alive() for r in runs), errors()
            time.sleep(0.1)
    for r in runs:
        r.join(timeout=300)
    assert [r.exitcode for r in runs] == [0, 0], errors()
    outputs = [log.read_text() for log in logs]

    cells = sorted(results_cells(tmp_path))
    computed = [re.findall(r"\] (\S+): \S+ \S+  kept", out) for out in outputs]
    assert len(cells) == 8 and sorted(computed[0] + computed[1]) == cells  # each cell by one of the runs
    for out, mine in zip(outputs, computed):
        reused = re.findall(r"\] (\S+): (?:done by another run|skipped \(done before)", out)  # before: it started late
        assert sorted(reused + mine) == cells  # and reused by the other
    summaries = [out.split("_summary.txt\n", 1)[1] for out in outputs]
    protocols = [line.split()[1] for line in summaries[0].splitlines() if line.split()[1:2] in
                 (["query_aware"], ["query_agnostic"])]  # the table's rows
    assert summaries[0] == summaries[1] and len(protocols) == 8  # both runs: all 8 cells


def results_cells(tmp_path: Path) -> list[str]:
    results = json.loads((tmp_path / "r" / "t" / "t_results.json").read_text())
    assert all(cell["num_examples"] == 1 for cell in results["cells"].values())
    return list(results["cells"])


def test_claim_waits_for_a_held_item_and_yields_it_after_the_rest(tmp_path):
    held = FileLock(tmp_path / "a.lock")
    held.acquire()
    order, said = [], []
    worker = threading.Thread(target=lambda: order.extend(
        claim(["a", "b"], lambda item: FileLock(tmp_path / f"{item}.lock"), lambda item, text: said.append(item))))
    worker.start()
    time.sleep(0.5)
    assert worker.is_alive() and said == ["a", "a"]  # deferred, then waited for
    held.release()
    worker.join(timeout=30)
    assert order == ["b", "a"]


def test_two_runs_writing_one_sweep_document_keep_each_others_cells(tmp_path):
    """Shards of one sweep write its one JSON at once: each write merges what the other wrote first, and a
    read sees the other's cells."""
    from lightning_bench.experiments.sweep.config import Cell

    cells = [Cell("tiny", "dense", "sparsity_sweep", "0.0", 16, 0.0),
             Cell("tiny", "h2o", "sparsity_sweep", "0.5", 16, 0.5)]
    path, settings = tmp_path / "sweep.json", {"method_params": {}}
    with CellDocument(path, "fp", {}) as first, CellDocument(path, "fp", {}) as second:
        for doc in (first, second):
            doc.on_write = lambda cell, measured, doc=doc: doc.save(fingerprint="fp")
        first.write(cells[0], settings, {"perplexity": 2.0, "method_params": {}})
        second.write(cells[1], settings, {"perplexity": 3.0, "method_params": {}})
        assert first.read(cells[1], settings)["perplexity"] == 3.0
    assert set(json.loads(path.read_text())["results"]["tiny"]) == {"dense", "h2o"}


def test_a_lock_is_free_once_its_holder_is_killed(tmp_path):
    """flock locks go with their process: a run killed while computing a cell leaves no stale blocker."""
    path = tmp_path / "cell.lock"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from filelock import FileLock; "
                               "FileLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)",
                               str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    said = []
    assert list(claim(["a"], lambda _: FileLock(path), lambda item, text: said.append(text))) == ["a"]
    assert said == []  # not even deferred: nothing holds it


# ---- outputs checked before the work -----------------------------------------------------------------
def _sweep_args(tmp_path: Path, tiny_corpus: Path, output: str) -> list[str]:
    config = tmp_path / "sweep.yaml"
    config.write_text(json.dumps({
        "model": {"class_path": "lightning_bench.models.HFLanguageModel", "init_args": {"pretrained": NO_MODEL}},
        "datasets": {"tiny": {"source": "text", "path": str(tiny_corpus), "tokenizer": "word"}},
        "methods": ["dense"], "sparsity_sweep": {"context_length": 16, "sparsity_levels": [0.0]}}))
    return ["sweep", "--config", str(config), "--output", output]


COMMANDS = {
    "downstream": lambda tmp, corpus, where: ["downstream", "--model.pretrained", NO_MODEL, "--results_dir", where],
    "generation": lambda tmp, corpus, where: ["generation", "--model.pretrained", NO_MODEL, "--data",
                                              f"tiny={corpus}", "--results_dir", where],
    "multi_dataset": lambda tmp, corpus, where: ["multi_dataset", "--config",
                                                 str(ROOT / "configs/compare/transformer_small.yaml"), "--datasets",
                                                 f"tiny={corpus}", "--seeds", "1", "--results_dir", where],
    "sweep": lambda tmp, corpus, where: _sweep_args(tmp, corpus, where + "/s.json"),
}
PLACES = {  # where: (the location given, a part of the reason the line gives)
    "under /proc": (lambda tmp: "/proc/lightning_bench_x", "cannot write there"),
    "an existing file": (lambda tmp: str(tmp / "taken"), "is a file"),
    "under a file": (lambda tmp: str(tmp / "taken" / "sub"), "is a file"),
    "a 300-character name": (lambda tmp: LONG_NAME, "too long"),
}


@pytest.mark.parametrize("place", list(PLACES))
@pytest.mark.parametrize("command", list(COMMANDS))
def test_an_unwritable_output_fails_before_any_model_loads(command, place, tiny_corpus, tmp_path, capsys):
    (tmp_path / "taken").write_text("a file where a folder is expected")
    where, reason = PLACES[place]
    argv = COMMANDS[command](tmp_path, tiny_corpus, where(tmp_path))
    code, _, err = run(argv, capsys)
    line = one_error_line(code, err)
    option = "--output" if command == "sweep" else "--results_dir"
    assert option in line and reason in line and NO_MODEL not in line, line


def test_a_sweep_output_that_is_a_folder_is_refused(tiny_corpus, tmp_path, capsys):
    code, _, err = run(_sweep_args(tmp_path, tiny_corpus, str(tmp_path)), capsys)
    assert "--output" in one_error_line(code, err) and "is a folder" in err


# ---- ranges, declared once on the options ----------------------------------------------------------
CONFIGS = {"downstream": DownstreamConfig, "generation": GenerationConfig, "sweep": SweepConfig,
           "multi_dataset": MultiDatasetConfig}


def _restricted(hint):
    """(restricted type, is a list) of a field's annotation, Optional unwrapped; (None, False) otherwise."""
    if typing.get_origin(hint) is Union:
        hint = next((a for a in typing.get_args(hint) if a is not type(None)), None)
    listed = typing.get_origin(hint) is list
    item = typing.get_args(hint)[0] if listed else hint
    return (item, listed) if hasattr(item, "_restrictions") else (None, False)


def declared_ranges(config: type, prefix: str = "") -> list[tuple[str, type, bool]]:
    """(flag, restricted type, is a list) of every numeric option of `config` and its nested configs."""
    found, hints = [], typing.get_type_hints(config)
    for old, renamed in getattr(config, "DEPRECATED", {}).items():  # deprecated options: a table entry, no field
        hints[old] = renamed.type or hints[renamed.new]
    for name, hint in hints.items():
        nested = [a for a in (typing.get_args(hint) or (hint,)) if dataclasses.is_dataclass(a)]
        if nested:
            found += declared_ranges(nested[0], f"{prefix}{name}.")
        kind, listed = _restricted(hint)
        if kind is not None:
            found.append((f"--{prefix}{name}", kind, listed))
    return found


def just_outside(kind: type) -> list:
    """A value just past each bound of a restricted type."""
    step = 1 if kind._type is int else 0.001
    past = {"gt": 0, "ge": -step, "lt": 0, "le": step}
    return [kind._type(ref + past[op.__name__]) for op, ref in kind._restrictions]


RANGE_CASES = [(command, flag, value, listed) for command, config in CONFIGS.items()
               for flag, kind, listed in declared_ranges(config) for value in just_outside(kind)]


def plain_numbers(config: type, prefix: str = "") -> list[str]:
    """Options of `config` (and its nested configs) typed as a bare int or float: declared without a range."""
    found = []
    for name, hint in typing.get_type_hints(config).items():
        args = [a for a in (typing.get_args(hint) or (hint,)) if a is not type(None)]
        nested = [a for a in args if dataclasses.is_dataclass(a)]
        if nested:
            found += plain_numbers(nested[0], f"{prefix}{name}.")
        items = typing.get_args(args[0]) if typing.get_origin(args[0]) is list else args
        found += [f"--{prefix}{name}" for a in items if a in (int, float)]
    return found


def test_the_experiment_configs_declare_their_ranges():
    assert {command: plain_numbers(config) for command, config in CONFIGS.items()} == {c: [] for c in CONFIGS}
    flags = {(command, flag) for command, flag, _, _ in RANGE_CASES}
    assert len(flags) >= 25
    assert {("downstream", "--max_new_tokens"), ("downstream", "--sparsity"), ("generation", "--seeds"),
            ("sweep", "--sparsity_sweep.context_length"), ("sweep", "--streaming.chunk_size"),
            ("multi_dataset", "--seeds")} <= flags


@pytest.mark.parametrize("command, flag, value, listed", RANGE_CASES,
                         ids=[f"{c}{f}={v}" for c, f, v, _ in RANGE_CASES])
def test_a_value_outside_a_declared_range_fails_while_parsing(command, flag, value, listed, capsys):
    code, _, err = run([command, flag, json.dumps([value]) if listed else str(value)], capsys)
    line = one_error_line(code, err)
    assert f"{flag}:" in line and "expected" in line, line


@pytest.mark.parametrize("command, config, flag", [
    ("multi_dataset", "datasets: [ptb]\nseeds: []\n", "--seeds is empty"),
    ("downstream", "model: {pretrained: x}\nseeds: []\n", "--seeds is empty"),
    ("generation", "model: {pretrained: x}\ncontext_length: []\n", "--context_length is empty"),
])
def test_an_empty_list_is_one_line(command, config, flag, tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(config)
    code, _, err = run([command, "--config", str(path)], capsys)
    assert flag in one_error_line(code, err)


# ---- config files --------------------------------------------------------------------------------
BAD_FILES = {
    "malformed": ("name: x\n  methods: [a\n", "not valid YAML: line 2, column 10"),
    "empty": ("", "is empty; expected a mapping"),
    "a list": ("- dense\n- h2o\n", "holds a list; expected a mapping"),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
@pytest.mark.parametrize("command", ["sweep", "downstream", "generation"])
def test_a_bad_config_file_is_one_line_naming_it(command, case, tmp_path, capsys):
    text, reason = BAD_FILES[case]
    path = tmp_path / "preset.yaml"
    path.write_text(text)
    code, _, err = run([command, "--config", str(path)], capsys)
    line = one_error_line(code, err)
    assert f"--config {path}" in line and reason in line and "unicode string" not in line, line


# ---- the summary names n beside each interval -------------------------------------------------------
def test_the_downstream_summary_shows_n_beside_each_interval(tmp_path):
    from lightning_bench.experiments.downstream.config import Cell
    from lightning_bench.experiments.downstream.report import write_report

    grid = [Cell("xsum", m, "sparsity", s, "query_aware", 1) for m, s in (("dense", 0.0), ("h2o", 0.5),
                                                                           ("tova", 0.5))]
    scores = {"dense": [10.0, 20.0, 30.0], "h2o": [9.0, 21.0, 25.0], "tova": [8.0, 18.0, 29.0]}
    records = {c.key: {"metrics": {"rougeL": sum(scores[c.method]) / 3}, "primary_metric": "rougeL",
                       "primary_per_example": scores[c.method], "timing": {"decode_tokens_per_s": 1.0},
                       "cache": {"kept_fraction_of_compressed": 0.5, "kv_bytes_peak_mean": 2.0**20}} for c in grid}
    _, summary = write_report(tmp_path, "t", {"model": {"pretrained": "m"}}, {}, grid, records)
    tova = next(line for line in summary.read_text().splitlines() if " tova " in line)
    intervals = re.findall(r"[+-]\d+\.\d\d \[[+-]\d+\.\d\d, [+-]\d+\.\d\d\] n=(\d+)", tova)
    assert intervals == ["3", "3"]  # vs dense and vs h2o, each over the 3 paired examples
