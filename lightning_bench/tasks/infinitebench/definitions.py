"""InfiniteBench (∞Bench; Zhang et al., 2024, OpenBMB/InfiniteBench): the English tasks of its 12, prompted
with the benchmark's own English templates (src/prompt.py, the `gpt4_templates` written for chat models),
generation limits from src/eval_utils.py (DATA_NAME_TO_MAX_NEW_TOKENS), no stop string (the scripts stop
at the limit or the end of the answer). passkey and number_string start the answer with the words every
other template of the benchmark ends them with ("The pass key is", "The sequence of digits is": the
yarn-mistral, kimi, claude2 and rwkv templates): their limits of 6 and 12 new tokens leave room for the
digits alone, and a chat model that begins "The pass key is ..." by itself would be cut off before them.

    Retrieve.PassKey  infinitebench/passkey            Retrieve.Number  infinitebench/number_string
    Retrieve.KV       infinitebench/kv_retrieval       En.QA            infinitebench/longbook_qa_eng
    En.MC             infinitebench/longbook_choice_eng  En.Dia         infinitebench/longdialogue_qa_eng
    Math.Find         infinitebench/math_find          Math.Calc        infinitebench/math_calc
    Code.Run          infinitebench/code_run           Code.Debug       infinitebench/code_debug
    En.Sum            infinitebench/longbook_sum_eng

Math.Calc keeps the scripts' limit of 30,000 new tokens (its answer lists every intermediate value of an
expression as long as the context): it needs a window of 30,000 tokens beyond the prompt, or a smaller
--max_new_tokens (whose score then counts only the values it leaves room for).

The sample's `context` (the haystack, the book, the dialogue script, the code, the list) is the
definition's document: it loses its middle when the prompt is too long (as the official scripts cut the
prompt from its middle), and the downstream driver compresses it before the question. Scored by
compute_scores.py's per-task rules, x100 (tasks/infinitebench/scorer.py).

Files: the benchmark's <task>.jsonl (tasks/infinitebench/reader.py); the hub:
xinrongzhang2022/InfiniteBench, one split per task, read as this definition's "test" split. passkey,
number_string and kv_retrieval can be made locally at any length for any tokenizer
(`lightning_bench infinitebench_generate --out DATA/infinitebench`, tasks/infinitebench/generate.py): under a
data folder their splits named by a length (4096 ... 131072, layout.yaml) are those
sets, which --max_context N reads; the split "test" stays the benchmark's file (passkey: the 8k sample).
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, GenerationSettings, Source, Splits, TaskDefinition
from lightning_bench.tasks.infinitebench.reader import math_prefix

HUB = "xinrongzhang2022/InfiniteBench"
FIELDS = ("id, context, input, answer, options (the benchmark's generated tasks: context, input, answer, len; "
          "`infinitebench_generate` adds target_length and depth)")
FIND_IT = "There is an important info hidden inside a lot of irrelevant text. Find it"
QUIZ = "I will quiz you about the important information there."


def _options(r: dict) -> str:
    return "".join(f"\n{letter}. {option}" for letter, option in zip("ABCD", r["options"]))


def passkey(r: dict) -> tuple:
    return f"{FIND_IT} and memorize them. {QUIZ}\n\n{r['context']}\n\n{r['input']}", tuple(r["answers"])


def number_string(r: dict) -> tuple:
    return f"{FIND_IT}. {QUIZ}\n\n{r['context']}\n\n{r['input']}", tuple(r["answers"])


def kv_retrieval(r: dict) -> tuple:
    return (f"Extract the value corresponding to the specified key in the JSON object below.\n\n{r['context']}"
            f"\n\n{r['input']}", tuple(r["answers"]))


def longbook_qa_eng(r: dict) -> tuple:
    return (f"Read the book below and answer a question.\n\n{r['context']}\n\nQuestion: {r['input']}\n\n"
            "Be very concise.", tuple(r["answers"]))


def longbook_choice_eng(r: dict) -> tuple:
    return (f"Read the book and answer the question.\n\n{r['context']}\n\nQuestion: {r['input']}\n\n"
            "Only one of the following options is correct, tell me the answer using one single letter "
            f"(A, B, C, or D). Don't say anything else.{_options(r)}", tuple(r["answers"]))


def longbook_sum_eng(r: dict) -> tuple:
    return f"Summarize the following book.\n\n{r['context']}", tuple(r["answers"])


def longdialogue_qa_eng(r: dict) -> tuple:
    return ("Below is a dialogue script where one random occurrence of a character name is replaced with "
            "\"$$MASK$$\", and you should try to guess who that character is.\n\nThe dialogue:\n\n---\n\n"
            f"{r['context']}\n\n---\n\nEnd of dialogue.\n\nWhich character is most likely \"$$MASK$$\"? Just say "
            "the name used by the scriptwriter (before the colon marks) of one single character and nothing "
            "else.", tuple(r["answers"]))


def math_find(r: dict) -> tuple:
    prefix = math_prefix("infinitebench/math_find", f"row {r.get('id')}", r["input"])
    return f"{prefix}\n\n{r['context']}\n\n{r['input']}", tuple(r["answers"])


def math_calc(r: dict) -> tuple:
    # the chat template's prompt (gpt4_templates); the scripts' GPT-4 run sent the bare expression after a
    # system prompt and a worked turn instead, an API arrangement not reproduced here
    return f"Compute the intermediate values in the following long expression.\n\n{r['context']}", tuple(r["answers"])


def code_run(r: dict) -> tuple:
    # "called named" is the benchmark's own words
    return (f"Following is a set of Python functions. There is a function called named {r['func']}.\n\n"
            f"{r['context']}\n\nPlease give me the exact number of the return value of {r['func_call']}. Be concise. "
            "Your response must end with the final returned value.", tuple(r["answers"]))


def code_debug(r: dict) -> tuple:
    # "funtion" and "inspect the options" are the benchmark's own words
    return ("There is ONLY ONE function in the large project that is deliberately made to include an obvious "
            "error. Please find the function that contains the most obvious errors. I will give you four options "
            "to narrow your scope. You can inspect the options and think. Eventually, tell me the answer using "
            f"one single letter (A, B, C, or D).\n\n{r['context']}\n\nWhich funtion has deliberate error?"
            f"{_options(r)}\n\nYou should first find the functions in the options. Repeat their content, inspect "
            "through code, and at last give me your answer for the function that has the deliberate and obvious "
            "error in A, B, C, or D.", tuple(r["answers"]))


# the answer's first words (GenerationSettings.answer_prefix); the template's version counts it
ANSWER_PREFIX = {"passkey": "The pass key is", "number_string": "The sequence of digits is"}

# task: (title, template, max_new_tokens)
SPECS = {
    "passkey": ("Retrieve.PassKey", passkey, 6),
    "number_string": ("Retrieve.Number", number_string, 12),
    "kv_retrieval": ("Retrieve.KV", kv_retrieval, 50),
    "longbook_qa_eng": ("En.QA", longbook_qa_eng, 40),
    "longbook_choice_eng": ("En.MC", longbook_choice_eng, 40),
    "longdialogue_qa_eng": ("En.Dia", longdialogue_qa_eng, 40),
    "math_find": ("Math.Find", math_find, 3),
    "math_calc": ("Math.Calc", math_calc, 30000),
    "code_run": ("Code.Run", code_run, 5),
    "code_debug": ("Code.Debug", code_debug, 5),
    "longbook_sum_eng": ("En.Sum", longbook_sum_eng, 1200),
}


def _task(short: str, title: str, template, max_new_tokens: int) -> TaskDefinition:
    name = f"infinitebench/{short}"
    return TaskDefinition(
        name=name, benchmark="infinitebench", title=f"InfiniteBench {title}",
        source=Source(HUB, None, "infinitebench", file_fields=FIELDS, hub_splits={"test": (short,)}),
        output_type="generate_until", template=template,
        template_version=f"{name}@{2 if short in ANSWER_PREFIX else 1}", scorer="infinitebench", headline="score",
        splits=Splits(eval="test", train=None, fewshot=None), answer_field="answers",
        generation=GenerationSettings(stop=(), max_new_tokens=max_new_tokens, document="context", chat=True,
                                      answer_prefix=ANSWER_PREFIX.get(short, "")))


TASKS = tuple(_task(short, *spec) for short, spec in SPECS.items())
BENCHMARKS = (Benchmark("infinitebench", "InfiniteBench (English)", tuple(t.name for t in TASKS), "task_means",
                        member="InfiniteBench task"),)
