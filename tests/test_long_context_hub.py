"""The long-context suites' hub path (loading.py `_from_hub`), with `datasets.load_dataset` replaced by a stand-in
that records its arguments and returns small in-memory `datasets.Dataset`s (the hub is not reachable here):
RULER's mixed-task sets (a config per length) and InfiniteBench's per-task files read with explicit features."""

import json

import datasets
import pytest

from lightning_bench.tasks.loading import load_rows
from lightning_bench.errors import MissingData


def ruler_row(task: str, n: int) -> dict:
    """A row of kvpress's simonjegou/ruler layout (every task mixed in split "test")."""
    return {"context": f"context {task} {n}. ", "question": f"Question {n}?", "answer_prefix": " Answer:",
            "answer": [f"gold {task} {n}"], "task": task, "max_new_tokens": 30}


@pytest.fixture
def hub(monkeypatch):
    """calls: the arguments of each load_dataset call; sets[config]: the rows that config's split holds."""
    calls, sets = [], {}

    def load_dataset(path, name=None, split=None, **kwargs):
        calls.append({"path": path, "name": name, "split": split, **kwargs})
        rows = sets[name] if name in sets else sets[None]
        return datasets.Dataset.from_list(rows, features=kwargs.get("features"))

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls, sets


def test_ruler_keeps_the_tasks_rows_before_max_rows(hub):
    calls, sets = hub
    # the first 5 rows are other tasks': taking max_rows before picking vt's rows left none of them
    others = [ruler_row(t, n) for n, t in enumerate(["niah_single_1", "cwe", "qa_1", "niah_single_1", "fwe"])]
    sets["4096"] = others + [ruler_row("vt", 5), ruler_row("cwe", 6), ruler_row("vt", 7), ruler_row("vt", 8)]
    rows = load_rows("ruler/vt", "test", max_rows=2)
    assert [r["outputs"] for r in rows] == [["gold vt 5"], ["gold vt 7"]]
    assert [r["id"] for r in rows] == ["0", "1"] and {r["task"] for r in rows} == {"vt"}
    assert [r["input"] for r in rows] == ["context vt 5. Question 5? Answer:", "context vt 7. Question 7? Answer:"]


@pytest.mark.parametrize("split,config", [("8192", "8192"), ("test", "4096"), ("4096", "4096")])
def test_ruler_split_named_by_a_length_reads_that_config(hub, split, config):
    calls, sets = hub
    sets["4096"] = [ruler_row("vt", 0)]
    sets["8192"] = [ruler_row("vt", 1)]
    rows, origin = load_rows("ruler/vt", split, max_rows=1, with_origin=True)
    assert [(c["path"], c["name"], c["split"]) for c in calls] == [("simonjegou/ruler", config, "test")]
    assert origin == {"split": split, "hub": "simonjegou/ruler", "config": config, "hub_splits": ["test"]}
    assert rows[0]["outputs"] == [f"gold vt {0 if config == '4096' else 1}"]
    assert rows[0]["target_length"] == int(config)  # the config read is the context length


INFINITEBENCH_ROWS = [
    {"id": 0, "context": "noise. The pass key is 71432. Remember it. noise.", "input": "What is the pass key?",
     "answer": ["71432"], "options": []},
    {"id": 1, "context": "noise. The pass key is 9. Remember it.", "input": "What is the pass key?",
     "answer": ["9"], "options": []},
]


def test_infinitebench_reads_the_tasks_file_with_explicit_features(hub, tmp_path):
    calls, sets = hub
    sets[None] = INFINITEBENCH_ROWS
    rows, origin = load_rows("infinitebench/passkey", "test", with_origin=True)
    (call,) = calls
    assert call["path"] == "xinrongzhang2022/InfiniteBench" and call["split"] == "passkey"
    assert call["data_files"] == {"passkey": "passkey.jsonl"}  # this task's file, not every task's
    features = call["features"]
    assert isinstance(features, datasets.Features)
    assert {k: repr(v) for k, v in features.items()} == {
        "id": repr(datasets.Value("int64")), "context": repr(datasets.Value("string")),
        "input": repr(datasets.Value("string")), "answer": repr(datasets.Sequence(datasets.Value("string"))),
        "options": repr(datasets.Sequence(datasets.Value("string")))}
    assert origin["hub_splits"] == ["passkey"]
    local = tmp_path / "passkey.jsonl"
    local.write_text("".join(json.dumps(r) + "\n" for r in INFINITEBENCH_ROWS))
    assert rows == load_rows("infinitebench/passkey", "test", paths=local)
    assert rows[0] == {"id": "0", "context": INFINITEBENCH_ROWS[0]["context"], "input": "What is the pass key?",
                       "answers": ["71432"], "options": []}


@pytest.mark.parametrize("task", ["ruler/vt", "infinitebench/passkey"])
def test_offline_is_one_line_missing_data(monkeypatch, task):
    def offline(*args, **kwargs):
        raise OSError("Couldn't reach 'the hub' on the Hub (LocalEntryNotFoundError)\nmore detail")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(MissingData) as info:
        load_rows(task, "test", max_rows=2)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{task}: cannot load ")
    assert "--data.data_dir" in message
