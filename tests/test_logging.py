"""W&B through the CLI: an offline run holds the full CLI config and the metrics, readable afterwards."""

from tests.test_cli import run, tiny_fit_args
from tests.wandb_reader import config_history_summary


def test_wandb_offline_run_reads_back(tiny_corpus, capsys, tmp_path):
    code, _, err = run(tiny_fit_args(tiny_corpus, "--wandb", "true", "--wandb_dir", str(tmp_path / "wb"),
                                     "--trainer.max_steps", "4", "--trainer.log_every_n_steps", "1",
                                     "--results_dir", "r"), capsys)
    assert code in (0, None), err
    runs = list((tmp_path / "wb" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1  # offline: saved locally, syncable with `wandb sync`
    config, history, summary = config_history_summary(next(runs[0].glob("*.wandb")))
    cli = config["cli"]
    assert cli["model"]["class_path"] == "lightning_bench.models.TransformerLM"
    assert cli["data"]["init_args"]["seq_len"] == 16 and cli["bits"] == 32
    logged = {key for row in history for key in row}
    assert {"train/loss", "train/lr", "train/ppl", "val/ppl", "val/loss"} <= logged
    assert sum("train/loss" in row for row in history) == 4  # one row per step, log_every_n_steps=1
    # the report's figures and tables of the record, in the same run: the record table, the loss curve image
    assert logged >= {"record/trainer_records/_type", "record/trainer_records/nrows"}
    loss = [key for key in logged if key.startswith("record/loss_") and key.endswith("/_type")]
    assert len(loss) == 1
    images = list(runs[0].glob("files/media/images/record/loss_*.png"))
    assert len(images) == 1
