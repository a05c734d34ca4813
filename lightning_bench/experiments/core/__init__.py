"""The experiment core shared by every experiment command (docs/experiments.md):

config     one jsonargparse configuration for a typed dataclass: --config, --print_config, overrides
grid       cells (frozen dataclasses of coordinates with a stable file key) and the grid rules
store      resumable stores of finished cells: one JSON per cell, or one JSON document of all cells
aggregate  mean / sample std / min / max / n, and paired t-tests between arms
"""

from lightning_bench.experiments.core.aggregate import STD_KIND, describe, paired_ttest, sample_std
from lightning_bench.experiments.core.config import check_name, check_unique, parse_command
from lightning_bench.experiments.core.grid import sparsity_levels_for
from lightning_bench.experiments.core.store import CellFolder, CellDocument, fingerprint

__all__ = ["STD_KIND", "describe", "paired_ttest", "sample_std", "check_name", "check_unique", "parse_command",
           "sparsity_levels_for", "CellFolder", "CellDocument", "fingerprint"]
