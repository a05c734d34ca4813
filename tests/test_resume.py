"""`--ckpt_path last` resumes a fit where it stopped: the same batches, RNG draws and running figures, so
the resumed run's record equals the uninterrupted run's (and says it was resumed)."""

import json
import signal

from tests.test_cli import run, tiny_fit_args

RECORD = "transformer_tiny_corpus_seq16_bits32.json"


def test_resume_at_an_epoch_boundary_continues_the_same_curve(tiny_corpus, capsys, tmp_path):
    def fit(results, root, *extra):
        args = tiny_fit_args(tiny_corpus, "--trainer.max_steps", "-1", "--trainer.max_epochs", "3",
                             "--results_dir", results, "--trainer.default_root_dir", root, *extra)
        code, _, err = run(args, capsys)
        assert code in (0, None), err
        return json.loads((tmp_path / results / RECORD).read_text())

    straight = fit("straight", "a")
    stopped = fit("stopped", "b", "--trainer.callbacks+=tests.helpers.StopAfterEpochs",
                  "--trainer.callbacks.epochs=1")
    resumed = fit("resumed", "b", "--ckpt_path", "last")
    assert stopped["epoch_losses"] == straight["epoch_losses"][:1]
    # the checkpoint carries the recorder's figures: the resumed record describes the whole run
    for key in ("global_steps", "trained_tokens", "epoch_losses", "validation_curve", "final_perplexity"):
        assert resumed[key] == straight[key], key
    assert straight["meta"]["resumed_from"] is None
    assert resumed["meta"]["resumed_from"]["step"] == stopped["global_steps"]


def test_kill_mid_epoch_then_resume_equals_uninterrupted(tiny_corpus, capsys, tmp_path, cli_process):
    """8 batches per epoch, 12 steps: killed (SIGKILL) after the step-5 checkpoint, mid-epoch; dropout on,
    so the RNG state must be restored too."""
    def args(results, ckpt_dir, *extra):
        return tiny_fit_args(tiny_corpus, "--model.dropout", "0.1", "--results_dir", results,
                             "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
                             f"--trainer.callbacks.dirpath={ckpt_dir}", "--trainer.callbacks.every_n_train_steps=5",
                             "--trainer.callbacks.save_last=true", *extra)

    killed = cli_process(args("killed", "ckpt_b", "--trainer.callbacks+=tests.helpers.KillAfterStep",
                              "--trainer.callbacks.step=5"), tmp_path / "killed.log")  # a process of its own
    killed.join(timeout=600)
    assert killed.exitcode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-2000:]
    assert not (tmp_path / "killed").exists()  # killed before any record

    code, _, err = run(args("straight", "ckpt_a"), capsys)
    assert code in (0, None), err
    code, _, err = run(args("resumed", "ckpt_b", "--ckpt_path", "last"), capsys)
    assert code in (0, None), err
    assert "not resumable" not in err  # Lightning's warning for a loader without state_dict
    straight, resumed = (json.loads((tmp_path / d / RECORD).read_text()) for d in ("straight", "resumed"))
    assert [v["step"] for v in straight["validation_curve"]] == [8, 12]  # one validation after the resume
    for key in ("global_steps", "trained_tokens", "epoch_losses", "validation_curve", "final_loss",
                "final_perplexity"):
        assert resumed[key] == straight[key], key
    assert resumed["trained_tokens"] == 12 * 8 * 16 - 3 * 16  # 12 batches of 8 x 16 tokens; epoch 0's last has 5
    assert resumed["meta"]["resumed_from"] == {"checkpoint": str(tmp_path / "ckpt_b" / "last.ckpt"), "step": 5,
                                               "run_id": None}  # a folder the user chose, not a run folder
    assert resumed["status"] == straight["status"] == "completed"
