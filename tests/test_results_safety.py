"""No run replaces another's record or checkpoints; `--ckpt_path last` says which run it resumes; an
output that cannot be written fails before the first training step; the screen ends with the figures."""

import hashlib
import json
import os
from pathlib import Path

from lightning_bench.results.naming import RUN_ID
from tests.test_cli import run, tiny_fit_args

STEM = "transformer_tiny_corpus_seq16_bits32"
RUNS = Path("checkpoints") / f"{STEM}_seed1234"


def _fit(corpus, capsys, *extra):
    code, out, err = run(tiny_fit_args(corpus, "--results_dir", "r", *extra), capsys)
    assert code in (0, None), err
    return out, err


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_second_run_keeps_the_first_runs_record_and_checkpoints(tiny_corpus, tmp_path, capsys):
    _fit(tiny_corpus, capsys, "--trainer.max_steps", "4")
    (first,) = (tmp_path / "r").glob(f"{STEM}_*.json")
    first_digest = _digest(first)
    first_ckpts = {p: _digest(p) for p in RUNS.rglob("*.ckpt")}
    assert first_ckpts and all(RUN_ID.fullmatch(p.parent.name) for p in first_ckpts)

    _fit(tiny_corpus, capsys, "--trainer.max_steps", "2")  # a short run of the same configuration
    records = sorted((tmp_path / "r").glob(f"{STEM}_*.json"))
    assert len(records) == 2 and first in records
    assert _digest(first) == first_digest, "the first run's record was rewritten"
    assert {p: _digest(p) for p in first_ckpts} == first_ckpts, "the first run's checkpoints were rewritten"
    second = next(p for p in records if p != first)
    pointer = tmp_path / "r" / f"{STEM}.json"
    assert pointer.resolve() == second.resolve()  # the bare name is the latest run
    latest = json.loads(pointer.read_text())
    assert latest["global_steps"] == 2 and latest["run_id"] == second.stem.removeprefix(STEM + "_")
    assert json.loads(first.read_text())["global_steps"] == 4
    assert len({p.parent for p in RUNS.rglob("last.ckpt")}) == 2  # one checkpoint folder per run
    assert not list(RUNS.rglob("last-v*.ckpt"))  # Lightning's versioned names mean a shared folder
    assert len(list(Path("logs", STEM).iterdir())) == 2  # and one log folder per run, named by its id


def test_ckpt_path_last_resumes_the_newest_run_and_names_it(tiny_corpus, tmp_path, capsys):
    _fit(tiny_corpus, capsys, "--trainer.max_steps", "2")
    _fit(tiny_corpus, capsys, "--trainer.max_steps", "3")
    # the second run, named by its own record (two runs can start within one second: ids then tie on time)
    newest = next(p.parent for p in RUNS.rglob("last.ckpt")
                  if p.parent.name == json.loads((tmp_path / "r" / f"{STEM}.json").read_text())["run_id"])
    out, err = _fit(tiny_corpus, capsys, "--trainer.max_steps", "5", "--ckpt_path", "last")
    assert f"--ckpt_path last: resuming run {newest.name} ({newest / 'last.ckpt'}, step 3)" in err
    record = json.loads((tmp_path / "r" / f"{STEM}.json").read_text())
    assert record["meta"]["resumed_from"]["run_id"] == newest.name
    assert record["meta"]["resumed_from"]["step"] == 3 and record["global_steps"] == 5
    assert len(list(RUNS.iterdir())) == 3  # the resumed run writes its own checkpoints
    code, _, err = run(["validate", *tiny_fit_args(tiny_corpus)[1:], "--results_dir", "r", "--ckpt_path", "last"],
                       capsys)
    assert code in (0, None), err
    assert "--ckpt_path last: using run " in err  # the run resumed last, now the newest


def test_an_unwritable_results_dir_fails_before_the_first_training_step(tiny_corpus, tmp_path, capsys):
    Path("taken").write_text("a file")
    code, out, err = run(tiny_fit_args(tiny_corpus, "--results_dir", "taken/r"), capsys)
    assert code == 2 and err.strip().splitlines()[-1].startswith("lightning_bench: error: --results_dir taken/r")
    assert not Path("checkpoints").exists() and not Path("logs").exists()  # nothing ran
    code, out, err = run(tiny_fit_args(tiny_corpus, "--trainer.default_root_dir", "/proc/nowhere"), capsys)
    assert code == 2 and "--trainer.default_root_dir /proc/nowhere: cannot write there" in err


def test_the_screen_ends_with_the_runs_figures(tiny_corpus, tmp_path, capsys):
    out, err = _fit(tiny_corpus, capsys, "--trainer.max_steps", "3")
    record = json.loads((tmp_path / "r" / f"{STEM}.json").read_text())
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"fit: final validation perplexity {record['final_perplexity']:.2f}")
    assert "after 3 steps" in last and record["run_id"] in last
    # a fit stopped mid-epoch validates once more: that validation belongs to the epoch it stopped in
    assert [v["epoch"] for v in record["validation_curve"]] == [0]


def test_a_link_is_replaced_atomically_and_copied_where_links_fail(tmp_path, monkeypatch):
    from lightning_bench.results.naming import point_latest

    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text("1")
    b.write_text("2")
    pointer = point_latest(a, tmp_path / "x.json")
    assert pointer.is_symlink() and os.readlink(pointer) == "a.json"  # relative: the folder can move
    point_latest(b, pointer)
    assert pointer.read_text() == "2" and not list(tmp_path.glob(".x.json.*"))

    def no_links(*args):
        raise OSError("links not supported")

    monkeypatch.setattr(os, "symlink", no_links)
    a2, b2 = tmp_path / "x_20261126-102440-a3f9.json", tmp_path / "x_20261126-102441-b3f9.json"
    a2.write_text("1")
    b2.write_text("2")
    point_latest(a2, pointer)
    assert not pointer.is_symlink() and pointer.read_text() == "1"
    point_latest(b2, pointer)  # the copy is a run's: replaced, not kept as a record of its own
    assert pointer.read_text() == "2" and len(list(tmp_path.glob("x_*.json"))) == 2


def test_a_record_and_checkpoint_from_before_run_ids_are_kept_and_resumed(tiny_corpus, tmp_path, capsys):
    _fit(tiny_corpus, capsys, "--trainer.max_steps", "2")
    (run,) = RUNS.iterdir()
    for ckpt in run.iterdir():  # the layout before run ids: checkpoints and record under the bare names
        ckpt.rename(RUNS / ckpt.name)
    run.rmdir()
    record = next((tmp_path / "r").glob(f"{STEM}_2*.json"))
    bare = tmp_path / "r" / f"{STEM}.json"
    bare.unlink()
    record.rename(bare)
    old = bare.read_text()
    out, err = _fit(tiny_corpus, capsys, "--trainer.max_steps", "3", "--ckpt_path", "last")
    assert f"--ckpt_path last: resuming run written before run ids ({RUNS / 'last.ckpt'}, step 2)" in err
    kept = [p for p in (tmp_path / "r").glob(f"{STEM}_*.json") if p.read_text() == old]
    assert len(kept) == 1 and kept[0].name.endswith("-0000.json")  # renamed as a run of its own, not replaced
    assert bare.is_symlink() and json.loads(bare.read_text())["global_steps"] == 3


def test_a_write_that_fails_late_is_one_line_and_leaves_no_partial_file(tiny_corpus, tmp_path):
    """A file size limit (as a full disk) hit while the run saves its checkpoint: one line, no partial file."""
    import resource
    import subprocess
    import sys

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (20 * 1024, 20 * 1024))

    argv = tiny_fit_args(tiny_corpus, "--trainer.max_steps", "2", "--results_dir", "r")
    proc = subprocess.run([sys.executable, "-c", "import sys; from lightning_bench.cli import main; sys.exit(main())",
                           *argv], cwd=tmp_path, capture_output=True, text=True, preexec_fn=limit_file_size,
                          timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[-1] == ("lightning_bench: error: a write failed: File too large; free space (or raise `ulimit -f`) "
                         "and run the same command again")
    assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("*.json"))


def test_a_merged_downstream_file_from_before_run_ids_is_copied_before_a_merge(tmp_path):
    from lightning_bench.results.downstream import DownstreamRecorder

    merged = tmp_path / "m_downstream.json"
    merged.write_text(json.dumps({"model": "m", "runs": {"2026-01-01T00:00:00+00:00-0a1b2c3d": {}}}))
    merged.with_suffix(".samples.jsonl").write_text('{"task": "glue/sst2"}\n')
    recorder = DownstreamRecorder(None, results_dir=str(tmp_path))
    recorder.keep_runs_without_own_file(merged, json.loads(merged.read_text()), "m")
    kept = tmp_path / "m_downstream_before_run_ids.json"
    assert kept.read_text() == merged.read_text()
    assert kept.with_suffix(".samples.jsonl").read_text() == '{"task": "glue/sst2"}\n'
    merged.write_text(json.dumps({"model": "m", "runs": {}}))  # once: a later merge does not copy again
    recorder.keep_runs_without_own_file(merged, {"runs": {"x": {}}}, "m")
    assert json.loads(kept.read_text())["runs"]
