"""FinetuneDataModule: one task as sequence classification / regression (`lightning_bench fit --task ...`).

Text (pair) -> token ids with an end token; the model puts a head on the last token's hidden state
(models/sequence_head.py) when the DataModule declares `finetune_num_labels`. Train on the train split,
monitor on a held-out part of it, test on the benchmark's validation split. When only one labelled file
exists (the offline samples), a seeded `holdout_fraction` of it is the test set and the rest is split
into train / monitor; the record names the split rule, and the checkpoint remembers the test rows.
"""

from __future__ import annotations

import hashlib
from functools import partial
from typing import Optional, Union

from torch.utils.data import DataLoader

from lightning_bench.tasks.datamodules.base import TaskDataModule
from lightning_bench.data.lm import EpochSeededSampler
from lightning_bench.data.options import (ContextTokens, Fraction, NonNegativeInt, OpenUnitInterval, PositiveInt,
                                          checked_arguments)
from lightning_bench.data.sharding import eval_sampler, processes
from lightning_bench.tasks import get_task
from lightning_bench.tasks.classifier_data import classification_collate, encode_pair, split_groups
from lightning_bench.errors import ConfigError, MissingData
from lightning_bench.tasks.prompts import finetune_input


class FinetuneDataModule(TaskDataModule):
    """Fine-tuning on one downstream task; options of TaskDataModule and:

    Args:
        holdout_fraction: without a train file, the fraction of the eval file that becomes the test set.
        val_fraction: the fraction of the training rows held out for monitoring (default as LMDataModule's).
        split_seed: seed of both splits (whole MultiRC questions move together).
    Inputs longer than max_length keep their first max_length - 1 tokens and the end token.
    """

    protocol = "finetune"

    def __init__(self, tasks: Union[str, list[str]] = "glue/sst2", data_dir: Optional[str] = None,
                 paths: Optional[dict[str, Union[str, list[str]]]] = None, tokenizer: str = "auto",
                 max_length: Optional[ContextTokens] = None, batch_size: PositiveInt = 16,
                 holdout_fraction: OpenUnitInterval = 0.2, val_fraction: Fraction = 0.05,
                 split_seed: NonNegativeInt = 1234):
        super().__init__(tasks, data_dir, paths, tokenizer, max_length, batch_size)
        self.save_hyperparameters(checked_arguments(FinetuneDataModule.__init__, locals()))
        if len(self.task_names) != 1:
            raise ConfigError(f"the finetune protocol trains one task at a time; got {len(self.task_names)} "
                              f"({', '.join(self.task_names[:4])}...): pass one, e.g. --task glue/sst2")
        self.task = get_task(self.task_names[0])
        if self.task.finetune is None:
            finetune_input(self.task.name, {})  # raises the one-line error listing the tasks that can be fine-tuned
        self.finetune: dict[str, list[dict]] = {}
        self.split_rule = ""

    @property
    def finetune_num_labels(self) -> int:
        """What the model builds its task head for (1 = regression)."""
        return self.task.finetune.num_labels

    def setup(self, stage: str = "fit") -> None:
        if self.finetune:
            return
        hp, task = self.hparams, self.task
        test = self.rows(task.name, "eval")
        try:
            train = self.rows(task.name, "train")
            self.split_rule = f"train on the {task.splits.train} split, test on the {task.splits.eval} split"
        except MissingData:  # only a missing train split falls back; a malformed train file is an error
            if hp.data_dir is None and not hp.paths:
                raise
            test, train = split_groups(test, hp.holdout_fraction, hp.split_seed)
            self.split_rule = (f"no train file: the eval file split with seed {hp.split_seed} (by question for "
                               f"multirc); {len(test)} rows ({hp.holdout_fraction:.0%}) test, the rest train")
        val, train = split_groups(train, hp.val_fraction, hp.split_seed + 1)
        if not train:
            raise ConfigError(f"{task.name}: no training rows left after the splits; lower --data.holdout_fraction")
        texts = {name: [task.finetune.text(r) for r in rows] for name, rows in
                 (("train", train), ("validation", val), ("test", test))}
        if self.tokenizer is None:
            word_text = "\n".join(t for a, b in texts["train"] for t in (a, b) if t)
            self.tokenizer = self.resolve_tokenizer(train_text=word_text)
        self.finetune = {"train": train, "validation": val, "test": test}
        if self.expected_state:  # a checkpoint to score: its rows checked now, before its model is built
            self.load_state_dict(self.expected_state)
        self._encoded = {name: [encode_pair(self.tokenizer, a, b, self.seq_len) for a, b in pairs]
                         for name, pairs in texts.items()}

    # ---- the checkpoint remembers which rows were the test set -----------------------------------
    expected_state: Optional[dict] = None  # the state of the checkpoint this run scores (set by the CLI)

    def state_dict(self) -> dict:
        return {"task": self.task.name, "split_rule": self.split_rule, "test_ids_sha256": self._test_ids_hash()}

    def load_state_dict(self, state: dict) -> None:
        """Testing a fine-tuned checkpoint on other rows than it was split with could score training rows."""
        if not state:
            return
        if state["task"] != self.task.name or state["test_ids_sha256"] != self._test_ids_hash():
            raise ConfigError(f"this checkpoint was fine-tuned on {state['task']} with test rows chosen by: "
                              f"{state['split_rule']}; the current data options select other test rows. Use the "
                              "fit's --data options (data_dir, paths, holdout_fraction, split_seed)")

    def _test_ids_hash(self) -> str:
        return hashlib.sha256("\n".join(r["id"] for r in self.finetune["test"]).encode()).hexdigest()

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        regression = self.finetune_num_labels == 1
        rows, encoded = self.finetune[split], self._encoded[split]
        items = [(ids, float(r["label"]) if regression else int(r["label"]), i)
                 for i, (ids, r) in enumerate(zip(encoded, rows))]
        collate = partial(classification_collate, pad_id=getattr(self.tokenizer, "prefix_id", 0), regression=regression)
        sampler = (EpochSeededSampler(len(items), self.hparams.split_seed, *processes(self), self.hparams.batch_size)
                   if shuffle
                   else eval_sampler(self, len(items), self.hparams.batch_size))  # no row twice under DDP
        return DataLoader(items, batch_size=self.hparams.batch_size, sampler=sampler, collate_fn=collate)

    def train_dataloader(self):
        return self._loader("train", shuffle=True)

    def val_dataloader(self):
        return self._loader("validation", shuffle=False) if self.finetune.get("validation") else []

    def test_dataloader(self):
        return self._loader("test", shuffle=False)

    def provenance(self) -> dict:
        return {**super().provenance(), "split_rule": self.split_rule,
                "split_sizes": {k: len(v) for k, v in self.finetune.items()}}
