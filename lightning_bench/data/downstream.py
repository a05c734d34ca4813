"""DownstreamDataModule: GLUE, SuperGLUE, SQuAD and MMLU for the two downstream protocols.

* prompted (`lightning_bench test --task ...`): every example of every selected task becomes
  loglikelihood / next-token / generation requests (lightning_bench/evaluation/prompted.py) built from
  the versioned templates in lightning_bench/evaluation/prompts.py, k-shot from the task's few-shot
  split; the module's test step scores them and DownstreamRecorder turns the scores into the
  benchmarks' metrics.
* finetune (`lightning_bench fit --task glue/sst2 ...`): one task; text (pair) -> token ids with an
  end token, a classification/regression head on the last token's hidden state (models/sequence_head.py).
  Train on the train split, monitor on a held-out part of it, test on the benchmark's validation split.
  When only one labelled file exists (the offline samples), a seeded `holdout_fraction` of it is the
  test set and the rest is split into train / monitor; the record names the split rule.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import partial
from typing import Literal, Optional, Union

import lightning as L
import torch
from torch.utils.data import DataLoader

from lightning_bench.data.lm import EpochSeededSampler
from lightning_bench.data.tasks import TASKS, expand_tasks, load_rows
from lightning_bench.data.tasks.finetune import classification_collate, encode_pair, passage, split_groups
from lightning_bench.evaluation.prompts import (FINETUNE_NUM_LABELS, Generation, MultipleChoice, build_request,
                                                finetune_input)
from lightning_bench.data.tokenization import build_tokenizer
from lightning_bench.errors import ConfigError, MissingData
from lightning_bench.evaluation import prompted

PROTOCOLS = ("auto", "prompted", "finetune")


@dataclass
class Request:
    """One example's request: what was asked (`request`) about which row of which task."""

    task: str
    row: dict
    request: Union[MultipleChoice, Generation]
    truncated: int = 0


class _Batches(torch.utils.data.Dataset):
    def __init__(self, batches):
        self.batches = batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        return self.batches[i]


class DownstreamDataModule(L.LightningDataModule):
    """Downstream tasks for prompted scoring or fine-tuning.

    Args:
        tasks: `glue`, `superglue`, `squad`, `squad_v2`, `mmlu`, a subtask (`glue/sst2`, `mmlu/anatomy`),
            or a list / comma-separated string of them (`lightning_bench aliases` lists the names).
        data_dir: local root laid out like ../shared/data (glue/sst2/dev.tsv, mmlu/test/..., ...);
            None = the Hugging Face hub (`datasets`, ids in lightning_bench/data/tasks/registry.py).
        paths: per-task files overriding the defaults, e.g. {"glue/sst2": "my/dev.tsv"} (the eval
            split) or {"glue/sst2:train": "my/train.tsv"}.
        num_fewshot: k-shot examples from the task's few-shot split (MMLU: its dev split, in order, as the
            benchmark does; other tasks: a seeded sample of the train split).
        fewshot_seed: seed of the k-shot samples (each example draws with fewshot_seed + its index).
        fewshot_source: `split` = the task's few-shot split (above); `eval` = other examples of the evaluated
            split, never the query itself (lm-evaluation-harness's fallback for tasks without a train
            split; what the offline samples allow, since they hold only evaluation files).
        max_samples: score only the first N examples of each task (None = all); the record says N.
        tokenizer: `auto` = the model's own (pretrained models); else `word`, `gpt2` or an HF folder/id.
        max_length: longest model input in tokens (longer prompts lose tokens from the left; the record
            counts them); fine-tuning truncates inputs to it. None = the model's limit, at most 2048.
        batch_size: rows per forward.
        max_new_tokens: generation limit for SQuAD answers.
        protocol: `auto` = finetune under `fit`, prompted otherwise; `finetune` to test a fine-tuned head.
    batch_size and val_fraction default as in LMDataModule: `--task` swaps the DataModule class and
    jsonargparse carries values of same-named options over, so equal defaults keep either path the same.
        holdout_fraction / val_fraction / split_seed: fine-tuning splits (see the module docstring).
    """

    def __init__(self, tasks: Union[str, list[str]] = "glue/sst2", data_dir: Optional[str] = None,
                 paths: Optional[dict[str, Union[str, list[str]]]] = None, num_fewshot: int = 0,
                 fewshot_seed: int = 1234, fewshot_source: Literal["split", "eval"] = "split",
                 max_samples: Optional[int] = None, tokenizer: str = "auto",
                 max_length: Optional[int] = None, batch_size: int = 16, max_new_tokens: int = 32,
                 protocol: Literal["auto", "prompted", "finetune"] = "auto", holdout_fraction: float = 0.2,
                 val_fraction: float = 0.05, split_seed: int = 1234):
        super().__init__()
        self.save_hyperparameters()
        self.task_names = expand_tasks(tasks)
        if protocol not in PROTOCOLS:
            raise ConfigError(f"unknown --data.protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}")
        if num_fewshot < 0 or (max_samples is not None and max_samples < 1) or (max_length or 8) < 8 or batch_size < 1:
            raise ConfigError("--data.num_fewshot must be >= 0, --data.max_samples >= 1, --data.max_length >= 8 "
                              "and --data.batch_size >= 1")
        if not 0 < holdout_fraction < 1 or not 0 <= val_fraction < 1:
            raise ConfigError("--data.holdout_fraction must be in (0, 1) and --data.val_fraction in [0, 1)")
        self.tokenizer = None
        self.requests: list[Request] = []
        self.finetune: dict[str, list[dict]] = {}
        self.sources: dict[str, dict] = {}
        self.active_protocol: Optional[str] = None

    # ---- what the rest of the library reads --------------------------------------------------
    @property
    def seq_len(self) -> int:
        if self.hparams.max_length is not None:
            return self.hparams.max_length
        model = self.trainer.lightning_module if self.trainer is not None else None
        limit = getattr(model, "max_seq_len", None)
        return min(2048, limit) if limit else 2048

    @property
    def dataset_name(self) -> str:
        return "downstream"

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @property
    def finetune_num_labels(self) -> Optional[int]:
        return FINETUNE_NUM_LABELS[self.task_names[0]] if self.active_protocol == "finetune" else None

    # ---- setup ---------------------------------------------------------------------------------
    def _protocol(self, stage: str) -> str:
        if self.hparams.fewshot_source not in ("split", "eval"):
            raise ConfigError(f"unknown --data.fewshot_source {self.hparams.fewshot_source!r}; valid: split, eval")
        if self.hparams.protocol != "auto":
            return self.hparams.protocol
        if self.active_protocol == "finetune":  # the test that ends a fine-tuning run scores the head
            return "finetune"
        return "finetune" if stage == "fit" else "prompted"

    def _rows(self, task: str, split: str, max_rows: Optional[int] = None) -> list[dict]:
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

    def setup(self, stage: str = "test") -> None:
        protocol = self._protocol(stage)
        if self.active_protocol == protocol and (self.requests or self.finetune):
            return
        if stage == "fit" and protocol != "finetune":
            raise ConfigError("`fit --task` trains with the finetune protocol; drop --data.protocol prompted")
        self.active_protocol = protocol
        if protocol == "finetune":
            self._setup_finetune()
        else:
            self._setup_prompted()

    def _resolve_tokenizer(self, train_text: Optional[str] = None):
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

    # ---- prompted ------------------------------------------------------------------------------
    def _setup_prompted(self) -> None:
        hp = self.hparams
        self.tokenizer = self.tokenizer or self._resolve_tokenizer()
        self.requests = []
        for task in self.task_names:
            rows = self._rows(task, "eval", hp.max_samples)
            pool = []
            if hp.num_fewshot:
                pool = self._rows(task, "eval") if hp.fewshot_source == "eval" else self._fewshot_pool(task)
            for index, row in enumerate(rows):
                shots = self._shots(task, pool, row, index)
                self.requests.append(Request(task, row, build_request(task, row, shots)))
        self._encode_requests()

    def _fewshot_pool(self, task: str) -> list[dict]:
        split = TASKS[task].fewshot_split
        try:
            pool = self._rows(task, "fewshot")
        except MissingData as err:
            raise ConfigError(f"{task}: --data.num_fewshot {self.hparams.num_fewshot} needs its {split} split, which "
                              f"was not found; pass --data.fewshot_source eval, --data.paths "
                              f"'{{{task}:fewshot: FILE}}' or --data.num_fewshot 0") from err
        if self.hparams.num_fewshot > len(pool):
            raise ConfigError(f"{task}: --data.num_fewshot {self.hparams.num_fewshot} is larger than its {split} split "
                              f"({len(pool)} examples); lower it")
        return pool

    def _shots(self, task: str, pool: list[dict], row: dict, index: int) -> list[dict]:
        k = self.hparams.num_fewshot
        if not k:
            return []
        if TASKS[task].benchmark == "mmlu" and self.hparams.fewshot_source == "split":
            return pool[:k]  # the original MMLU protocol: the first k dev questions, in order
        if self.hparams.fewshot_source == "eval":
            # never the query, nor another question about the same passage (it would show its answer)
            same = passage(row)
            candidates = [r for r in pool if r["id"] != row["id"] and (same is None or passage(r) != same)]
        else:
            candidates = pool
        if k > len(candidates):
            raise ConfigError(f"{task}: --data.num_fewshot {k} is larger than its few-shot split without the "
                              f"query ({len(candidates)} examples); lower it")
        return random.Random(self.hparams.fewshot_seed + index).sample(candidates, k)

    def _encode_requests(self) -> None:
        hp, tok = self.hparams, self.tokenizer
        self._encoded: list[prompted.EncodedRequest] = []
        self._no_answer: dict[int, Optional[int]] = {}
        for rid, req in enumerate(self.requests):
            r = req.request
            if isinstance(r, Generation):
                enc = [prompted.encode_generation(tok, rid, r.context, self.seq_len, hp.max_new_tokens)]
                self._no_answer[rid] = (prompted.split_continuation(tok, r.context, " " + r.no_answer)[1]
                                        if r.no_answer else None)
            else:
                enc = prompted.encode_multiple_choice(tok, rid, r.context, r.choices, self.seq_len)
            req.truncated = max(e.truncated for e in enc)
            self._encoded.extend(enc)
        stops = {r.request.stop for r in self.requests if isinstance(r.request, Generation)}
        # the tokenizer's end-of-sequence token ends an answer too (instruct models emit it)
        eos = getattr(getattr(tok, "tok", None), "eos_token_id", None)
        self.stop_ids = {s: frozenset(prompted.stop_token_ids(tok, s) | ({eos} if eos is not None else set()))
                         for s in stops}

    def _prompted_batches(self) -> list[dict]:
        batches = []
        pad = getattr(self.tokenizer, "prefix_id", 0)
        for kind in ("next_token", "loglikelihood"):
            rows = sorted((e for e in self._encoded if e.kind == kind), key=lambda e: -len(e.tokens))
            for i in range(0, len(rows), self.hparams.batch_size):
                batches.append(prompted.collate(rows[i:i + self.hparams.batch_size], pad))
        for e in (e for e in self._encoded if e.kind == "generate"):
            batch = prompted.collate([e], pad)
            r = self.requests[e.request_id].request
            batch.update(max_new_tokens=self.hparams.max_new_tokens, stop=r.stop,
                         no_answer_tokens=self._no_answer[e.request_id])
            batches.append(batch)
        return batches

    def generation_settings(self, batch: dict) -> dict:
        return {"tokenizer": self.tokenizer, "stop_ids": self.stop_ids.get(batch["stop"], frozenset()),
                "max_new_tokens": batch["max_new_tokens"], "no_answer_tokens": batch["no_answer_tokens"]}

    # ---- fine-tuning ---------------------------------------------------------------------------
    def _setup_finetune(self) -> None:
        hp = self.hparams
        if len(self.task_names) != 1:
            raise ConfigError(f"the finetune protocol trains one task at a time; got {len(self.task_names)} "
                              f"({', '.join(self.task_names[:4])}...): pass one, e.g. --task glue/sst2")
        task = self.task_names[0]
        if hp.max_samples is not None:
            raise ConfigError("--data.max_samples limits prompted scoring; fine-tuning uses every row (drop it)")
        if task not in FINETUNE_NUM_LABELS:
            finetune_input(task, {})  # raises the one-line error listing the tasks that can be fine-tuned
        test = self._rows(task, "eval")
        try:
            train = self._rows(task, "train")
            self.split_rule = f"train on the {TASKS[task].train_split} split, test on the {TASKS[task].eval_split} split"
        except MissingData:  # only a missing train split falls back; a malformed train file is an error
            if hp.data_dir is None and not hp.paths:
                raise
            test, train = split_groups(test, hp.holdout_fraction, hp.split_seed)
            self.split_rule = (f"no train file: the eval file split with seed {hp.split_seed} (by question for "
                               f"multirc); {len(test)} rows ({hp.holdout_fraction:.0%}) test, the rest train")
        val, train = split_groups(train, hp.val_fraction, hp.split_seed + 1)
        if not train:
            raise ConfigError(f"{task}: no training rows left after the splits; lower --data.holdout_fraction")
        texts = {name: [finetune_input(task, r) for r in rows] for name, rows in
                 (("train", train), ("validation", val), ("test", test))}
        if self.tokenizer is None:
            word_text = "\n".join(t for a, b in texts["train"] for t in (a, b) if t)
            self.tokenizer = self._resolve_tokenizer(train_text=word_text)
        self.finetune = {"train": train, "validation": val, "test": test}
        self._encoded_ft = {name: [encode_pair(self.tokenizer, a, b, self.seq_len) for a, b in pairs]
                            for name, pairs in texts.items()}

    # ---- the checkpoint remembers which rows were the test set -----------------------------------
    def state_dict(self) -> dict:
        if self.active_protocol != "finetune":
            return {}
        return {"task": self.task_names[0], "split_rule": self.split_rule, "test_ids_sha256": self._test_ids_hash()}

    def load_state_dict(self, state: dict) -> None:
        """Testing a fine-tuned checkpoint on other rows than it was split with could score training rows."""
        if not state or self.active_protocol != "finetune":
            return
        if state["task"] != self.task_names[0] or state["test_ids_sha256"] != self._test_ids_hash():
            raise ConfigError(f"this checkpoint was fine-tuned on {state['task']} with test rows chosen by: "
                              f"{state['split_rule']}; the current data options select other test rows. Use the "
                              "fit's --data options (data_dir, paths, holdout_fraction, split_seed)")

    def _test_ids_hash(self) -> str:
        import hashlib

        return hashlib.sha256("\n".join(r["id"] for r in self.finetune["test"]).encode()).hexdigest()

    def _finetune_loader(self, split: str, shuffle: bool) -> DataLoader:
        task = self.task_names[0]
        regression = FINETUNE_NUM_LABELS[task] == 1
        rows, encoded = self.finetune[split], self._encoded_ft[split]
        items = [(ids, float(r["label"]) if regression else int(r["label"]), i)
                 for i, (ids, r) in enumerate(zip(encoded, rows))]
        collate = partial(classification_collate, pad_id=getattr(self.tokenizer, "prefix_id", 0), regression=regression)
        sampler = EpochSeededSampler(len(items), self.hparams.split_seed) if shuffle else None
        return DataLoader(items, batch_size=self.hparams.batch_size, sampler=sampler, collate_fn=collate)

    # ---- loaders -------------------------------------------------------------------------------
    def train_dataloader(self):
        return self._finetune_loader("train", shuffle=True)

    def val_dataloader(self):
        if self.active_protocol != "finetune" or not self.finetune.get("validation"):
            return []
        return self._finetune_loader("validation", shuffle=False)

    def test_dataloader(self):
        if self.active_protocol == "finetune":
            return self._finetune_loader("test", shuffle=False)
        return DataLoader(_Batches(self._prompted_batches()), batch_size=None)

    # ---- provenance ----------------------------------------------------------------------------
    def provenance(self) -> dict:
        out = {"tasks": self.task_names, "protocol": self.active_protocol, "sources": self.sources,
               "tokenizer": self.tokenizer.describe() if self.tokenizer else None}
        if self.active_protocol == "finetune":
            out["split_rule"] = self.split_rule
            out["split_sizes"] = {k: len(v) for k, v in self.finetune.items()}
        return out

