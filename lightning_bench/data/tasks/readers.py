"""`load_rows`: one task split as a list of rows in the HF `datasets` layout, from local files or the hub.

Local files are read in the benchmark's own format (glue.py, superglue.py, squad.py, mmlu.py say
which); `data_dir` is a folder laid out like ../shared/data, `paths` names the files directly. With
neither, the rows come from the HF hub through `datasets.load_dataset` and are normalised by the same
code, so a task's rows look the same whichever way they were loaded.

`split` is a split name ("validation", MMLU's "dev", ...) or a role the registry resolves: "eval",
"train" or "fewshot".
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from lightning_bench.data.tasks import glue, mmlu, squad, superglue
from lightning_bench.data.tasks.registry import TaskSource, get_task
from lightning_bench.errors import ConfigError, MissingData

FORMATS = {"glue_tsv": glue, "superglue_jsonl": superglue, "squad_json": squad, "mmlu_csv": mmlu}
ROLES = {"eval": "eval_split", "train": "train_split", "fewshot": "fewshot_split"}


def load_rows(task: str, split: str, data_dir: str | Path | None = None,
              paths: str | Path | list[str | Path] | None = None, max_rows: int | None = None,
              with_origin: bool = False) -> list[dict] | tuple[list[dict], dict]:
    """Rows of `task`'s `split` (the first `max_rows`, if given); relative `paths` are under `data_dir`.

    with_origin: also return where the rows came from, so a result can name its data exactly:
    {"split", "files": [{"path", "sha256"}], "note" (how the default eval files differ from the
    benchmark's split, if they do)} or {"split", "hub", "config", "hub_splits"}.
    """
    source = get_task(task)
    split = _split(source, split)
    fmt = FORMATS[source.reader]
    if paths is None and data_dir is None:
        rows, origin = _from_hub(source, split, fmt, max_rows)
    else:
        files = _local_files(source, split, data_dir, [paths] if isinstance(paths, (str, Path)) else paths)
        rows = first_rows(fmt.read(task, files), max_rows)
        origin = {"split": split, "files": [{"path": str(f), "sha256": _sha256(f)} for f in files]}
        if paths is None and split == source.eval_split and source.local_note:
            origin["note"] = source.local_note
    return (rows, origin) if with_origin else rows


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


def _split(source: TaskSource, split: str) -> str:
    if split not in ROLES:
        return split
    resolved = getattr(source, ROLES[split])
    if resolved is None:
        raise MissingData(f"{source.name}: {source.benchmark} has no {split} split; pick another task or split")
    return resolved


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _local_files(source: TaskSource, split: str, data_dir, paths: list | None) -> list[Path]:
    if paths is None:
        if split not in source.local:
            raise MissingData(f"{source.name}: no local file is known for split {split!r} (known: "
                              f"{', '.join(source.local)}); pass the files with --data.paths")
        paths = source.local[split]
    root = Path(data_dir) if data_dir is not None else None
    files = [Path(p) if root is None or Path(p).is_absolute() else root / p for p in paths]
    if not files:
        raise ConfigError(f"{source.name}: --data.paths is empty; name at least one file")
    for f in files:
        if not f.is_file():
            what = "is a folder, not a file" if f.is_dir() else "not found"
            raise MissingData(f"{source.name}: {f} {what}; set --data.data_dir to a folder laid out like "
                              "../shared/data (glue/, superglue/, squad_v1.1/, squad_v2.0/, mmlu/) "
                              "or name the files with --data.paths")
    return files


def _from_hub(source: TaskSource, split: str, fmt, max_rows: int | None) -> tuple[list[dict], dict]:
    from datasets import load_dataset  # heavy import; only the hub path needs it

    hub_splits = source.hub_splits.get(split, (split,))  # MNLI validation = matched + mismatched
    rows: list[dict] = []
    for hub_split in hub_splits:
        try:
            ds = load_dataset(source.hub_id, source.hub_config, split=hub_split)
        except OSError as err:  # offline or not found: the fix is local files
            raise MissingData(f"{source.name}: cannot load {source.hub_id} ({source.hub_config}) split {hub_split!r} "
                              f"from the hub ({type(err).__name__}); read local files with --data.data_dir "
                              "or --data.paths") from err
        if max_rows is not None:
            ds = ds.select(range(min(max_rows, len(ds))))
        rows += fmt.from_hub(source.name, hub_split, list(ds))
    origin = {"split": split, "hub": source.hub_id, "config": source.hub_config, "hub_splits": list(hub_splits)}
    return first_rows(rows, max_rows), origin
