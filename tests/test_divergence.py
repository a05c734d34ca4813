"""A diverged run never looks perfect: a NaN training loss or evaluation loss stops the run with one line
(exit 2) and a record that says "diverged", never a perplexity of 1 (a NaN summed away by a metric)."""

import json

import lightning as L
import pytest
import torch

from lightning_bench.errors import DivergedError
from lightning_bench.results.recorder import ResultsRecorder
from tests.helpers import quiet_trainer, tiny_data, tiny_model
from tests.test_cli import run, tiny_fit_args

RECORD = "transformer_tiny_corpus_seq16_bits32"


def test_nan_training_loss_stops_with_a_diverged_record(tiny_corpus, capsys, tmp_path):
    code, _, err = run(tiny_fit_args(tiny_corpus, "--model.learning_rate", "1e6", "--model.warmup_steps", "0",
                                     "--results_dir", "r"), capsys)
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1].startswith("lightning_bench: error: the training loss is nan at step "), err
    assert "Traceback" not in err
    record = json.loads((tmp_path / "r" / f"{RECORD}.json").read_text())
    divergence = record["divergence"]
    assert record["status"] == "diverged" and divergence["quantity"] == "train/loss"
    assert f"at step {divergence['step']}:" in lines[-1]
    assert record["global_steps"] == divergence["step"] - 1 == divergence["last_finite_step"]
    assert divergence["value"] == "nan" and divergence["last_finite_train_loss"] > 0
    assert record["final_perplexity"] is None and record["final_loss"] is None
    assert None not in record["epoch_losses"]  # the finite steps' mean, as the last finite figure


class PoisonWeights(L.Callback):
    """NaN weights from the start of evaluation: every logit, so every per-token loss, is NaN."""

    def on_validation_start(self, trainer, pl_module):
        with torch.no_grad():
            for p in pl_module.net.parameters():
                p.fill_(float("nan"))


def test_nan_evaluation_loss_is_not_summed_away(tiny_corpus, tmp_path):
    dm = tiny_data(tiny_corpus)
    dm.setup("validate")
    recorder = ResultsRecorder(str(tmp_path / "r"))
    trainer = quiet_trainer(callbacks=[PoisonWeights(), recorder])
    with pytest.raises(DivergedError, match="the val loss is nan"):
        trainer.validate(tiny_model(dm.vocab_size), datamodule=dm, verbose=False)
    record = json.loads(recorder.written["validate"].read_text())
    assert record["status"] == "diverged" and record["metrics"] is None
    assert record["divergence"]["quantity"] == "val/loss"


def test_completed_runs_say_so(tiny_corpus, capsys, tmp_path):
    code, _, err = run(tiny_fit_args(tiny_corpus, "--trainer.max_steps", "2", "--results_dir", "r"), capsys)
    assert code in (0, None), err
    record = json.loads((tmp_path / "r" / f"{RECORD}.json").read_text())
    assert record["status"] == "completed" and record["divergence"] is None
    assert record["meta"]["resumed_from"] is None


def test_nan_validation_during_fit_gives_a_diverged_fit_record(tiny_corpus, capsys, tmp_path):
    code, _, err = run(tiny_fit_args(tiny_corpus, "--trainer.num_sanity_val_steps", "0", "--results_dir", "r",
                                     "--trainer.callbacks+=tests.test_divergence.PoisonWeights"), capsys)
    assert code == 2 and "the val loss is nan after 8 training steps" in err.strip().splitlines()[-1], err
    record = json.loads((tmp_path / "r" / f"{RECORD}.json").read_text())
    assert record["status"] == "diverged" and record["divergence"]["quantity"] == "val/loss"
    assert record["final_perplexity"] is None and record["best_perplexity"] is None
    assert record["global_steps"] == record["divergence"]["step"] == 8  # the epoch's 8 finite steps


class NaNLogits(torch.nn.Module):
    """lm_forward of a model whose outputs went non-finite: NaN in one logit of every position."""

    global_step = 7

    def lm_forward(self, input_ids, logits_to_keep=None):
        from types import SimpleNamespace

        logits = torch.zeros(*input_ids.shape, 11)
        logits[..., 3] = float("nan")
        return SimpleNamespace(logits=logits if logits_to_keep is None else logits[:, logits_to_keep])


@pytest.mark.parametrize("kind", ["loglikelihood", "next_token"])
def test_nan_logits_stop_prompted_scoring(kind):
    from lightning_bench.tasks.datamodules.encoding import EncodedRequest, collate
    from lightning_bench.evaluation.request_scoring import score_batch

    if kind == "next_token":
        row = EncodedRequest("next_token", 0, [1, 2, 4], choice_tokens=[5, 6])
    else:
        row = EncodedRequest("loglikelihood", 0, [1, 2, 4], scored_from=2, targets=[5])
    with pytest.raises(DivergedError, match="log-probabilities are nan"):
        score_batch(NaNLogits(), collate([row], pad_id=0))
