"""`lightning_bench multi_dataset`: datasets x seeds -> one summary that agrees with the per-cell test
records; a second invocation resumes (skips finished cells); bad input is one line and exit 2."""

import json
import statistics
from pathlib import Path

import pytest

from tests.test_cli import QUIET, run

PRESET = Path(__file__).resolve().parent.parent / "configs" / "compare" / "transformer_small.yaml"
# a tiny Transformer and 3 steps instead of the preset's sizes and epoch
TINY = ["--model.n_layer", "1", "--model.d_model", "32", "--model.n_head", "2", "--model.d_ff", "64",
        "--model.warmup_steps", "2", "--data.seq_len", "16", "--data.batch_size", "8", "--trainer.max_steps", "3",
        *QUIET]


def sweep(datasets, *extra_fit_args, seeds=("1", "2")):
    return ["multi_dataset", "--config", str(PRESET), "--datasets", *datasets, "--seeds", *seeds,
            "--results_dir", "r", "--", *TINY, *extra_fit_args]


def read(path) -> dict:
    return json.loads(Path(path).read_text())


def files_with_mtimes(root: Path, but: Path) -> dict:
    return {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file() and p != but}


def without_timestamp(summary: dict) -> dict:
    summary = json.loads(json.dumps(summary))
    del summary["meta"]["created_utc"]
    return summary


def test_sweep_summary_matches_records_and_resumes(tiny_corpus, capsys, tmp_path):
    datasets = [f"a={tiny_corpus}", f"b={tiny_corpus}"]
    code, out, err = run(sweep(datasets), capsys)
    assert code in (0, None), err
    path = tmp_path / "r" / "transformer_multi_dataset.json"
    summary = read(path)
    assert (summary["model_name"], summary["datasets"], summary["seeds"]) == ("transformer", ["a", "b"], [1, 2])
    assert summary["complete"] and summary["cells_done"] == summary["cells_total"] == 4

    for name in ("a", "b"):
        ppl = {}
        for seed in ("1", "2"):
            fit_path, test_path = summary["records"][name][seed]
            cell = Path("r", "multi_dataset", "transformer", f"seed{seed}", name)
            assert Path(fit_path).parent == Path(test_path).parent == cell
            fit, test = read(fit_path), read(test_path)
            assert fit["stage"] == "fit" and test["stage"] == "test"
            assert fit["meta"]["seed"] == test["meta"]["seed"] == int(seed)
            assert fit["global_steps"] == 3 and fit["config"]["model"]["init_args"]["d_model"] == 32
            # the test evaluated that fit's final checkpoint
            ckpt = Path(test["config"]["ckpt_path"])
            assert ckpt.name == "last.ckpt" and cell.resolve() in ckpt.resolve().parents
            ppl[seed] = test["metrics"]["ppl"]
        assert ppl["1"] != ppl["2"]  # the seed reached the run (init and data order)
        assert summary["per_seed"][name] == ppl
        assert summary["perplexities"][name] == pytest.approx(statistics.mean(ppl.values()))
        assert summary["std_over_seeds"][name] == pytest.approx(statistics.stdev(ppl.values()))
    means = [summary["perplexities"][name] for name in ("a", "b")]
    assert summary["mean_perplexity"] == pytest.approx(statistics.mean(means))
    assert summary["std_perplexity"] == pytest.approx(statistics.stdev(means))
    assert summary["parameters"] == read(summary["records"]["a"]["1"][0])["parameters"]
    assert summary["config"]["preset"] == str(PRESET) and summary["config"]["extra_args"] == TINY
    assert summary["meta"]["command"].startswith("lightning_bench multi_dataset --config")

    # a second invocation runs nothing: every cell is skipped, only the summary is rewritten
    before = files_with_mtimes(tmp_path / "r", but=path)
    code, out, err = run(sweep(datasets), capsys)
    assert code in (0, None), err
    assert out.count(": skipped (done before") == 4
    assert files_with_mtimes(tmp_path / "r", but=path) == before
    assert without_timestamp(read(path)) == without_timestamp(summary)

    # killed after b/seed 2's fit: the rerun only tests that fit, and gets the same number
    lost = Path(summary["records"]["b"]["2"][1])
    lost.unlink()
    code, out, err = run(sweep(datasets), capsys)
    assert code in (0, None), err
    assert out.count(": skipped") == 3 and "b seed 2: fit already done" in out
    retested = read(path)["records"]["b"]["2"][1]  # a new run: its own record, the lost one stays lost
    assert retested != str(lost) and read(retested)["metrics"]["ppl"] == pytest.approx(summary["per_seed"]["b"]["2"],
                                                                                       rel=1e-6)
    again = without_timestamp(read(path))
    again["records"]["b"]["2"][1] = str(lost)
    assert again == without_timestamp(summary)

    # the same results folder with other extra arguments would silently reuse these cells: refused
    code, _, err = run(sweep(datasets, "--trainer.max_steps", "4"), capsys)
    assert code == 2 and "another preset or extra arguments" in err.strip().splitlines()[-1]


BAD = {
    "unknown alias": (["wikitext9"], "unknown dataset 'wikitext9'; valid:"),
    "missing folder": (["mine=no/such/dir"], "dataset 'mine': folder 'no/such/dir' does not exist"),
    "bare text": (["text"], "NAME=DIR"),
    "no datasets": ([], "needs --datasets"),
    "same name twice": (["ptb", "ptb"], "lists a dataset twice"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_dataset_is_one_line_exit_2(case, capsys, tmp_path):
    datasets, expected = BAD[case]
    args = sweep(datasets) if datasets else [a for a in sweep(["x"]) if a not in ("--datasets", "x")]
    code, out, err = run(args, capsys)
    assert code == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert err.startswith("lightning_bench: error: ") and expected in err, err
    assert not (tmp_path / "r").exists()


def test_cell_arguments_cannot_be_overridden(capsys, tmp_path):
    code, _, err = run(sweep(["ptb"], "--seed_everything", "7"), capsys)
    assert code == 2 and "--seed_everything is set per cell" in err
