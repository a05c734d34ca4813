"""The language-model corpora: LMDataModule and DATA_ALIASES (the corpus names --data accepts). The
downstream tasks' DataModules are lightning_bench.tasks.datamodules."""

from lightning_bench.data.lm import LMDataModule
from lightning_bench.data.sources import DATA_ALIASES

__all__ = ["LMDataModule", "DATA_ALIASES"]
