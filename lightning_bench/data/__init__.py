"""DataModules; DATA_ALIASES are the corpus names --data accepts; `--task` picks a task DataModule."""

from lightning_bench.data.downstream import FinetuneDataModule, PromptedDataModule, TaskDataModule
from lightning_bench.data.lm import LMDataModule
from lightning_bench.data.sources import DATA_ALIASES

__all__ = ["LMDataModule", "PromptedDataModule", "FinetuneDataModule", "TaskDataModule", "DATA_ALIASES"]
