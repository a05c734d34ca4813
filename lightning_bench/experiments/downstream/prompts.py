"""The prompts of a downstream grid: each task's examples built once, exactly as `lightning_bench test
--task` builds them (PromptedDataModule: definitions, chat template, k-shot, stops, sampling), then split
into the context the compression protocols may compress and the question that follows it."""

from __future__ import annotations

from dataclasses import dataclass
from lightning_bench.data.downstream.prompted import PromptedDataModule, Request
from lightning_bench.data.tasks import get_task
from lightning_bench.data.tasks.requests import Generation
from lightning_bench.errors import ConfigError
from lightning_bench.evaluation.prompted import split_prompt
from lightning_bench.experiments.downstream.scoring import primary_metric


@dataclass
class TaskSample:
    request: Request  # .task, .row, .request (the Generation)
    context_ids: list[int]  # up to the end of the task's document (the whole prompt when it has none)
    question_ids: list[int]  # the rest: question, answer cue, the chat template's assistant turn
    truncated: int  # document tokens removed from the middle to fit max_length - max_new_tokens
    max_new_tokens: int  # the task's, or the row's own (long-context rows)


@dataclass
class TaskPrompts:
    task: str
    samples: list[TaskSample]
    stop_ids: frozenset
    stop_strings: tuple[str, ...]
    max_new_tokens: int
    sampling: dict  # {samples, temperature, top_p, seed}
    chat_template: bool
    source: dict  # where the rows came from (files + sha256, or the hub)


def build_prompts(cfg, tokenizer, max_length: int) -> tuple[dict[str, TaskPrompts], dict]:
    """{task: TaskPrompts} for every task of `cfg` (a DownstreamConfig), and the data provenance."""
    dm = PromptedDataModule(tasks=cfg.tasks, data_dir=cfg.data_dir, paths=cfg.paths, max_samples=cfg.max_samples,
                            max_length=max_length, max_new_tokens=cfg.max_new_tokens,
                            chat_template=cfg.chat_template, samples=cfg.samples, temperature=cfg.temperature,
                            top_p=cfg.top_p, max_context=cfg.max_context)
    dm.tokenizer = tokenizer
    for task in dm.task_names:
        if get_task(task).output_type != "generate_until":
            raise ConfigError(f"{task} is scored by log-likelihood, not generated: `downstream` compares KV-cache "
                              f"methods on generation; use `lightning_bench test --task {task} --sparsity ...`")
        primary_metric(task)  # a task without a headline metric: one line now, not after its generation
    dm.setup("test")  # rows, requests, stop tokens; a prompt that cannot fit is a one-line error here
    out: dict[str, TaskPrompts] = {}
    for req in dm.requests:
        r: Generation = req.request
        task = req.task
        if task not in out:
            stop = tuple(r.stop)
            out[task] = TaskPrompts(task, [], dm.stop_ids.get(stop, frozenset()), tuple(s for s in stop if len(s) > 1),
                                    dm.max_new_tokens(task), dm.sampling(task), dm.uses_chat_template(task),
                                    dm.sources.get(task, {}).get(dm.eval_split(task), {}))
        limit = dm.max_new_tokens(task, req.row)
        context, question, cut = split_prompt(tokenizer, dm.render(task, r.context), r.document, max_length - limit,
                                              f"{task} sample {req.row.get('id')!r}")
        out[task].samples.append(TaskSample(req, context, question, cut, limit))
    return out, dm.provenance()


def shortest_context(prompts: TaskPrompts, protocol: str) -> int:
    """The fewest tokens a first compression sees in this task (what a fixed budget must not exceed)."""
    if protocol == "query_agnostic":
        return min(len(s.context_ids) for s in prompts.samples)
    return min(len(s.context_ids) + len(s.question_ids) for s in prompts.samples)

