"""DataModules; DATA_ALIASES are the corpus names --data accepts."""

from lightning_bench.data.downstream import DownstreamDataModule
from lightning_bench.data.lm import LMDataModule
from lightning_bench.data.sources import DATA_ALIASES

__all__ = ["LMDataModule", "DownstreamDataModule", "DATA_ALIASES"]
