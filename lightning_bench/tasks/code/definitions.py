"""Code: CodeXGLUE code-to-text (six languages; Lu et al., 2021) and line-level code completion (py150,
javaCorpus), and HumanEval (Chen et al., 2021).

code-to-text: the function's code, asked for a one-sentence summary, scored by smoothed BLEU-4 as
CodeXGLUE's own evaluator computes it (the benchmark's overall figure is the mean over languages).
Line completion: the left context continued to the end of the line; exact match and edit similarity as
CodeXGLUE's evaluator. HumanEval: the prompt (signature + docstring) completed as code, stopped at the
Codex paper's stop sequences, executed against the tests in a sandbox (tasks/code/sandbox.py);
pass@k by the unbiased estimator. The completion tasks continue code, so they are not wrapped in a chat
template (as bigcode-evaluation-harness's `humaneval`, unlike its `instruct-humaneval`).
Files: tasks/code/codexglue_reader.py, humaneval_reader.py; hub: google/code_x_glue_ct_code_to_text,
google/code_x_glue_cc_code_completion_line, openai/openai_humaneval.
"""

from __future__ import annotations

from lightning_bench.tasks.definition import Benchmark, GenerationSettings, Source, Splits, TaskDefinition

LANGUAGES = {"go": "Go", "java": "Java", "javascript": "JavaScript", "php": "PHP", "python": "Python", "ruby": "Ruby"}
COMPLETION = {"py150": ("python", "py150"), "javacorpus": ("java", "javaCorpus")}
HUMANEVAL_STOP = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")  # the Codex paper's stop sequences


def code_to_text_prompt(r: dict) -> tuple:
    language = LANGUAGES.get(r.get("language", ""), r.get("language", ""))
    return (f"Summarize what the following {language} function does in one sentence.\n\nCode:\n{r['code_original']}"
            "\n\nSummary:", (r["docstring"],))


def line_prompt(r: dict) -> tuple:
    return r["input"], (r["gt"],)


def humaneval_prompt(r: dict) -> tuple:
    # the prompt's trailing newline removed (as bigcode-evaluation-harness does): ending on "\n" splits
    # the newline + indentation token BPE tokenizers use, and models then close the function instead
    # (SmolLM2: 9 of 20 greedy completions were "\ndef" with the newline kept). The sandbox runs the
    # original prompt + the completion, whose leading "\n    " only adds a blank line.
    return r["prompt"].rstrip(), (r["canonical_solution"],)


def _code_to_text(lang: str) -> TaskDefinition:
    return TaskDefinition(
        name=f"codexglue_code_to_text/{lang}", benchmark="codexglue_code_to_text",
        title=f"CodeXGLUE code-to-text ({LANGUAGES[lang]})",
        source=Source("google/code_x_glue_ct_code_to_text", lang, "codexglue_code_to_text"),
        output_type="generate_until", template=code_to_text_prompt, template_version="codexglue_code_to_text@1",
        scorer="smoothed_bleu4", headline="smoothed_bleu4", splits=Splits(eval="test", train="train", fewshot="train"),
        answer_field="docstring",
        generation=GenerationSettings(stop=("\n",), max_new_tokens=48, document="code_original", chat=True))


def _completion(name: str) -> TaskDefinition:
    lang, config = COMPLETION[name]
    return TaskDefinition(
        name=f"codexglue_code_completion_line/{name}", benchmark="codexglue_code_completion_line",
        title=f"CodeXGLUE line completion ({config})",
        source=Source("google/code_x_glue_cc_code_completion_line", config, "codexglue_line_completion"),
        output_type="generate_until", template=line_prompt, template_version="codexglue_code_completion_line@1",
        # eval "train": the hub dataset's only split is named "train" but holds CodeXGLUE's test set
        scorer="line_completion", headline="edit_similarity", splits=Splits(eval="train", train=None, fewshot=None), answer_field="gt",
        # the left context is cut from the left when too long: the end of it is what the line continues
        generation=GenerationSettings(stop=("\n",), max_new_tokens=64, keep_whitespace=True))


TASKS = (
    *(_code_to_text(lang) for lang in LANGUAGES),
    *(_completion(name) for name in COMPLETION),
    TaskDefinition(
        name="humaneval", benchmark="humaneval", title="HumanEval",
        source=Source("openai/openai_humaneval", None, "humaneval"), output_type="generate_until",
        template=humaneval_prompt, template_version="humaneval@2", scorer="pass_at_k", headline="pass@1",
        splits=Splits(eval="test", train=None, fewshot=None), answer_field="canonical_solution",
        generation=GenerationSettings(stop=HUMANEVAL_STOP, max_new_tokens=384, keep_whitespace=True)),
)
BENCHMARKS = (
    Benchmark("codexglue_code_to_text", "CodeXGLUE code-to-text", tuple(t.name for t in TASKS[:6]), "task_means",
              member="CodeXGLUE language"),
    Benchmark("codexglue_code_completion_line", "CodeXGLUE line completion", tuple(t.name for t in TASKS[6:8]),
              "task_means", member="CodeXGLUE line-completion corpus"),
    Benchmark("humaneval", "HumanEval", ("humaneval",), "single_task"),
    Benchmark("code", "code tasks", tuple(t.name for t in TASKS), "selection_only"),
)
