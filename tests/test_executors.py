"""The runner's executors (experiments/core/runner.py, ray_executor.py): a sweep grid and a downstream grid
run as two shards (one after the other, or at once) and by two Ray workers give the results JSON of a serial
run; a shard process killed mid-group, or a Ray worker dying mid-group, leaves no finished-looking cell and
a rerun completes it; a bad --shard, --executor ray without Ray and an unreachable --ray.address are one line."""

import functools
import json
import signal
import sys
from pathlib import Path

import pytest

from lightning_bench.errors import ConfigError
from lightning_bench.experiments.core.runner import run_grid
from lightning_bench.experiments.core.store import CellStore
from lightning_bench.experiments.downstream import command as downstream_command
from lightning_bench.experiments.sweep.streaming_eval import CellRunner
from tests.conftest import need_module
from tests.test_cli import run
from tests.test_downstream_driver import _args, _die_in_the_second_group, _stable
from tests.test_experiment_safety import COMMANDS, NO_MODEL, one_error_line
from tests.test_runner import FILES, REFUSAL, Cell, grid_command, square, works
from tests.test_streaming_sparsity import sweep, tiny_sweep

# What differs between two runs of one grid, however they ran, and is left out of the comparisons: wall-clock
# figures (seconds, tokens_per_second, timing, prefill_seconds, decode_seconds) and peak memory (another
# process, another allocator history); `meta` (date, host, process, the command line as typed, tokenizer
# cache hits); a cell's `checksum` (it covers the cell's meta). Each run below writes in a folder of its own
# under the same relative paths, so the paths the results name are compared too.
VOLATILE = {"seconds", "tokens_per_second", "timing", "prefill_seconds", "decode_seconds", "peak_memory_mb",
            "meta", "checksum"}
stable = functools.partial(_stable, volatile=VOLATILE)


def no_model_here(*args):
    raise AssertionError("the model was loaded in the process that drives the Ray workers")


def in_own_folder(tmp_path: Path, name: str, monkeypatch) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


# ---- one-line errors -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["3/2", "x", "0/0"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_bad_shard_is_one_line_before_anything_loads(command, value, tiny_corpus, tmp_path, capsys):
    code, _, err = run([*COMMANDS[command](tmp_path, tiny_corpus, str(tmp_path / "r")), "--shard", value], capsys)
    line = one_error_line(code, err)
    assert f"--shard {value!r}: expected I/N with 0 <= I < N" in line and NO_MODEL not in line, line


@pytest.mark.parametrize("command", ["downstream", "sweep"])
def test_executor_ray_without_ray_names_the_extra(command, tiny_corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as where it is not installed
    code, _, err = run([*COMMANDS[command](tmp_path, tiny_corpus, str(tmp_path / "r")), "--executor", "ray"], capsys)
    assert "pip install 'lightning_bench[ray]'" in one_error_line(code, err)


def test_an_unreachable_ray_address_is_one_line_before_the_model_loads(tiny_corpus, tmp_path, capsys):
    need_module("ray")
    argv = COMMANDS["downstream"](tmp_path, tiny_corpus, str(tmp_path / "r"))
    code, _, err = run([*argv, "--executor", "ray", "--ray.address", "127.0.0.1:1"], capsys)
    line = one_error_line(code, err)
    assert "--ray.address 127.0.0.1:1: cannot reach it" in line and NO_MODEL not in line, line


# ---- Ray: a worker dying mid-group ---------------------------------------------------------------------------
def test_a_ray_worker_dying_mid_group_fails_that_group_only_and_a_rerun_completes_it(ray_local, tmp_path):
    folder = tmp_path / "ray"
    with pytest.raises(ConfigError, match="the worker computing g died .* run the same command again"):
        grid_command(str(folder), die_in="g")
    assert sorted(p.name for p in folder.glob("*.json")) == ["c1.json", "c4.json"]  # g's cells: none written
    resumed = grid_command(str(folder))  # its lock was released: the rerun takes it
    serial = run_grid(works(Cell(1), Cell(2, "g"), Cell(3, "g"), Cell(4)), CellStore(tmp_path / "serial", FILES,
                                                                                    REFUSAL), square, lambda *a: None)
    assert stable(resumed) == stable(serial) and len(serial) == 4


# ---- the same results JSON however the grid ran -----------------------------------------------------------------
def test_sweep_as_shards_and_on_ray_writes_the_serial_json(tiny_corpus, tmp_path, capsys, monkeypatch, cli_process,
                                                           ray_local):
    """11 cells in 8 groups (a (length, ratio) on both axes is one group); the document is written by every
    shard at once, or by the Ray driver only."""
    def run_in(name, *extra) -> str:
        """The grid in a folder of its own (the same relative paths in every run); "-": the folder only."""
        tiny_sweep(in_own_folder(tmp_path, name, monkeypatch), tiny_corpus, output="sweep.json")
        return "" if extra == ("-",) else sweep(capsys, "--config", "tiny_sweep.yaml", *extra)

    run_in("serial")
    out = run_in("one_by_one", "--shard", "0/2")
    assert "cells are still owed by other shards" in out and not json.loads(Path("sweep.json").read_text())["complete"]
    assert "11/11 of this grid done" in sweep(capsys, "--config", "tiny_sweep.yaml", "--shard", "1/2")

    run_in("at_once", "-")
    logs = [Path(f"shard{i}.log") for i in range(2)]
    shards = [cli_process(["sweep", "--config", "tiny_sweep.yaml", "--shard", f"{i}/2"], log)
              for i, log in enumerate(logs)]
    for shard in shards:
        shard.join(timeout=600)
    assert [s.exitcode for s in shards] == [0, 0], [log.read_text()[-2000:] for log in logs]

    monkeypatch.setattr(CellRunner, "model", no_model_here)  # in this process, the driver's: the workers load it
    run_in("ray", "--executor", "ray", "--ray.workers", "2")
    serial = stable(json.loads((tmp_path / "serial" / "sweep.json").read_text()))
    assert serial["complete"] and serial["cells_done"] == 11
    for name in ("one_by_one", "at_once", "ray"):
        assert stable(json.loads((tmp_path / name / "sweep.json").read_text())) == serial, name


@pytest.mark.shared_data
def test_downstream_as_shards_one_killed_and_on_ray_writes_the_serial_json(tiny_hf, shared_data, tmp_path, capsys,
                                                                           monkeypatch, cli_process, ray_local):
    """4 groups (task x protocol x seed), 2 cells each: shard 0/2 has the 1st and the 3rd. Killed (-9) in its
    2nd group, it leaves that group's progress and no cell of it; run again, it resumes the group; shard 1/2
    then finds the grid complete and writes the report."""
    grid = ["--tasks", "squad_v2", "--methods", "dense", "h2o", "--ratios", "0.5", "--protocols", "query_aware",
            "query_agnostic", "--seeds", "1", "2"]
    results = lambda: json.loads(Path("r/t/t_results.json").read_text())  # noqa: E731

    in_own_folder(tmp_path, "serial", monkeypatch)
    code, _, err = run(_args(tiny_hf, shared_data, "r", *grid), capsys)
    assert code == 0, err
    serial = stable(results())

    in_own_folder(tmp_path, "shards", monkeypatch)
    killed = cli_process(_args(tiny_hf, shared_data, "r", *grid, "--shard", "0/2"), Path("killed.log"),
                         before=_die_in_the_second_group)
    killed.join(timeout=600)
    assert killed.exitcode == -signal.SIGKILL, Path("killed.log").read_text()[-3000:]
    assert sorted(p.name for p in Path("r/t/cells").glob("*.json")) == [
        "squad_v2__dense_s0.0_query_aware_seed1.json", "squad_v2__h2o_s0.5_query_aware_seed1.json"]
    assert [p.name for p in Path("r/t/partial").iterdir()] == ["squad_v2__query_agnostic_seed1.json"]
    code, out, err = run(_args(tiny_hf, shared_data, "r", *grid, "--shard", "0/2"), capsys)
    assert code == 0 and "resuming after example 1 of 2" in out, err
    assert "4 of the grid's 8 cells are still owed by other shards" in out and not Path("r/t/t_results.json").exists()
    code, out, err = run(_args(tiny_hf, shared_data, "r", *grid, "--shard", "1/2"), capsys)
    assert code == 0 and stable(results()) == serial, err

    in_own_folder(tmp_path, "ray", monkeypatch)
    monkeypatch.setattr(downstream_command, "network", no_model_here)  # the driver's: the workers load it
    code, out, err = run(_args(tiny_hf, shared_data, "r", *grid, "--executor", "ray", "--ray.workers", "2"), capsys)
    assert code == 0 and stable(results()) == serial, err
