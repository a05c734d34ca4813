"""`lightning_bench downstream --wandb true`, offline: one run (project lightning_bench, group = the
experiment name, job type downstream) holding the cells table, the report's figures of the grid as images
captioned with their provenance (PNGs in the run's media folder) and its tables as W&B Tables whose rows are
the cells; read back from the run's own `.wandb` file. Without --wandb nothing is logged."""

import json

import pytest

from lightning_bench.reports.downstream_builders import Cell, downstream_items
from lightning_bench.reports.figures import Figure
from lightning_bench.reports.wandb_log import cell_value
from tests.test_cli import run
from tests.test_downstream_driver import _args

pytestmark = pytest.mark.shared_data


def test_downstream_wandb_run_holds_the_reports_figures_and_tables(tiny_hf, shared_data, tmp_path, capsys,
                                                                   monkeypatch):
    from tests.wandb_reader import config_history_summary, read_records

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.chdir(tmp_path)  # the default --wandb_dir is relative: nothing may appear here either
    wb = tmp_path / "wb"
    grid = _args(tiny_hf, shared_data, tmp_path / "r", "--tasks", "xsum", "--max_samples", "1", "--methods",
                 "dense", "h2o", "--wandb_dir", str(wb))
    code, _, err = run(grid, capsys)  # without --wandb: no run, no W&B folder
    assert code == 0, err
    assert not wb.exists() and not any(p.name.startswith("wandb") for p in tmp_path.iterdir())

    code, _, err = run([*grid, "--wandb", "true"], capsys)  # the same grid (its cells reused), now logged
    assert code == 0, err
    results_path = tmp_path / "r" / "t" / "t_results.json"
    record = json.loads(results_path.read_text())
    items = downstream_items([Cell(c, _source=str(results_path), _meta=record.get("meta"))
                              for c in record["cells"].values()], "t", str(results_path))
    figures = [i for i in items if isinstance(i, Figure)]
    tables = [i for i in items if not isinstance(i, Figure)]
    assert {f.name for f in figures} == {"t_xsum_score_vs_sparsity", "t_xsum_pareto_kv"}
    assert [t.name for t in tables] == ["t_cells"]

    (run_dir,) = (wb / "wandb").glob("offline-run-*")
    wandb_file = next(run_dir.glob("*.wandb"))
    (run_record,) = [r.run for r in read_records(wandb_file) if r.WhichOneof("record_type") == "run"]
    assert (run_record.project, run_record.run_group, run_record.job_type) == ("lightning_bench", "t", "downstream")
    _, history, _ = config_history_summary(wandb_file)
    logged = {key: value for row in history for key, value in row.items()}
    assert logged["downstream/cells/nrows"] == 2  # the cells table, as before
    assert "downstream/xsum__h2o_s0.5_query_aware_seed1234/rougeL" in logged

    files = run_dir / "files"
    for figure in figures:  # one image each, its provenance the caption, its PNG in the run's media folder
        field = lambda name: logged[f"downstream/{figure.name}/{name}"]  # noqa: E731
        assert field("_type") == "images/separated" and field("captions") == [figure.provenance]
        assert figure.provenance and all((files / name).is_file() for name in field("filenames"))
    assert len(list(files.glob("media/images/downstream/*.png"))) == len(figures)
    for table in tables:  # a W&B Table with the report table's columns, one row per cell
        field = lambda name: logged[f"downstream/{table.name}/{name}"]  # noqa: E731
        assert field("_type") == "table-file" and field("nrows") == len(record["cells"]) == len(table.rows)
        written = json.loads((files / field("path")).read_text())
        assert written["columns"] == table.columns
        assert written["data"] == [[cell_value(v) for v in row] for row in table.rows]
    cells = {(row[0], row[1], row[2]) for row in written["data"]}
    assert cells == {(c["task"], c["compression_protocol"], c["method"]) for c in record["cells"].values()}
