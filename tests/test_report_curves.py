"""Fit loss curves in reports: read from the run's CSV log (every logged step, every validation), found through
the record; the record's per-epoch values when no log is found."""

import csv
import json
import shutil
from pathlib import Path

import pytest

from lightning_bench.reports.builders import metrics_csv, trainer_items
from tests.test_cli import QUIET, run


def tiny_fit(tiny_corpus, capsys, root: str) -> tuple[dict, Path]:
    code, _, err = run(["fit", "--model", "transformer", "--model.n_layer", "1", "--model.d_model", "32",
                        "--model.n_head", "2", "--data", "text", "--data.path", str(tiny_corpus), "--data.seq_len",
                        "16", "--data.batch_size", "4", "--trainer.max_steps", "12", "--trainer.log_every_n_steps", "2",
                        "--trainer.val_check_interval", "6", *QUIET, "--results_dir", root,
                        "--trainer.default_root_dir", root], capsys)
    assert code in (0, None), err
    path = next(p for p in Path(root).glob("*.json") if p.stem.count("_") > 3)  # the run's own file
    return json.loads(path.read_text()), path


def test_loss_curve_is_the_csv_log_of_the_fit(tiny_corpus, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    record, path = tiny_fit(tiny_corpus, capsys, "runs")
    log = metrics_csv(record, path)
    assert log is not None and Path(record["logs"]["csv"]) == log  # the record names its log
    rows = list(csv.DictReader(open(log)))
    expected_train = [(int(r["step"]) + 1, float(r["train/loss"])) for r in rows if r.get("train/loss")]
    expected_val = [(int(r["step"]) + 1, float(r["val/loss"])) for r in rows if r.get("val/loss")]
    assert len(expected_train) >= 5 and len(expected_val) == 2  # every 2nd step; validations at steps 6 and 12
    table, curve = trainer_items([(record, path)])
    train, validation = curve.series
    assert list(zip(train.x, train.y)) == expected_train
    assert list(zip(validation.x, validation.y)) == expected_val
    assert curve.xlabel == "optimizer step" and "curves: runs/" in curve.provenance and curve.source == str(path)

    # a record that does not name its log (written before it did) finds it by run id beside the record
    del record["logs"]
    assert metrics_csv(record, path).resolve() == log.resolve()
    # no log anywhere: the record's per-epoch values
    shutil.rmtree(log.parent)
    _, epochs = trainer_items([(record, path)])
    assert epochs.xlabel.startswith("epoch") and epochs.series[0].y == record["epoch_losses"]


def test_ruler_length_heatmap_takes_each_cell_score_at_its_length():
    """Cells of two grids (4096 and 8192): per method a heatmap of level x length; a task at one length has none."""
    import copy

    from lightning_bench.reports.downstream_builders import Cell, length_items
    from tests.test_report import grid_cells

    cells = []
    for length, scores in ((4096, (50.0, 40.0)), (8192, (30.0, 10.0))):
        for cell, score in zip(copy.deepcopy(grid_cells()), scores):
            cell["protocol"]["data"]["split"] = str(length)
            cell["metrics"]["string_match"] = score
            cells.append(Cell(cell, _source=f"grid{length}"))
    (figure,) = length_items(cells, "all")
    assert figure.name.startswith("all_") and figure.name.endswith("_ruler_niah_single_1_h2o_length_heatmap")
    assert not figure.warning
    assert figure.heatmap == {"rows": ["dense", "0.5 query_aware"], "cols": ["4096", "8192"],
                              "values": [[50.0, 30.0], [40.0, 10.0]]}
    assert length_items(cells[:2], "one") == []
    # another model's cells never share the heatmap; the same model measured twice keeps the first, says so
    other = copy.deepcopy(cells[2:])
    for cell in other:
        cell["protocol"]["model"] = {"pretrained": "/models/other-360m"}
        cell["metrics"]["string_match"] = 99.0
    (again,) = length_items(cells + other, "all")
    assert again.heatmap == figure.heatmap
    (twice,) = length_items(cells + copy.deepcopy(cells[2:]), "all")
    assert twice.heatmap == figure.heatmap and twice.warning == "2 cells measured twice: the first read is shown"


def test_a_report_stopped_halfway_leaves_nothing_under_its_name(tmp_path, capsys, monkeypatch):
    """The folder is written whole beside the target and renamed into place: a failure while drawing leaves
    neither a half report nor the hidden partial folder, and the same command then succeeds."""
    from lightning_bench.reports import report
    from tests.test_report import write_inputs

    inputs = write_inputs(tmp_path)
    drawn, original = [], report.render

    def render_then_fail(figure, folder, formats):
        drawn.append(figure.name)
        if len(drawn) == 2:
            raise OSError("disk full (injected)")
        return original(figure, folder, formats)

    monkeypatch.setattr(report, "render", render_then_fail)
    with pytest.raises(OSError, match="injected"):
        run(["report", *inputs, "-o", str(tmp_path / "out")], capsys)
    assert len(drawn) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grid", "runs", "sweep.json"]  # no out, no partial
    monkeypatch.setattr(report, "render", original)
    code, out, err = run(["report", *inputs, "-o", str(tmp_path / "out")], capsys)
    assert code == 0, err
    assert (tmp_path / "out" / "report.html").is_file() and "wrote" in out


def test_the_current_folder_is_refused_as_the_report_folder(tmp_path, capsys, monkeypatch):
    from tests.test_report import write_inputs

    inputs = write_inputs(tmp_path / "in")
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    code, _, err = run(["report", *inputs, "-o", "."], capsys)
    assert code == 2 and "-o .: the current folder; name a new folder" in err
    assert not list((tmp_path / "here").iterdir())


def test_svg_false_writes_png_only_and_the_page_links_no_svg(tmp_path, capsys):
    from tests.test_report import write_inputs

    code, _, err = run(["report", *write_inputs(tmp_path), "-o", str(tmp_path / "out"), "--svg", "false"], capsys)
    assert code == 0, err
    figures = tmp_path / "out" / "figures"
    assert list(figures.glob("*.png")) and not list(figures.glob("*.svg"))
    assert ".svg" not in (tmp_path / "out" / "report.md").read_text()
