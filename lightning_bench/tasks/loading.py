"""`load_rows`: one task split as a list of rows in the HF `datasets` layout, from local files or the hub.

Local files are read in the benchmark's own format (each benchmark folder's reader); `data_dir` is a
folder laid out like ../shared/data (the benchmark folder's layout.yaml says which file holds which split:
`{name}` stands for the task's name inside its benchmark, so `mmlu/*` covers all 57 subjects; `note` says
how the default eval files differ from the benchmark's own split, and goes into records),
`paths` names the files directly. With
neither, the rows come from the HF hub through `datasets.load_dataset` and are normalised by the same
code, so a task's rows look the same whichever way they were loaded.

`split` is a split name ("validation", MMLU's "dev", ...) or a role the registry resolves: "eval",
"train" or "fewshot".
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path

import yaml

from lightning_bench.tasks.definition import TaskDefinition
from lightning_bench.tasks.registry import EXPECTED_FILES, READERS, SUITES, get_task
from lightning_bench.errors import ConfigError, MissingData

ROLES = ("eval", "train", "fewshot")
LENGTH_SPLIT = "{length}"  # the layout key of a suite's sets generated at any length (layout.yaml)


def load_rows(task: str, split: str, data_dir: str | Path | None = None,
              paths: str | Path | list[str | Path] | None = None, max_rows: int | None = None,
              with_origin: bool = False) -> list[dict] | tuple[list[dict], dict]:
    """Rows of `task`'s `split` (the first `max_rows`, if given); relative `paths` are under `data_dir`.

    with_origin: also return where the rows came from, so a result can name its data exactly:
    {"split", "files": [{"path", "sha256"}], "note" (how the default eval files differ from the
    benchmark's split, if they do)} or {"split", "hub", "config", "hub_splits"}.
    """
    definition = get_task(task)
    split = resolve_split(definition, split)
    reader = READERS[definition.source.format]
    if paths is None and data_dir is None:
        rows, origin = _from_hub(definition, split, reader, max_rows)
    else:
        files = _local_files(definition, split, data_dir, [paths] if isinstance(paths, (str, Path)) else paths)
        rows = first_rows(reader.read(definition, files), max_rows)
        origin = {"split": split, "files": [{"path": str(f), "sha256": _sha256(f)} for f in files]}
        note = local_layout(definition).get("note")
        if paths is None and split == definition.splits.eval and note:
            origin["note"] = note
    return (rows, origin) if with_origin else rows


def local_layout(task: TaskDefinition) -> dict:
    """{split: [paths under a data folder], "note": ...} for `task`, from its layout.yaml. A suite generated
    per length has the split LENGTH_SPLIT, its paths holding "{length}": the set of any length found on disk."""
    layouts = _layouts()
    layout = layouts.get(task.name) or layouts.get(f"{task.benchmark}/*", {})
    return {k: ([p.format(name=task.short_name, length="{length}") for p in v] if k != "note" else v)
            for k, v in layout.items()}


def length_splits(task: TaskDefinition, data_dir: str | Path | None) -> list[int]:
    """The lengths `task` has a set of: the splits its layout names by a length (the hub's), and those of
    its LENGTH_SPLIT files found under `data_dir` (`generate_ruler --lengths 1024` writes ruler/1024/...)."""
    layout = local_layout(task)
    lengths = {int(k) for k in layout if str(k).isdigit()}
    for pattern in layout.get(LENGTH_SPLIT, []) if data_dir is not None else []:
        shape = re.compile(re.escape(pattern).replace(re.escape("{length}"), r"(\d+)"))
        for found in Path(data_dir).glob(pattern.replace("{length}", "*")):
            match = shape.fullmatch(found.relative_to(data_dir).as_posix())
            lengths.update([int(match.group(1))] if match else [])
    return sorted(lengths)


@lru_cache(maxsize=1)
def _layouts() -> dict:
    """Every suite's layout.yaml, merged (a task laid out twice is an error)."""
    layouts: dict = {}
    for suite in SUITES:
        more = yaml.safe_load(suite.layout.read_text()) or {}
        clash = set(more) & set(layouts)
        if clash:
            raise AssertionError(f"{suite.layout} lays out {sorted(clash)} again")
        layouts.update(more)
    return layouts


def first_rows(rows: list[dict], max_rows: int | None) -> list[dict]:
    """The first `max_rows` rows, of each subset where rows have one (MNLI: N matched + N mismatched,
    so a small N still scores both halves of the task)."""
    if max_rows is None:
        return rows
    seen: dict = {}
    kept = []
    for row in rows:
        key = row.get("subset")
        if seen.get(key, 0) < max_rows:
            seen[key] = seen.get(key, 0) + 1
            kept.append(row)
    return kept


def resolve_split(task: TaskDefinition, split: str) -> str:
    """A role ("eval", "train", "fewshot") -> the task's split for it; a split name is returned as is."""
    if split not in ROLES:
        return split
    resolved = getattr(task.splits, split)
    if resolved is None:
        raise MissingData(f"{task.name}: {task.benchmark} has no {split} split; pick another task or split")
    return resolved


def _sha256(path: Path) -> str:
    if path.is_dir():  # a folder of files (CNN/DM .story files): the hash of its files' names and bytes, in order
        digest = hashlib.sha256()
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(str(f.relative_to(path)).encode() + b"\0" + f.read_bytes())
        return digest.hexdigest()
    return hashlib.sha256(path.read_bytes()).hexdigest()




def _expected_files(fmt: str) -> str:
    return EXPECTED_FILES.get(fmt, "its file")


def _local_files(task: TaskDefinition, split: str, data_dir, paths: list | None) -> list[Path]:
    if paths is None:
        known = {k: v for k, v in local_layout(task).items() if k != "note"}
        if split not in known and split.isdigit() and LENGTH_SPLIT in known:
            known[split] = [p.replace(LENGTH_SPLIT, split) for p in known[LENGTH_SPLIT]]
        if split not in known:
            raise MissingData(f"{task.name}: no local file is known for split {split!r} (known: "
                              f"{', '.join(known)}); pass the files with --data.paths")
        paths = known[split]
    root = Path(data_dir) if data_dir is not None else None
    files = [Path(p) if root is None or Path(p).is_absolute() else root / p for p in paths]
    if not files:
        raise ConfigError(f"{task.name}: --data.paths is empty; name at least one file")
    for f in files:
        if not f.is_file() and not (f.is_dir() and getattr(READERS[task.source.format], "reads_folders", False)):
            what = "is a folder, not a file" if f.is_dir() else "not found"
            raise MissingData(f"{task.name}: {f} {what}; expected {_expected_files(task.source.format)} "
                              "there: set --data.data_dir to a folder laid out like ../shared/data "
                              "(lightning_bench/tasks/<benchmark>/layout.yaml) or name the files with --data.paths")
    return files


def _from_hub(task: TaskDefinition, split: str, reader, max_rows: int | None) -> tuple[list[dict], dict]:
    from dataclasses import replace

    from datasets import load_dataset  # heavy import; only the hub path needs it

    source = task.source
    if not source.hub_id:  # a benchmark published outside the hub: local files only
        raise MissingData(f"{task.name}: {task.benchmark} has no hub copy; read local files: {_local_hint(task, split)}")
    # a reader whose hub set is not one config with a hub split per split (RULER: a config per length, all
    # tasks mixed in one split; InfiniteBench: a file per task, read with explicit features) lays the load out
    # itself: {"config", "hub_splits", "load_args": hub split -> more load_dataset arguments,
    # "task_rows": (column, keep): the rows whose column value keep() accepts are the task's}
    layout = reader.hub_layout(task, split) if getattr(reader, "hub_layout", None) else {}
    config = layout.get("config", source.hub_config)
    hub_splits = layout.get("hub_splits") or source.hub_splits.get(split, (split,))  # MNLI: matched + mismatched
    if config != source.hub_config:  # the reader sees the config actually read (RULER: its length)
        task = replace(task, source=replace(source, hub_config=config))
    rows: list[dict] = []
    for hub_split in hub_splits:
        extra = layout["load_args"](hub_split) if "load_args" in layout else {}
        try:
            ds = load_dataset(source.hub_id, config, split=hub_split, **extra)
        # offline or not found (OSError), or a script-based hub dataset that this `datasets` refuses to run
        # (RuntimeError: LongBench v1, ZeroSCROLLS): the fix is local files
        except (OSError, RuntimeError) as err:
            raise MissingData(f"{task.name}: cannot load {source.hub_id} ({config}) split {hub_split!r} "
                              f"from the hub ({type(err).__name__}); read local files: {_local_hint(task, split)}"
                              ) from err
        if "task_rows" in layout:  # several tasks in one split: this task's rows first, then the first max_rows
            ds = _task_rows(task, ds, hub_split, *layout["task_rows"])
        if max_rows is not None:
            ds = ds.select(range(min(max_rows, len(ds))))
        rows += reader.from_hub(task, hub_split, list(ds))
    origin = {"split": split, "hub": source.hub_id, "config": config, "hub_splits": list(hub_splits)}
    return first_rows(rows, max_rows), origin


def _local_hint(task: TaskDefinition, split: str) -> str:
    """Which file --data.data_dir would supply for `split`, in which format: the offline user's next step."""
    paths = local_layout(task).get(split)
    where = (f"--data.data_dir DIR reads DIR/{' and DIR/'.join(paths)}" if paths
             else f"no file under --data.data_dir is known for split {split!r}")
    return f"{where}, expected: {_expected_files(task.source.format)}; or name the files with --data.paths"


def _task_rows(task: TaskDefinition, ds, hub_split: str, column: str, keep):
    """The rows of `ds` whose `column` value `keep` accepts (filtered on that column alone: the contexts are long)."""
    if column not in ds.column_names:  # a split of one task's rows only
        return ds
    kept = ds.filter(keep, input_columns=column)
    if len(ds) and not len(kept):
        raise ConfigError(f"{task.name}: {task.source.hub_id} ({task.source.hub_config}) split {hub_split!r} holds "
                          f"no {task.short_name} rows (its {column}s: {', '.join(sorted(set(map(str, ds[column]))))})")
    return kept
