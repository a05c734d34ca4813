"""`lightning_bench tune`: spaces from the declarations, one-line errors before anything loads, and real
searches on a local Ray (2 CPUs) over a tiny model: the best trial cached (a planted better point found), shown,
a search killed mid-way resumed without redoing its finished trials, its rows disjoint from downstream's, its
configs used by `downstream --tuned_configs` serially, as shards and on Ray workers alike."""

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from lightning_bench.experiments.tuning.space import Target, searched, targets, violation
from lightning_bench.sparsity.masking.stack import MaskerStack
from tests.test_cli import run
from tests.test_downstream_driver import _args
from tests.test_executors import stable
from tests.test_experiment_safety import one_error_line
from tests.helpers import grid_results


def _tune(tiny_hf, shared_data, *extra):
    return ["tune", "--model.pretrained", str(tiny_hf), "--data_dir", str(shared_data), "--tasks", "xsum",
            "--max_samples", "2", "--tune_samples", "2", "--grace_samples", "1", "--max_new_tokens", "4",
            "--max_length", "192", "--tuned_configs", "tuned", *extra]


# ---- spaces from the declarations -------------------------------------------------------------------------
def test_every_point_of_a_declared_space_passes_its_declarations():
    """MagicPIG's space (the earlier system's could not pass its own check) and every method's: the corners of
    each searched range build, or are refused with a reason (never an exception)."""
    configs = targets(["dense", "h2o", "snapkv", "cab", "streaming_llm"],
                      {"pig": "magic_pig:8:75", "topk": "sink:0.02,local:0.02,oracle_topk:0.05"}, {})
    assert [t.name for t in configs] == ["h2o", "snapkv", "cab", "streaming_llm", "pig", "topk"]  # dense: none
    for target in configs:
        space = searched(target)
        assert space and "seed" not in space and "3.seed" not in space  # an unbounded seed is never searched
        for corner in ("low", "high"):
            point = {k: s.get(corner, s.get("choices", [s["default"]])[0]) for k, s in space.items()}
            why = violation(target, point, None)
            # cab's three shares must sum to 1, which no range declares: such points are refused with the
            # declaration's reason (reported as invalid trials), never an exception
            assert why is None or target.name == "cab" and "must" in why, (target.name, point, why)
    snapkv = searched(targets(["snapkv"], {}, {})[0])
    assert snapkv["kernel"] == {"default": 7, "choices": list(range(1, 28, 2))}  # its step 2: only odd kernels
    assert searched(targets(["snapkv"], {}, {})[0], {"kernel": {"low": 4, "high": 9}})["kernel"]["choices"] == [5, 7, 9]
    pig = searched(Target("pig", stack=MaskerStack.parse("magic_pig:8:75")))
    assert pig["0.magic_pig.lsh_k"] == {"default": 8, "low": 1, "high": 32}


def test_a_stack_over_its_density_target_is_refused_and_fixed_parameters_are_not_searched():
    topk = Target("topk", stack=MaskerStack.parse("sink:0.02,local:0.02,oracle_topk:0.05"))
    assert "above the target 0.05" in violation(topk, {}, 0.05)
    assert violation(topk, {"2.oracle_topk.heavy_size": 0.01}, 0.05) is None
    cab = targets(["cab"], {}, {"cab": {"bridge_ratio": 0.1}})[0]
    assert set(searched(cab)) == {"local_ratio", "importance_ratio"}
    assert searched(cab, {"local_ratio": {"low": 0.2, "high": 0.4}})["local_ratio"]["high"] == 0.4


# ---- one line, exit 2, before any model loads ---------------------------------------------------------------
@pytest.mark.parametrize("extra, message", [
    (["--methods", "h2o", "--space", "{snapkv: {window: {low: 1, high: 4}}}"], "--space names snapkv"),
    (["--methods", "h2o", "--space", "{h2o: {window: {low: 1, high: 4}}}"], "unknown parameter window"),
    (["--methods", "h2o", "--space", "{h2o: {recent_ratio: {low: 0.5, high: 2}}}"], "not within the declared range"),
    (["--methods", "h2o", "--method_params.h2o.recent_ratio", "1.5"], "recent_ratio must be in [0.0, 1.0]"),
    (["--methods", "nope"], "unknown sparsity method 'nope'"),
    (["--methods", "h2o", "--ray.address", "127.0.0.1:1"], "--ray.address 127.0.0.1:1: cannot reach it"),
])
def test_bad_tune_options_are_one_line(extra, message, tmp_path, capsys):
    code, _, err = run(_tune(tmp_path / "no_model", tmp_path, *extra), capsys)
    line = one_error_line(code, err)
    assert message in line, line


def test_tune_without_ray_names_the_extra(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as where it is not installed
    code, _, err = run(_tune(tmp_path / "no_model", tmp_path, "--methods", "h2o"), capsys)
    assert "tune needs Ray Tune, which is not installed: pip install 'lightning_bench[tune]'" in one_error_line(code,
                                                                                                               err)


# ---- a real search on Ray ----------------------------------------------------------------------------------
def _entry(name: str) -> dict:
    return json.loads(next(Path("tuned").glob(f"*__{name}.json")).read_text())


def _trials(name: str):
    import pandas

    return pandas.read_csv(next(Path("tuned").glob(f"*__{name}.trials.csv")))


def _best_of(trials, rows: int) -> float:
    """The smallest objective among the valid trials that evaluated every tuning row (the ones that can be best)."""
    return trials[(trials["valid"] == True) & (trials["rows"] >= rows)]["objective"].min()  # noqa: E712


@pytest.mark.shared_data
def test_search_cache_show_and_the_tuned_matrix_on_every_executor(tiny_hf, shared_data, ray_local, tmp_path, capsys,
                                                                  monkeypatch):
    code, out, err = run(_tune(tiny_hf, shared_data, "--methods", "h2o", "--num_samples", "3"), capsys)
    assert code == 0, err
    entry, trials = _entry("h2o__global"), _trials("h2o__global")
    assert entry["status"] == "done" and len(trials) == 3 and entry["trials"] == 3
    assert len(trials[trials["config/recent_ratio"] == 0.5]) == 1  # the declared default, evaluated once
    assert entry["objective"] == pytest.approx(_best_of(trials, 2))  # the best trial's, not the first one's
    assert set(trials["model_loads"]) == {1}  # one load per worker process, reused by its later trials
    assert entry["tuning_rows"]["xsum"] == ["2", "3"] and entry["evaluation_rows"] == 2

    code, out, _ = run(["tune", "show", "tuned"], capsys)
    assert code == 0 and "h2o__global  done  combined_score" in out and "recent_ratio=" in out

    # the matrix with the tuned configs: serially, as two shards, and on two Ray workers, the same results
    grid = ["--tasks", "xsum", "--methods", "h2o", "--seeds", "1", "2", "--tuned_configs", str(tmp_path / "tuned")]
    results = {}
    for name, extra in (("serial", []), ("shard", ["--shard", "0/2"]), ("shard", ["--shard", "1/2"]),
                        ("ray", ["--executor", "ray", "--ray.workers", "2"])):
        (tmp_path / name).mkdir(exist_ok=True)
        monkeypatch.chdir(tmp_path / name)
        code, out, err = run(_args(tiny_hf, shared_data, "r", *grid, *extra), capsys)
        assert code == 0, err
        if Path("r/t/t_results.json").exists():
            results[name] = grid_results("r/t/t_results.json")
    assert stable(results["shard"]) == stable(results["serial"]) == stable(results["ray"])
    for cell in results["serial"]["cells"].values():
        assert cell["method_params"]["recent_ratio"] == pytest.approx(entry["best"]["recent_ratio"])
        evaluated = {s["id"] for s in cell["samples"]}
        assert evaluated and not evaluated & set(entry["tuning_rows"]["xsum"])  # tuning never saw an evaluated row

    # `test --task` with the same cache: the tuned method generates what the tuned downstream cell generated
    code, out, err = run(["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--task", "xsum",
                          "--data.data_dir", str(shared_data), "--data.max_samples", "2", "--data.max_new_tokens", "4",
                          "--data.max_length", "192", "--sparsity", "h2o", "--sparsity.ratio", "0.5",
                          "--sparsity.tuned_configs", str(tmp_path / "tuned"), "--results_dir", "tested",
                          "--trainer.enable_progress_bar", "false", "--trainer.logger", "false"], capsys)
    assert code in (0, None), err
    rows = [json.loads(line) for line in next(Path("tested").glob("*.samples.jsonl")).read_text().splitlines()]
    cell = results["serial"]["cells"]["xsum__h2o_s0.5_query_aware_seed1"]
    assert [r["prediction"] for r in rows] == [s["prediction"] for s in cell["samples"]]
    record = next(p for p in Path("tested").glob("*_downstream.json"))
    assert f"{entry['best']['recent_ratio']}" in record.read_text()[:100000]  # the tuned parameter, recorded


def _experiment_trials(folder: Path) -> dict[str, str]:
    """{trial id: status} in the experiment states Ray Tune wrote under `folder` ({} before the first)."""
    out = {}
    for state in sorted(folder.glob("ray/*/experiment_state-*.json")):
        try:
            trials = json.loads(state.read_text())["trial_data"]
        except (json.JSONDecodeError, OSError):  # caught mid-write: read again next time
            continue
        out.update({t["trial_id"]: t["status"] for t in (json.loads(item[0]) for item in trials)})
    return out


@pytest.mark.shared_data
def test_per_task_search_killed_mid_way_resumes_and_finds_a_planted_better_config(tiny_hf, shared_data, ray_local,
                                                                                  tmp_path, capsys, cli_process,
                                                                                  monkeypatch):
    """Per-task mode, one search per task. Top-k over at least half the keys (the narrowed range) has less
    attention error than the declared 10%, so every point but the default is better: a search that did not
    evaluate, compare or cache its trials (or cached the first one) fails here. The driver is killed (-9) once
    the first search has finished a trial; the same command resumes that search without running its finished
    trials again, then runs the second."""
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "0")  # the search's state saved at every trial event
    stack = "{topk: 'sink:0.1,local:0.1,oracle_topk:0.1'}"
    argv = _tune(tiny_hf, shared_data, "--tasks", "xsum", "cnn_dailymail", "--methods", "dense",
                 "--attention_sparsity", stack, "--mode", "per_task", "--num_samples", "4", "--search", "tpe",
                 "--objective", "attention_error", "--asha", "false", "--max_concurrent_trials", "1",
                 "--space", "{topk: {2.oracle_topk.heavy_size: {low: 0.5, high: 0.8}}}",
                 "--ray.address", ray_local.get_runtime_context().gcs_address)
    search = cli_process(argv, tmp_path / "killed.log")
    deadline = time.monotonic() + 300
    while "TERMINATED" not in _experiment_trials(tmp_path / "tuned").values():
        assert search.is_alive() and time.monotonic() < deadline, (tmp_path / "killed.log").read_text()[-3000:]
        time.sleep(0.2)
    os.kill(search.pid, signal.SIGKILL)  # the driver, mid-search: no entry, no trials table
    search.join(timeout=60)
    finished = {k for k, v in _experiment_trials(tmp_path / "tuned").items() if v == "TERMINATED"}
    assert finished and len(finished) < 4 and not list(Path("tuned").glob("*.json"))
    result = lambda trial: next((tmp_path / "tuned").glob(f"ray/*/trial_{trial}_*/result.json"))  # noqa: E731
    before = {trial: result(trial).read_text() for trial in finished}

    code, out, err = run(argv, capsys)
    assert code == 0 and out.count("resuming the search") == 1, err
    assert finished <= set(_trials("topk__xsum")["trial_id"])
    for trial, text in before.items():  # a finished trial was not run again: its results are the same lines
        assert result(trial).read_text() == text
    for task in ("xsum", "cnn_dailymail"):
        entry, trials = _entry(f"topk__{task}"), _trials(f"topk__{task}")
        assert entry["status"] == "done" and entry["tasks"] == [task] and len(trials) == 4
        assert set(entry["best"]) == {"0.sink.sink_size", "1.local.window_size", "2.oracle_topk.heavy_size"}
        default = trials[trials["config/2.oracle_topk.heavy_size"] == 0.1]["objective"].iloc[0]
        assert entry["best"]["2.oracle_topk.heavy_size"] >= 0.5 and entry["objective"] < default
        assert entry["objective"] == pytest.approx(entry["figures"]["attention_error"])
    code, out, _ = run(["tune", "show", "tuned"], capsys)
    assert out.count("topk__") == 2


def test_the_summary_names_the_parameters_each_task_ran():
    """A matrix run with per-task tuned configs: one method, two parameter sets; the summary names both."""
    from types import SimpleNamespace as Cell

    from lightning_bench.experiments.downstream.report import method_parameters

    grid = [Cell(key="a", method="h2o", task="ruler/niah_single_2"), Cell(key="b", method="h2o", task="squad_v2"),
            Cell(key="c", method="snapkv", task="squad_v2")]
    records = {"a": {"method_params": {"recent_ratio": 0.5}}, "b": {"method_params": {"recent_ratio": 0.25}},
               "c": {"method_params": {"window": 3, "kernel": 7, "pooling": "max"}}}
    assert method_parameters(grid, records) == (
        "method parameters: h2o(recent_ratio=0.5) on ruler/niah_single_2; h2o(recent_ratio=0.25) on squad_v2; "
        "snapkv(window=3, kernel=7, pooling=max)\n")


@pytest.mark.parametrize("extra, message", [
    (["--sparsity.tuned_configs", "nowhere", "--sparsity", "h2o"], "--sparsity.tuned_configs nowhere: not a folder"),
    (["--sparsity.tuned_configs", "."], "applies to validate/test with --sparsity METHOD"),
])
def test_bad_test_tuned_configs_are_one_line(extra, message, tiny_hf, capsys):
    code, _, err = run(["test", "--model", "hf", "--model.pretrained", str(tiny_hf), *extra], capsys)
    line = one_error_line(code, err)
    assert message in line, line
