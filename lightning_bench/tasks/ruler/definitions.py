"""RULER (Hsieh et al., 2024, "RULER: What's the Real Context Size of Your Long-Context Language Models?"):
13 synthetic tasks generated at any length for any tokenizer.

    ruler/niah_single_1      one needle (word key -> 7-digit number), noise haystack (~ passkey retrieval)
    ruler/niah_single_2      one needle (word -> number), essay haystack (~ vanilla needle-in-a-haystack)
    ruler/niah_single_3      one needle (word -> uuid), essay haystack
    ruler/niah_multikey_1    4 keys in the essay, one queried
    ruler/niah_multikey_2    haystack made of distractor needles (word -> number), one queried
    ruler/niah_multikey_3    haystack made of distractor needles (uuid -> uuid), one queried
    ruler/niah_multivalue    4 values under one key, all asked for
    ruler/niah_multiquery    4 keys, all asked for
    ruler/vt                 variable tracking: one chain of 4 hops (5 variables) in noise, one example first
    ruler/cwe                common words extraction: the 10 words repeated 30x among words repeated 3x
    ruler/fwe                frequent words extraction: the 3 most frequent coded words (Zipf, alpha 2)
    ruler/qa_1               SQuAD: the gold paragraph among distractor paragraphs
    ruler/qa_2               HotpotQA: the question's paragraphs among distractor paragraphs

The rows are the generator's (`lightning_bench generate_ruler`, tasks/ruler/generate.py): RULER's own jsonl
fields (index, input, outputs, length) plus context / question / answer_prefix (the input split before
the question, as kvpress splits it, so the downstream driver can compress the context before the question
is seen), max_new_tokens, depth and target_length. Prompts are RULER's task templates with the answer
prefix appended (its scripts/data/synthetic/constants.py), evaluated as base prompts (no chat template),
greedy, no stop string, RULER's tokens_to_generate as the limit. Scored by RULER's string_match_all
(niah, vt, cwe, fwe) and string_match_part (qa) (tasks/ruler/scorer.py). Files:
ruler/<length>/<task>.jsonl under --data.data_dir (layout.yaml; split `test` = 4096, or a
split named by the length) or --data.paths; the hub: simonjegou/ruler (kvpress's RULER sets, one config
per length, all tasks in split test; rows picked by their `task`).
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, GenerationSettings, Source, Splits, TaskDefinition

HUB = "simonjegou/ruler"
HUB_LENGTH = "4096"  # the hub config (= context length) split "test" reads; a split named by a length reads that one
FIELDS = ("index, input, outputs, length (RULER's generated jsonl); context, question, answer_prefix, "
          "max_new_tokens, depth, target_length (lightning_bench generate_ruler)")

# RULER's task families (scripts/data/synthetic/constants.py): tokens_to_generate and the metric
FAMILIES = {
    "niah": {"tokens_to_generate": 128, "metric": "string_match_all"},
    "vt": {"tokens_to_generate": 30, "metric": "string_match_all"},
    "cwe": {"tokens_to_generate": 120, "metric": "string_match_all"},
    "fwe": {"tokens_to_generate": 50, "metric": "string_match_all"},
    "qa": {"tokens_to_generate": 32, "metric": "string_match_part"},
}

# RULER's scripts/synthetic.yaml: each task's family and arguments; `haystack` is the niah haystack
# (repeat = the noise sentences, essay = a long text, needle = distractor needles)
SPECS = {
    "niah_single_1": ("niah", dict(haystack="repeat", type_k="words", type_v="numbers", num_k=1, num_v=1, num_q=1)),
    "niah_single_2": ("niah", dict(haystack="essay", type_k="words", type_v="numbers", num_k=1, num_v=1, num_q=1)),
    "niah_single_3": ("niah", dict(haystack="essay", type_k="words", type_v="uuids", num_k=1, num_v=1, num_q=1)),
    "niah_multikey_1": ("niah", dict(haystack="essay", type_k="words", type_v="numbers", num_k=4, num_v=1, num_q=1)),
    "niah_multikey_2": ("niah", dict(haystack="needle", type_k="words", type_v="numbers", num_k=1, num_v=1, num_q=1)),
    "niah_multikey_3": ("niah", dict(haystack="needle", type_k="uuids", type_v="uuids", num_k=1, num_v=1, num_q=1)),
    "niah_multivalue": ("niah", dict(haystack="essay", type_k="words", type_v="numbers", num_k=1, num_v=4, num_q=1)),
    "niah_multiquery": ("niah", dict(haystack="essay", type_k="words", type_v="numbers", num_k=1, num_v=1, num_q=4)),
    "vt": ("vt", dict(num_chains=1, num_hops=4)),
    "cwe": ("cwe", dict(freq_cw=30, freq_ucw=3, num_cw=10)),
    "fwe": ("fwe", dict(alpha=2.0)),
    "qa_1": ("qa", dict(dataset="squad")),
    "qa_2": ("qa", dict(dataset="hotpotqa")),
}
TASK_NAMES = tuple(SPECS)

TITLES = {
    "niah_single_1": "single needle, noise haystack", "niah_single_2": "single needle, essay haystack",
    "niah_single_3": "single needle (uuid value), essay haystack", "niah_multikey_1": "multi-key needles, essay",
    "niah_multikey_2": "multi-key, needle haystack", "niah_multikey_3": "multi-key (uuids), needle haystack",
    "niah_multivalue": "multi-value needles", "niah_multiquery": "multi-query needles", "vt": "variable tracking",
    "cwe": "common words extraction", "fwe": "frequent words extraction", "qa_1": "QA (SQuAD)",
    "qa_2": "QA (HotpotQA)",
}


def family(task: str) -> str:
    """The RULER family of a task's short name ("niah_single_1" -> "niah")."""
    return SPECS[task][0]


def tokens_to_generate(task: str) -> int:
    return FAMILIES[family(task)]["tokens_to_generate"]


def prompt(r: dict) -> tuple:
    """RULER's input without its answer prefix (context + question: the user's text) and its gold outputs;
    the prefix is the row's `answer_prefix` (GenerationSettings.answer_prefix_field)."""
    return f"{r['context']}{r['question']}", tuple(r["outputs"])


def _task(short: str) -> TaskDefinition:
    name = f"ruler/{short}"
    return TaskDefinition(
        name=name, benchmark="ruler", title=f"RULER {short} ({TITLES[short]})",
        source=Source(HUB, HUB_LENGTH, "ruler", file_fields=FIELDS), output_type="generate_until",
        template=prompt, template_version=f"{name}@2", scorer="ruler", headline="string_match",
        splits=Splits(eval="test", train=None, fewshot=None), answer_field="outputs",
        # max_new_tokens: each row's own where it gives one (PromptedDataModule), else RULER's per family
        generation=GenerationSettings(stop=(), max_new_tokens=tokens_to_generate(short), document="context",
                                      chat=True, answer_prefix_field="answer_prefix"))


TASKS = tuple(_task(short) for short in TASK_NAMES)
BENCHMARKS = (Benchmark("ruler", "RULER", tuple(t.name for t in TASKS), "task_means", member="RULER task"),)
