"""Prompt templates of the downstream tasks, one per task, versioned: change a template, bump its version.

Styled after lm-evaluation-harness (written here, not copied). Multiple-choice tasks become a
loglikelihood request: score each continuation (each starts with a space) after the context. SQuAD
becomes a greedy generation cut at a newline. A k-shot context is the task's description line (MMLU,
SQuAD v2) + "\\n\\n", then every shot with its gold continuation + "\\n\\n", then the query without answer.
MMLU keeps the original MMLU prompt (Hendrycks et al.), fields unstripped as the original code used them.

`finetune_input` gives the text (pair) a sequence classifier/regressor is fine-tuned on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from lightning_bench.errors import ConfigError


@dataclass(frozen=True)
class MultipleChoice:
    """Loglikelihood request: score each continuation after the context."""
    context: str
    choices: tuple[str, ...]
    gold: int | tuple[int, ...]  # a tuple where several choices are right (ReCoRD)
    choice_values: tuple[float, ...] | None = None  # STS-B: the score each choice stands for


@dataclass(frozen=True)
class Generation:
    """Greedy generation, cut at `stop`."""
    context: str
    answers: tuple[str, ...]  # () = unanswerable
    stop: str = "\n"
    no_answer: str | None = None  # what the model says for "no answer" (SQuAD v2)


YES_NO = (" no", " yes")
TRUE_FALSE = (" True", " False")
UNANSWERABLE = "unanswerable"
SQUAD_V2_LINE = f'Answer from the background; when it does not contain the answer, answer "{UNANSWERABLE}".'


def _sentence(text: str) -> str:
    """A hypothesis read out as a statement ends with a period."""
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _nli(premise: str, hypothesis: str, options: str) -> str:
    return f"{premise}\nQuestion: {_sentence(hypothesis)} {options}?\nAnswer:"


def _pair(a: str, b: str, question: str, kind: str = "Sentence") -> str:
    return f"{kind} 1: {a}\n{kind} 2: {b}\nQuestion: {question}\nAnswer:"


def _copa(r: dict) -> tuple:
    premise = r["premise"].strip()
    premise = premise[:-1] if premise.endswith((".", "!")) else premise  # the connector continues the sentence
    connector = {"cause": "because", "effect": "therefore"}[r["question"]]
    alternatives = tuple(" " + _continue_sentence(c) for c in (r["choice1"], r["choice2"]))
    return f"{premise} {connector}", alternatives, r["label"]


def _continue_sentence(text: str) -> str:
    """Lower-case the first letter so the alternative continues the premise, unless the first word is
    "I" or an acronym / name-like token ("I shut off the radio", "NASA ...")."""
    first = text.split(" ", 1)[0]
    keep = first == "I" or first.startswith("I'") or (len(first) > 1 and first[1].isupper())
    return text if keep else text[0].lower() + text[1:]


def _record(r: dict) -> tuple:
    text, *highlights = r["passage"].strip().split("\n@highlight\n")
    context = text + "\n\n" + "".join(f"  - {h}.\n" for h in highlights)  # the summary bullets
    choices = tuple("  - " + r["query"].replace("@placeholder", e) for e in r["entities"])  # one more bullet
    return context, choices, tuple(i for i, e in enumerate(r["entities"]) if e in r["answers"])


# task -> row -> (query text without answer, continuations, gold index or indices)
TEMPLATES = {
    "glue/cola": lambda r: (f"{r['sentence']}\nQuestion: Does this sentence make sense?\nAnswer:", YES_NO, r["label"]),
    "glue/sst2": lambda r: (f"{r['sentence']}\nQuestion: Is this sentence positive or negative?\nAnswer:",
                            (" negative", " positive"), r["label"]),
    "glue/mrpc": lambda r: (_pair(r["sentence1"], r["sentence2"], "Do both sentences mean the same thing?"),
                            YES_NO, r["label"]),
    "glue/qqp": lambda r: (_pair(r["question1"], r["question2"], "Do both questions ask the same thing?", "Question"),
                           YES_NO, r["label"]),
    "glue/stsb": lambda r: (_pair(r["sentence1"], r["sentence2"],
                                  "On a scale of 0 to 5, how similar are the two sentences in meaning?"),
                            tuple(f" {i}" for i in range(6)), min(5, int(r["label"] + 0.5))),  # half up
    "glue/mnli": lambda r: (_nli(r["premise"], r["hypothesis"], "True, False or Neither"),
                            (" True", " Neither", " False"), r["label"]),
    "glue/qnli": lambda r: (f"{r['question']}\n{r['sentence']}\nQuestion: Does this response answer the question?"
                            "\nAnswer:", (" yes", " no"), r["label"]),
    "glue/rte": lambda r: (_nli(r["sentence1"], r["sentence2"], "True or False"), TRUE_FALSE, r["label"]),
    "glue/wnli": lambda r: (_nli(r["sentence1"], r["sentence2"], "True or False"), (" False", " True"), r["label"]),
    "superglue/boolq": lambda r: (f"{r['passage']}\nQuestion: {r['question']}?\nAnswer:", YES_NO, r["label"]),
    "superglue/cb": lambda r: (_nli(r["premise"], r["hypothesis"], "True, False or Neither"),
                               (" True", " False", " Neither"), r["label"]),
    "superglue/copa": _copa,
    "superglue/multirc": lambda r: (f"{r['paragraph']}\nQuestion: {r['question']}\nCandidate answer: {r['answer']}"
                                    "\nIs the candidate answer correct?\nAnswer:", YES_NO, r["label"]),
    "superglue/record": _record,
    "superglue/rte": lambda r: (_nli(r["premise"], r["hypothesis"], "True or False"), TRUE_FALSE, r["label"]),
    "superglue/wic": lambda r: (_pair(r["sentence1"], r["sentence2"], f"Is the word '{r['word']}' used in the same "
                                      "way in the two sentences above?"), YES_NO, r["label"]),
    "superglue/wsc": lambda r: (f"Passage: {r['text']}\nQuestion: In the passage above, does the pronoun "
                                f"\"{r['span2_text']}\" refer to \"{r['span1_text']}\"?\nAnswer:", YES_NO, r["label"]),
}
MMLU_LETTERS = ("A", "B", "C", "D")
PROMPT_VERSIONS: dict[str, str] = {**{t: f"{t}@1" for t in (*TEMPLATES, "squad", "squad_v2")}, "mmlu": "mmlu@1",
                                   "superglue/copa": "superglue/copa@2"}  # @2: "I" stays upper-case


def _benchmark(task: str) -> str:
    if task in TEMPLATES or task in ("squad", "squad_v2"):
        return task.split("/")[0]
    # imported here: lightning_bench.data (the registry's package) imports this module
    from lightning_bench.data.tasks.registry import get_task

    return get_task(task).benchmark  # "mmlu" for mmlu/<subject>; the unknown-name error otherwise


def prompt_version(task: str) -> str:
    """The version of the template `task` is prompted with (MMLU subjects share one)."""
    return PROMPT_VERSIONS["mmlu" if _benchmark(task) == "mmlu" else task]


def build_request(task: str, row: dict, shots: Sequence[dict] = ()) -> MultipleChoice | Generation:
    """The request for `row`, after the `shots` (k = len(shots)) shown with their gold answers."""
    bench = _benchmark(task)
    if bench in ("squad", "squad_v2"):
        head = SQUAD_V2_LINE + "\n\n" if bench == "squad_v2" else ""
        context = head + "".join(_squad(s) + " " + (s["answers"] or [UNANSWERABLE])[0] + "\n\n" for s in shots)
        return Generation(context + _squad(row), tuple(row["answers"]),
                          no_answer=UNANSWERABLE if bench == "squad_v2" else None)
    if bench == "mmlu":
        head = f"The following are multiple choice questions (with answers) about {task[5:].replace('_', ' ')}.\n\n"
        shown = "".join(_mmlu(s) + f" {MMLU_LETTERS[s['label']]}\n\n" for s in shots)
        return MultipleChoice(head + shown + _mmlu(row), tuple(f" {x}" for x in MMLU_LETTERS), row["label"])
    shown = ""
    for shot in shots:
        text, choices, gold = TEMPLATES[task](shot)
        shown += text + choices[gold[0] if isinstance(gold, tuple) else gold] + "\n\n"
    text, choices, gold = TEMPLATES[task](row)
    return MultipleChoice(shown + text, choices, gold, (0.0, 1.0, 2.0, 3.0, 4.0, 5.0) if task == "glue/stsb" else None)


def _squad(r: dict) -> str:
    title = f"Title: {r['title']}\n\n" if r.get("title") else ""
    return f"{title}Background: {r['context']}\n\nQuestion: {r['question']}\n\nAnswer:"


def _mmlu(r: dict) -> str:
    options = "".join(f"\n{letter}. {choice}" for letter, choice in zip(MMLU_LETTERS, r["choices"]))
    return f"{r['question']}{options}\nAnswer:"


# task -> number of labels for fine-tuning as sequence classification (1 = regression)
FINETUNE_NUM_LABELS: dict[str, int] = {
    **{t: 2 for t in TEMPLATES if t.startswith("glue/")}, "glue/mnli": 3, "glue/stsb": 1,
    **{f"superglue/{t}": 2 for t in ("boolq", "multirc", "rte", "wic", "wsc")}, "superglue/cb": 3,
}
_PAIRS = {  # task -> the row fields of the text pair (None: a single text)
    "glue/cola": ("sentence", None), "glue/sst2": ("sentence", None), "glue/mrpc": ("sentence1", "sentence2"),
    "glue/qqp": ("question1", "question2"), "glue/stsb": ("sentence1", "sentence2"),
    "glue/mnli": ("premise", "hypothesis"), "glue/qnli": ("question", "sentence"),
    "glue/rte": ("sentence1", "sentence2"), "glue/wnli": ("sentence1", "sentence2"),
    "superglue/boolq": ("question", "passage"), "superglue/cb": ("premise", "hypothesis"),
    "superglue/rte": ("premise", "hypothesis"),
}


def finetune_input(task: str, row: dict) -> tuple[str, str | None]:
    """The text (pair) a fine-tuned classifier reads; MultiRC: one example per answer option."""
    if task not in FINETUNE_NUM_LABELS:
        _benchmark(task)  # an unknown name gets the unknown-task error
        raise ConfigError(f"{task} cannot be fine-tuned as sequence classification; tasks that can: "
                          f"{', '.join(FINETUNE_NUM_LABELS)}")
    if task == "superglue/multirc":
        return row["paragraph"], f"{row['question']} {row['answer']}"
    if task == "superglue/wic":  # the target word leads both sentences, or the pair would not say which word
        return f"{row['word']}: {row['sentence1']}", f"{row['word']}: {row['sentence2']}"
    if task == "superglue/wsc":
        return row["text"], f"Does \"{row['span2_text']}\" refer to \"{row['span1_text']}\"?"
    a, b = _PAIRS[task]
    return row[a], (row[b] if b else None)
