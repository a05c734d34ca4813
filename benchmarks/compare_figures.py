"""Compare the figures two runs wrote, field by field, leaving out what depends on timing or on where and
when a run happened (seconds, tokens/s, memory, run ids, paths, versions, checksums of the file itself).

    python benchmarks/compare_figures.py BEFORE AFTER      # two folders of benchmarks/figures_unchanged.sh
    python benchmarks/compare_figures.py OLD.json NEW.json  # two records (e.g. a RULER cell file)

Folders are matched by the records' paths relative to the folder; where a record name carries a run id
(`{name}_{run_id}.json`), the bare-name pointer to the latest run is compared. Prints one line per record
(`same`, or each differing field with both values) and exits 1 when any figure differs.
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
                      r"peak_memory|memory_kind|duration|started|finished|mfu", re.I)
RUN_ID = re.compile(r"_\d{8}-\d{6}-[0-9a-f]{4}(?=\.)")


def differences(old, new, where: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
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


def records(folder: Path) -> dict[str, Path]:
    """relative name -> file, the latest run's pointer standing for a name with run ids."""
    found = {}
    for path in sorted(folder.rglob("*.json")):
        name = str(path.relative_to(folder))
        if RUN_ID.search(path.name) and path.with_name(RUN_ID.sub("", path.name)).exists():
            continue  # the bare-name pointer is compared instead
        found[RUN_ID.sub("", name)] = path
    return found


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
        found = differences(json.loads(a.read_text()), json.loads(b.read_text()))
        differing += bool(found)
        print(f"{name}: {'same' if not found else f'{len(found)} fields differ'}")
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
