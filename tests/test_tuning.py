"""`lightning_bench tune`: spaces from the declarations, one-line errors before anything loads, and one real
search on a local Ray (2 CPUs) over a tiny model: no worse than the defaults, cached, shown, resumed without
redoing trials, its rows disjoint from downstream's, its configs used by `downstream --tuned_configs`."""

import json
import sys

import pytest

from lightning_bench.experiments.tuning.space import Target, searched, targets, violation
from lightning_bench.sparsity.masking.stack import MaskerStack
from tests.test_cli import run
from tests.test_experiment_safety import one_error_line


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
            # snapkv's kernel must be odd and cab's three shares sum to 1, which no range declares: such points
            # are refused with the declaration's reason (reported as invalid trials), never an exception
            assert why is None or target.name in ("snapkv", "cab") and "must" in why, (target.name, point, why)
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
    from pathlib import Path

    return json.loads(next(Path("tuned").glob(f"*__{name}.json")).read_text())


@pytest.mark.shared_data
def test_search_cache_show_resume_and_downstream(tiny_hf, shared_data, ray_local, tmp_path, capsys):
    import pandas

    code, out, err = run(_tune(tiny_hf, shared_data, "--methods", "h2o", "--num_samples", "3"), capsys)
    assert code == 0, err
    entry = _entry("h2o__global")
    trials = pandas.read_csv(next(tmp_path.glob("tuned/*__h2o__global.trials.csv")))
    default = trials[trials["config/recent_ratio"] == 0.5]  # the declared default, evaluated first
    assert entry["status"] == "done" and len(trials) == 3 and len(default) == 1
    assert entry["objective"] <= default["objective"].iloc[0]  # no worse than the default on its objective
    assert set(trials["model_loads"]) == {1}  # one load per worker process, reused by its later trials
    assert entry["tuning_rows"]["xsum"] == ["2", "3"] and entry["evaluation_rows"] == 2

    code, out, _ = run(["tune", "show", "tuned"], capsys)
    assert code == 0 and "h2o__global  done  combined_score" in out and "recent_ratio=" in out

    # killed after its trials finished but before its entry: the rerun restores Ray Tune's experiment and runs
    # none of them again (the same trials, the same results)
    next(tmp_path.glob("tuned/*__h2o__global.json")).unlink()
    code, out, err = run(_tune(tiny_hf, shared_data, "--methods", "h2o", "--num_samples", "3"), capsys)
    assert code == 0 and "resuming the search" in out, err
    again = pandas.read_csv(next(tmp_path.glob("tuned/*__h2o__global.trials.csv")))
    assert sorted(again["trial_id"]) == sorted(trials["trial_id"]) and list(again["timestamp"].sort_values()) == \
        list(trials["timestamp"].sort_values())
    assert _entry("h2o__global")["best"] == entry["best"]

    code, out, err = run(["downstream", "--model.pretrained", str(tiny_hf), "--data_dir", str(shared_data),
                          "--tasks", "xsum", "--methods", "h2o", "--max_samples", "2", "--max_new_tokens", "4",
                          "--max_length", "192", "--tuned_configs", "tuned", "--results_dir", "r", "--name", "t"],
                         capsys)
    assert code == 0, err
    cell = json.loads((tmp_path / "r/t/t_results.json").read_text())["cells"]["xsum__h2o_s0.5_query_aware_seed1234"]
    assert cell["method_params"]["recent_ratio"] == pytest.approx(entry["best"]["recent_ratio"])
    evaluated = {s["id"] for s in cell["samples"]}
    assert evaluated and not evaluated & set(entry["tuning_rows"]["xsum"])  # tuning never saw an evaluated row


@pytest.mark.shared_data
def test_per_task_mode_writes_one_entry_per_task(tiny_hf, shared_data, ray_local, capsys):
    stack = "{topk: 'sink:0.1,local:0.1,oracle_topk:0.1'}"
    code, _, err = run(_tune(tiny_hf, shared_data, "--tasks", "xsum", "cnn_dailymail", "--methods", "dense",
                             "--attention_sparsity", stack, "--mode", "per_task", "--num_samples", "2",
                             "--search", "tpe", "--objective", "attention_error", "--asha", "false"), capsys)
    assert code == 0, err
    for task in ("xsum", "cnn_dailymail"):
        entry = _entry(f"topk__{task}")
        assert entry["status"] == "done" and entry["tasks"] == [task] and set(entry["best"]) == {
            "0.sink.sink_size", "1.local.window_size", "2.oracle_topk.heavy_size"}
    code, out, _ = run(["tune", "show", "tuned"], capsys)
    assert out.count("topk__") == 2
