"""TaskDefinition: everything about one downstream task, declared in one place.

Like one lm-evaluation-harness task: where the rows come from (`Source`), which splits play which role
(`Splits`), what the model is asked (`output_type` + a versioned `template`), how the answers are
scored (`metrics` averaged into the task score, or a generation `scorer` and its `headline`), and the fine-tuning and generation settings.
A benchmark is one folder of lightning_bench/tasks/ (definitions, reader, scorer, layout.yaml) whose
__init__.py declares a `Suite`; registry.py lists the suites, and nothing else names a task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional

AGGREGATIONS = ("mean_task_score", "single_task", "mmlu_questions", "selection_only", "task_means", "per_task")
OUTPUT_TYPES = ("multiple_choice", "generate_until", "loglikelihood_rolling")  # rolling: reserved, not run yet
@dataclass(frozen=True)
class Source:
    """Where the rows come from and how the file format names the task's fields.

    `columns` maps each row field to the file's column (GLUE TSV) or key (SuperGLUE JSON lines; the same
    name there); `label_column` is the file's label column; `label_names` lists the label values in index
    order (None: a float score, or no single label as in ReCoRD). `hub_splits` lists the hub splits one
    split is made of (MNLI's validation = matched + mismatched).
    """

    hub_id: str
    hub_config: Optional[str]
    format: str  # a file format some suite has a reader for (Suite.readers)
    columns: Mapping[str, str] = field(default_factory=dict, hash=False)
    label_column: str = "label"
    label_names: Optional[tuple[str, ...]] = None
    file_fields: str = ""  # the original file's fields where `columns` does not say them (nested formats)
    hub_splits: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class Splits:
    """Which split each role reads (hub split names; MMLU's few-shot split is "dev")."""

    eval: str = "validation"
    train: Optional[str] = "train"  # None: the benchmark has no train split for the task
    fewshot: Optional[str] = "train"  # None: no split to draw k-shot examples from


@dataclass(frozen=True)
class Finetune:
    """Fine-tuning as sequence classification: `num_labels` (1 = regression) and the text (pair) read.

    `text_pair` names the row fields (second None: a single text); `input` builds the pair itself
    where the fields alone would not say what to classify (WiC's word, WSC's spans).
    """

    num_labels: int
    text_pair: tuple[str, Optional[str]] = ("", None)
    input: Optional[Callable[[dict], tuple[str, Optional[str]]]] = None

    def text(self, row: dict) -> tuple[str, Optional[str]]:
        if self.input is not None:
            return self.input(row)
        a, b = self.text_pair
        return row[a], (row[b] if b else None)


@dataclass(frozen=True)
class GenerationSettings:
    """`generate_until`: decoding until a stop sequence or `max_new_tokens`; greedy unless `samples` > 1.

    `samples` completions per prompt are drawn with `temperature` / `top_p` (HumanEval's pass@k); the
    run's options can override all three. `document` names the row field that may be cut from its
    middle when the prompt does not fit (never the instruction or the question); None: the prompt is
    cut from the left, as for SQuAD's k-shot contexts.
    """

    stop: tuple[str, ...] = ("\n",)
    max_new_tokens: int = 32
    no_answer: Optional[str] = None  # what the model says for "no answer" (SQuAD v2); scored as ""
    samples: int = 1
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0
    document: Optional[str] = None  # a row field, or "" with `document_text` for a rendered one
    document_text: Optional[Callable[[dict], str]] = None  # the document as the template shows it (dialogue history)
    keep_whitespace: bool = False  # code: the completion's leading indentation is part of the answer
    chat: bool = False  # an instruction-style prompt: wrapped in the model's chat template (--data.chat_template)
    # the answer's first words, written after the prompt (after the chat template's assistant header) so the
    # completion continues them; not part of the prediction. InfiniteBench's templates for open models end
    # their passkey prompt with "The pass key is" and size the 6-token limit for the digits alone.
    answer_prefix: str = ""
    # the row field holding each row's own answer prefix (kvpress's unified rows, RULER): written as it is
    # after the question in a plain prompt (RULER's input is context + question + answer_prefix), after the
    # assistant header in a chat
    answer_prefix_field: Optional[str] = None

    def answer_start(self, row: dict) -> tuple[str, str]:
        """(answer prefix, what joins it to a plain prompt): the task's own after a blank line (as the
        benchmark's yarn-mistral template writes "{input}\n\nThe pass key is"), or the row's as written."""
        if self.answer_prefix_field:
            return row.get(self.answer_prefix_field) or "", ""
        return self.answer_prefix, "\n\n"


# a template maps a row to (context, choices, gold) for multiple_choice, (context, answers) for generate_until
Template = Callable[[dict], tuple]


@dataclass(frozen=True)
class TaskDefinition:
    name: str  # registry key: "<benchmark>/<task>", or the benchmark itself for one-task benchmarks ("squad")
    benchmark: str  # the named group it belongs to and the record section it is written under
    title: str  # the benchmark's own name for it ("SST-2"), in messages
    source: Source
    output_type: str  # one of OUTPUT_TYPES
    template: Template
    template_version: str  # "<name>@<n>": a changed template gets the next n, so old records stay apart
    # multiple choice: the official metrics (tasks/official_metrics.py), averaged into the task score
    metrics: tuple[str, ...] = ()
    # generate_until: the scoring family (a suite's `scorers` key, or squad_v1/squad_v2 of official_metrics.py)
    # and the per-example figure of it that `downstream` tables, pairs and compares (its headline)
    scorer: Optional[str] = None
    headline: Optional[str] = None
    splits: Splits = Splits()
    fewshot_sampling: str = "seeded"  # or "first": the first k rows of the few-shot split, in order (MMLU)
    description: str = ""  # a line before the k-shot examples (MMLU's subject line, SQuAD v2's instruction)
    choice_values: Optional[tuple[float, ...]] = None  # STS-B: the score each choice stands for
    answer_field: str = "label"  # the row field holding the gold (a label index, a score, or answer strings)
    choices_field: Optional[str] = None  # the row field the choices name, where a prediction is one of its
    # strings rather than a label (ReCoRD: the entity filled in), scored against `answer_field`
    finetune: Optional[Finetune] = None  # None: not fine-tunable as sequence classification
    generation: Optional[GenerationSettings] = None  # generate_until only
    diagnostic: bool = False  # reported beside the benchmark average, never averaged in (SuperGLUE AX-b/AX-g)

    @property
    def short_name(self) -> str:
        """The name inside its benchmark ("sst2"), or the benchmark's name for a one-task benchmark."""
        return self.name.partition("/")[2] or self.name

    @property
    def num_classes(self) -> Optional[int]:
        return len(self.source.label_names) if self.source.label_names else None


@dataclass(frozen=True)
class Benchmark:
    """A named group of tasks (`--task glue`). `aggregation` says how the benchmark's record section combines
    its tasks: mean_task_score (GLUE/SuperGLUE: unweighted mean of the task scores, diagnostics left out),
    single_task (SQuAD: the task's own metrics), mmlu_questions (micro averages over questions, per
    category and overall), task_means (generative benchmarks of several tasks: each task's metrics and
    the unweighted mean over tasks of every metric they all report, as CodeXGLUE averages its six
    languages), per_task (settings of one benchmark that are not averaged: TriviaQA rc and unfiltered,
    MultiWOZ 2.1 and 2.2; each task's metrics side by side), selection_only (a group that only selects tasks; they are recorded under
    their own benchmark)."""

    name: str
    title: str
    tasks: tuple[str, ...]
    aggregation: str  # one of AGGREGATIONS
    member: str = ""  # how a message names one of its tasks ("MMLU subject"); "" = "<name> task"


def check_definition(task: TaskDefinition) -> list[str]:
    """What is missing or inconsistent in a definition (empty = complete); tests run it over the registry."""
    problems = []
    if task.output_type not in OUTPUT_TYPES:
        problems.append(f"output_type {task.output_type!r} is not one of {OUTPUT_TYPES}")
    named, _, number = task.template_version.partition("@")
    if named not in (task.name, task.benchmark) or not number.isdigit():  # MMLU's subjects share "mmlu@n"
        problems.append(f"template_version {task.template_version!r} is not '<task or benchmark>@<n>'")
    if task.output_type == "multiple_choice" and (not task.metrics or task.scorer or task.headline):
        problems.append("a multiple-choice task lists its official metrics, and has no scorer or headline")
    if task.output_type == "generate_until" and (task.metrics or not task.scorer or not task.headline):
        problems.append("a generate_until task names its scorer and headline metric, and lists no metrics")
    if (task.output_type == "generate_until") != (task.generation is not None):
        problems.append("generation settings belong to generate_until tasks, and only to them")
    if task.fewshot_sampling not in ("seeded", "first"):
        problems.append(f"fewshot_sampling {task.fewshot_sampling!r} is not 'seeded' or 'first'")
    labels = task.finetune.num_labels if task.finetune else None
    if labels not in (None, 1) and task.num_classes != labels:
        problems.append(f"finetune.num_labels {labels} != its {task.num_classes} label names")
    return problems



@dataclass(frozen=True)
class Suite:
    """What one benchmark folder (lightning_bench/tasks/<folder>/) contributes, declared in its __init__.py:
    its tasks and named groups, a reader per file format it defines {format: reader}, a scorer per generation
    family {family: scorer(task, rows, predictions, pairs) -> (figures, per-example scores)}, what a missing
    file of each format should have been (the one-line error names it), and its layout.yaml beside it."""

    tasks: tuple[TaskDefinition, ...]
    benchmarks: tuple[Benchmark, ...]
    readers: Mapping[str, object]
    layout: Path  # {task or "<benchmark>/*": {split: [paths under --data.data_dir]}}
    scorers: Mapping[str, Callable] = field(default_factory=dict)
    expected_files: Mapping[str, str] = field(default_factory=dict)
    long_context: bool = False  # its tasks fill the model's window: the default input limit is the window
