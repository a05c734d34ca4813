"""Requests from task definitions: a row (and its k-shot examples) -> what the model is asked
(lm-evaluation-harness's requests; evaluation/request_scoring.py encodes and scores them).

Multiple-choice tasks become a loglikelihood request: score each continuation (each starts with a
space) after the context. `generate_until` tasks become a greedy generation cut at a stop string.
A k-shot context is the task's description line (MMLU, SQuAD v2) + "\\n\\n", then every shot with its
gold continuation + "\\n\\n", then the query without answer. The templates themselves are part of each
task's definition (lightning_bench/tasks/<benchmark>/definitions.py), versioned there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

from lightning_bench.tasks.definition import TaskDefinition
from lightning_bench.tasks.registry import TASKS, get_task
from lightning_bench.errors import ConfigError


@dataclass(frozen=True)
class MultipleChoice:
    """Loglikelihood request: score each continuation after the context."""
    context: str
    choices: tuple[str, ...]
    gold: Union[int, tuple[int, ...]]  # a tuple where several choices are right (ReCoRD)
    choice_values: Optional[tuple[float, ...]] = None  # STS-B: the score each choice stands for


@dataclass(frozen=True)
class Generation:
    """Generation (greedy, or `samples` draws), cut at the first of the `stop` strings. `document`: the
    part of `context` that may lose its middle when the prompt is too long (None: cut from the left)."""
    context: str
    answers: tuple[str, ...]  # () = unanswerable
    stop: tuple[str, ...] = ("\n",)
    no_answer: Optional[str] = None  # what the model says for "no answer" (SQuAD v2)
    document: Optional[str] = None
    answer_prefix: str = ""  # the answer's first words: after the assistant header in a chat, else after `joiner`
    joiner: str = ""


def render_generation(request: Generation, chat_tokenizer=None) -> tuple[str, int]:
    """(prompt, where its cue starts) as the model reads it: the user's text (`request.context`), in
    `chat_tokenizer`'s chat template as one user turn followed by the assistant's header when given (a
    transformers tokenizer, its system prompt included), then the answer prefix. The cue (closing turn,
    header, prefix) is what the compression protocols feed after compressing (sparsity/task_decode.py)."""
    if chat_tokenizer is None:
        prefix = request.joiner + request.answer_prefix if request.answer_prefix else ""
        return request.context + prefix, len(request.context)
    # kvpress's split: the user's text and a separator no text can hold, rendered, then cut at the separator
    separator = "#" * (len(request.context) + 10)
    rendered = chat_tokenizer.apply_chat_template([{"role": "user", "content": request.context + separator}],
                                                  tokenize=False, add_generation_prompt=True, enable_thinking=False)
    if rendered.count(separator) != 1:  # a template that rewrites the user's text cannot be split where it ends
        raise ConfigError("the tokenizer's chat template does not show the user's text verbatim, so the prompt "
                          "cannot be split before its answer cue; use --chat_template off")
    head, closing = rendered.split(separator)
    return head + closing + request.answer_prefix, len(head)


def prompt_version(task: str) -> str:
    """The version of the template `task` is prompted with (MMLU subjects share one)."""
    return get_task(task).template_version


def build_request(task: str, row: dict, shots: Sequence[dict] = ()) -> Union[MultipleChoice, Generation]:
    """The request for `row`, after the `shots` (k = len(shots)) shown with their gold answers."""
    definition = get_task(task)
    head = definition.description + "\n\n" if definition.description else ""
    shown = "".join(_shown(definition, shot) + "\n\n" for shot in shots)
    if definition.output_type == "generate_until":
        context, answers = definition.template(row)
        settings = definition.generation
        document = (settings.document_text(row) if settings.document_text is not None
                    else row.get(settings.document) if settings.document else None)
        if document is not None and document not in context:
            raise AssertionError(f"{task}: the template does not show row[{settings.document!r}] verbatim")
        return Generation(head + shown + context, tuple(answers), settings.stop, settings.no_answer, document or None,
                          *settings.answer_start(row))
    if definition.output_type != "multiple_choice":
        raise ConfigError(f"{task}: {definition.output_type} requests are not scored yet")
    context, choices, gold = definition.template(row)
    return MultipleChoice(head + shown + context, choices, gold, definition.choice_values)


def _shown(definition: TaskDefinition, shot: dict) -> str:
    """A k-shot example: its query with the gold continuation (the first gold answer where several are right)."""
    if definition.output_type == "generate_until":
        context, answers = definition.template(shot)
        return context + " " + (list(answers) or [definition.generation.no_answer])[0]
    context, choices, gold = definition.template(shot)
    return context + choices[gold[0] if isinstance(gold, tuple) else gold]


def finetune_input(task: str, row: dict) -> tuple[str, Optional[str]]:
    """The text (pair) a fine-tuned classifier reads; MultiRC: one example per answer option."""
    definition = get_task(task)
    if definition.finetune is None:
        raise ConfigError(f"{task} cannot be fine-tuned as sequence classification; tasks that can: "
                          f"{', '.join(name for name, t in TASKS.items() if t.finetune is not None)}")
    return definition.finetune.text(row)
