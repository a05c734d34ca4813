"""`lightning_bench multi_dataset` (config.py: options, datasets, cells; records.py: one cell = one fit and one
test through the trainer, and the store over their records; command.py: the wiring and the summary): train and test one fit preset on several datasets and seeds.

    lightning_bench multi_dataset --config configs/compare/bk_small.yaml --datasets ptb mine=data/mine \
        --seeds 1 2 3 [--results_dir benchmark_results] [-- extra fit/test args ...]

`--config` names the fit preset itself (as above), or a multi_dataset YAML with the fields of
MultiDatasetConfig (`preset`, `datasets`, `seeds`, `results_dir`, `fit_args`).

Each (dataset, seed) cell runs `fit` with `--seed_everything SEED`, then `test` from that fit's
`last.ckpt`, both in-process through `trainer_cli.run_cli`, and keeps everything in its own folder
`{results_dir}/multi_dataset/{model}/seed{seed}/{dataset}/` (records, logs, checkpoints). The folder
is per dataset as well as per seed because two local folders may share a folder name, and a text
corpus's records are named after its folder.

The summary `{results_dir}/{model}_multi_dataset.json` is rewritten (atomically) after every cell.
Its numbers are the test records' token perplexities (`metrics.ppl`): per seed, their mean and sample
standard deviation over seeds per dataset, then the mean and sample standard deviation of the
per-dataset means across datasets (ddof=1; null where there are fewer than two values). The
across-dataset figures are null until every cell is done (`complete`).

Resuming: the grid runs on core/runner.py, with the trainer's own records as the store (`RecordStore`):
a cell whose folder already holds a test record is skipped; a cell whose fit record exists but whose test
record does not is tested from its checkpoint without training again. A lock per cell keeps two runs into
one results folder off the same cell. So a killed
sweep restarts where it stopped, and `--seeds` / `--datasets` can be extended later. A results folder
that holds a sweep of the same model made with another preset file or other extra arguments is refused
(its cells would be silently reused).
"""

from lightning_bench.experiments.multi_dataset.command import main
from lightning_bench.experiments.multi_dataset.config import MultiDatasetConfig, preset_as_config

__all__ = ["main", "MultiDatasetConfig", "preset_as_config"]
