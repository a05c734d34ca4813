"""benchmarks/gpu_check.sh --dry-run: every section of the GPU check through its real code path, on CPU with a
tiny random Llama and tiny sizes, so the script cannot rot between GPU runs (docs/gpu.md); and a failing or
hanging section is recorded as failed while the others run."""

import json
import os
import subprocess
import sys
import tarfile

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.shared_data  # WikiText-2, the PG-19 sample, quick_test's XSum and SQuAD v2 rows
SECTIONS = ["setup", "env", "eval", "mfu", "step_variants", "bnb", "mamba", "eviction", "downstream",
            "attention_sparsity", "attention_ruler", "ruler_v2"]


def gpu_check(shared_data, tmp_path, *extra, inject=""):
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "PYTHON": sys.executable, "LB_GPU_CHECK_INJECT": inject}
    proc = subprocess.run(["bash", str(ROOT / "benchmarks/gpu_check.sh"), "--dry-run", "--out", str(out),
                           "--workdir", str(tmp_path / "work"), "--data", str(shared_data), *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert out.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def test_dry_run_runs_every_section(shared_data, tmp_path):
    proc, report = gpu_check(shared_data, tmp_path)
    sections = report["sections"]
    assert list(sections) == SECTIONS
    failed = {name: s for name, s in sections.items() if s["status"] != "ok"}
    assert not failed and proc.returncode == 0, (failed, proc.stdout[-3000:])
    assert report["dry_run"] and report["revision"]["commit"] and report["versions"]["torch"]

    evaluation = sections["eval"]
    assert set(evaluation["tokens_per_sec"]) == {"cli_fp32", "cli_bf16", "route_fp32", "bare_forward_fp32",
                                                 "plain_loop_fp32"}
    assert all(v > 0 for v in evaluation["tokens_per_sec"].values())
    assert evaluation["max_token_nll_diff_route_vs_plain"] < 1e-3  # the two score the same windows
    mfu = sections["mfu"]
    assert mfu["flops_per_step"] > 0 and mfu["tokens_per_sec"] > 0 and mfu["attn_implementation"] == "sdpa"
    assert mfu["mfu"] is None and mfu["peak_flops"] is None  # no bf16 peak is known for a CPU
    assert mfu["compiled"]["command"].endswith("--compile aot_eager") and mfu["compiled"]["tokens_per_sec"] > 0
    variants = sections["step_variants"]
    assert set(variants["variants"]) == {"eager", "fused"} and variants["flops_per_step"] > 0  # no compile on CPU
    assert all(v["step_s_median"] > 0 and v["mfu"] is None for v in variants["variants"].values())
    for bits in ("bits8", "bits4"):  # the "device" is the CPU here: one run serves both sides
        assert sections["bnb"][bits]["ppl_rel_diff_device_vs_cpu"] == 0.0
        assert sections["bnb"][bits]["tokens_per_sec_x_bf16"] > 0 and sections["bnb"][bits]["tokens_per_sec_x_fp32"] > 0
    assert set(sections["bnb"]["runs"]) == {"dev32", "dev16", "dev8", "dev4", "cpu8", "cpu4"}
    mamba = sections["mamba"]
    assert mamba["max_abs_diff_transformers_device_vs_cpu_scan"] < 1e-4 * max(1.0, mamba["max_abs_logit"])
    eviction = sections["eviction"]
    from lightning_bench.sparsity import METHODS

    assert set(eviction["kept_parity"]) == set(METHODS) == set(eviction["overhead"])
    assert eviction["all_identical"]
    downstream = sections["downstream"]
    assert downstream["cells"] == 6 and downstream["cells_per_hour"] > 0  # 2 tasks x (dense, h2o, cab_v4)
    runs = sections["attention_sparsity"]["runs"]
    assert list(runs) == ["dense", "oracle_topk 10%", "sink+local 10%"]  # the dry run's first three
    assert runs["dense"]["density"] is None and runs["dense"]["ppl"] > 0
    for label in ("oracle_topk 10%", "sink+local 10%"):
        assert 0 < runs[label]["density"] < 1 and runs[label]["attention_error"] > 0 and runs[label]["ppl"] > 0
    ruler = sections["attention_ruler"]["cells"]  # the preset, shrunk to one XSum example on the tiny model
    assert set(ruler) == {"xsum__dense_s0.0_query_agnostic_seed1234", "xsum__h2o_s0.5_query_agnostic_seed1234",
                          "xsum__topk_10_s0.0_query_agnostic_seed1234"}
    assert ruler["xsum__h2o_s0.5_query_agnostic_seed1234"]["attention_error"] > 0
    with tarfile.open(tmp_path / "attention_ruler.tar.gz") as tar:  # the grid's folder, beside the check's JSON
        names = tar.getnames()
    assert "attention_sparsity/attention_sparsity_results.json" in names
    assert "attention_sparsity/cells/xsum__topk_10_s0.0_query_agnostic_seed1234.json" in names
    ruler_v2 = sections["ruler_v2"]
    assert ruler_v2["finished"] and ruler_v2["cells_done"] == 3  # dense + snapkv at 0.5 and 0.9, one protocol
    assert (tmp_path / "ruler_v2_cells.tar.gz").exists()


def test_a_failed_or_timed_out_section_is_recorded_and_the_next_ones_run(shared_data, tmp_path):
    """Bare interpreters (the injections act before any heavy import): the bookkeeping, not the sections."""
    proc, report = gpu_check(shared_data, tmp_path, "--only", "env,mamba", "--isolation", "process",
                             "--limit", "mamba=2", inject="setup:ok,env:fail,mamba:hang")
    sections = report["sections"]
    assert proc.returncode == 1 and list(sections) == ["setup", "env", "mamba"]
    assert sections["setup"]["status"] == "ok"
    assert sections["env"]["status"] == "failed" and "injected failure" in sections["env"]["error"]
    assert sections["mamba"] == {**sections["mamba"], "status": "failed", "error": "timed out after 2 s"}
