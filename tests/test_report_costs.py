"""`lightning_bench report` over cost records: the scaling curves of a `benchmarks/scaling.py --out` record and the
quantization tables of fit / test records run at several `--bits`. The figures' data (series, point labels,
skipped lengths) read back against the records, the `results` row of a scaling record, and one report folder."""

import json
from pathlib import Path

from lightning_bench.reports import records
from lightning_bench.reports.cost_builders import quantization_items, scaling_items
from lightning_bench.reports.figures import Figure, Table
from lightning_bench.reports.report import files_of, gather
from lightning_bench.results.io import write_json_atomic
from tests.test_cli import run
from tests.test_report import check_written
from tests.test_results_table import meta, trainer_record

SCHEME_8 = ("bitsandbytes Linear8bitLt: int8 weights, one absmax scale per output row; at inference the activations "
            "are quantized too, each input row (token) to int8 by its own absmax on every call (LLM.int8() "
            "vector-wise quantization: W8A8, int32 accumulation); threshold 0: no fp16 outlier columns")


def find(items, name):
    return next(i for i in items if i.name == name)


# ---- scaling: the record benchmarks/scaling.py --out writes -------------------------------------------------
def scaling_row(model: str, seq_len: int, ms: float, mem_mib: float, **extra) -> dict:
    return {"model": model, "seq_len": seq_len, "ms": ms, "us_per_token": 1e3 * ms / seq_len, "mem_mib": mem_mib,
            "mib_per_1k_tokens": mem_mib * 1e3 / seq_len, "params": 1000, "times_ms": [ms], **extra}


def scaling_record() -> dict:
    """bk, mamba and the transformer at 512, 1024, 2048; the transformer's 2048 skipped (over the time limit)."""
    rows = [scaling_row("bk", 512, 20.0, 8.0), scaling_row("bk", 1024, 40.0, 16.0), scaling_row("bk", 2048, 80.0, 32.0),
            scaling_row("mamba", 512, 30.0, 10.0), scaling_row("mamba", 1024, 62.0, 20.0),
            scaling_row("mamba", 2048, 130.0, 41.0),
            scaling_row("transformer", 512, 10.0, 6.0, attn="sdpa"),
            scaling_row("transformer", 1024, 30.0, 20.0, attn="sdpa"),
            {"model": "transformer", "seq_len": 2048, "ms": None, "us_per_token": None, "mem_mib": None,
             "mib_per_1k_tokens": None, "params": None, "times_ms": None, "skipped": "exceeded the 120 s limit"}]
    floors = {m: scaling_row(m, 8, 5.0, 4.0) for m in ("bk", "mamba", "transformer")}
    growth = {"bk": {"time_per_token": 1.0, "memory_per_token": 1.0, "net_time": 1.0, "net_memory": 1.0,
                     "from": 512, "to": 2048},
              "mamba": {"time_per_token": 1.0833, "memory_per_token": 1.025, "net_time": 1.12, "net_memory": 1.03,
                        "from": 512, "to": 2048},
              "transformer": {"time_per_token": 1.5, "memory_per_token": 1.67, "net_time": None, "net_memory": 2.0,
                              "from": 512, "to": 1024}}
    how = {"device": "cpu", "torch": "2.13.0+cpu", "threads": 1, "cpus": 2, "load_avg_start": 0.5, "d_model": 64,
           "layers": 2, "vocab": 1000, "batch": 1, "reps": 3, "timeout_s": 120.0, "floor_len": 8,
           "transformer_heads": 4, "memory": "peak RSS increase over post-build RSS, MiB",
           "timed": "one training step's forward + backward (no optimizer step) at batch 1", "wall_s": 60.0}
    argv = ["--seq-lens", "512", "1024", "2048", "--threads", "1", "--out", "scaling.json"]
    return {"kind": "scaling", "rows": rows, "floors": floors, "growth": growth, "how": how,
            "meta": {**meta(6), "command": "python benchmarks/scaling.py " + " ".join(argv), "argv": argv}}


def test_scaling_curves_are_the_per_token_costs_without_the_skipped_length():
    record = scaling_record()
    time, memory, rows, growth = scaling_items(record, Path("scaling.json"))
    measured = [r for r in record["rows"] if "skipped" not in r]
    for figure, key in ((time, "us_per_token"), (memory, "mib_per_1k_tokens")):
        assert figure.log_x and [s.label for s in figure.series] == ["bk", "mamba", "transformer"]
        for series in figure.series:
            mine = [r for r in measured if r["model"] == series.label]
            assert (series.x, series.y) == ([r["seq_len"] for r in mine], [r[key] for r in mine])
        assert figure.warning == "not measured: transformer 2048"
    assert time.series[2].y == [1e3 * 10.0 / 512, 1e3 * 30.0 / 1024]
    assert "peak RSS increase" in memory.provenance and "forward + backward" in time.provenance
    assert "command: python benchmarks/scaling.py" in time.provenance and "git 0123456789" in time.provenance
    assert rows.rows[0] == ["bk", 8, 5.0, "", "", 4.0, 1000, "floor (fixed per-call cost)"]
    assert rows.rows[1] == ["bk", 512, 20.0, 1e3 * 20.0 / 512, 8.0 * 1e3 / 512, 8.0, 1000, ""]
    assert rows.rows[-1] == ["transformer", 2048, "", "", "", "", "", "skipped: exceeded the 120 s limit"]
    assert len(rows.rows) == len(record["rows"]) + len(record["floors"])
    assert growth.rows == [["bk", 512, 2048, 1.0, 1.0, 1.0, 1.0], ["mamba", 512, 2048, 1.0833, 1.025, 1.12, 1.03],
                           ["transformer", 512, 1024, 1.5, 1.67, "", 2.0]]


def test_a_scaling_record_is_one_results_row_per_model(tmp_path):
    write_json_atomic(tmp_path / "scaling.json", scaling_record())
    found, skipped = records.collect([tmp_path])
    assert not skipped
    assert [(r.values["kind"], r.values["model"], r.values["metric"], r.values["value"]) for r in found] == [
        ("scaling", "bk", "us/token @ 2048", "39.062"), ("scaling", "mamba", "us/token @ 2048", "63.477"),
        ("scaling", "transformer", "us/token @ 1024", "29.297")]
    assert found[0].values["cost"] == "2.56e+04 tok/s; mem 32 MiB"


# ---- quantization: fit / test records as ResultsRecorder writes them at --bits 32, 16, 8, 4 -------------------
def quantized(record: dict, bits: int, size_mb: float, ratio=None) -> dict:
    """The fields a run at `bits` adds (a real `test --bits 8` record's keys: QuantizationCallback.record_fields);
    bits 16 only changes `bits` and the size."""
    record.update(bits=bits, model_size_mb=size_mb)
    if bits in (8, 4):
        record["model_size"] = {"total_mb": size_mb, "quantized_linear_mb": 1.0, "fp32_equivalent_linear_mb": 4.0,
                                "other_mb": size_mb - 1.0, "ratio": ratio, "total_ratio": 0.4, "quantized_layers": 4}
        record["quantization"] = {
            "bits": bits, "mode": "lowbit", "path": "fp32_then_export",
            "scheme": SCHEME_8 if bits == 8 else "bitsandbytes Linear4bit nf4: 4-bit NormalFloat weights",
            "kernel": "cpu_int8_exact_sgemm", "quantized_layers": 4, "kept_fp32": {"lm_head": "skip_modules"},
            "act_bits": None, "max_dequant_error": 0.0, "fallback_reason": None, "kernel_calls": {}}
    return record


def quant_records() -> list[tuple[dict, Path]]:
    """transformer on ptb, test at 32, 16, 8, 4 bits (and a second, newer run at 8); its fit at 32 only (no group);
    bk on ptb, fit at 32 and 8."""
    def test(run, day, ppl, bits, size, ratio=None):
        record = quantized(trainer_record("test", run, day, ppl), bits, size, ratio)
        record["metrics"]["word_ppl"] = ppl * 1.5
        return record, Path(f"transformer_ptb_test_{run}.json")

    def fit(run, day, ppl, bits, size, ratio=None):
        record = quantized({**trainer_record("fit", run, day, ppl), "model_name": "bk"}, bits, size, ratio)
        return record, Path(f"bk_ptb_{run}.json")

    return [test("20261101-100000-aa32", 1, 30.0, 32, 10.0), test("20261102-100000-aa16", 2, 30.1, 16, 5.0),
            test("20261103-100000-aaa8", 3, 30.6, 8, 4.0, 0.25), test("20261104-100000-aaa4", 4, 33.0, 4, 3.5, 0.14),
            test("20261105-100000-bbb8", 5, 30.5, 8, 4.0, 0.25),
            (trainer_record("fit", "20261101-100000-ff32", 1, 29.0), Path("transformer_ptb_fit.json")),
            fit("20261101-100000-bk32", 1, 40.0, 32, 12.0), fit("20261102-100000-bkk8", 2, 41.0, 8, 5.0, 0.26)]


def test_quantization_tables_per_group_and_ppl_vs_size_labelled_by_bits():
    items = quantization_items(quant_records())
    test_table, fit_table, figure = items
    assert test_table.title == "quantization: transformer on ptb (test)"
    assert test_table.columns == ["bits", "scheme", "ppl", "word ppl", "model size MB", "quantized Linear / fp32",
                                  "tokens/s", "eval time s", "file"]
    assert [row[:7] for row in test_table.rows] == [
        [32, "fp32", 30.0, 45.0, 10.0, "", 50.0], [16, "bf16 weights", 30.1, 30.1 * 1.5, 5.0, "", 50.0],
        [8, "bitsandbytes Linear8bitLt", 30.5, 45.75, 4.0, 0.25, 50.0],
        [8, "bitsandbytes Linear8bitLt", 30.6, 30.6 * 1.5, 4.0, 0.25, 50.0],
        [4, "bitsandbytes Linear4bit nf4", 33.0, 49.5, 3.5, 0.14, 50.0]]
    assert test_table.rows[2][-2:] == [2.0, "transformer_ptb_test_20261105-100000-bbb8.json"]
    assert fit_table.title == "quantization: bk on ptb (fit)" and "training time s" in fit_table.columns
    assert "word ppl" not in fit_table.columns  # no validation of these fits scored words
    assert [row[:6] for row in fit_table.rows] == [[32, "fp32", 40.0, 12.0, "", 900.0],
                                                   [8, "bitsandbytes Linear8bitLt", 41.0, 5.0, 0.26, 900.0]]
    transformer, bk = figure.series  # the newest run of each bits, by size
    assert (transformer.x, transformer.y, transformer.labels) == (
        [3.5, 4.0, 5.0, 10.0], [33.0, 30.5, 30.1, 30.0], ["4-bit", "8-bit", "16-bit", "32-bit"])
    assert (bk.label, bk.x, bk.y, bk.labels) == ("bk on ptb (fit)", [5.0, 12.0], [41.0, 40.0], ["8-bit", "32-bit"])
    assert figure.warning == "several runs, the newest drawn: transformer on ptb (test) 8-bit"
    assert "protocol: name=token_windows window=16" in figure.provenance


def test_records_at_one_bits_make_no_quantization_section():
    one = [rp for rp in quant_records() if rp[0]["bits"] == 32]
    assert quantization_items(one) == []


# ---- one report folder over both --------------------------------------------------------------------------
def test_report_draws_scaling_and_quantization(tmp_path, capsys):
    write_json_atomic(tmp_path / "in" / "scaling.json", scaling_record())
    for record, path in quant_records():
        write_json_atomic(tmp_path / "in" / "runs" / path.name, record)
    damaged = {**scaling_record(), "rows": [{"model": "bk"}]}  # claims the shape, is not it
    write_json_atomic(tmp_path / "in" / "damaged_scaling.json", damaged)
    out = tmp_path / "out"
    code, stdout, err = run(["report", str(tmp_path / "in"), "-o", str(out)], capsys)
    assert code == 0, err
    skipped = [line for line in stdout.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 1 and "damaged_scaling.json" in skipped[0]
    got = gather(files_of([tmp_path / "in"]))
    headings = [h for h, _ in got.sections]
    assert headings[0].startswith("Scaling") and headings[-1] == "Quantization"
    items = [i for _, section in got.sections for i in section]
    figures, tables = [i for i in items if isinstance(i, Figure)], [i for i in items if isinstance(i, Table)]
    names = {i.name for i in items}
    assert {"scaling_time_per_token", "scaling_memory_per_1k_tokens", "scaling_rows", "scaling_growth",
            "quantization_ppl_vs_size"} <= names
    page, text = check_written(out, figures, tables)
    assert [h for h in page.headings if h.startswith(("Scaling", "Quantization"))] == [headings[0], "Quantization"]
    assert all(t.provenance in text for t in tables)
    assert json.loads((tmp_path / "in" / "scaling.json").read_text())["kind"] == "scaling"
