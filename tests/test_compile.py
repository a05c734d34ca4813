"""`fit --compile BACKEND`: the training step's forward + loss under torch.compile, everything else as before."""

import json

import pytest
import torch

from tests.test_cli import QUIET, run

MODEL = ["--model", "transformer", "--model.n_layer", "1", "--model.d_model", "32", "--model.n_head", "2",
         "--model.warmup_steps", "2"]


def fit(tiny_corpus, results, *extra):
    from lightning_bench.trainer_cli import run_cli

    data = ["--data", "text", "--data.path", str(tiny_corpus), "--data.seq_len", "16", "--data.batch_size", "4"]
    return run_cli(["fit", *MODEL, *data, *QUIET, "--trainer.max_steps", "3", "--seed_everything", "7",
                    "--results_dir", results, *extra])


graphs = []


@torch._dynamo.register_backend(name="lb_counting_aot_eager")
def counting_aot_eager(graph_module, example_inputs):
    """aot_eager, counting the graphs dynamo hands it."""
    graphs.append(graph_module)
    return torch._dynamo.lookup_backend("aot_eager")(graph_module, example_inputs)


def test_compiled_steps_train_as_eager_steps_do(tiny_corpus, tmp_path, monkeypatch):
    """aot_eager traces forward and backward as inductor does, without generating code (seconds, not a
    minute of C++ builds on this machine): the same losses and weights, the same state_dict keys."""
    monkeypatch.chdir(tmp_path)
    eager = fit(tiny_corpus, "eager")
    assert not graphs
    compiled = fit(tiny_corpus, "compiled", "--compile", "lb_counting_aot_eager")
    assert compiled.model.compile_backend == "lb_counting_aot_eager" and eager.model.compile_backend is None
    records = {name: json.loads(next((tmp_path / name).glob("*.json")).read_text()) for name in ("eager", "compiled")}
    assert records["compiled"]["global_steps"] == records["eager"]["global_steps"] == 3
    assert records["compiled"]["final_loss"] == pytest.approx(records["eager"]["final_loss"], rel=1e-5)
    ours, theirs = compiled.model.state_dict(), eager.model.state_dict()
    assert list(ours) == list(theirs)  # the network is not wrapped: checkpoints load either way
    assert max(float((ours[k].float() - theirs[k].float()).abs().max()) for k in ours) < 1e-4
    assert records["compiled"]["config"]["compile"] == "lb_counting_aot_eager"  # the record says how it trained
    assert records["eager"]["config"]["compile"] is None
    assert graphs, "dynamo never traced the training step"


def test_an_unknown_backend_is_one_line_before_training(tiny_corpus, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["fit", *MODEL, "--data", "text", "--data.path", str(tiny_corpus), *QUIET,
                        "--compile", "inductr"], capsys)
    assert code == 2 and "lightning_bench: error: --compile inductr: not a torch.compile backend; valid:" in err
    assert "inductor" in err and not (tmp_path / "benchmark_results").exists()


def test_compile_outside_fit_is_refused(tiny_corpus, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["test", *MODEL, "--data", "text", "--data.path", str(tiny_corpus), *QUIET,
                        "--compile", "inductor"], capsys)
    assert code == 2 and "lightning_bench: error: --compile applies to fit" in err
    assert not (tmp_path / "benchmark_results").exists()


def test_an_empty_backend_is_refused_not_ignored(tiny_corpus, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["fit", *MODEL, "--data", "text", "--data.path", str(tiny_corpus), *QUIET, "--compile", ""],
                       capsys)
    assert code == 2 and "lightning_bench: error: --compile : not a torch.compile backend" in err
