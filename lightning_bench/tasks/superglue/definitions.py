"""SuperGLUE (Wang et al., 2019, NeurIPS): the 8 scored tasks and the 2 diagnostics, one definition each.

Metrics are the SuperGLUE paper's (Table 1, Sec. 3.3); the benchmark score averages the 8 tasks, the
diagnostics AX-b (Matthews correlation) and AX-g (accuracy, gender parity) are reported beside it.
Files: SuperGLUE's JSON lines (tasks/superglue/reader.py); hub: aps/super_glue.
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, Finetune, Source, Splits, TaskDefinition
from lightning_bench.tasks.choice_prompts import BOOL, ENTAILMENT, TRUE_FALSE, YES_NO, nli, pair

HUB_ID = "aps/super_glue"


def superglue_task(short: str, title: str, fields: tuple, label_names, template, metrics: tuple, finetune=None,
                   version: int = 1, file_fields: str = "", **extra) -> TaskDefinition:
    return TaskDefinition(
        name=f"superglue/{short}", benchmark="superglue", title=title,
        source=Source(HUB_ID, short, "superglue_jsonl", {f: f for f in fields}, "label", label_names,
                      file_fields=file_fields),
        output_type="multiple_choice", template=template, template_version=f"superglue/{short}@{version}",
        metrics=metrics, finetune=finetune, **extra)


def copa(r: dict) -> tuple:
    premise = r["premise"].strip()
    premise = premise[:-1] if premise.endswith((".", "!")) else premise  # the connector continues the sentence
    connector = {"cause": "because", "effect": "therefore"}[r["question"]]
    alternatives = tuple(" " + continue_sentence(c) for c in (r["choice1"], r["choice2"]))
    return f"{premise} {connector}", alternatives, r["label"]


def continue_sentence(text: str) -> str:
    """Lower-case the first letter so the alternative continues the premise, unless the first word is
    "I" or an acronym / name-like token ("I shut off the radio", "NASA ...")."""
    first = text.split(" ", 1)[0]
    keep = first == "I" or first.startswith("I'") or (len(first) > 1 and first[1].isupper())
    return text if keep else text[0].lower() + text[1:]


def record(r: dict) -> tuple:
    text, *highlights = r["passage"].strip().split("\n@highlight\n")
    context = text + "\n\n" + "".join(f"  - {h}.\n" for h in highlights)  # the summary bullets
    choices = tuple("  - " + r["query"].replace("@placeholder", e) for e in r["entities"])  # one more bullet
    return context, choices, tuple(i for i, e in enumerate(r["entities"]) if e in r["answers"])


RTE_LIKE = ("premise", "hypothesis")
TASKS = (
    superglue_task("boolq", "BoolQ", ("question", "passage"), BOOL,
                   lambda r: (f"{r['passage']}\nQuestion: {r['question']}?\nAnswer:", YES_NO, r["label"]),
                   ("accuracy",), Finetune(2, ("question", "passage"))),
    superglue_task("cb", "CB", RTE_LIKE, ("entailment", "contradiction", "neutral"),
                   lambda r: (nli(r["premise"], r["hypothesis"], "True, False or Neither"),
                              (" True", " False", " Neither"), r["label"]),
                   ("accuracy", "f1_macro"), Finetune(3, RTE_LIKE)),
    superglue_task("copa", "COPA", ("premise", "choice1", "choice2", "question"), ("choice1", "choice2"), copa,
                   ("accuracy",), version=2),  # @2: "I" stays upper-case
    superglue_task("multirc", "MultiRC", ("paragraph", "question", "answer"), BOOL,
                   lambda r: (f"{r['paragraph']}\nQuestion: {r['question']}\nCandidate answer: {r['answer']}"
                              "\nIs the candidate answer correct?\nAnswer:", YES_NO, r["label"]),
                   ("exact_match", "f1a"),  # EM per question (all its options right), F1 over all options
                   Finetune(2, input=lambda r: (r["paragraph"], f"{r['question']} {r['answer']}")),
                   file_fields="idx, passage{text, questions[{question, idx, answers[{text, idx, label}]}]}"),
    superglue_task("record", "ReCoRD", ("passage", "query", "entities", "answers"), None, record,
                   ("exact_match", "f1"),  # max over the gold answers, SQuAD normalisation
                   answer_field="answers", choices_field="entities",
                   file_fields="idx, passage{text, entities}, qas[{query, idx, answers}]"),
    superglue_task("rte", "RTE", RTE_LIKE, ENTAILMENT,
                   lambda r: (nli(r["premise"], r["hypothesis"], "True or False"), TRUE_FALSE, r["label"]),
                   ("accuracy",), Finetune(2, RTE_LIKE)),
    superglue_task("wic", "WiC", ("word", "sentence1", "sentence2"), BOOL,
                   lambda r: (pair(r["sentence1"], r["sentence2"], f"Is the word '{r['word']}' used in the same "
                                   "way in the two sentences above?"), YES_NO, r["label"]),
                   ("accuracy",),  # the target word leads both sentences, or the pair would not say which word
                   Finetune(2, input=lambda r: (f"{r['word']}: {r['sentence1']}", f"{r['word']}: {r['sentence2']}"))),
    superglue_task("wsc", "WSC", ("text", "span1_text", "span2_text", "span1_index", "span2_index"), BOOL,
                   lambda r: (f"Passage: {r['text']}\nQuestion: In the passage above, does the pronoun "
                              f"\"{r['span2_text']}\" refer to \"{r['span1_text']}\"?\nAnswer:", YES_NO, r["label"]),
                   ("accuracy",),
                   Finetune(2, input=lambda r: (r["text"], f"Does \"{r['span2_text']}\" refer to \"{r['span1_text']}\"?")),
                   file_fields="text, target{span1_index, span1_text, span2_index, span2_text}, idx, label"),
)

# The diagnostics: RTE-style pairs with only a test split (labelled). Prompted like RTE; no train split, so
# neither fine-tuning nor k-shot from a split (k-shot: --data.fewshot_source eval draws other test pairs).
DIAGNOSTIC_SPLITS = Splits(eval="test", train=None, fewshot=None)
DIAGNOSTICS = (
    superglue_task("axb", "AX-b", ("sentence1", "sentence2"), ENTAILMENT,
                   lambda r: (nli(r["sentence1"], r["sentence2"], "True or False"), TRUE_FALSE, r["label"]),
                   ("mcc",), splits=DIAGNOSTIC_SPLITS, diagnostic=True),
    superglue_task("axg", "AX-g", RTE_LIKE, ENTAILMENT,
                   lambda r: (nli(r["premise"], r["hypothesis"], "True or False"), TRUE_FALSE, r["label"]),
                   ("accuracy", "gender_parity"),  # parity: pairs (idx 2k, 2k+1) differ only in the pronoun
                   splits=DIAGNOSTIC_SPLITS, diagnostic=True),
)

BENCHMARKS = (
    Benchmark("superglue", "SuperGLUE", tuple(t.name for t in TASKS), "mean_task_score"),
    Benchmark("superglue_diagnostics", "SuperGLUE diagnostics", tuple(t.name for t in DIAGNOSTICS), "selection_only"),
)
TASKS = TASKS + DIAGNOSTICS
