"""LooGLE (Li et al., 2023; bigai-nlco/LooGLE): long documents (scientific papers, Wikipedia articles, movie
and TV scripts) with questions on them.

    loogle/shortdep_qa            answer from one passage            BLEU-1/4, ROUGE-1/2/L
    loogle/shortdep_cloze         fill the <mask-n> entities         exact / partial match over the masks
    loogle/longdep_qa             answer from evidence spread widely BLEU-1/4, ROUGE-1/2/L
    loogle/longdep_summarization  summarize an arXiv paper           BLEU-1/4, ROUGE-1/2/L

Prompts: LooGLE's config/task2prompt.json, word for word (its typos and spaces included); generation
limits: config/task2maxlen.json; no stop string. The document (`context`) is the definition's document:
cut from its middle when the prompt is too long (as LooGLE's prediction scripts do), compressed before the
question by the downstream driver. One request per question (tasks/loogle/reader.py);
scored by tasks/loogle/scorer.py. Files: LooGLE-testdata/<task>.jsonl; the hub:
bigai-nlco/LooGLE (config `summarization` for longdep_summarization), split test.
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, GenerationSettings, Source, Splits, TaskDefinition

HUB = "bigai-nlco/LooGLE"
FIELDS = "input, title, qa_pairs ([{Q, A, S}] as a literal string, or 'none'), output"
QA = "Please answer the question based on the long texts below. \n"
CLOZE = ("Please fill in the clozes based on the given long texts below. Each of the placeholder '<mask-n>' in the "
         "question could be an entity of Person, Location or Organiocation. The same masks represent the same "
         "entity. Output a json format answer, for example: {'<mask-0>': 'Bob', '<mask-1>': 'Gorrosion Magazine',"
         "'<mask-2>': 'Bethel Horizon'}\n")


def qa(r: dict) -> tuple:
    return f"{QA}{r['context']}\nQuestion: {r['question']}\nAnswer: ", tuple(r["answers"])


def cloze(r: dict) -> tuple:
    return (f"{CLOZE}{r['context']}\n Question: {r['question']} What are the masked entities? \nAnswer:",
            tuple(r["answers"]))


def summarization(r: dict) -> tuple:
    return f"Please generate a summary of the below paper. \n{r['context']}\n Summarization: ", tuple(r["answers"])


# task: (title, hub config, template, max_new_tokens)
SPECS = {
    "shortdep_qa": ("short-dependency QA", "shortdep_qa", qa, 300),
    "shortdep_cloze": ("short-dependency cloze", "shortdep_cloze", cloze, 50),
    "longdep_qa": ("long-dependency QA", "longdep_qa", qa, 500),
    "longdep_summarization": ("long-dependency summarization", "summarization", summarization, 500),
}


def _task(short: str, title: str, config: str, template, max_new_tokens: int) -> TaskDefinition:
    name = f"loogle/{short}"
    return TaskDefinition(
        name=name, benchmark="loogle", title=f"LooGLE {title}",
        source=Source(HUB, config, "loogle", file_fields=FIELDS),
        output_type="generate_until", template=template, template_version=f"{name}@1", scorer="loogle", headline="score",
        splits=Splits(eval="test", train=None, fewshot=None), answer_field="answers",
        generation=GenerationSettings(stop=(), max_new_tokens=max_new_tokens, document="context", chat=True))


TASKS = tuple(_task(short, *spec) for short, spec in SPECS.items())
BENCHMARKS = (Benchmark("loogle", "LooGLE", tuple(t.name for t in TASKS), "task_means", member="LooGLE task"),)
