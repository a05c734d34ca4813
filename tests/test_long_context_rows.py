"""Bring-your-own long-context rows (the kvpress-style unified layout): reading, per-row generation limits,
lengths recorded per sample (as fed and before middle truncation), scoring by hand, and the downstream
driver compressing the context before the question."""

import json

import pytest

from lightning_bench.tasks import load_rows
from lightning_bench.errors import ConfigError
from lightning_bench.tasks.generative_scoring import score_generative
from lightning_bench.tasks import get_task
from tests.test_cli import run
from tests.helpers import grid_results

FILLER = "The grass is green. The sky is blue. " * 40


def _write(tmp_path, rows) -> str:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


ROWS = [{"context": f"{FILLER}The pass key is 4412. {FILLER}", "question": "\nWhat is the pass key?",
         "answer_prefix": "\nAnswer:", "answer": "4412", "max_new_tokens": 5},
        {"context": "Paris is the capital of France.", "question": "\nCapital of France?", "answer_prefix": " ",
         "answer": ["Paris", "paris france"], "id": "q2"}]


def test_rows_are_read_with_ids_answers_and_limits(tmp_path):
    rows = load_rows("long_context_rows", "eval", paths=_write(tmp_path, ROWS))
    assert [r["id"] for r in rows] == ["0", "q2"] and rows[0]["answers"] == ["4412"]
    assert rows[0]["max_new_tokens"] == 5 and "max_new_tokens" not in rows[1]
    with pytest.raises(ConfigError, match=r"row 0 has no answer; expected JSON lines of \{context"):
        load_rows("long_context_rows", "eval", paths=_write(tmp_path, [{"context": "c", "question": "q"}]))


def test_string_match_and_f1_by_hand(tmp_path):
    rows = load_rows("long_context_rows", "eval", paths=_write(tmp_path, ROWS))
    preds = [{"prediction": "the key: 4412"}, {"prediction": "It is Paris."}]
    figures, per = score_generative(get_task("long_context_rows"), [(type("R", (), {"row": r}), p)
                                                                    for r, p in zip(rows, preds)])
    # 4412: contained (100); SQuAD normalisation drops "the": F1 of {key, 4412} vs {4412} = 2 * (1/2 * 1) / (1/2 + 1) = 66.7
    # Paris: 1 of the 2 answers contained (50); F1 vs "Paris": {it, is, paris} vs {paris} = 50
    assert per == [{"string_match": 100.0, "f1": pytest.approx(200 / 3)}, {"string_match": 50.0, "f1": pytest.approx(50.0)}]
    assert figures["string_match"] == 75.0


@pytest.mark.parametrize("protocol", ["query_agnostic"])
def test_cli_and_driver_record_lengths_and_compress_before_the_question(protocol, tiny_hf, tmp_path, capsys):
    paths = json.dumps({"long_context_rows": _write(tmp_path, ROWS)})
    code, _, err = run(["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--task", "long_context_rows",
                        "--data.paths", paths, "--data.max_length", "256", "--trainer.enable_progress_bar", "false",
                        "--trainer.logger", "false"], capsys)
    assert code in (0, None), err
    samples = [json.loads(line) for line in
               (tmp_path / "benchmark_results" / f"hf-{tiny_hf.name}_downstream.samples.jsonl").read_text().splitlines()]
    long, short = samples
    assert long["truncated_tokens"] > 0 and long["original_prompt_tokens"] == long["prompt_tokens"] + long["truncated_tokens"]
    assert long["prompt_tokens"] <= 256 - 5 and long["generated_tokens"] <= 5  # the row's own limit
    assert short["truncated_tokens"] == 0 and short["generated_tokens"] <= 64

    code, _, err = run(["downstream", "--model.pretrained", str(tiny_hf), "--tasks", "long_context_rows", "--paths",
                        paths, "--methods", "dense", "snapkv", "--sparsity", "0.5", "--protocols", protocol,
                        "--max_length", "256", "--results_dir", str(tmp_path / "ds"), "--name", "t"], capsys)
    assert code == 0, err
    cell = grid_results(tmp_path / "ds" / "t" / "t_results.json")["cells"][
        f"long_context_rows__snapkv_s0.5_{protocol}_seed1234"]
    first = cell["samples"][0]
    assert first["question_tokens"] > 0 and first["compressed_tokens"] == first["context_tokens"]
    assert first["kept_tokens"] == -(-first["context_tokens"] // 2)  # ceil(0.5 x context)
    assert first["original_prompt_tokens"] == first["context_tokens"] + first["question_tokens"] + first["cue_tokens"] + \
        first["truncated_tokens"]
