"""TaskDataModule: what the prompted-evaluation and the fine-tuning DataModules share.

The task list, where rows come from (a local folder, files, or the hub) and their provenance, the
tokenizer, and the model-input limit. Each subclass is one protocol (`protocol`); which one a command
uses is decided once, in tasks/datamodules/protocol.py.
"""

from __future__ import annotations

from typing import Optional, Union

import lightning as L

from lightning_bench.data.options import ContextTokens, PositiveInt
from lightning_bench.tasks import default_max_length, expand_tasks, load_rows
from lightning_bench.data.tokenization import build_tokenizer
from lightning_bench.errors import ConfigError


class TaskDataModule(L.LightningDataModule):
    """Downstream task rows, tokenizer and provenance.

    Args:
        tasks: `glue`, `superglue`, `squad`, `squad_v2`, `mmlu`, a task (`glue/sst2`, `mmlu/anatomy`), or a
            list / comma-separated string of them (`lightning_bench aliases` lists the names).
        data_dir: local root laid out like ../shared/data (each benchmark's lightning_bench/tasks/<benchmark>/layout.yaml
            says which file holds which split); None = the Hugging Face hub (`datasets`).
        paths: per-task files overriding the defaults, e.g. {"glue/sst2": "my/dev.tsv"} (the eval
            split) or {"glue/sst2:train": "my/train.tsv"}.
        tokenizer: `auto` = the model's own (pretrained models); else `word`, `gpt2` or an HF folder/id.
        max_length: longest model input in tokens. None = the model's limit, at most 2048; with a long-context
            task (RULER, InfiniteBench, LooGLE, LongBench, ZeroSCROLLS, rows) the model's limit.
        batch_size: rows per forward (the default matches LMDataModule's: `--task` swaps the DataModule
            class and jsonargparse carries same-named values over, so equal defaults keep runs the same).
    """

    protocol = ""  # "prompted" | "finetune": set by each subclass

    def __init__(self, tasks: Union[str, list[str]] = "glue/sst2", data_dir: Optional[str] = None,
                 paths: Optional[dict[str, Union[str, list[str]]]] = None, tokenizer: str = "auto",
                 max_length: Optional[ContextTokens] = None, batch_size: PositiveInt = 16):
        super().__init__()  # each subclass saves its arguments, checked against the ranges they declare
        self.task_names = expand_tasks(tasks)
        self.tokenizer = None
        self.sources: dict[str, dict] = {}

    @property
    def seq_len(self) -> int:
        if self.hparams.max_length is not None:
            return self.hparams.max_length
        model = self.trainer.lightning_module if self.trainer is not None else None
        return default_max_length(self.task_names, getattr(model, "max_seq_len", None))

    @property
    def dataset_name(self) -> str:
        return "downstream"

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def rows(self, task: str, split: str, max_rows: Optional[int] = None) -> list[dict]:
        """Rows of `task`'s split or role ("eval", "train", "fewshot"); their origin goes into provenance."""
        paths = self.hparams.paths or {}
        path = paths.get(f"{task}:{split}", paths.get(task) if split == "eval" else None)
        rows, origin = load_rows(task, split, data_dir=self.hparams.data_dir, paths=path, max_rows=max_rows,
                                 with_origin=True)
        if not rows:  # e.g. a SQuAD file whose articles hold no questions: never drop a task silently
            raise ConfigError(f"{task}: its {split} data ({origin.get('files') or origin.get('hub')}) holds no "
                              "examples; point --data.data_dir or --data.paths at the real file")
        if task == "glue/stsb" and split == "eval" and len(rows) < 2:
            raise ConfigError("glue/stsb: Pearson and Spearman need at least 2 examples; raise --data.max_samples")
        self.sources.setdefault(task, {})[split] = origin
        return rows

    def resolve_tokenizer(self, train_text: Optional[str] = None):
        """The model's own tokenizer (`auto`), else the one named; a random-init model trains a word vocabulary."""
        spec = self.hparams.tokenizer
        model = self.trainer.lightning_module if self.trainer is not None else None
        source = getattr(model, "tokenizer_source", None)
        if spec == "auto":
            if source:
                return build_tokenizer(source["name"], **source.get("kwargs", {}))
            if train_text is None:
                raise ConfigError("prompted scoring needs the tokenizer the model was trained with: pass "
                                  "--data.tokenizer gpt2 or a tokenizer folder")
            spec = "word"
        return build_tokenizer(spec, train_text=train_text)

    def provenance(self) -> dict:
        return {"tasks": self.task_names, "protocol": self.protocol, "sources": self.sources,
                "tokenizer": self.tokenizer.describe() if self.tokenizer else None}
