"""`benchmarks/scaling.py --out FILE`: the record holds the numbers the printed table shows (rows, floors, growth
ratios), how they were measured and `meta`; an existing FILE is refused in one line before anything is measured."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND = ["benchmarks/scaling.py", "--models", "transformer", "--seq-lens", "16", "32", "--reps", "1",
           "--floor-len", "8", "--threads", "1"]


def scaling(out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *COMMAND, "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def printed(stdout: str) -> tuple[dict, dict, dict]:
    """(model, seq_len) -> the row's columns, model -> its floor's columns, model -> its growth columns, as printed."""
    rows, floors, growth = {}, {}, {}
    lines = stdout.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("model        seq_len")))
    for line in lines[at + 2:]:
        words = line.split()
        if line.startswith("growth"):
            break
        if "floor (fixed per-call cost)" in line:
            floors[words[0]] = words[2:4]
        elif len(words) >= 6:
            rows[words[0], int(words[1])] = words[2:6]
    at = lines.index(next(line for line in lines if line.startswith("model         time/token")))
    for line in lines[at + 1:]:
        if not line.strip():
            break
        growth[line.split()[0]] = line.split()[1:5]
    return rows, floors, growth


def shown(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def test_the_record_holds_what_the_table_prints_and_is_never_replaced(tmp_path):
    out = tmp_path / "scaling.json"
    done = scaling(out)
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    rows, floors, growth = printed(done.stdout)

    assert record["kind"] == "scaling"
    assert [(r["model"], r["seq_len"]) for r in record["rows"]] == list(rows) == [
        ("transformer", 16), ("transformer", 32)]  # one model: each config is a fresh process importing torch
    for row in record["rows"]:
        assert rows[row["model"], row["seq_len"]] == [format(row["ms"], ".1f"), format(row["us_per_token"], ".2f"),
                                                      format(row["mib_per_1k_tokens"], ".3f"),
                                                      format(row["mem_mib"], ".1f")]
        assert row["us_per_token"] == 1e3 * row["ms"] / row["seq_len"]
        assert row["mib_per_1k_tokens"] == row["mem_mib"] * 1e3 / row["seq_len"]
        assert row["params"] > 0 and "skipped" not in row
        assert ("attn" in row) == (row["model"] == "transformer")
    assert {m: [format(f["ms"], ".1f"), format(f["mem_mib"], ".1f")] for m, f in record["floors"].items()} == floors
    assert all(f["seq_len"] == 8 for f in record["floors"].values())
    for model, g in record["growth"].items():
        assert (g["from"], g["to"]) == (16, 32)
        keys = ("time_per_token", "memory_per_token", "net_time", "net_memory")
        assert growth[model] == [shown(g[k], ".2f") for k in keys]
        by_length = {r["seq_len"]: r for r in record["rows"] if r["model"] == model}
        assert g["time_per_token"] == (by_length[32]["ms"] / 32) / (by_length[16]["ms"] / 16)

    how, meta = record["how"], record["meta"]
    assert how["device"].split()[0] in ("cpu", "cuda") and (how["threads"], how["reps"], how["batch"]) == (1, 1, 1)
    assert (how["d_model"], how["layers"], how["vocab"]) == (64, 2, 1000)
    assert how["torch"] and how["memory"].endswith(", MiB") and "forward + backward" in how["timed"]
    assert f"memory: {how['memory']}" in done.stdout  # the script's own words
    assert meta["versions"]["lightning_bench"] and "commit" in meta["git"] and meta["created_utc"]
    assert meta["argv"] == [*COMMAND[1:], "--out", str(out)] and meta["command"].startswith("python benchmarks/")

    before = out.read_bytes(), out.stat().st_mtime_ns
    again = scaling(out)
    assert again.returncode == 2 and again.stdout == ""  # refused before the device probe or any measurement
    assert again.stderr.count("\n") == 1 and again.stderr.startswith("scaling.py: error: --out ")
    assert "exists" in again.stderr and "Traceback" not in again.stderr
    assert (out.read_bytes(), out.stat().st_mtime_ns) == before
