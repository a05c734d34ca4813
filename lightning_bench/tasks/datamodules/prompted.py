"""PromptedDataModule: every example of every selected task as loglikelihood / next-token / generation
requests (encoded by tasks/datamodules/encoding.py), built from the tasks' versioned templates
(tasks/prompts.py), k-shot from each task's few-shot split. The model's test step scores them (evaluation/evaluator.py)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal, Optional, Union

import torch
from torch.utils.data import DataLoader

from lightning_bench.tasks.datamodules import encoding
from lightning_bench.tasks.datamodules.base import TaskDataModule
from lightning_bench.data.options import (ContextTokens, NonNegativeFloat, NonNegativeInt, OpenClosedUnitInterval,
                                          PositiveInt, checked_arguments)
from lightning_bench.data.sharding import eval_sampler
from lightning_bench.tasks import GenerationSettings, get_task
from lightning_bench.tasks.classifier_data import passage
from lightning_bench.tasks.loading import length_splits
from lightning_bench.errors import ConfigError, MissingData
from lightning_bench.tasks.prompts import Generation, MultipleChoice, build_request, render_generation


@dataclass
class Request:
    """One example's request: what was asked (`request`) about which row of which task."""

    task: str
    row: dict
    request: Union[MultipleChoice, Generation]
    truncated: int = 0  # prompt tokens removed to fit max_length (from the document's middle, or the left)
    prompt_tokens: int = 0  # tokens of the prompt as fed (the longest of its rows for multiple choice)


class _Batches(torch.utils.data.Dataset):
    def __init__(self, batches):
        self.batches = batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, i):
        return self.batches[i]


def check_window(context: int, window: Optional[int], option: str, cut_option: str) -> None:
    """A requested context longer than the model's window is an error unless truncation is asked for."""
    if window is not None and context > window:
        raise ConfigError(f"{option} {context} is beyond the model's window ({window} tokens); lower it, or pass "
                          f"{cut_option} <= {window} to cut the middle of longer prompts")


class PromptedDataModule(TaskDataModule):
    """Prompted scoring of downstream tasks (`lightning_bench test --task ...`); options of TaskDataModule and:

    Args:
        num_fewshot: k-shot examples from the task's few-shot split (MMLU: its dev split, in order, as the
            benchmark does; other tasks: a seeded sample of the train split).
        fewshot_seed: seed of the k-shot samples (each example draws with fewshot_seed + its index).
        fewshot_source: `split` = the task's few-shot split (above); `eval` = other examples of the evaluated
            split, never the query itself (lm-evaluation-harness's fallback for tasks without a train
            split; what the offline samples allow, since they hold only evaluation files).
        max_samples: score only the first N examples of each task (None = all); the record says N.
        max_new_tokens: generation limit (None = each task's own: SQuAD 32).
        chat_template: `auto` = wrap the prompts of the tasks that are asked as instructions (summaries,
            open QA, dialogue state, code; not SQuAD's or the multiple-choice templates) in the
            tokenizer's chat template as one user turn, when it has one; `off` = never; `on` = those
            tasks, and an error when the tokenizer has no template. The record says where it applied.
        samples, temperature, top_p: completions per prompt and their sampling (None = each task's own:
            greedy, one completion; HumanEval's pass@k needs samples >= k and temperature > 0).
        generation_seed: seed of the sampled completions (each draw: its own generator from the seed,
            the request and the draw index, so a rerun or a resumed run draws the same).
        max_context: the context length in tokens, counted as RULER counts it (prompt + answer): suites
            generated per length read their set of this length (RULER: ruler/<N>/<task>.jsonl, or the hub
            config N); it is max_length's default, and may not exceed the model's window unless
            max_length is given (then longer prompts lose their middle, as below).
    A generation prompt longer than max_length - max_new_tokens loses the middle of its document where
    the task names one (news article, evidence, dialogue history, code), else tokens from the left; the
    per-sample rows count the tokens removed.
    """

    protocol = "prompted"

    def __init__(self, tasks: Union[str, list[str]] = "glue/sst2", data_dir: Optional[str] = None,
                 paths: Optional[dict[str, Union[str, list[str]]]] = None, num_fewshot: NonNegativeInt = 0,
                 fewshot_seed: NonNegativeInt = 1234, fewshot_source: Literal["split", "eval"] = "split",
                 max_samples: Optional[PositiveInt] = None, tokenizer: str = "auto",
                 max_length: Optional[ContextTokens] = None, batch_size: PositiveInt = 16,
                 max_new_tokens: Optional[PositiveInt] = None, chat_template: Literal["auto", "on", "off"] = "auto",
                 samples: Optional[PositiveInt] = None, temperature: Optional[NonNegativeFloat] = None,
                 top_p: Optional[OpenClosedUnitInterval] = None, generation_seed: NonNegativeInt = 1234,
                 max_context: Optional[ContextTokens] = None):
        super().__init__(tasks, data_dir, paths, tokenizer, max_length, batch_size)
        self.save_hyperparameters(checked_arguments(PromptedDataModule.__init__, locals()))
        if chat_template not in ("auto", "on", "off"):
            raise ConfigError(f"unknown --data.chat_template {chat_template!r}; valid: auto, on, off")
        if fewshot_source not in ("split", "eval"):
            raise ConfigError(f"unknown --data.fewshot_source {fewshot_source!r}; valid: split, eval")
        self.requests: list[Request] = []

    def setup(self, stage: str = "test") -> None:
        if stage == "fit":
            raise ConfigError("`fit --task` trains with the finetune protocol (FinetuneDataModule); drop "
                              "--data.protocol prompted")
        if self.requests:
            return
        hp = self.hparams
        self.tokenizer = self.tokenizer or self.resolve_tokenizer()
        for task in self.task_names:
            rows = self.rows(task, self.eval_split(task), hp.max_samples)
            pool = []
            if hp.num_fewshot:
                pool = self.rows(task, "eval") if hp.fewshot_source == "eval" else self._fewshot_pool(task)
            for index, row in enumerate(rows):
                shots = self._shots(task, pool, row, index)
                self.requests.append(Request(task, row, build_request(task, row, shots)))
        self._encode_requests()

    @property
    def seq_len(self) -> int:
        """--data.max_length, else --data.max_context (which may not exceed the model's window: a longer
        context is cut only when --data.max_length asks for it), else the default (TaskDataModule)."""
        hp = self.hparams
        if hp.max_context is None or hp.max_length is not None:
            return super().seq_len
        model = self.trainer.lightning_module if self.trainer is not None else None
        check_window(hp.max_context, getattr(model, "max_seq_len", None), "--data.max_context", "--data.max_length")
        return hp.max_context

    def eval_split(self, task: str) -> str:
        """The role "eval", or for a suite generated per length (RULER: ruler/<N>/<task>.jsonl, or the hub's
        N-token config) the set of --data.max_context tokens."""
        n = self.hparams.max_context
        if n is None or task in (self.hparams.paths or {}):
            return "eval"
        lengths = length_splits(get_task(task), self.hparams.data_dir)
        if not lengths:
            return "eval"  # one set whatever the length: its prompts are cut to max_context like any other
        if n not in lengths:
            where = "the hub's and --data.data_dir's" if self.hparams.data_dir else "the hub's"
            raise ConfigError(f"{task}: max_context {n} has no {get_task(task).benchmark} set; {where} sets are "
                              f"{', '.join(map(str, lengths))} tokens (other lengths: generate them under "
                              "--data.data_dir, or name the files in paths)")
        return str(n)

    def max_new_tokens(self, task: str, row: Optional[dict] = None) -> int:
        """--data.max_new_tokens, else the row's own (long-context rows carry one), else the task's."""
        settings = get_task(task).generation or GenerationSettings()
        return self.hparams.max_new_tokens or (row or {}).get("max_new_tokens") or settings.max_new_tokens

    def sampling(self, task: str) -> dict:
        """How `task`'s completions are drawn: {samples, temperature, top_p, seed} (options over the task's own)."""
        settings = get_task(task).generation or GenerationSettings()
        hp = self.hparams
        out = {"samples": hp.samples or settings.samples,
               "temperature": settings.temperature if hp.temperature is None else hp.temperature,
               "top_p": settings.top_p if hp.top_p is None else hp.top_p, "seed": hp.generation_seed}
        if out["samples"] > 1 and out["temperature"] == 0:
            raise ConfigError(f"{task}: {out['samples']} samples per prompt need --data.temperature > 0 "
                              "(greedy decoding gives one completion)")
        return out

    def uses_chat_template(self, task: str) -> bool:
        settings = get_task(task).generation
        if self.hparams.chat_template == "off" or settings is None or not settings.chat:
            return False
        has = getattr(getattr(self.tokenizer, "tok", None), "chat_template", None) is not None
        if not has and self.hparams.chat_template == "on":
            raise ConfigError(f"--data.chat_template on: tokenizer {getattr(self.tokenizer, 'name', '?')!r} has no "
                              "chat template; use auto or off")
        return has

    def render(self, task: str, request: Generation) -> tuple[str, int]:
        """(prompt, where its cue starts): the request as the model reads it, in the chat template when the
        task uses it (requests.render_generation)."""
        return render_generation(request, self.tokenizer.tok if self.uses_chat_template(task) else None)

    def _fewshot_pool(self, task: str) -> list[dict]:
        split = get_task(task).splits.fewshot
        try:
            pool = self.rows(task, "fewshot")
        except MissingData as err:
            raise ConfigError(f"{task}: --data.num_fewshot {self.hparams.num_fewshot} needs its {split or 'few-shot'} "
                              f"split, which was not found; pass --data.fewshot_source eval, --data.paths "
                              f"'{{{task}:fewshot: FILE}}' or --data.num_fewshot 0") from err
        if self.hparams.num_fewshot > len(pool):
            raise ConfigError(f"{task}: --data.num_fewshot {self.hparams.num_fewshot} is larger than its {split} split "
                              f"({len(pool)} examples); lower it")
        return pool

    def _shots(self, task: str, pool: list[dict], row: dict, index: int) -> list[dict]:
        k = self.hparams.num_fewshot
        if not k:
            return []
        if get_task(task).fewshot_sampling == "first" and self.hparams.fewshot_source == "split":
            return pool[:k]  # e.g. the original MMLU protocol: the first k dev questions, in order
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
        tok = self.tokenizer
        self._encoded: list[encoding.EncodedRequest] = []
        self._no_answer: dict[int, Optional[list[int]]] = {}
        for rid, req in enumerate(self.requests):
            r = req.request
            if isinstance(r, Generation):
                label = f"{req.task} sample {req.row.get('id', rid)!r}"
                settings = get_task(req.task).generation
                enc = [encoding.encode_generation(tok, rid, *self.render(req.task, r), self.seq_len,
                                                  self.max_new_tokens(req.task, req.row), r.document, label,
                                                  cut_left=not settings.chat)]
                self._no_answer[rid] = (encoding.split_continuation(tok, r.context, " " + r.no_answer)[1]
                                        if r.no_answer else None)
            else:
                enc = encoding.encode_multiple_choice(tok, rid, r.context, r.choices, self.seq_len)
            req.truncated = max(e.truncated for e in enc)
            req.prompt_tokens = max(len(e.tokens) for e in enc)
            self._encoded.extend(enc)
        stops = {r.request.stop for r in self.requests if isinstance(r.request, Generation)}
        # the tokenizer's end-of-sequence token ends an answer too (instruct models emit it); a
        # one-character stop ("\n") is every token holding it, longer ones are matched on the text
        eos = getattr(getattr(tok, "tok", None), "eos_token_id", None)
        self.stop_ids = {s: frozenset(set().union(*(encoding.stop_token_ids(tok, one) for one in s if len(one) == 1))
                                      | ({eos} if eos is not None else set())) for s in stops}

    def _batches(self) -> list[dict]:
        batches = []
        pad = getattr(self.tokenizer, "prefix_id", 0)
        for kind in ("next_token", "loglikelihood"):
            rows = sorted((e for e in self._encoded if e.kind == kind), key=lambda e: -len(e.tokens))
            for i in range(0, len(rows), self.hparams.batch_size):
                batches.append(encoding.collate(rows[i:i + self.hparams.batch_size], pad))
        for e in (e for e in self._encoded if e.kind == "generate"):
            batch = encoding.collate([e], pad)
            req = self.requests[e.request_id]
            batch.update(max_new_tokens=self.max_new_tokens(req.task, req.row), stop=req.request.stop, cue_tokens=e.cue,
                         no_answer_tokens=self._no_answer[e.request_id], sampling=self.sampling(req.task))
            batches.append(batch)
        return batches

    def generation_settings(self, batch: dict) -> dict:
        """What evaluation/request_scoring.generate needs beyond the batch: the tokenizer and the stop token ids."""
        stop = tuple(batch["stop"])  # the DataLoader hands the tuple back as a list
        return {"tokenizer": self.tokenizer, "stop_ids": self.stop_ids.get(stop, frozenset()),
                "stop_strings": tuple(s for s in stop if len(s) > 1),
                "max_new_tokens": batch["max_new_tokens"], "no_answer_tokens": batch["no_answer_tokens"],
                "cue_tokens": batch["cue_tokens"], **batch["sampling"]}

    def test_dataloader(self):
        batches = _Batches(self._batches())  # under DDP each rank scores whole batches, none twice
        return DataLoader(batches, batch_size=None, sampler=eval_sampler(self, len(batches), 1))

    def protocol_record(self) -> dict:
        """The settings a prompted score depends on (the record's `protocol`)."""
        hp = self.hparams
        return {"name": self.protocol, "num_fewshot": hp.num_fewshot, "fewshot_seed": hp.fewshot_seed,
                "fewshot_source": hp.fewshot_source, "max_samples": hp.max_samples, "max_length": self.seq_len,
                "max_new_tokens": self._recorded_max_new_tokens(),
                "prompt_versions": {t: get_task(t).template_version for t in self.task_names},
                **self._generation_record()}

    def _generation_record(self) -> dict:
        """Chat template and sampling per generation task (only when a run has such tasks: older records
        of multiple-choice runs keep their shape)."""
        tasks = [t for t in self.task_names if get_task(t).generation]
        if not tasks:
            return {}
        if getattr(self, "tokenizer", None) is None:
            self.tokenizer = self.resolve_tokenizer()
        return {"chat_template": {t: self.uses_chat_template(t) for t in tasks},
                "chat_template_option": self.hparams.chat_template,
                "sampling": {t: self.sampling(t) for t in tasks}}

    def _recorded_max_new_tokens(self):
        """One number when the run's generation tasks share it (or without any: the limit that would
        apply), else {task: limit}; records compare it across runs (`mixed_protocols`)."""
        limits = {t: self.max_new_tokens(t) for t in self.task_names if get_task(t).generation}
        if not limits:
            return self.hparams.max_new_tokens or GenerationSettings().max_new_tokens
        return limits if len(set(limits.values())) > 1 else next(iter(limits.values()))
