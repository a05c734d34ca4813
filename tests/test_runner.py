"""The experiment runner and its store (experiments/core/runner.py, core/store.py), and the option
vocabulary of the experiment commands: old spellings give the same configuration, each with one note."""

import functools
import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from lightning_bench.errors import ConfigError
from lightning_bench.experiments.core.config import parse_command
from lightning_bench.experiments.core.execution import RayOptions
from lightning_bench.experiments.core.ray_executor import RayExecutor
from lightning_bench.experiments.core.runner import Work, run_grid, run_serial
from lightning_bench.experiments.core.store import CellStore, fingerprint

FILES = __import__("re").compile(r"^c\d+\.json$")
REFUSAL = "was made under other settings; use another --name"


@dataclass(frozen=True)
class Cell:
    n: int
    group_of: str = ""

    @property
    def key(self) -> str:
        return f"c{self.n}"


def works(*cells, settings=None):
    return [Work(cell, settings or {"model": "m"}, cell.group_of or cell.key) for cell in cells]


def square(todo):
    """A cell's record depends on its Work alone, as the runner requires."""
    return [{"value": w.cell.n ** 2, "settings": w.settings} for w in todo]


def grid_command(folder: str, die_in: str = ""):
    """A grid of this file as a command on Ray workers (tests/test_executors.py; here, where each worker imports
    it quickly); its compute ends its worker's process in group `die_in`, as kill -9 or the OOM killer would."""
    def compute(todo):
        if todo[0].group == die_in:
            os.kill(os.getpid(), signal.SIGKILL)
        return square(todo)

    executor = RayExecutor(RayOptions(workers=2), functools.partial(grid_command, folder, die_in))
    return run_grid(works(Cell(1), Cell(2, "g"), Cell(3, "g"), Cell(4)), CellStore(folder, FILES, REFUSAL),
                    compute, lambda *a: None, executor=executor)


# ---- the runner ------------------------------------------------------------------------------------------
def test_a_grid_runs_once_resumes_and_a_cell_computed_elsewhere_is_the_same(tmp_path, capsys):
    grid = works(Cell(1), Cell(2), Cell(3, "g"), Cell(4, "g"))
    store = CellStore(tmp_path / "one", FILES, REFUSAL)
    computed = []

    def counting(todo):
        computed.append([w.key for w in todo])
        return square(todo)

    first = run_grid(grid, store, counting, lambda cell, text: print(cell if isinstance(cell, str) else cell.key, text))
    assert computed == [["c1"], ["c2"], ["c3", "c4"]]  # a group is computed together
    assert run_grid(grid, store, counting, lambda *a: None) == first and len(computed) == 3  # every cell skipped

    # another process (here: the executor called directly) computes some groups into a second store;
    # the rest by run_grid: the records are those of the one-process run
    other = CellStore(tmp_path / "two", FILES, REFUSAL)
    run_serial([[grid[2], grid[3]]], square, other, lambda *a: None)
    second = run_grid(grid, other, square, lambda *a: None)
    strip = lambda records: {k: {f: v for f, v in r.items() if f != "checksum"} for k, r in records.items()}  # noqa: E731
    assert strip(second) == strip(first)


def test_the_executor_is_given_only_the_cells_left(tmp_path):
    grid = works(Cell(1), Cell(2, "g"), Cell(3, "g"))
    store = CellStore(tmp_path, FILES, REFUSAL)
    run_grid(grid[:2], store, square, lambda *a: None)
    handed = []

    def executor(groups, compute, store, say, check):
        handed.extend([w.key for w in group] for group in groups)
        return run_serial(groups, compute, store, say, check)

    run_grid(grid, store, square, lambda *a: None, executor=executor)
    assert handed == [["c3"]]


# ---- the store ---------------------------------------------------------------------------------------------
def test_a_cell_file_of_the_earlier_layout_is_read_a_damaged_one_set_aside(tmp_path, capsys):
    """generation wrote cell files without a checksum before the one store: they are read as they are."""
    old = {"method": "dense", "sparsity": 0.0, "summary": {"nll": 1.5}, "protocol": {"model": "m"}}
    (tmp_path / "c1.json").write_text(json.dumps(old))
    store = CellStore(tmp_path, FILES, REFUSAL)
    assert store.read(Cell(1), {"model": "m"}) == old
    with pytest.raises(ConfigError, match=f"c1.json {REFUSAL}"):
        store.read(Cell(1), {"model": "other"})

    store.write(Cell(2), {"model": "m"}, {"value": 4})
    record = json.loads((tmp_path / "c2.json").read_text())
    assert record["checksum"] == fingerprint({k: v for k, v in record.items() if k != "checksum"})
    record["value"] = 5  # edited by hand: its checksum no longer matches
    (tmp_path / "c2.json").write_text(json.dumps(record))
    (tmp_path / "c3.json").write_text('{"value": ')  # truncated
    assert store.read(Cell(2), {"model": "m"}) is None and store.read(Cell(3), {"model": "m"}) is None
    assert (tmp_path / "c2.json.corrupt").exists() and (tmp_path / "c3.json.corrupt").exists()
    assert capsys.readouterr().err.count("is damaged") == 2
    (tmp_path / "c3.json").write_text('{"value": 6')  # damaged again: the first copy set aside is kept
    assert store.read(Cell(3), {"model": "m"}) is None
    assert (tmp_path / "c3.json.corrupt").read_text() == '{"value": ' and (tmp_path / "c3.json.corrupt.1").exists()


def test_group_progress_is_kept_under_its_settings_only(tmp_path, capsys):
    store = CellStore(tmp_path / "cells", FILES, REFUSAL, tmp_path / "partial")
    store.progress("g", {"c1": {"model": "m"}}).save(3, {"c1": {"rows": [1, 2, 3]}})
    assert store.progress("g", {"c1": {"model": "m"}}).load()["examples"] == 3
    assert store.progress("g", {"c1": {"model": "other"}}).load() is None
    assert (tmp_path / "partial" / "g.json.stale").exists() and "under other settings" in capsys.readouterr().err


# ---- the vocabulary ------------------------------------------------------------------------------------------
def _parsed(command, config_class, argv, capsys):
    before = (list(argv), list(sys.argv))
    parsed = parse_command(command, config_class, argv, "")
    assert (list(argv), list(sys.argv)) == before  # nothing rewrites an argument list
    return parsed, capsys.readouterr().err.splitlines()


GENERATION = ["--model.pretrained", "m", "--methods", "dense", "h2o", "--context-length", "16", "--rerotate"]


@pytest.mark.parametrize("old, new, note", [
    (["--sparsity", "0.5", "0.7"], ["--ratios", "0.5", "0.7"], "--sparsity is deprecated; use --ratios"),
    (["--experiment_name", "x"], ["--name", "x"], "--experiment_name is deprecated; use --name"),
    (["--experiment-name", "x"], ["--name", "x"], "--experiment_name is deprecated; use --name"),
    (["--device", "cpu"], ["--accelerator", "cpu"], "--device is deprecated; use --accelerator"),
    (["--seed", "7"], ["--seeds", "7"], "--seed is deprecated; use --seeds"),
    (["--num_runs", "3"], ["--seeds", "42", "43", "44"], "--num_runs is deprecated; use --seeds (42 .. 42+N-1)"),
    (["--dataset", "ptb"], ["--data", "ptb"], "--dataset is deprecated; use --data"),
    (["--method-param", "h2o.recent_ratio=0.2"], ["--method_params.h2o.recent_ratio", "0.2"],
     "--method-param is deprecated; use --method_params.h2o.recent_ratio 0.2"),
])
def test_generation_old_spellings_give_the_same_config_and_one_note(old, new, note, capsys):
    from lightning_bench.experiments.generation.config import GenerationConfig

    old_parsed, old_err = _parsed("generation", GenerationConfig, [*GENERATION, *old], capsys)
    new_parsed, new_err = _parsed("generation", GenerationConfig, [*GENERATION, *new], capsys)
    assert old_parsed.config == new_parsed.config and old_parsed.resolved == new_parsed.resolved
    assert old_err == [f"lightning_bench: note: {note}"] and new_err == []
    assert new_parsed.config.rerotate is True and new_parsed.config.context_length == [16]


def test_dotted_method_parameters_of_one_method_all_count(tmp_path, capsys):
    """`--method_params.cab.a 1 --method_params.cab.b 2`: both reach the config (jsonargparse alone kept only
    the last item of a method); a later whole assignment of the method's dict still replaces earlier items."""
    from lightning_bench.experiments.downstream.config import DownstreamConfig

    base = ["--model.pretrained", "m", "--tasks", "xsum", "--methods", "cab", "h2o", "--ratios", "0.5"]
    parsed, _ = _parsed("downstream", DownstreamConfig, [*base, "--method_params.cab.local_ratio", "0.2",
                                                         "--method_params.cab.importance_ratio", "0.6",
                                                         "--method_params.h2o.recent_ratio=0.25"], capsys)
    assert parsed.config.method_params == {"cab": {"local_ratio": 0.2, "importance_ratio": 0.6},
                                           "h2o": {"recent_ratio": 0.25}} == parsed.resolved["method_params"]
    parsed, _ = _parsed("downstream", DownstreamConfig, [*base, "--method_params.cab.local_ratio", "0.2",
                                                         "--method_params.cab", "{local_ratio: 0.1, bridge_ratio: 0.4}"],
                        capsys)
    assert parsed.config.method_params == {"cab": {"local_ratio": 0.1, "bridge_ratio": 0.4}}


def test_an_old_and_a_new_spelling_together_are_one_error(capsys):
    from lightning_bench.experiments.generation.config import GenerationConfig

    with pytest.raises(ConfigError, match="give --seeds or --num_runs, not both"):
        parse_command("generation", GenerationConfig, [*GENERATION, "--seeds", "1", "--num_runs", "2"], "")


def test_an_old_spelling_typed_over_a_presets_new_one_wins_with_one_note(tmp_path, capsys):
    """An old script's `--sparsity` over a shipped preset that now says `ratios:`: the command line wins, as
    for any option, with the note; typed the other way round, `--ratios` wins over an old preset's key."""
    from lightning_bench.experiments.downstream.config import DownstreamConfig

    new_preset, old_preset = tmp_path / "new.yaml", tmp_path / "old.yaml"
    new_preset.write_text("model: {pretrained: m}\ntasks: [xsum]\nmethods: [h2o]\nratios: [0.5]\n")
    old_preset.write_text("model: {pretrained: m}\ntasks: [xsum]\nmethods: [h2o]\nsparsity: [0.5]\n")
    parsed, err = _parsed("downstream", DownstreamConfig, ["--config", str(new_preset), "--sparsity", "0.9"], capsys)
    assert parsed.config.ratios == [0.9] and err == ["lightning_bench: note: --sparsity is deprecated; use --ratios"]
    parsed, err = _parsed("downstream", DownstreamConfig, ["--config", str(old_preset), "--ratios", "0.9"], capsys)
    assert parsed.config.ratios == [0.9] and err == ["lightning_bench: note: --sparsity is deprecated; use --ratios"]


def test_downstream_old_spellings_give_the_same_grid(capsys):
    from lightning_bench.experiments.downstream.config import DownstreamConfig

    base = ["--model.pretrained", "m", "--tasks", "xsum", "--methods", "dense", "h2o"]
    old, err = _parsed("downstream", DownstreamConfig, [*base, "--sparsity", "0.5", "--device", "cpu", "--seed", "3"],
                       capsys)
    new, _ = _parsed("downstream", DownstreamConfig, [*base, "--ratios", "0.5", "--accelerator", "cpu", "--seeds", "3"],
                     capsys)
    assert old.config.cells() == new.config.cells() and old.resolved == new.resolved
    assert (new.config.accelerator, new.config.rounding) == ("cpu", "ceil") and len(err) == 3


def test_a_sweep_preset_in_the_old_spelling_is_the_same_sweep(tmp_path, tiny_corpus, capsys):
    from lightning_bench.experiments.sweep.config import SweepConfig, settings_fingerprint

    def preset(name, **fields):
        path = tmp_path / name
        path.write_text(json.dumps({
            "model": {"class_path": "lightning_bench.models.HFLanguageModel", "init_args": {"pretrained": "m"}},
            "datasets": {"tiny": {"source": "text", "path": str(tiny_corpus), "tokenizer": "word"}},
            "methods": ["dense", "h2o"], **fields}))
        return ["--config", str(path)]

    old, err = _parsed("sweep", SweepConfig, preset("old.yaml", seed=5, **{
        "sparsity_sweep": {"context_length": 16, "sparsity_levels": [0.0, 0.5]},
        "context_length_sweep": {"sparsity": 0.5, "context_lengths": [8, 16]}}), capsys)
    new, new_err = _parsed("sweep", SweepConfig, preset("new.yaml", seeds=[5], **{
        "sparsity_sweep": {"context_length": 16, "ratios": [0.0, 0.5]},
        "context_length_sweep": {"ratio": 0.5, "context_lengths": [8, 16]}}), capsys)
    assert old.config.cells() == new.config.cells() and old.config.grid() == new.config.grid()
    assert settings_fingerprint(old.resolved) == settings_fingerprint(new.resolved) and new_err == []
    assert [line.split("note: ")[1] for line in err] == [
        "--seed is deprecated; use --seeds",
        "sparsity_sweep.sparsity_levels is deprecated; use sparsity_sweep.ratios",
        "context_length_sweep.sparsity is deprecated; use context_length_sweep.ratio"]
    assert new.config.sparsity_sweep.sparsity_levels == [0.0, 0.5]  # what reports of earlier files read


def test_the_presets_use_the_current_spellings(capsys):
    """No shipped preset prints a deprecation note."""
    from lightning_bench.experiments.downstream.config import DownstreamConfig
    from lightning_bench.experiments.sweep.config import SweepConfig

    root = Path(__file__).resolve().parent.parent / "configs"
    for command, config_class, folder in (("sweep", SweepConfig, "perplexity"),
                                          ("downstream", DownstreamConfig, "downstream")):
        for path in sorted((root / folder).glob("*.yaml")):
            text = path.read_text()
            assert "\nsparsity:" not in text and "\nseed:" not in text and "sparsity_levels" not in text, path
