"""Counting-Stars (lightning_bench/tasks/counting_stars/): the generator places the evidence as the
benchmark's gen_test_data.ipynb does, the reader splits the release files' prompts and finds the wrong
counts, the scorer gives the benchmark's per-star scores on hand-worked answers, and the suite runs
through `test --task` and `downstream` like every other."""

import hashlib
import json
from pathlib import Path

import pytest

from lightning_bench.errors import ConfigError
from lightning_bench.tasks import get_task, load_rows
from lightning_bench.tasks.counting_stars.definitions import QUESTIONS, SEPARATOR
from lightning_bench.tasks.counting_stars.generate import COUNTS_32, WRONG_32, make_row, star_counts
from lightning_bench.tasks.counting_stars.scorer import SCORERS, parse_counts, star_scores
from lightning_bench.tasks.prompts import build_request
from tests.test_cli import run
from tests.helpers import grid_results

FIXTURE = (Path(__file__).parent / "fixtures" / "long_context" / "counting_stars" /
           "Counting_Stars_EN_multi-evidence-retrieval-reasoning_128000_32_32.jsonl")
HAYSTACK = " ".join(f"w{i}" for i in range(100))


def test_stars_sit_where_the_benchmark_puts_them():
    """40 pieces, 4 stars: s = 10; star t goes in after piece 6t + 10t + 10 of the text as it is by then, and
    each inserted sentence adds 6 - 2 pieces (its first and last merge with the words beside them), so star t
    precedes original word (t + 1) x 10 + 2t: w10, w22, w34; the last lands past the end, after w39."""
    row = make_row("searching", HAYSTACK, 50, 0.8, [15, 117, 42, 69], [16, 116, 43, 70])
    context = row["context"]
    assert context.startswith("w0 w1") and row["context_size"] == 40 and "w40" not in context
    for t, (count, after) in enumerate(zip((15, 117, 42), ("w10", "w22", "w34"))):
        assert f"\nThe little penguin counted {count} ★\n{after} " in context, t
    assert context.endswith("w39\nThe little penguin counted 69 ★\n")
    assert row["star_depths"] == sorted(row["star_depths"]) and row["counts"] == [15, 117, 42, 69]
    assert row["max_new_tokens"] == 8 * 4  # sized to its stars: 64 stars would not fit the task's 256
    reasoning = make_row("reasoning", HAYSTACK, 50, 0.8, [15, 117, 42, 69], [16, 116, 43, 70])["context"]
    assert ("counted 16 ★, but found that a mistake had been made, so the counting was done again, and this time "
            "15 ★ was counted correctly.\n") in reasoning


def test_counts_are_the_benchmarks_for_32_stars_and_drawn_by_its_rule_otherwise():
    assert star_counts(32, 0) == (COUNTS_32, WRONG_32)
    assert all(abs(a - r) == 1 for a, r in zip(COUNTS_32, WRONG_32)) and not set(COUNTS_32) & set(WRONG_32)
    counts, wrong = star_counts(10, 3)
    assert sorted((a - 1) // 4 for a in counts) == list(range(10))  # one count in each block [4i+1, 4i+3]
    assert all(a % 4 != 0 and abs(a - r) == 1 for a, r in zip(counts, wrong))
    assert star_counts(10, 3) == (counts, wrong) != star_counts(10, 4)
    for seed in range(20):  # the wrong counts are distinct and positive, as the benchmark's own lists are
        counts, wrong = star_counts(64, seed)
        assert len(set(wrong)) == 64 and min(wrong) > 0 and not set(wrong) & set(counts)


def test_release_files_are_split_into_context_and_question_and_render_back_byte_for_byte():
    rows = load_rows("counting_stars/reasoning", "eval", paths=str(FIXTURE))
    raw = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    assert [r["counts"] for r in rows] == [[15, 117, 42, 69]] * 2
    assert [r["distractors"] for r in rows] == [[16, 116, 43, 70]] * 2  # read from the correction sentences
    assert [r["length"] for r in rows] == [100, 200]  # the nominal length, context_size / 0.8, as its plots label it
    for row, original in zip(rows, raw):
        request = build_request("counting_stars/reasoning", row)
        assert request.context == original["question"] and request.document == row["context"]
        assert row["question"] == QUESTIONS["reasoning"] and not row.get("question_differs")
    with pytest.raises(ConfigError, match="a reasoning file; read it as counting_stars/reasoning"):
        load_rows("counting_stars/searching", "eval", paths=str(FIXTURE))


def test_the_benchmark_has_no_hub_copy_and_says_so_in_one_line():
    with pytest.raises(ConfigError) as info:
        load_rows("counting_stars/searching", "eval")
    assert "no hub copy" in str(info.value) and "counting_stars/searching.jsonl" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("answer,expected", [
    ('{"little_penguin": [15, 117, 42]}', [15, 117, 42]),
    ('```json\n{"little_penguin": [15, 117, 42\n```', [15, 117, 42]),  # fenced and cut short: repaired
    ('{"little_penguin": [15, 117]} That is all.', None),  # unfenced text after the JSON: json.loads refuses
    ("15, 117, 42", None), ('{"penguin": [1]}', None),
])
def test_answers_are_parsed_as_the_benchmark_parses_them(answer, expected):
    assert parse_counts(answer) == expected


def test_degenerate_nesting_is_unparsable_not_a_crash():
    assert parse_counts("[" * 100_000) is None and parse_counts("```json\n" + "[" * 5_000 + "\n```") is None


def test_star_scores_worked_by_hand():
    counts, wrong = [15, 117, 42, 69], [16, 116, 43, 70]
    assert star_scores([15, 42, 7], counts) == [1, 0, 1, 0]
    assert star_scores(["15", 117.0], counts) == [0, 1, 0, 0]  # Python's `in`: a string is not the count
    # cut to the first M = 4 items before repeats go: 69 comes fifth
    assert star_scores([15, 15, 15, 15, 69], counts) == [1, 0, 0, 0]
    # reasoning: correct only 1, both 0.5, wrong only 0.25, neither 0
    assert star_scores([15, 117, 116, 43], counts, wrong) == [1, 0.5, 0.25, 0]
    figures, per = SCORERS["counting_stars"](get_task("counting_stars/reasoning"),
                                             [{"counts": counts, "distractors": wrong, "length": 100}] * 2,
                                             ['{"little_penguin": [15, 117, 116, 43]}', "no idea"], None)
    assert [p["score"] for p in per] == [100 * 1.75 / 4, 0.0] and figures["score"] == 100 * 1.75 / 8
    assert figures["unparsable"] == 1 and figures["by_star"] == {"1": 50.0, "2": 25.0, "3": 12.5, "4": 0.0}
    assert figures["by_length"] == {"100": 100 * 1.75 / 8}


def test_generate_then_test_and_downstream_on_the_tiny_model(tiny_hf, shared_data, tmp_path, capsys):
    data = tmp_path / "data"
    code, out, err = run(["counting_stars_generate", "--haystack", str(shared_data / "pg19" / "test"),
                          "--lengths", "60", "120", "--stars", "4", "--data_dir", str(data / "counting_stars")], capsys)
    assert code == 0, err
    entry = json.loads((data / "counting_stars" / "manifest.json").read_text())["searching"]
    book = Path(entry["haystack"][0]["path"])
    assert entry["arguments"]["stars"] == 4
    assert entry["haystack"][0]["sha256"] == hashlib.sha256(book.read_bytes()).hexdigest()
    assert entry["arguments"]["haystack"] == [entry["haystack"][0]["sha256"]]
    code, _, err = run(["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--task", "counting_stars",
                        "--data.data_dir", str(data), "--data.max_new_tokens", "8", "--trainer.enable_progress_bar",
                        "false", "--trainer.logger", "false"], capsys)
    assert code in (0, None), err
    record = json.loads(next((tmp_path / "benchmark_results").glob("*_downstream.json")).read_text())
    section = json.dumps(record)
    assert "counting_stars/searching" in section and "counting_stars/reasoning" in section and "by_star" in section
    code, _, err = run(["downstream", "--model.pretrained", str(tiny_hf), "--tasks", "counting_stars", "--data_dir",
                        str(data), "--methods", "dense", "h2o", "--sparsity", "0.5", "--protocols", "query_agnostic",
                        "--max_new_tokens", "8", "--results_dir", str(tmp_path / "ds"), "--name", "t"], capsys)
    assert code == 0, err
    cells = grid_results(tmp_path / "ds" / "t" / "t_results.json")["cells"]
    assert len(cells) == 4 and all(c["primary_metric"] == "score" and c["num_examples"] == 2 for c in cells.values())
    h2o = cells["counting_stars-reasoning__h2o_s0.5_query_agnostic_seed1234"]
    assert all(s["compressed_tokens"] == s["context_tokens"] for s in h2o["samples"])  # the stars, not the question
