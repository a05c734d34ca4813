"""A generator replaces a set only under the arguments it was made with (tasks/generated_sets.py): the same
command again rewrites the same bytes; other arguments, or a file whose manifest does not say how it was
made, are refused in one line before any row is drawn, and the file is left as it was."""

import json
from pathlib import Path

import pytest

from lightning_bench.errors import ConfigError
from lightning_bench.tasks.counting_stars.generate import main as counting_stars
from lightning_bench.tasks.infinitebench.generate import main as infinitebench
from lightning_bench.tasks.ruler.generate import main as ruler


def _refused(command, argv, path, match):
    before = path.read_bytes()
    with pytest.raises(ConfigError, match=match) as err:
        command(argv)
    assert "\n" not in str(err.value) and "choose another" in str(err.value)
    assert path.read_bytes() == before


def test_ruler_set_is_replaced_only_by_the_same_arguments(tmp_path):
    data = tmp_path / "ruler"
    argv = ["--tokenizer", "gpt2", "--data_dir", str(data), "--lengths", "1024", "--num_samples", "2",
            "--tasks", "niah_single_1"]
    path = data / "1024" / "niah_single_1.jsonl"
    assert ruler(argv) == 0
    first = path.read_bytes()
    assert ruler(argv) == 0 and path.read_bytes() == first  # the same arguments: the same rows
    _refused(ruler, [*argv, "--seed", "7"], path, r"niah_single_1.jsonl exists, made with other arguments "
                                                   r"\(seed: 42 -> 7\); choose another --data_dir")
    _refused(ruler, [*argv[:-1], "niah_single_2", "niah_single_1", "--num_samples", "3"], path, "num_samples: 2 -> 3")
    assert not (data / "1024" / "niah_single_2.jsonl").exists()  # refused before anything was written
    assert ruler([*argv[:-1], "niah_single_3", "--seed", "7"]) == 0  # another task's file: its own arguments
    manifest = json.loads((data / "1024" / "manifest.json").read_text())
    assert manifest["niah_single_1"]["arguments"]["seed"] == 42 and manifest["niah_single_3"]["arguments"]["seed"] == 7
    del manifest["niah_single_1"]["arguments"]  # a set made before generators recorded their arguments
    (data / "1024" / "manifest.json").write_text(json.dumps(manifest))
    _refused(ruler, argv, path, "does not record the arguments")


def test_the_same_tokenizer_by_another_path_is_the_same_arguments(tmp_path, monkeypatch):
    """The tokenizer counts by its content: its folder spelled relatively, with a trailing slash, or copied
    elsewhere rewrites the same set; a tokenizer with other merges is refused."""
    import shutil

    from lightning_bench.data.tokenization import offline_gpt2_folder

    folder = Path(offline_gpt2_folder(tmp_path / "cache"))
    data = tmp_path / "ruler"
    argv = ["--data_dir", str(data), "--lengths", "1024", "--num_samples", "2", "--tasks", "niah_single_1"]
    path = data / "1024" / "niah_single_1.jsonl"
    assert ruler(["--tokenizer", str(folder), *argv]) == 0
    first = path.read_bytes()
    monkeypatch.chdir(folder.parent)
    copy = shutil.copytree(folder, tmp_path / "copy")
    for spelling in (folder.name, str(folder) + "/", str(copy)):
        assert ruler(["--tokenizer", spelling, *argv]) == 0 and path.read_bytes() == first, spelling
    merges = copy / "merges.txt"
    lines = merges.read_text().splitlines()
    merges.write_text("\n".join(lines[:-1000]) + "\n")  # the same vocabulary, fewer merges: other token ids
    _refused(ruler, ["--tokenizer", str(copy), *argv], path, "tokenizer: ")


def test_infinitebench_sets_and_files_are_replaced_only_by_the_same_arguments(tmp_path):
    data = tmp_path / "ib"
    argv = ["--task", "passkey", "--tokenizer", "gpt2", "--lengths", "600", "--depths", "2", "--data_dir", str(data)]
    path = data / "600" / "passkey.jsonl"
    assert infinitebench(argv) == 0
    first = path.read_bytes()
    assert infinitebench(argv) == 0 and path.read_bytes() == first
    _refused(infinitebench, [*argv, "--per_depth", "2"], path, "per_depth: 1 -> 2")
    one = tmp_path / "one.jsonl"
    argv = ["--task", "passkey", "--tokenizer", "gpt2", "--lengths", "600", "--depths", "2", "-o", str(one)]
    assert infinitebench(argv) == 0
    first = one.read_bytes()
    assert infinitebench(argv) == 0 and one.read_bytes() == first
    _refused(infinitebench, [*argv[:5], "600", "700", *argv[6:]], one, r"lengths: \[600\] -> \[600, ?700\]")
    _refused(infinitebench, [*argv, "--seed", "3"], one, "choose another -o")


def test_counting_stars_set_is_replaced_only_by_the_same_arguments(shared_data, tmp_path):
    data = tmp_path / "counting_stars"
    argv = ["--haystack", str(shared_data / "pg19" / "test"), "--lengths", "60", "--stars", "4", "--task",
            "searching", "--data_dir", str(data)]
    path = data / "searching.jsonl"
    assert counting_stars(argv) == 0
    first = path.read_bytes()
    assert counting_stars(argv) == 0 and path.read_bytes() == first
    _refused(counting_stars, [*argv, "--seed", "1"], path, "seed: 0 -> 1")
    import os  # the same haystack spelled as a relative path: the same arguments (sources count by their bytes)
    assert counting_stars([argv[0], os.path.relpath(argv[1]), *argv[2:]]) == 0 and path.read_bytes() == first
    assert counting_stars([*argv[:5], "5", "--task", "reasoning", "--data_dir", str(data)]) == 0  # its own file
    manifest = json.loads((data / "manifest.json").read_text())
    assert manifest["searching"]["arguments"]["stars"] == 4 and manifest["reasoning"]["arguments"]["stars"] == 5
