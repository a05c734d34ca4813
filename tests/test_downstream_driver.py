"""`lightning_bench downstream` end to end on a tiny random Llama and the shared samples: the grid, the
results JSON and summary, dense cells equal to `lightning_bench test`, sparsity 0 equal to dense for
every method and both protocols, a killed run resumed to the same numbers, a group stopped mid-way
resumed after its last finished example, a damaged cell file recomputed, and one-line errors."""

import json
import shutil
import signal
from pathlib import Path

import pytest

from lightning_bench.data.tokenization import offline_gpt2_folder
from tests.test_cli import run
from tests.helpers import grid_results

pytestmark = pytest.mark.shared_data
VOLATILE = {"meta", "timing", "prefill_seconds", "decode_seconds", "peak_memory_mb", "checksum", "results_dir"}


def _args(tiny_hf, shared_data, results_dir, *extra):
    return ["downstream", "--model.pretrained", str(tiny_hf), "--data_dir", str(shared_data), "--results_dir",
            str(results_dir), "--name", "t", "--max_samples", "2", "--max_new_tokens", "4", "--max_length", "192",
            *extra]


def _stable(value, volatile=VOLATILE):
    """The results without what differs between two runs of the same grid (times, memory, dates)."""
    if isinstance(value, dict):
        return {k: _stable(v, volatile) for k, v in value.items() if k not in volatile}
    if isinstance(value, list):
        return [_stable(v, volatile) for v in value]
    return value


def _results(results_dir: Path, name: str = "t") -> dict:
    return grid_results(results_dir / name / f"{name}_results.json")


def test_grid_results_summary_and_dense_equal_to_test(tiny_hf, shared_data, tmp_path, capsys):
    code, out, err = run(_args(tiny_hf, shared_data, tmp_path / "r", "--tasks", "xsum", "--methods", "dense", "h2o",
                               "streaming_llm", "--ratios", "0.5", "--protocols", "query_aware", "query_agnostic"),
                         capsys)
    assert code == 0, err
    results = _results(tmp_path / "r")
    cells = results["cells"]
    assert len(cells) == 2 * (1 + 2)  # dense once per protocol, two evicting methods at one level
    h2o = cells["xsum__h2o_s0.5_query_agnostic_seed1234"]
    assert h2o["num_examples"] == 2 and h2o["primary_metric"] == "rougeL" and len(h2o["samples"]) == 2
    assert all(s["question_tokens"] > 0 and s["compressed_tokens"] == s["context_tokens"] for s in h2o["samples"])
    assert all(s["kept_tokens"] < s["compressed_tokens"] and s["kv_bytes_peak"] < s["dense_kv_bytes_peak"]
               for s in h2o["samples"])
    comparison = h2o["comparisons"]
    assert comparison["vs_dense"]["reference"] == "xsum__dense_s0.0_query_agnostic_seed1234"
    assert comparison["vs_dense"]["n"] == 2 and "vs_h2o" not in comparison
    assert cells["xsum__streaming_llm_s0.5_query_aware_seed1234"]["comparisons"]["vs_h2o"]["n"] == 2
    summary = (tmp_path / "r" / "t" / "t_summary.txt").read_text()
    assert "streaming_llm" in summary and "diff vs dense" in summary
    # every method's parameters as run, and the tasks where dense itself fails flagged (a tiny random model)
    assert "method parameters: h2o(recent_ratio=0.5); streaming_llm(n_sink=4)" in summary
    assert "dense at most 20 (read their rows as noise): xsum (query_agnostic) dense" in summary
    assert "not in this report" not in out

    # a smaller grid in the same folder reports its own cells and says which cell files it left out (kept)
    code, out, err = run(_args(tiny_hf, shared_data, tmp_path / "r", "--tasks", "xsum", "--methods", "dense",
                               "--protocols", "query_aware"), capsys)
    assert code == 0, err
    assert list(_results(tmp_path / "r")["cells"]) == ["xsum__dense_s0.0_query_aware_seed1234"]
    assert ("5 cell file(s) of earlier runs in " in out and "are kept but not in this report (e.g. "
            "xsum__dense_s0.0_query_agnostic_seed1234)" in out)
    assert len(list((tmp_path / "r" / "t" / "cells").glob("*.json"))) == 6

    # the dense cell is what `lightning_bench test --task xsum` generates and scores on the same examples
    code, _, err = run(["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--task", "xsum",
                        "--data.data_dir", str(shared_data), "--data.max_samples", "2", "--data.max_new_tokens", "4",
                        "--data.max_length", "192", "--trainer.enable_progress_bar", "false",
                        "--trainer.logger", "false"], capsys)
    assert code in (0, None), err
    folder = Path("benchmark_results")
    record = json.loads((folder / f"hf-{tiny_hf.name}_downstream.json").read_text())
    rows = [json.loads(line) for line in (folder / f"hf-{tiny_hf.name}_downstream.samples.jsonl").read_text().splitlines()]
    dense = cells["xsum__dense_s0.0_query_aware_seed1234"]
    assert [s["prediction"] for s in dense["samples"]] == [r["prediction"] for r in rows]
    assert dense["metrics"]["rougeL"] == pytest.approx(record["xsum"]["rougeL"])


def test_sparsity_zero_reproduces_dense_for_every_method_and_protocol(tiny_hf, shared_data, tmp_path, capsys):
    from lightning_bench.sparsity.methods import METHODS

    code, _, err = run(_args(tiny_hf, shared_data, tmp_path, "--tasks", "xsum", "--max_samples", "1",
                             "--methods", *METHODS, "--ratios", "0.0", "--protocols", "query_aware",
                             "query_agnostic"), capsys)
    assert code == 0, err
    cells = _results(tmp_path)["cells"]
    for protocol in ("query_aware", "query_agnostic"):
        dense = cells[f"xsum__dense_s0.0_{protocol}_seed1234"]["samples"][0]["generated"]
        for method in METHODS:
            assert cells[f"xsum__{method}_s0.0_{protocol}_seed1234"]["samples"][0]["generated"] == dense, method


def _die_in_the_second_group():
    """Arms kill -9 of this process for when the grid's second group has saved its first example (the first
    group's cells written, the second's progress on disk), as a job killed mid-way: no `finally`, no record."""
    import os

    from lightning_bench.experiments.core.store import Progress

    save, saved = Progress.save, []

    def save_then_die(self, examples, cells):
        save(self, examples, cells)
        saved.append(self.path.name)
        if len(set(saved)) == 2:
            os.kill(os.getpid(), signal.SIGKILL)

    Progress.save = save_then_die


def test_killed_run_resumes_to_the_same_results_and_damaged_cells_are_recomputed(tiny_hf, shared_data, tmp_path,
                                                                                  capsys, cli_process):
    """The uninterrupted run and the resumed one run in-process, the killed one in a process of its own
    (squad_v2 first: the killed run ends before any ROUGE scoring, whose scorer takes seconds to build)."""
    grid = ["--tasks", "squad_v2", "xsum", "--methods", "dense", "h2o", "tova", "--ratios", "0.5", "0.9"]
    code, _, err = run(_args(tiny_hf, shared_data, tmp_path / "whole", *grid), capsys)
    assert code == 0, err

    cells_dir = tmp_path / "killed" / "t" / "cells"
    killed = cli_process(_args(tiny_hf, shared_data, tmp_path / "killed", *grid), tmp_path / "killed.log",
                         before=_die_in_the_second_group)
    killed.join(timeout=600)
    assert killed.exitcode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    finished = sorted(cells_dir.glob("*.json"))
    assert len(finished) == 5 and not (tmp_path / "killed" / "t" / "t_results.json").exists()  # squad_v2's cells
    assert [p.name for p in (tmp_path / "killed" / "t" / "partial").iterdir()] == ["xsum__query_aware_seed1234.json"]
    damaged = finished[1]
    damaged.write_text(damaged.read_text()[:200])  # a cell file cut short (as by a full disk)
    code, out, err = run(_args(tiny_hf, shared_data, tmp_path / "killed", *grid), capsys)
    assert code == 0, err
    assert out.count("done before") == len(finished) - 1 and f"{damaged.name} is damaged" in err
    assert "xsum / query_aware / seed 1234: resuming after example 1 of 2" in out
    assert damaged.with_name(damaged.name + ".corrupt").exists()
    assert _stable(_results(tmp_path / "killed")) == _stable(_results(tmp_path / "whole"))


class _Stop(Exception):
    """Stands for a run stopped in the middle of a group (a crash, a session's end)."""


def test_a_group_stopped_mid_way_resumes_after_its_last_finished_example(tiny_hf, shared_data, tmp_path, capsys,
                                                                         monkeypatch):
    from lightning_bench.sparsity import task_decode

    grid = ["--tasks", "xsum", "--max_samples", "4", "--methods", "dense", "h2o", "tova", "--ratios", "0.5",
            "--protocols", "query_agnostic"]
    code, _, err = run(_args(tiny_hf, shared_data, tmp_path / "whole", *grid), capsys)
    assert code == 0, err

    original_continue, original_prefill = task_decode.continue_prompts, task_decode.prefill_prompt
    calls = {"continue": 0, "prefill": 0}

    def continue_then_stop(*args, **kwargs):  # the 3 cells of an example decode as one batch: stop in the 3rd
        calls["continue"] += 1
        if calls["continue"] == 3:
            raise _Stop
        return original_continue(*args, **kwargs)

    monkeypatch.setattr(task_decode, "continue_prompts", continue_then_stop)
    with pytest.raises(_Stop):
        run(_args(tiny_hf, shared_data, tmp_path / "stopped", *grid), capsys)
    partial = tmp_path / "stopped" / "t" / "partial" / "xsum__query_agnostic_seed1234.json"
    assert json.loads(partial.read_text())["examples"] == 2 and not list((tmp_path / "stopped" / "t" / "cells").glob("*"))

    def counted_prefill(*args, **kwargs):
        calls["prefill"] += 1
        return original_prefill(*args, **kwargs)

    monkeypatch.setattr(task_decode, "continue_prompts", original_continue)
    monkeypatch.setattr(task_decode, "prefill_prompt", counted_prefill)
    code, out, err = run(_args(tiny_hf, shared_data, tmp_path / "stopped", *grid), capsys)
    assert code == 0, err
    assert "resuming after example 2 of 4" in out and calls["prefill"] == 2  # examples 3 and 4 only
    assert not partial.exists()
    assert _stable(_results(tmp_path / "stopped")) == _stable(_results(tmp_path / "whole"))

    # the continuations of 2 examples sharing batches: the same results; stopped in its 2nd batch, it
    # resumes after the 1st batch's 2 examples
    calls["continue"] = 1
    monkeypatch.setattr(task_decode, "continue_prompts", continue_then_stop)
    with pytest.raises(_Stop):
        run(_args(tiny_hf, shared_data, tmp_path / "batched", *grid, "--batch_examples", "2"), capsys)
    monkeypatch.setattr(task_decode, "continue_prompts", original_continue)
    calls["prefill"] = 0
    code, out, err = run(_args(tiny_hf, shared_data, tmp_path / "batched", *grid, "--batch_examples", "2"), capsys)
    assert code == 0 and "resuming after example 2 of 4" in out and calls["prefill"] == 2, err  # examples 3 and 4
    batched, whole = _stable(_results(tmp_path / "batched")), _stable(_results(tmp_path / "whole"))
    assert batched["config"].pop("batch_examples") == 2 and whole["config"].pop("batch_examples") == 1
    assert batched == whole

    # a progress file left under other settings is set aside, not merged
    monkeypatch.setattr(task_decode, "continue_prompts", continue_then_stop)
    calls["continue"] = 0
    with pytest.raises(_Stop):
        run(_args(tiny_hf, shared_data, tmp_path / "other", *grid), capsys)
    monkeypatch.setattr(task_decode, "continue_prompts", original_continue)
    code, out, err = run(_args(tiny_hf, shared_data, tmp_path / "other", *grid, "--max_new_tokens", "3"), capsys)
    assert code == 0 and "under other settings" in err and "resuming" not in out
    assert (tmp_path / "other" / "t" / "partial" / "xsum__query_agnostic_seed1234.json.stale").exists()


@pytest.mark.parametrize("args, message", [
    (["--tasks", "xsum", "--methods", "dense", "h2x"], "unknown sparsity method 'h2x'; valid: cab, cab_v3"),
    # the deprecated spelling is an optional field (absent unless given): its range reads "or null"
    (["--tasks", "xsum", "--sparsity", "1.0"], "--sparsity: got '[1.0]'; expected a float in [0, 1) or null"),
    (["--tasks", "xsum", "--ratios", "1.0"], "--ratios: got '1.0'; expected a float in [0, 1)"),
    (["--tasks", "xsumm"], "unknown benchmark or task 'xsumm'; valid: groups"),
    (["--tasks", "xsum", "--budget_tokens", "100000"], "--budget_tokens 100000 is larger than the shortest prompt"),
    (["--tasks", "xsum", "--budget_tokens", "100000", "--protocols", "interval"],
     "--budget_tokens 100000 is larger than the shortest prompt of xsum under interval"),
    (["--tasks", "glue/sst2"], "glue/sst2 is scored by log-likelihood, not generated"),
])
def test_bad_downstream_driver_input_is_one_line(args, message, tiny_hf, shared_data, tmp_path, capsys):
    code, _, err = run(_args(tiny_hf, shared_data, tmp_path, *args), capsys)
    lines = [line for line in err.splitlines() if line.startswith("lightning_bench: error:")]
    assert code == 2 and len(lines) == 1 and message in lines[0], err
    assert not (tmp_path / "t").exists()


def test_a_model_without_a_kv_cache_is_refused(shared_data, tmp_path, capsys):
    from transformers import MambaConfig, MambaForCausalLM

    folder = tmp_path / "mamba"
    MambaForCausalLM(MambaConfig(vocab_size=50257, hidden_size=16, num_hidden_layers=1, state_size=4)).save_pretrained(folder)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copyfile(Path(offline_gpt2_folder(folder / "cache")) / name, folder / name)
    code, _, err = run(_args(folder, shared_data, tmp_path, "--tasks", "xsum"), capsys)
    assert code == 2 and "has no KV cache to evict from" in err


def test_one_wandb_run_per_call_offline(tiny_hf, shared_data, tmp_path, capsys, monkeypatch):
    from tests.wandb_reader import config_history_summary

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    code, _, err = run(_args(tiny_hf, shared_data, tmp_path / "r", "--tasks", "xsum", "--max_samples", "1",
                             "--methods", "dense", "h2o", "--wandb", "true", "--wandb_dir", str(tmp_path / "wb")),
                       capsys)
    assert code == 0, err
    (run_dir,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    _, history, summary = config_history_summary(next(run_dir.glob("*.wandb")))
    logged = {key for row in history for key in row} | set(summary)
    assert any(row.get("downstream/cells/nrows") == 2 for row in history)  # the table: one row per cell
    results = _results(tmp_path / "r")
    assert "downstream/xsum__h2o_s0.5_query_aware_seed1234/rougeL" in logged and results["cells"]


def test_quick_test_preset_on_smollm2_slice(smollm2_dir, shared_data, tmp_path, capsys, monkeypatch):
    """The shipped quick_test preset, as users run it, on a slice: SmolLM2 (its chat template), 1 example
    per task, prompts cut to 512 tokens (instead of 2048: the prefill was most of the time), 6 answer tokens."""
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)  # the preset's data_dir is relative to the repo
    code, out, err = run(["downstream", "--config", "configs/downstream/quick_test.yaml", "--model.pretrained",
                          str(smollm2_dir), "--data_dir", str(shared_data), "--max_samples", "1",
                          "--max_length", "512", "--max_new_tokens", "6", "--results_dir", str(tmp_path)], capsys)
    assert code == 0, err
    results = _results(tmp_path, "quick_test")
    assert len(results["cells"]) == 2 * 3 and "xsum__cab_v4_s0.5_query_aware_seed1234" in results["cells"]
    dense = results["cells"]["xsum__dense_s0.0_query_aware_seed1234"]["samples"][0]
    assert dense["generated"].strip() and "<|im_" not in dense["generated"]  # an answer, no template tokens
    assert "squad_v2" in (tmp_path / "quick_test" / "quick_test_summary.txt").read_text()


def test_every_generation_task_has_a_headline_metric():
    """Each task `downstream` can run names the per-example figure it pairs across methods, so no suite
    fails after its examples were generated."""
    from lightning_bench.tasks.registry import TASKS
    from lightning_bench.experiments.downstream.scoring import primary_metric

    generated = [name for name, t in TASKS.items() if t.output_type == "generate_until"]
    assert len(generated) > 80  # summaries, QA, dialogue, code and every long-context suite
    missing = [name for name in generated if not primary_metric(name)]
    assert not missing


def test_bits_8_runs_the_grid_on_low_bit_layers_and_is_part_of_the_fingerprint(tiny_hf, shared_data, tmp_path,
                                                                                 capsys):
    """--bits 8 composes with the methods and both protocols: the cells run on bitsandbytes int8 layers (the
    record says which, and how many), and a cell folder written at 32 bits is refused at 8 (and back)."""
    grid = ("--tasks", "xsum", "--methods", "dense", "h2o", "--ratios", "0.5", "--protocols", "query_aware",
            "query_agnostic")
    code, out, err = run(_args(tiny_hf, shared_data, tmp_path / "r", *grid, "--bits", "8"), capsys)
    assert code == 0, err
    results = _results(tmp_path / "r")
    model = results["config"]["model"]
    assert model["bits"] == 8 and model["quantization"]["bits"] == 8
    assert model["quantization"]["quantized_layers"] > 0 and "int8" in model["quantization"]["scheme"]
    assert len(results["cells"]) == 4
    assert all(c["protocol"]["model"]["bits"] == 8 for c in results["cells"].values())
    code, out, err = run(_args(tiny_hf, shared_data, tmp_path / "r", *grid), capsys)  # same folder, 32 bits
    lines = [line for line in err.splitlines() if line.startswith("lightning_bench: error:")]
    assert code == 2 and len(lines) == 1 and "made under other settings" in lines[0], err


def test_bits_16_contradicting_the_model_dtype_is_one_line(tiny_hf, shared_data, tmp_path, capsys):
    code, out, err = run(_args(tiny_hf, shared_data, tmp_path / "r", "--bits", "16", "--model.dtype", "float16"),
                         capsys)
    lines = [line for line in err.splitlines() if line.startswith("lightning_bench: error:")]
    assert code == 2 and len(lines) == 1 and "--bits 16" in lines[0] and "--model.dtype float16" in lines[0], err
    assert not (tmp_path / "r").exists()


def test_a_changed_template_is_part_of_the_cells_fingerprint(tiny_hf, shared_data, tmp_path, capsys):
    """A template at its second version (passkey, which now starts the answer with "The pass key is") names
    its version in the cell's protocol, so cells of the first version are never reused for it; first
    versions keep the fingerprint their cells were written with."""
    code, _, err = run(_args(tiny_hf, shared_data, tmp_path, "--tasks", "infinitebench/passkey", "xsum",
                             "--max_samples", "1", "--methods", "dense", "--protocols", "query_agnostic"), capsys)
    assert code == 0, err
    cells = _results(tmp_path)["cells"]
    assert cells["infinitebench-passkey__dense_s0.0_query_agnostic_seed1234"]["protocol"]["prompt_version"] == (
        "infinitebench/passkey@2")
    assert "prompt_version" not in cells["xsum__dense_s0.0_query_agnostic_seed1234"]["protocol"]


def test_long_context_tasks_default_to_the_model_window():
    """Without --max_length / --max_context a long-context suite gets the model's whole window (a 4k RULER
    set must not lose its middle to the 2048 default), other tasks the 2048 cap as before."""
    from lightning_bench.tasks import default_max_length

    assert default_max_length(["xsum"], 8192) == 2048
    assert default_max_length(["xsum"], 1024) == 1024
    assert default_max_length(["ruler/vt"], 8192) == 8192
    assert default_max_length(["xsum", "loogle/shortdep_qa"], 8192) == 8192
    assert default_max_length(["infinitebench/passkey"], None) == 2048
