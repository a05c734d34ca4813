"""Per-token NLL without full-vocabulary fp32 log-probabilities: the loss a model computes, so it lives in
models/token_nll.py (models are the bottom layer; tests/test_package_boundaries.py). Re-exported here."""

from lightning_bench.models.token_nll import IGNORE_INDEX, ROW_BLOCK, VOCAB_SLICE, head_nll, logits_nll

__all__ = ["IGNORE_INDEX", "ROW_BLOCK", "VOCAB_SLICE", "head_nll", "logits_nll"]
