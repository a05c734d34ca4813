"""Several processes give one process's figures: `--trainer.strategy ddp --trainer.devices 2` on CPU (gloo).

Evaluation is exact (the same float64 sums, added in the same order: data/sharding.py, models/keyed_sum.py),
prompted predictions are every request's, once; training takes one process's steps at the same global
batch, so its loss curve matches within TRAIN_TOLERANCE (the ranks' gradients are averaged by DDP's
all-reduce, not summed in one process's order: the last digits differ, and Adam carries them on).
"""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightning_bench.data.sharding import BlockShardSampler, global_batch_part
from tests.conftest import FIXTURES
from tests.helpers import tiny_data
from tests.test_cli import run

LB = Path(sys.executable).parent / "lightning_bench"  # Lightning's launcher starts rank 1 as this script again
TWO = ["--trainer.strategy", "ddp", "--trainer.devices", "2"]
TRAIN_TOLERANCE = 1e-5  # relative, per step; measured: ~1e-7 over 20 steps of the tiny model
TINY_MODEL = ["--model", "transformer", "--model.n_layer", "1", "--model.d_model", "32", "--model.n_head", "2",
              "--model.warmup_steps", "2"]
QUIET = ["--trainer.enable_progress_bar", "false", "--trainer.enable_model_summary", "false",
         "--trainer.accelerator", "cpu"]


def two_processes(argv: list[str]) -> None:
    # the tests' own process runs one thread; tests.helpers callbacks import from the repository root
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(filter(None, [
        str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([str(LB), *argv, *TWO], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


def one_process(argv: list[str], capsys) -> None:
    code, _, err = run(argv, capsys)
    assert code in (0, None), err


@pytest.mark.parametrize("n, block, world", [(7, 3, 2), (6, 3, 2), (2, 3, 2), (10, 1, 3), (11, 4, 3)])
def test_each_rank_scores_whole_batches_and_none_twice(n, block, world):
    parts = [list(BlockShardSampler(n, block, world, rank)) for rank in range(world)]
    assert sorted(i for part in parts for i in part) == list(range(n))
    one_process = {tuple(range(i, min(i + block, n))) for i in range(0, n, block)}
    for part in parts:  # cut into the loader's batches: each is one of one process's batches
        assert {tuple(part[i:i + block]) for i in range(0, len(part), block)} <= one_process


@pytest.mark.parametrize("n, batch, world", [(61, 4, 2), (64, 4, 2), (9, 4, 3), (2, 2, 3)])
def test_training_ranks_take_one_process_global_batches(n, batch, world):
    order = list(range(100, 100 + n))
    parts = [global_batch_part(order, batch, world, rank) for rank in range(world)]
    steps = [[part[i:i + batch] for i in range(0, len(part), batch)] for part in parts]
    assert len({len(s) for s in steps}) == 1, "every rank steps equally often (DDP would wait forever)"
    global_batch = batch * world
    for k, ranks in enumerate(zip(*steps)):
        taken = [i for rank_batch in ranks for i in rank_batch]
        expected = order[k * global_batch:(k + 1) * global_batch]
        if len(expected) >= world:  # else the epoch's first items fill the last step (said in the docstring)
            assert taken == expected


def test_ddp_test_perplexity_equals_one_process_exactly(tiny_corpus, tmp_path, capsys):
    common = ["test", *TINY_MODEL, "--data", "text", "--data.path", str(tiny_corpus), "--data.seq_len", "16",
              "--data.batch_size", "3", "--data.eval_protocol", "document_rolling", "--data.document_split", "lines",
              "--data.eval_max_documents", "7", *QUIET]
    dm = tiny_data(tiny_corpus, eval_protocol="document_rolling", batch_size=3, document_split="lines",
                   eval_max_documents=7)
    dm.setup("test")
    # 17 windows of 7 documents (of unequal lengths) in 6 batches of 3: rank 0 scores batches 0, 2, 4, rank 1
    # batches 1, 3 and the short last one
    assert len(dm.test_dataloader().dataset) == 17
    one_process([*common, "--results_dir", "one"], capsys)
    two_processes([*common, "--results_dir", "two"])
    one, two = (json.loads((tmp_path / d / "transformer_tiny_corpus_seq16_bits32_test.json").read_text())
                for d in ("one", "two"))
    assert two["metrics"] == one["metrics"]  # every figure, to the last bit
    assert two["metrics"]["scored_tokens"] == one["meta"]["evaluation_protocol"]["units"]["tokens"]
    assert one["meta"]["processes"]["world_size"] == 1
    assert two["meta"]["processes"] == {"world_size": 2, "num_nodes": 1, "strategy": "DDPStrategy"}
    # per-token NLL of every window, in the text's order, written once
    predict = ["predict", *common[1:]]
    one_process([*predict, "--results_dir", "one"], capsys)
    two_processes([*predict, "--results_dir", "two"])
    one, two = (torch.load(next((tmp_path / d).glob("*_predict_*.pt")))["windows"] for d in ("one", "two"))
    assert len(two) == len(one) == 6  # batches of 3 windows
    assert all(torch.allclose(a, b, rtol=0, atol=0, equal_nan=True) for a, b in zip(one, two))  # bit for bit


def test_ddp_prompted_predictions_are_every_requests_once(tiny_hf, tmp_path, capsys):
    squad = json.dumps({"squad_v2": str(FIXTURES / "tasks" / "squad_v2.0" / "dev.json")})
    common = ["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--data.data_dir", str(FIXTURES / "tasks"),
              "--task", "glue/sst2", "--task", "squad_v2", "--data.paths", squad, "--data.max_new_tokens", "4",
              "--data.batch_size", "2", "--trainer.logger", "false", *QUIET]
    one_process([*common, "--results_dir", "one"], capsys)
    two_processes([*common, "--results_dir", "two"])
    stem = f"hf-{tiny_hf.name}_downstream"
    one, two = ([json.loads(line) for line in (tmp_path / d / f"{stem}.samples.jsonl").read_text().splitlines()]
                for d in ("one", "two"))
    assert len(two) == len(one) and len({(s["task"], s["id"]) for s in two}) == len(two)
    assert two == one  # the same predictions, in the requests' order
    records = [json.loads((tmp_path / d / f"{stem}.json").read_text()) for d in ("one", "two")]
    for benchmark in ("glue", "squad_v2"):  # the same scores; each names its own run
        assert _without_runs(records[1][benchmark]) == _without_runs(records[0][benchmark])
    run_two = next(iter(records[1]["runs"].values()))
    assert run_two["meta"]["processes"]["world_size"] == 2


def _without_runs(entry):
    if isinstance(entry, dict):
        return {k: _without_runs(v) for k, v in entry.items() if k != "run"}
    return entry


def _step_losses(folder: Path) -> list[float]:
    """The logged training loss of every step, over the run's logs (a resumed run logs into a folder of its own)."""
    losses = {int(r["step"]): float(r["train/loss"]) for metrics in folder.glob("*/*/metrics.csv")
              for r in csv.DictReader(metrics.open()) if r.get("train/loss")}
    return [losses[step] for step in sorted(losses)]


def test_ddp_fit_follows_one_process_at_the_same_global_batch(tiny_corpus, tmp_path, capsys):
    """61 training chunks: every epoch ends with a smaller global batch (5 of 8 chunks, cut 3 + 2). The two
    processes stop gracefully after step 5, mid-epoch, and resume from the step-5 checkpoint: the resumed
    curve must still be one process's (a wrong place in the epoch would change every later batch)."""
    common = ["fit", *TINY_MODEL, "--data", "text", "--data.path", str(tiny_corpus), "--data.seq_len", "16",
              "--trainer.max_steps", "20", "--trainer.max_epochs", "4", "--trainer.log_every_n_steps", "1",
              "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint", "--trainer.callbacks.dirpath=ckpt",
              "--trainer.callbacks.every_n_train_steps=5", "--trainer.callbacks.save_last=true", *QUIET]
    one_process([*common, "--data.batch_size", "8", "--results_dir", "one", "--trainer.default_root_dir", "one"],
                capsys)
    two = [*common, "--data.batch_size", "4", "--results_dir", "two", "--trainer.default_root_dir", "two"]
    two_processes([*two, "--trainer.callbacks+=tests.helpers.StopAfterStep", "--trainer.callbacks.step=5"])
    two_processes([*two, "--ckpt_path", "last"])
    one, two = (json.loads((tmp_path / d / "transformer_tiny_corpus_seq16_bits32.json").read_text())
                for d in ("one", "two"))
    assert two["meta"]["resumed_from"]["step"] == 5
    assert two["global_steps"] == one["global_steps"] == 20 and len(one["epoch_losses"]) == 3
    assert two["trained_tokens"] == one["trained_tokens"]  # every rank's tokens, none repeated
    assert two["meta"]["processes"]["world_size"] == 2
    steps_one, steps_two = _step_losses(tmp_path / "one"), _step_losses(tmp_path / "two")
    assert len(steps_one) == len(steps_two) == 20
    assert steps_two[0] == steps_one[0]  # the first step is the same batch and the same weights
    assert steps_two == pytest.approx(steps_one, rel=TRAIN_TOLERANCE)
    assert two["epoch_losses"] == pytest.approx(one["epoch_losses"], rel=TRAIN_TOLERANCE)
    curve = lambda r: [v["ppl"] for v in r["validation_curve"]]  # noqa: E731
    assert curve(two) == pytest.approx(curve(one), rel=TRAIN_TOLERANCE)
