"""What an offline W&B run holds, read back from its own `.wandb` file: its project, group and job type, every
image (key, caption, whether its PNG is in the run's media folder) and every W&B Table (key, rows, columns).

    python benchmarks/wandb_offline_summary.py WANDB_DIR/wandb/offline-run-DATE-ID

wandb 0.31 ships no Python reader for offline runs (`wandb sync` uploads them, `wandb leet` shows them in a
terminal); the records are parsed with wandb's own protobuf classes by tests/wandb_reader.py, the reader the
tests use.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.wandb_reader import config_history_summary, read_records  # noqa: E402


def summarize(run_dir: Path) -> dict:
    wandb_file = next(run_dir.glob("*.wandb"))
    run = next(r.run for r in read_records(wandb_file) if r.WhichOneof("record_type") == "run")
    _, history, _ = config_history_summary(wandb_file)
    logged = {key: value for row in history for key, value in row.items()}
    files = run_dir / "files"
    images, tables = {}, {}
    for key, value in logged.items():
        name, _, field = key.rpartition("/")
        if field == "_type" and value == "images/separated":
            names = logged.get(f"{name}/filenames", [])
            images[name] = {"caption": (logged.get(f"{name}/captions") or [""])[0],
                            "png_in_run": all((files / n).is_file() for n in names), "files": names}
        elif field == "_type" and value == "table-file":
            table = json.loads((files / logged[f"{name}/path"]).read_text())
            tables[name] = {"rows": len(table["data"]), "columns": table["columns"]}
    return {"run": str(run_dir), "project": run.project, "group": run.run_group, "job_type": run.job_type,
            "images": images, "tables": tables}


def main() -> int:
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print("usage: python benchmarks/wandb_offline_summary.py WANDB_DIR/wandb/offline-run-DATE-ID", file=sys.stderr)
        return 2
    info = summarize(Path(sys.argv[1]))
    print(f"{info['run']}: project {info['project']}, group {info['group']}, job type {info['job_type']}")
    print(f"{len(info['images'])} images:")
    for key, image in info["images"].items():
        print(f"  {key}  (PNG in the run: {image['png_in_run']})  caption: {image['caption'][:100]}")
    print(f"{len(info['tables'])} tables:")
    for key, table in info["tables"].items():
        print(f"  {key}: {table['rows']} rows x {len(table['columns'])} columns ({', '.join(map(str, table['columns']))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
