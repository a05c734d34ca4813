"""Fine-tuning head (models/sequence_head.py): the same protocol on every family.

Tiny models on a synthetic task (label = whether token MARK occurs): these check that the head sits
on the LM's own final hidden state at the last real token, learns, logs, returns per-row
predictions, and survives a checkpoint.
"""

from types import SimpleNamespace

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, default_collate

from lightning_bench.models import HFLanguageModel, MambaLM, ResNetBKLM, TransformerLM
from lightning_bench.models.sequence_head import SequenceHead, last_token_pool
from tests.helpers import quiet_trainer, tiny_model

VOCAB, T, PAD, MARK = 16, 12, 0, 5
FAMILIES = ["transformer", "hf", "mamba", "bk"]


def toy_rows(n: int, seed: int):
    """Right-padded rows of 4..T tokens; label 1 iff MARK occurs (planted at a random real position)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(4, T + 1, (n,), generator=g)
    ids = torch.randint(1, VOCAB, (n, T), generator=g)
    ids[ids == MARK] = MARK + 1
    labels = torch.randint(0, 2, (n,), generator=g)
    where = (torch.rand(n, generator=g) * lengths).long()
    ids[labels.bool(), where[labels.bool()]] = MARK
    mask = (torch.arange(T) < lengths[:, None]).long()
    return ids.masked_fill(mask == 0, PAD), mask, labels


def collate(rows):
    ids, mask, targets, index = default_collate(rows)
    return {"kind": "classification", "input_ids": ids, "attention_mask": mask, "targets": targets,
            "row_index": index}


class ToyTask(L.LightningDataModule):
    """The data side's fine-tuning contract, minimally: finetune_num_labels + classification batches."""

    vocab_size, seq_len, tokenizer = VOCAB, T, "toy"  # what configure_model / setup read

    def __init__(self, ids, mask, targets, num_labels: int):
        super().__init__()
        self.finetune_num_labels = num_labels
        self.targets = targets
        self.rows = TensorDataset(ids, mask, targets, torch.arange(len(ids)))

    def train_dataloader(self):
        return DataLoader(self.rows, batch_size=32, shuffle=True, collate_fn=collate)

    def val_dataloader(self):  # the training rows: "training accuracy", measured without dropout
        return DataLoader(self.rows, batch_size=32, collate_fn=collate)

    test_dataloader = val_dataloader


class Collect(L.Callback):
    """What a downstream callback sees: each evaluation step's returned rows and predictions."""

    def __init__(self):
        self.outputs = []

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        self.outputs.append(outputs)

    on_test_batch_end = on_validation_batch_end

    def rows_and_predictions(self):
        return (torch.cat([o["row_index"] for o in self.outputs]),
                torch.cat([o["predictions"] for o in self.outputs]))


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=None, eos_token_id=None, pad_token_id=None)
    folder = tmp_path_factory.mktemp("tiny_llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def make(family, hf_dir, **kwargs):
    """A tiny model; the hf family's net is built later (by the Trainer from the data, or by `ready`)."""
    if family == "transformer":
        return tiny_model(VOCAB, **kwargs)
    if family == "hf":
        return HFLanguageModel(str(hf_dir), **kwargs)
    if family == "mamba":
        return MambaLM(d_model=16, n_layer=1, d_state=4, vocab_size=VOCAB, **kwargs)
    return ResNetBKLM(d_model=16, n_layers=1, num_experts=2, max_seq_len=16, vocab_size=VOCAB, **kwargs)


def ready(family, hf_dir):
    torch.manual_seed(0)
    model = make(family, hf_dir)
    if model.net is None:
        model.build(VOCAB)
    return model.eval()  # bk's expert dropout off: forwards repeat exactly


# ---- (a) hidden_states is the LM head's input -----------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_hidden_states_feed_the_lm_head(family, hf_dir):
    model = ready(family, hf_dir)
    ids = torch.randint(1, VOCAB, (2, T))
    with torch.no_grad():
        hidden = model.hidden_states(ids)
        assert hidden.shape == (2, T, model.hidden_size)
        torch.testing.assert_close(model.net.lm_head(hidden), model.lm_forward(ids).logits)


# ---- (b) pooling at the last real token; right padding leaves a row's representation unchanged ---
def test_last_token_pool_picks_the_last_real_token():
    hidden = torch.arange(24.0).view(2, 4, 3)
    pooled = last_token_pool(hidden, torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]))
    assert torch.equal(pooled, torch.stack([hidden[0, 2], hidden[1, 3]]))
    with pytest.raises(ValueError, match="no real token"):
        last_token_pool(hidden, torch.tensor([[1, 0, 0, 0], [0, 0, 0, 0]]))
    with pytest.raises(ValueError, match="right padding"):
        last_token_pool(hidden, torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]))


@pytest.mark.parametrize("family", FAMILIES)
def test_right_padding_does_not_change_a_rows_representation(family, hf_dir):
    model = ready(family, hf_dir)
    short, longer = torch.randint(1, VOCAB, (1, 5)), torch.randint(1, VOCAB, (1, T))
    ids = torch.cat([F.pad(short, (0, T - 5), value=PAD), longer])
    mask = torch.ones_like(ids)
    mask[0, 5:] = 0
    with torch.no_grad():
        alone = model.sequence_representation({"input_ids": short, "attention_mask": torch.ones_like(short)})
        batched = model.sequence_representation({"input_ids": ids, "attention_mask": mask})
        torch.testing.assert_close(alone[0], model.hidden_states(short)[0, -1])
        torch.testing.assert_close(batched[0], alone[0])
        torch.testing.assert_close(batched[1], model.hidden_states(longer)[0, -1])


# ---- (c) fine-tuning learns, logs and returns per-row predictions ---------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_finetuning_learns_a_separable_task(family, hf_dir):
    torch.manual_seed(0)
    dm = ToyTask(*toy_rows(128, 0), num_labels=2)
    model = make(family, hf_dir, learning_rate=1e-2, warmup_steps=5)
    trainer = quiet_trainer(max_epochs=20)
    trainer.fit(model, datamodule=dm)
    assert isinstance(model.task_head, SequenceHead) and model.task_head.num_labels == 2
    assert {"train/loss", "train/accuracy"} <= set(trainer.callback_metrics)

    collect = Collect()
    (metrics,) = quiet_trainer(callbacks=[collect]).validate(model, datamodule=dm, verbose=False)
    rows, predictions = collect.rows_and_predictions()
    assert predictions.dtype == torch.long and predictions.device.type == "cpu"
    accuracy = (predictions == dm.targets[rows]).float().mean().item()
    assert metrics["val/accuracy"] == pytest.approx(accuracy)
    assert accuracy > 0.75, f"{family}: training accuracy {accuracy:.2f} (chance 0.5)"
    assert model.last_eval == {}  # no LM batches: the perplexity epoch end had nothing to report


# ---- (d) regression: MSE, float predictions --------------------------------------------------------
def test_regression_head_uses_mse_and_returns_scores(hf_dir):
    torch.manual_seed(0)
    ids, mask, labels = toy_rows(128, 1)
    dm = ToyTask(ids, mask, 2.0 * labels.float() - 0.5, num_labels=1)
    model = make("transformer", hf_dir, learning_rate=1e-2, warmup_steps=5)
    quiet_trainer(max_epochs=20).fit(model, datamodule=dm)
    collect = Collect()
    (metrics,) = quiet_trainer(callbacks=[collect]).validate(model, datamodule=dm, verbose=False)
    rows, predictions = collect.rows_and_predictions()
    assert predictions.dtype == torch.float32 and predictions.shape == rows.shape
    mse = F.mse_loss(predictions, dm.targets[rows]).item()
    assert metrics["val/mse"] == pytest.approx(mse, rel=1e-5) and metrics["val/loss"] == pytest.approx(mse, rel=1e-5)
    assert "val/accuracy" not in metrics
    assert mse < 0.25 * dm.targets.var().item()  # learned: far better than predicting the mean


def test_head_bias_is_not_decayed():
    model = tiny_model(VOCAB)
    model.task_head = SequenceHead(model.hidden_size, 3)
    model._trainer = SimpleNamespace(estimated_stepping_batches=10)  # all the optimizer reads from it
    decay, no_decay = model.configure_optimizers()["optimizer"].param_groups
    assert any(p is model.task_head.proj.weight for p in decay["params"])
    assert any(p is model.task_head.proj.bias for p in no_decay["params"])


# ---- (e) checkpoint round trip ---------------------------------------------------------------------
def test_checkpoint_restores_the_head(tmp_path, hf_dir):
    torch.manual_seed(0)
    dm = ToyTask(*toy_rows(64, 2), num_labels=2)
    model = make("transformer", hf_dir, learning_rate=1e-2, warmup_steps=5)
    trainer = quiet_trainer(max_epochs=3)
    trainer.fit(model, datamodule=dm)
    trainer.save_checkpoint(tmp_path / "ft.ckpt")
    expected = Collect()
    quiet_trainer(callbacks=[expected]).validate(model, datamodule=dm, verbose=False)
    head = {k: v.clone() for k, v in model.task_head.state_dict().items()}

    # no DataModule: the head is rebuilt from the checkpoint's own weights
    loaded = TransformerLM.load_from_checkpoint(tmp_path / "ft.ckpt")
    assert all(torch.equal(v, head[k]) for k, v in loaded.task_head.state_dict().items())
    # a fresh model (another random head) tested from the checkpoint: configure_model builds the head first
    torch.manual_seed(1)
    fresh = make("transformer", hf_dir)
    got = Collect()
    quiet_trainer(callbacks=[got]).test(fresh, datamodule=dm, ckpt_path=tmp_path / "ft.ckpt", verbose=False)
    assert all(torch.equal(v, head[k]) for k, v in fresh.task_head.state_dict().items())
    for a, b in zip(expected.rows_and_predictions(), got.rows_and_predictions()):
        assert torch.equal(a, b)
