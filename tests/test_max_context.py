"""--max_context: the context length of a run, counted as RULER counts it (prompt + answer). Suites made
per length read the set of that length; a length beyond the model's window is refused in one line
unless --max_length asks for the middle to be cut."""

import json
import shutil
from pathlib import Path

import pytest

from lightning_bench.tasks.datamodules import PromptedDataModule
from lightning_bench.errors import ConfigError
from tests.test_cli import run
from tests.helpers import grid_results

FIXTURE = Path(__file__).parent / "fixtures" / "ruler" / "niah_single_1.300.jsonl"


@pytest.fixture
def ruler_dir(tmp_path) -> Path:
    """ruler/4096 and ruler/8192 sets of niah_single_1, told apart by their row index."""
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    for length, offset in ((4096, 0), (8192, 100)):
        folder = tmp_path / "data" / "ruler" / str(length)
        folder.mkdir(parents=True)
        (folder / "niah_single_1.jsonl").write_text("".join(json.dumps({**r, "index": r["index"] + offset}) + "\n"
                                                           for r in rows))
    return tmp_path / "data"


def _one_line(err) -> str:
    assert "\n" not in str(err.value)
    return str(err.value)


def test_the_set_of_the_requested_length_is_read(ruler_dir):
    for max_context, split, first in ((None, "eval", 0), (4096, "4096", 0), (8192, "8192", 100)):
        dm = PromptedDataModule(tasks="ruler/niah_single_1", data_dir=str(ruler_dir), max_context=max_context)
        assert dm.eval_split("ruler/niah_single_1") == split
        rows = dm.rows("ruler/niah_single_1", dm.eval_split("ruler/niah_single_1"))
        assert rows[0]["index"] == first
        assert dm.sources["ruler/niah_single_1"][split]["files"][0]["path"].endswith(
            f"ruler/{max_context or 4096}/niah_single_1.jsonl")
    # a suite with one set whatever the length reads it (its prompts are cut to the length like any other)
    assert PromptedDataModule(tasks="xsum", max_context=4096).eval_split("xsum") == "eval"
    with pytest.raises(ConfigError) as err:
        PromptedDataModule(tasks="ruler/niah_single_1", data_dir=str(ruler_dir), max_context=5000).eval_split(
            "ruler/niah_single_1")
    message = _one_line(err)
    assert "max_context 5000 has no ruler set;" in message and "sets are 4096, 8192, 16384" in message
    with pytest.raises(ConfigError) as err:
        PromptedDataModule(tasks="xsum", max_context=4)
    assert "--data.max_context: got 4; expected an int >= 8" in _one_line(err)


def test_a_set_generated_at_any_length_is_read_by_test_and_downstream(tiny_hf, ruler_dir, tmp_path, capsys):
    """`generate_ruler --lengths 1024` writes ruler/1024/: the lengths found on disk count, not only the hub's."""
    shutil.copytree(ruler_dir / "ruler" / "4096", ruler_dir / "ruler" / "1024")
    dm = PromptedDataModule(tasks="ruler/niah_single_1", data_dir=str(ruler_dir), max_context=1024)
    assert dm.eval_split("ruler/niah_single_1") == "1024"
    with pytest.raises(ConfigError) as err:  # still refused where no such set exists
        PromptedDataModule(tasks="ruler/niah_single_1", data_dir=str(ruler_dir), max_context=2048).eval_split(
            "ruler/niah_single_1")
    assert "sets are 1024, 4096, 8192, 16384" in _one_line(err)
    code, _, err = run(_downstream(tiny_hf, ruler_dir, tmp_path, "--max_context", "1024", "--max_length", "160"),
                       capsys)
    assert code == 0, err
    results = grid_results(tmp_path / "t" / "t_results.json")
    files = results["meta"]["data"]["sources"]["ruler/niah_single_1"]["1024"]["files"]
    assert files[0]["path"].endswith("ruler/1024/niah_single_1.jsonl")
    code, _, err = run(_test(tiny_hf, ruler_dir, "--data.max_context", "1024", "--data.max_length", "160"), capsys)
    assert code in (0, None), err
    record = json.loads((tmp_path / "benchmark_results" / f"hf-{tiny_hf.name}_downstream.json").read_text())
    (run_,) = record["runs"].values()
    files = run_["meta"]["data"]["sources"]["ruler/niah_single_1"]["1024"]["files"]
    assert [f["path"] for f in files] == [str(ruler_dir / "ruler" / "1024" / "niah_single_1.jsonl")]


def _downstream(tiny_hf, data_dir, results_dir, *extra):
    return ["downstream", "--model.pretrained", str(tiny_hf), "--data_dir", str(data_dir), "--results_dir",
            str(results_dir), "--name", "t", "--tasks", "ruler/niah_single_1", "--methods", "dense", "h2o",
            "--sparsity", "0.5", "--max_new_tokens", "3", *extra]


def test_a_length_beyond_the_window_is_refused_unless_the_cut_is_asked_for(tiny_hf, ruler_dir, tmp_path, capsys):
    code, _, err = run(_downstream(tiny_hf, ruler_dir, tmp_path, "--max_context", "4096"), capsys)
    lines = [line for line in err.splitlines() if line.startswith("lightning_bench: error:")]
    assert code == 2 and len(lines) == 1, err
    assert "--max_context 4096 is beyond the model's window (512 tokens); lower it, or pass --max_length" in lines[0]
    assert not (tmp_path / "t").exists()
    # truncation asked for: the 4096 set is read and its prompts lose their middle to fit 160 tokens
    code, _, err = run(_downstream(tiny_hf, ruler_dir, tmp_path, "--max_context", "4096", "--max_length", "160"),
                       capsys)
    assert code == 0, err
    results = grid_results(tmp_path / "t" / "t_results.json")
    assert results["config"]["max_length"] == 160 and results["config"]["max_context"] == 4096
    cell = results["cells"]["ruler-niah_single_1__h2o_s0.5_query_aware_seed1234"]
    sample = cell["samples"][0]
    assert sample["truncated_tokens"] > 0
    assert sample["context_tokens"] + sample["question_tokens"] + sample["cue_tokens"] + 3 <= 160
    assert sample["original_prompt_tokens"] == sample["context_tokens"] + sample["question_tokens"] + \
        sample["cue_tokens"] + sample["truncated_tokens"]
    files = results["meta"]["data"]["sources"]["ruler/niah_single_1"]["4096"]["files"]
    assert files[0]["path"].endswith("ruler/4096/niah_single_1.jsonl")
    assert cell["protocol"]["data"]["files"] == files  # the cell is tied to the data it read


def _test(tiny_hf, data_dir, *extra):
    return ["test", "--model", "hf", "--model.pretrained", str(tiny_hf), "--task", "ruler/niah_single_1",
            "--data.data_dir", str(data_dir), "--data.max_new_tokens", "3", "--trainer.enable_progress_bar", "false",
            "--trainer.logger", "false", *extra]


def test_test_refuses_a_context_beyond_the_window_unless_the_cut_is_asked_for(tiny_hf, ruler_dir, tmp_path, capsys):
    """`lightning_bench test --data.max_context`: the same rule as downstream's --max_context."""
    code, _, err = run(_test(tiny_hf, ruler_dir, "--data.max_context", "4096"), capsys)
    lines = [line for line in err.splitlines() if line.startswith("lightning_bench: error:")]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert ("--data.max_context 4096 is beyond the model's window (512 tokens); lower it, or pass --data.max_length "
            "<= 512 to cut the middle of longer prompts") in lines[0]
    assert not (tmp_path / "benchmark_results").exists()
    # the window itself is not beyond it: 512 passes the window check and is refused only for having no set
    code, _, err = run(_test(tiny_hf, ruler_dir, "--data.max_context", "512"), capsys)
    assert code == 2 and "max_context 512 has no ruler set" in err and "beyond the model's window" not in err, err
    # truncation asked for: the 4096 set is read and its prompts lose their middle to fit 160 tokens
    code, _, err = run(_test(tiny_hf, ruler_dir, "--data.max_context", "4096", "--data.max_length", "160"), capsys)
    assert code in (0, None), err
    folder = tmp_path / "benchmark_results"
    record = json.loads((folder / f"hf-{tiny_hf.name}_downstream.json").read_text())
    (run_,) = record["runs"].values()
    assert run_["protocol"]["max_length"] == 160 and run_["config"]["data"]["init_args"]["max_context"] == 4096
    files = run_["meta"]["data"]["sources"]["ruler/niah_single_1"]["4096"]["files"]
    assert [f["path"] for f in files] == [str(ruler_dir / "ruler" / "4096" / "niah_single_1.jsonl")]
    samples = [json.loads(line) for line in (folder / f"hf-{tiny_hf.name}_downstream.samples.jsonl").read_text()
               .splitlines()]
    assert [s["id"] for s in samples] == ["0", "1"]  # the 4096 set's rows (the 8192 set's start at 100)
    for sample in samples:
        assert sample["truncated_tokens"] > 0 and sample["prompt_tokens"] + 3 <= 160
        assert sample["original_prompt_tokens"] == sample["prompt_tokens"] + sample["truncated_tokens"]
