"""IGNORE_INDEX, the label of a position no loss scores, for the evaluation modules that build labels.

Its home is the loss that skips it (models/token_nll.py). The scoring windows of the two perplexity
protocols are data preparation: data/windows.py (`Window`, `token_windows`, `rolling_windows`).
"""

from lightning_bench.models.token_nll import IGNORE_INDEX

__all__ = ["IGNORE_INDEX"]
