"""Generated sets (RULER, InfiniteBench, Counting-Stars) are replaced only by the same arguments.

A generated file is the input that later records name by its hash: writing other rows over it would
silently change what the next run reads and leave earlier records pointing at data that no longer exists.
Each generator records, per file, the arguments that decide its rows (`"arguments"` in its manifest entry)
and calls `check_replaceable` for every file it is about to write, before it draws any row. The same
arguments make the same rows (every draw is seeded), so rerunning a generator stays harmless.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from lightning_bench.errors import ConfigError


def normalized(arguments: dict) -> dict:
    """As the manifest will read back (tuples as lists, keys as strings), so a comparison is exact."""
    return json.loads(json.dumps(arguments, sort_keys=True))


def read_manifest(path: str | Path) -> dict:
    """A folder's manifest.json ({} when there is none yet)."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError as err:
        raise ConfigError(f"{path} is not valid JSON ({err}); restore it or choose another output folder") from None


def check_replaceable(path: str | Path, recorded: Optional[dict], arguments: dict, option: str) -> None:
    """Refuse (one line naming `option`) to write `path` when it exists and was made with other arguments,
    or by a generator that did not record them. `recorded` is the file's manifest entry (None: none)."""
    path = Path(path)
    if not path.exists():
        return
    made = (recorded or {}).get("arguments")
    wanted = normalized(arguments)
    if made == wanted:
        return
    if made is None:
        why = "and its manifest does not record the arguments it was made with"
    else:
        changed = sorted(k for k in set(made) | set(wanted) if made.get(k) != wanted.get(k))
        shown = "; ".join(f"{k}: {_short(made.get(k))} -> {_short(wanted.get(k))}" for k in changed[:3])
        why = f"made with other arguments ({shown}{'; ...' if len(changed) > 3 else ''})"
    raise ConfigError(f"{path} exists, {why}; choose another {option} (or delete the file to make it again)")


def _short(value) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."
