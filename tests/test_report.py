"""`lightning_bench report`: the figures' data (series, dense line, error bars, heatmap means, warnings)
built from records in the shapes the library writes, and the report folder end to end (pages, figures,
CSVs, the one-line refusals)."""

import csv
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from lightning_bench.reports.builders import sweep_items, trainer_items
from lightning_bench.reports.downstream_builders import Cell, downstream_items
from lightning_bench.reports.figures import Figure, Table
from lightning_bench.reports.report import files_of, gather
from lightning_bench.results.io import write_json_atomic
from tests.test_cli import run
from tests.test_results_table import meta, trainer_record

MEASURED_CELL = (Path(__file__).resolve().parent.parent / "measurements" / "long_context_v2" / "cells"
                 / "ruler-niah_single_1__dense_s0.0_query_aware_seed1234.json")


def sweep_record(methods=("dense", "h2o")) -> dict:
    """A sweep as experiments/sweep writes it: dense at 0 only; h2o at 0, 0.5, 0.9 (L=256) and at 0.9
    over L 128, 256 (the 0.9/256 cell is on both axes)."""
    def cell(length, sparsity, ppl):
        return {"perplexity": ppl, "context_length": length, "sparsity": sparsity, "tokens": 512,
                "tokens_per_second": 40.0, "peak_kv_bytes": 2**20, "method_params": {}}

    results = {"dense": {"sparsity_sweep": {"0.0": cell(256, 0.0, 20.0)},
                         "context_length_sweep": {"128": cell(128, 0.0, 22.0), "256": cell(256, 0.0, 20.0)}},
               "h2o": {"sparsity_sweep": {"0.0": cell(256, 0.0, 20.0), "0.5": cell(256, 0.5, 25.0),
                                          "0.9": cell(256, 0.9, 40.0)},
                       "context_length_sweep": {"128": cell(128, 0.9, 50.0), "256": cell(256, 0.9, 40.0)}}}
    data = {"wikitext2": {"splits": {"test": {"origin": "x", "sha256": "ab" * 32}}}}
    return {"results": {"wikitext2": {m: results[m] for m in methods}},
            "config": {"model": {"class_path": "lightning_bench.models.HFLanguageModel",
                                 "init_args": {"pretrained": "/models/smollm2-135m"}}},
            "grid": {}, "fingerprint": "f", "cells_done": 7, "cells_total": 7, "complete": True,
            "meta": {**meta(5), "data": data, "evaluation_protocol": {"wikitext2": {"name": "token_windows"}}}}


def grid_cells() -> list[dict]:
    """A measured RULER cell cut to 4 examples at depths 10, 10, 50, 90 (dense scores 100, 0, 100, 0), and an
    h2o cell at sparsity 0.5 beside it (scores 0, 0, 100, 100; CI [0, 100], n=4; half the KV bytes)."""
    if not MEASURED_CELL.exists():
        pytest.skip(f"{MEASURED_CELL} is not in this checkout")
    dense = json.loads(MEASURED_CELL.read_text())
    dense["samples"] = [{**dense["samples"][i], "depth": d} for i, d in enumerate([10.0, 10.0, 50.0, 90.0])]
    dense.update(num_examples=4, primary_per_example=[100.0, 0.0, 100.0, 0.0])
    dense["metrics"].update(string_match=50.0, string_match_ci95=[0.0, 100.0])
    h2o = json.loads(json.dumps(dense))
    h2o.update(method="h2o", level=0.5, primary_per_example=[0.0, 0.0, 100.0, 100.0])
    h2o["cache"]["kv_bytes_peak_mean"] = dense["cache"]["kv_bytes_peak_mean"] / 2
    h2o["metrics"]["string_match"] = 50.0
    return [dense, h2o]


def find(items, name):
    return next(i for i in items if i.name == name)


def test_sweep_figures_hold_each_method_and_the_dense_line():
    items = sweep_items(sweep_record(), Path("sweep.json"))
    by_sparsity = find(items, "sweep_wikitext2_ppl_vs_sparsity_L256")
    h2o, dense = by_sparsity.series
    assert (h2o.label, h2o.x, h2o.y, h2o.dashed) == ("h2o", [0.0, 0.5, 0.9], [20.0, 25.0, 40.0], False)
    assert (dense.x, dense.y, dense.dashed) == ([0.0, 0.9], [20.0, 20.0], True)  # across every level
    assert "sha256 abababababab" in by_sparsity.provenance and "512 scored tokens" in by_sparsity.provenance
    by_context = find(items, "sweep_wikitext2_ppl_vs_context")
    assert [(s.label, s.x, s.y) for s in by_context.series] == [
        ("dense", [128, 256], [22.0, 20.0]), ("h2o @ sparsity 0.9", [128, 256], [50.0, 40.0])]
    table = find(items, "sweep_wikitext2_methods")
    assert table.columns == ["method", "L=256 s=0", "L=256 s=0.5", "L=256 s=0.9"]
    assert table.rows == [["dense", 20.0, "", ""], ["h2o", 20.0, 25.0, 40.0]]
    assert not by_sparsity.warning


def test_a_figure_of_one_point_says_so():
    (only_dense, *_) = sweep_items(sweep_record(methods=("dense",)), Path("sweep.json"))
    assert only_dense.warning == "one point"


def test_downstream_figures_error_bars_dense_line_and_few_examples_warning():
    cells = [Cell(c, _source="grid") for c in grid_cells()]
    items = downstream_items(cells, "grid", "grid")
    score = find(items, "grid_ruler_niah_single_1_score_vs_sparsity")
    h2o, dense = score.series
    assert (h2o.label, h2o.x, h2o.y, h2o.low, h2o.high) == ("h2o (query_aware)", [0.5], [50.0], [0.0], [100.0])
    assert (dense.x, dense.y, dense.dashed) == ([0.0, 0.5], [50.0, 50.0], True)
    assert score.warning == "CI from fewer than 10 examples (n=4)"
    pareto = find(items, "grid_ruler_niah_single_1_pareto_kv")
    kv = cells[0]["cache"]["kv_bytes_peak_mean"] / 2**20
    assert {s.label: (s.x, s.y) for s in pareto.series if not s.dashed} == {
        "dense (query_aware)": ([kv], [50.0]), "h2o (query_aware)": ([kv / 2], [50.0])}
    # the h2o cell beats dense (same score, half the memory): the front is that one cell, so no front line
    assert all(not s.dashed for s in pareto.series)
    table = find(items, "grid_cells")
    assert [row[:6] for row in table.rows] == [["ruler/niah_single_1", "query_aware", "dense", 0.0, 50.0, 4],
                                               ["ruler/niah_single_1", "query_aware", "h2o", 0.5, 50.0, 4]]


def test_ruler_heatmap_is_the_mean_score_per_level_and_depth():
    items = downstream_items([Cell(c, _source="grid") for c in grid_cells()], "grid", "grid")
    heatmap = find(items, "grid_ruler_niah_single_1_h2o_depth_heatmap").heatmap
    # dense: depth 10 -> (100 + 0) / 2, 50 -> 100, 90 -> 0; h2o: depth 10 -> (0 + 0) / 2, 50 -> 100, 90 -> 100
    assert heatmap == {"rows": ["dense", "0.5 query_aware"], "cols": ["10", "50", "90"],
                       "values": [[50.0, 100.0, 0.0], [0.0, 100.0, 100.0]]}


def test_ruler_heatmap_reads_the_samples_a_results_cell_leaves_in_its_cell_file(tmp_path):
    """A grid's results file holds no per-example rows (`samples_file` names the cell file that does): the
    heatmap is the same as from the cells themselves; a cell file gone falls back to `metrics.by_depth`."""
    (tmp_path / "cells").mkdir()
    slim = []
    for i, cell in enumerate(grid_cells()):
        (tmp_path / "cells" / f"c{i}.json").write_text(json.dumps(cell))
        slim.append(Cell({k: v for k, v in cell.items() if k != "samples"}, samples_file=f"cells/c{i}.json",
                         _source=str(tmp_path / "grid_results.json")))
    heatmap = find(downstream_items(slim, "grid", "grid"), "grid_ruler_niah_single_1_h2o_depth_heatmap").heatmap
    assert heatmap["values"] == [[50.0, 100.0, 0.0], [0.0, 100.0, 100.0]]
    (tmp_path / "cells" / "c1.json").unlink()  # h2o's rows gone: its row is the cell's by_depth means
    heatmap = find(downstream_items(slim, "grid", "grid"), "grid_ruler_niah_single_1_h2o_depth_heatmap").heatmap
    h2o_row = {col: v for col, v in zip(heatmap["cols"], heatmap["values"][1]) if v is not None}
    assert h2o_row == {f"{float(d):g}": v for d, v in slim[1]["metrics"]["by_depth"].items() if v is not None}
    assert {col: v for col, v in zip(heatmap["cols"], heatmap["values"][0]) if v is not None} == {
        "10": 50.0, "50": 100.0, "90": 0.0}


def test_trainer_table_and_loss_curve():
    fit = trainer_record("fit", "20261101-100000-aaaa", 2, 30.0)
    fit.update(epoch_losses=[4.0, 3.5], epoch_perplexities=[40.0, 30.0])
    test = trainer_record("test", "20261102-100000-bbbb", 3, 31.0)
    table, curve = trainer_items([(fit, Path("fit.json")), (test, Path("test.json"))])
    assert [row[:8] for row in table.rows] == [["test", "transformer", "ptb", 32, "", 31.0, 50.0, 120.0],
                                               ["fit", "transformer", "ptb", 32, "", 30.0, 900.0, 120.0]]
    train, validation = curve.series
    assert (train.x, train.y) == ([1, 2], [4.0, 3.5])
    assert validation.y == pytest.approx([3.6888794541, 3.4011973817])  # ln 40, ln 30


class Page(HTMLParser):
    """The report page's figures (img sources), tables and section headings (h2)."""

    def __init__(self):
        super().__init__()
        self.images, self.tables, self.headings, self._h2 = [], 0, [], False

    def handle_starttag(self, tag, attrs):
        self.images += [dict(attrs)["src"]] if tag == "img" else []
        self.tables += tag == "table"
        self._h2 = tag == "h2"

    def handle_data(self, data):
        if self._h2:
            self.headings.append(data)
            self._h2 = False


def write_inputs(root: Path) -> list[str]:
    write_json_atomic(root / "sweep.json", sweep_record())
    for cell in grid_cells():
        write_json_atomic(root / "grid" / "cells" / f"{cell['method']}.json", cell)
    fit = trainer_record("fit", "20261101-100000-aaaa", 2, 30.0)
    write_json_atomic(root / "runs" / "fit_20261101-100000-aaaa.json", fit)
    return [str(root / "sweep.json"), str(root / "grid"), str(root / "runs")]


def check_written(out: Path, figures: list, tables: list) -> tuple["Page", str]:
    """Every figure as PNG and SVG, every table as its CSV, the HTML page holding each figure and table, the
    Markdown page each figure with its provenance; (the parsed HTML page, the Markdown text)."""
    for figure in figures:
        assert (out / "figures" / f"{figure.name}.png").stat().st_size > 0
        assert (out / "figures" / f"{figure.name}.svg").read_text().lstrip().startswith("<?xml")
    for table in tables:
        with open(out / "tables" / f"{table.name}.csv") as f:
            assert list(csv.reader(f)) == [table.columns, *([str(v) for v in row] for row in table.rows)]
    page = Page()
    page.feed((out / "report.html").read_text())
    assert len(page.images) == len(figures) and page.tables == len(tables)
    text = (out / "report.md").read_text()
    assert all(f"figures/{f.name}.png" in text and f.provenance in text for f in figures)
    return page, text


def test_report_folder_end_to_end(tmp_path, capsys):
    inputs, out = write_inputs(tmp_path), tmp_path / "out"
    code, stdout, err = run(["report", *inputs, "-o", str(out)], capsys)
    assert code == 0, err
    items = [i for _, section in gather(files_of([Path(p) for p in inputs])).sections for i in section]
    figures, tables = [i for i in items if isinstance(i, Figure)], [i for i in items if isinstance(i, Table)]
    # sweep: 2 figures + its table; grid: score, Pareto, one heatmap + its table; fit: loss curve + the table
    assert len(figures) == 6 and len(tables) == 3
    page, text = check_written(out, figures, tables)
    assert all(src.startswith("data:image/png;base64,") for src in page.images)
    assert "](../sweep.json)" in text  # the source, linked relative to the report folder


def test_a_non_empty_report_folder_is_refused_and_kept(tmp_path, capsys):
    inputs = write_inputs(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.md").write_text("mine")
    code, _, err = run(["report", *inputs, "-o", str(tmp_path / "out")], capsys)
    assert code == 2 and err.strip().count("\n") == 0 and "-o" in err and "Traceback" not in err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.md"]


def test_unknown_or_damaged_files_are_one_line_never_a_traceback(tmp_path, capsys):
    inputs = write_inputs(tmp_path)
    (tmp_path / "other.json").write_text('{"something": "else"}')
    (tmp_path / "broken.json").write_text("{not json")
    code, out, err = run(["report", *inputs, str(tmp_path / "other.json"), str(tmp_path / "broken.json"),
                          "-o", str(tmp_path / "out")], capsys)
    assert code == 0 and "Traceback" not in err
    skipped = [line for line in out.splitlines() if line.startswith("skipped")]
    assert len(skipped) == 1 and "other.json" in skipped[0] and "broken.json" in skipped[0]
    code, out, err = run(["report", str(tmp_path / "broken.json"), "-o", str(tmp_path / "none")], capsys)
    assert code == 2 and "Traceback" not in err and err.strip().startswith("lightning_bench: error: report:")
    assert not (tmp_path / "none").exists()


def test_report_wandb_run_holds_every_figure_and_table(tmp_path, capsys, monkeypatch):
    """`report --wandb`, offline: the run's own records (read back from its .wandb file) hold one image per
    figure, captioned with its provenance, and one W&B Table per table, with their files in the run."""
    from tests.wandb_reader import config_history_summary

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    inputs, out = write_inputs(tmp_path), tmp_path / "out"
    code, _, err = run(["report", *inputs, "-o", str(out), "--wandb", "true", "--wandb_dir", str(tmp_path / "wb")],
                       capsys)
    assert code == 0, err
    items = [i for _, section in gather(files_of([Path(p) for p in inputs])).sections for i in section]
    (run_dir,) = (tmp_path / "wb" / "wandb").glob("offline-run-*")
    config, history, _ = config_history_summary(next(run_dir.glob("*.wandb")))
    logged = {key: value for row in history for key, value in row.items()}
    for item in items:  # the run's history holds each value's fields under `report/<name>/<field>`
        field = lambda name: logged[f"report/{item.name}/{name}"]  # noqa: E731
        if isinstance(item, Figure):
            assert field("_type") == "images/separated" and field("captions") == [item.provenance]
        else:
            assert field("_type") == "table-file" and field("ncols") == len(item.columns)
            assert field("nrows") == len(item.rows)
    assert len(list(run_dir.glob("files/media/images/report/*.png"))) == sum(isinstance(i, Figure) for i in items)
    assert config["report"] == str(out)
