"""`--ckpt_path last` resumes a fit where it stopped and continues the same loss curve."""

import json

import pytest

from tests.test_cli import run, tiny_fit_args


def test_resume_continues_the_same_curve(tiny_corpus, capsys, tmp_path):
    def fit(results, root, *extra):
        args = tiny_fit_args(tiny_corpus, "--trainer.max_steps", "-1", "--trainer.max_epochs", "3",
                             "--results_dir", results, "--trainer.default_root_dir", root, *extra)
        code, _, err = run(args, capsys)
        assert code in (0, None), err
        return json.loads((tmp_path / results / "transformer_tiny_corpus_seq16_bits32.json").read_text())

    straight = fit("straight", "a")
    stopped = fit("stopped", "b", "--trainer.callbacks+=tests.helpers.StopAfterEpochs",
                  "--trainer.callbacks.epochs=1")
    resumed = fit("resumed", "b", "--ckpt_path", "last")
    assert stopped["epoch_losses"] == pytest.approx(straight["epoch_losses"][:1], rel=1e-6)
    assert resumed["global_steps"] == straight["global_steps"]
    # the resumed run reports its own epochs (2 and 3): the same numbers as the uninterrupted run's
    assert resumed["epoch_losses"] == pytest.approx(straight["epoch_losses"][1:], rel=1e-5)
    assert resumed["final_perplexity"] == pytest.approx(straight["final_perplexity"], rel=1e-5)
