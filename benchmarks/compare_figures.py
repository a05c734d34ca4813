"""Compare the figures two runs wrote, field by field, leaving out what depends on timing or on where and
when a run happened (seconds, tokens/s, memory, run ids, paths, versions, checksums of the file itself).

    python benchmarks/compare_figures.py BEFORE AFTER      # two folders of benchmarks/figures_unchanged.sh
    python benchmarks/compare_figures.py OLD.json NEW.json  # two records (e.g. a RULER cell file)

Folders are matched by the records' paths relative to the folder; where a record name carries a run id
(`{name}_{run_id}.json`), the bare-name pointer to the latest run is compared. Prints one line per record
(`same`, or each differing field with both values) and exits 1 when any figure differs. The recorded
command-line `config` is left out too (a refactor may rename options); what a figure depends on is in
the record's `protocol` and `meta.data`, which are compared. Keys that are run ids (a merged downstream
record's `runs`) are matched in order.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

# keys whose values depend on the machine's load, the clock or the location, never on the method
VOLATILE = re.compile(r"second|time|per_s|per_sec|throughput|rss|memory|run_id|created|utc|date|git|command|"
                      r"platform|versions|checksum|path|_dir$|resumed|hostname|pid|elapsed|wall|\bfiles\b|dirty|"
                      r"peak_memory|memory_kind|duration|started|finished|mfu|cache_hits|^run$|^config$", re.I)
RUN_ID = re.compile(r"_\d{8}-\d{6}-[0-9a-f]{4}(?=\.)")


def differences(old, new, where: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        old, new = _by_run_order(old), _by_run_order(new)
        found = []
        for key in sorted(set(old) | set(new), key=str):
            if VOLATILE.search(str(key)):
                continue
            if key not in old or key not in new:
                found.append(f"{where}.{key}: only in {'after' if key in new else 'before'}")
                continue
            found += differences(old[key], new[key], f"{where}.{key}")
        return found
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{where}: {len(old)} entries before, {len(new)} after"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{where}[{i}]")]
    if isinstance(old, float) and isinstance(new, float) and math.isnan(old) and math.isnan(new):
        return []
    return [] if old == new else [f"{where}: {old!r} before, {new!r} after"]


def _by_run_order(mapping: dict) -> dict:
    """Run-id keys (`20261126-134523-7cf1`) become run0, run1, ... in sorted order."""
    runs = sorted(k for k in mapping if re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", str(k)))
    names = {k: f"run{i}" for i, k in enumerate(runs)}
    return {names.get(k, k): v for k, v in mapping.items()}


def records(folder: Path) -> dict[str, Path]:
    """relative name -> file, the latest run's pointer standing for a name with run ids."""
    found = {}
    for path in sorted([*folder.rglob("*.json"), *folder.rglob("*.jsonl")]):
        name = str(path.relative_to(folder))
        if RUN_ID.search(path.name) and path.with_name(RUN_ID.sub("", path.name)).exists():
            continue  # the bare-name pointer is compared instead
        found[RUN_ID.sub("", name)] = path
    return found


def load(path: Path):
    """A JSON record, or the list of a JSON-lines file's rows (per-sample predictions)."""
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def leaves(value, where: str = "") -> int:
    """How many values `differences` compares in `value`."""
    if isinstance(value, dict):
        value = _by_run_order(value)
        return sum(leaves(v) for k, v in value.items() if not VOLATILE.search(str(k)))
    if isinstance(value, list):
        return sum(leaves(v) for v in value)
    return 1


def compare(old: Path, new: Path) -> int:
    if old.is_file():
        pairs = {old.name: (old, new)}
    else:
        before, after = records(old), records(new)
        for name in sorted(set(before) ^ set(after)):
            print(f"{name}: only {'after' if name in after else 'before'}")
        pairs = {n: (before[n], after[n]) for n in sorted(set(before) & set(after))}
    differing = 0
    for name, (a, b) in pairs.items():
        old, new = load(a), load(b)
        found = differences(old, new)
        differing += bool(found)
        print(f"{name}: {f'same ({leaves(old)} values compared)' if not found else f'{len(found)} fields differ'}")
        for line in found[:20]:
            print(f"    {line}")
    print(f"{len(pairs)} records compared, {differing} differ")
    return 1 if differing else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    sys.exit(compare(args.before, args.after))
