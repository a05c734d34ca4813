"""lightning_bench: language-model efficiency research on PyTorch Lightning."""

__version__ = "0.1.0"
