"""Small builders shared by tests: a tiny word-level DataModule and a tiny Transformer, and a downstream
grid's results read back with their per-example rows."""

import json
import os
import signal
from pathlib import Path

import lightning as L

from lightning_bench.data import LMDataModule
from lightning_bench.models import TransformerLM


def tiny_data(corpus, **overrides) -> LMDataModule:
    kwargs = dict(source="text", path=str(corpus), tokenizer="word", seq_len=16, batch_size=4)
    kwargs.update(overrides)
    return LMDataModule(**kwargs)


def tiny_model(vocab_size: int, **overrides) -> TransformerLM:
    kwargs = dict(n_layer=1, d_model=32, n_head=4, n_kv_head=2, max_seq_len=64, vocab_size=vocab_size)
    kwargs.update(overrides)
    return TransformerLM(**kwargs)


def tiny_llama(vocab_size: int):
    """A 2-layer GQA Llama (4 query heads over 2 KV heads) in eval mode, seeded. Its init is wider than the
    default 0.02 so that attention and next-token choices depend on the context."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         initializer_range=0.2, bos_token_id=None, eos_token_id=None, pad_token_id=None,
                         attn_implementation="sdpa")
    return LlamaForCausalLM(config).eval()


def quiet_trainer(**overrides) -> L.Trainer:
    kwargs = dict(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                  enable_checkpointing=False)
    kwargs.update(overrides)
    return L.Trainer(**kwargs)


class StopAfterEpochs(L.Callback):
    """Stops a fit gracefully after `epochs` epochs, like a preempted job (the schedule is untouched)."""

    def __init__(self, epochs: int = 1):
        self.epochs = epochs

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.current_epoch + 1 >= self.epochs:
            trainer.should_stop = True


class KillAfterStep(L.Callback):
    """kill -9 of its own process once training step `step` is done (and checkpointed: ModelCheckpoint saves
    at that step's end): no hook, no `finally`, no record runs, as when a job is killed."""

    def __init__(self, step: int = 1):
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class StopAfterStep(L.Callback):
    """Stops a fit gracefully after training step `step`, mid-epoch (a checkpoint every few steps keeps the place)."""

    def __init__(self, step: int = 1):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.step:
            trainer.should_stop = True


def grid_results(path) -> dict:
    """A downstream grid's `{name}_results.json` with each cell's per-example rows read back from the cell
    file it names (the results file itself holds none: checked on every grid a test reads this way)."""
    from lightning_bench.results.io import cell_samples

    results = json.loads(Path(path).read_text())
    for key, cell in results["cells"].items():
        assert "samples" not in cell and cell["samples_file"] == f"cells/{key}.json"
        cell["samples"] = cell_samples(cell, path)
    return results
