"""Figures and tables of what a model costs:

  scaling       per `benchmarks/scaling.py --out` record: time per token vs sequence length and memory per
                1k tokens vs sequence length, one line per model (BK / Mamba / Transformer), log length axis;
                a table of every (model, length) with each model's floor row, and a table of the growth ratios
  quantization  over the fit / validate / test records (results/recorder.py): per (model, data, stage) run at
                two or more `--bits`, a table bits -> scheme, ppl, size, tokens/s, time; one figure of ppl vs
                model size across those groups, each point labelled by its bits
"""

from __future__ import annotations

from pathlib import Path

from lightning_bench.reports.figures import Figure, Series, Table, warnings_of
from lightning_bench.reports.provenance import file_safe, provenance
from lightning_bench.reports.records import _sparsity


def _blank(value):
    return "" if value is None else value


def _joined(lines) -> str:
    lines = list(dict.fromkeys(line for line in lines if line))
    return " | ".join(lines[:3]) + (f" | ... ({len(lines) - 3} more)" if len(lines) > 3 else "")


# ---- scaling (benchmarks/scaling.py --out) --------------------------------------------------------------
GROWTH_COLUMNS = ["model", "from seq_len", "to seq_len", "time/token", "memory/token", "net time", "net memory"]
ROW_COLUMNS = ["model", "seq_len", "ms/fwd+bwd", "us/token", "MiB/1k tokens", "mem MiB", "params", "notes"]


def _scaling_provenance(record: dict, what: str) -> str:
    how, rows = record.get("how") or {}, record["rows"]
    models = list(dict.fromkeys(r["model"] for r in rows))
    width = f"d_model {how.get('d_model')}, {how.get('layers')} layers, vocab {how.get('vocab')}"
    return provenance(record.get("meta"), model=f"{', '.join(models)} ({width})",
                      data=f"random token ids, batch {how.get('batch', 1)}",
                      protocol=f"{what}; {how.get('device')}, torch {how.get('torch')}, threads {how.get('threads')}",
                      n=f"median of {how.get('reps')} timed steps per point")


def _per_length(record: dict, key: str) -> list[Series]:
    """One series per model: (seq_len, row[key]) of the rows measured, in length order."""
    by_model: dict[str, list] = {}
    for row in record["rows"]:
        if "skipped" not in row and row.get(key) is not None:
            by_model.setdefault(row["model"], []).append((row["seq_len"], row[key]))
    return [Series(model, [p[0] for p in sorted(pts)], [p[1] for p in sorted(pts)]) for model, pts in by_model.items()]


def _skipped_warning(record: dict, series: list[Series]) -> str:
    skipped = [f"{r['model']} {r['seq_len']}" for r in record["rows"] if "skipped" in r]
    found = [warnings_of(series), f"not measured: {', '.join(skipped)}" if skipped else ""]
    return "; ".join(w for w in found if w)


def _notes(row: dict, floor: bool = False) -> str:
    if "skipped" in row:
        return f"skipped: {row['skipped']}"
    notes = ["floor (fixed per-call cost)" if floor else "", row.get("mem_note") or "",
             f"attn={row['attn']}" if row.get("attn") else ""]
    return "; ".join(n for n in notes if n)


def _row_cells(row: dict, floor: bool = False) -> list:
    """A table row; a floor row has no per-token columns (the printed table leaves them blank too)."""
    per_token = ["", ""] if floor else [_blank(row.get("us_per_token")), _blank(row.get("mib_per_1k_tokens"))]
    return [row["model"], row["seq_len"], _blank(row.get("ms")), *per_token, _blank(row.get("mem_mib")),
            _blank(row.get("params")), _notes(row, floor)]


def scaling_items(record: dict, path: Path) -> list:
    """Per-token time and memory against sequence length, one line per model; skipped lengths are left out of
    the lines (named on the figure) and listed in the table as skipped."""
    stem = Path(path).stem
    prefix = file_safe(stem if stem.startswith("scaling") else f"scaling_{stem}")
    how = record.get("how") or {}
    time_series, memory_series = _per_length(record, "us_per_token"), _per_length(record, "mib_per_1k_tokens")
    timed, memory = how.get("timed") or "fwd+bwd", how.get("memory") or "memory"
    figures = [Figure(f"{prefix}_time_per_token", "time per token vs sequence length", "sequence length (tokens)",
                      "microseconds per token (fwd+bwd time / seq_len)", time_series,
                      _scaling_provenance(record, f"timed: {timed}"), str(path),
                      _skipped_warning(record, time_series), log_x=True),
               Figure(f"{prefix}_memory_per_1k_tokens", "memory per 1k tokens vs sequence length",
                      "sequence length (tokens)", "MiB per 1k tokens (memory / seq_len x 1000)", memory_series,
                      _scaling_provenance(record, f"memory: {memory}"), str(path),
                      _skipped_warning(record, memory_series), log_x=True)]
    floors = record.get("floors") or {}
    rows = [cells for model in dict.fromkeys(r["model"] for r in record["rows"])
            for cells in ([_row_cells(floors[model], floor=True)] if model in floors else [])
            + [_row_cells(r) for r in record["rows"] if r["model"] == model]]
    both = _scaling_provenance(record, f"timed: {timed}; memory: {memory}")
    growth = [[model, _blank(g.get("from")), _blank(g.get("to")), *(_blank(g.get(k)) for k in
              ("time_per_token", "memory_per_token", "net_time", "net_memory"))]
              for model, g in (record.get("growth") or {}).items()]
    tables = [Table(f"{prefix}_rows", "fwd+bwd cost per model and sequence length", ROW_COLUMNS, rows, both, str(path)),
              Table(f"{prefix}_growth", "growth of per-token cost, longest length / shortest (1.0 = linear in N; "
                    "net: the floor subtracted first)", GROWTH_COLUMNS, growth, both, str(path))]
    return [*figures, *tables]


# ---- quantization (fit / validate / test records at several --bits) ------------------------------------
def _scheme(record: dict) -> str:
    """What `bits` meant for this run: the quantization scheme's name (its text up to the first ':'; the
    record keeps the whole), else fp32 or bf16."""
    quantization, bits = record.get("quantization") or {}, record.get("bits")
    if quantization.get("scheme"):
        return quantization["scheme"].split(":")[0]
    if quantization.get("mode") == "qat":
        return f"quantization-aware training ({bits}-bit fake-quant weights)"
    if bits == 16:
        fp16 = "fp16" in str((record.get("meta") or {}).get("precision") or "")
        return ("fp16 mixed" if fp16 else "bf16 autocast") if record["stage"] == "fit" else "bf16 weights"
    return "fp32" if bits == 32 else ""


def _ppl(record: dict):
    if record.get("status") == "diverged":
        return None
    return record.get("final_perplexity") if record["stage"] == "fit" else (record.get("metrics") or {}).get("ppl")


def _word_ppl(record: dict):
    if record["stage"] == "fit":
        curve = record.get("validation_curve") or [{}]
        return curve[-1].get("word_ppl")
    return (record.get("metrics") or {}).get("word_ppl")


def _group_key(record: dict) -> tuple:
    sparsity = record.get("sparsity") or {}
    # the parameter count (logical: a 4-bit layer counts its weights, not its packed bytes) tells two sizes of
    # one family apart, which model_name ("transformer") does not
    return (record["model_name"], record.get("dataset", ""), record["stage"], record.get("seq_len"),
            _sparsity(sparsity.get("method"), sparsity.get("ratio"), sparsity.get("budget_tokens")),
            (record.get("parameters") or {}).get("total"))


def _groups(records: list[tuple[dict, Path]]) -> dict:
    """(model, data, stage, seq_len, sparsity, parameters) -> its records, bits high to low, newest first within one bits;
    only the groups run at two or more bits."""
    found: dict[tuple, list] = {}
    for record, path in records:
        found.setdefault(_group_key(record), []).append((record, path))
    for group in found.values():
        group.sort(key=lambda rp: (rp[0].get("meta") or {}).get("created_utc") or "", reverse=True)
        group.sort(key=lambda rp: -(rp[0].get("bits") or 0))
    return {key: group for key, group in found.items() if len({r.get("bits") for r, _ in group}) >= 2}


def _group_title(key: tuple, keys: list[tuple]) -> str:
    model, data, stage, seq_len, sparsity, parameters = key
    lengths = {k[3] for k in keys if k[:3] == key[:3]}
    sizes = {k[5] for k in keys if k[:3] == key[:3]}
    extra = [f"seq_len {seq_len}" if len(lengths) > 1 else "", f"sparsity {sparsity}" if sparsity else "",
             f"{parameters:,} parameters" if len(sizes) > 1 and parameters else ""]
    return f"{model} on {data} ({stage}{''.join(f', {e}' for e in extra if e)})"


def _quant_provenance(group: list) -> list[str]:
    """One provenance line per record of the group (equal lines once, when joined)."""
    lines = []
    for record, _ in group:
        meta = record.get("meta") or {}
        protocol = meta.get("evaluation_protocol") or {}
        lines.append(provenance(meta, model=record["model_name"], data=record.get("dataset", ""),
                                data_block=meta.get("data"),
                                protocol=" ".join(f"{k}={protocol[k]}" for k in ("name", "window", "stride")
                                                  if k in protocol)))
    return lines


def _quant_row(record: dict, path: Path, word: bool) -> list:
    fit, ratio = record["stage"] == "fit", (record.get("model_size") or {}).get("ratio")
    ppl = "diverged" if record.get("status") == "diverged" else _blank(_ppl(record))
    return [record.get("bits"), _scheme(record), ppl, *([_blank(_word_ppl(record))] if word else []),
            _blank(record.get("model_size_mb")), _blank(ratio),
            _blank(record.get("tokens_per_sec") if fit else record.get("scored_tokens_per_sec")),
            _blank(record.get("training_time") if fit else record.get("eval_time")), str(path)]


def _quant_table(key: tuple, title: str, group: list) -> Table:
    word = any(_word_ppl(r) is not None for r, _ in group)
    columns = ["bits", "scheme", "ppl", *(["word ppl"] if word else []), "model size MB",
               "quantized Linear / fp32", "tokens/s", "training time s" if key[2] == "fit" else "eval time s", "file"]
    paths = [p for _, p in group]
    return Table(file_safe(f"quantization_{'_'.join(str(k) for k in key if k not in (None, ''))}"),
                 f"quantization: {title}", columns, [_quant_row(r, p, word) for r, p in group],
                 _joined(_quant_provenance(group)), str(Path(paths[0]).parent) if len(paths) == 1 else
                 "the files in the `file` column")


def _quant_series(title: str, group: list) -> Series:
    """The newest record of each bits (group is newest first within a bits) with a ppl and a size."""
    newest = {}
    for record, _ in group:
        if _ppl(record) is not None and record.get("model_size_mb") is not None:
            newest.setdefault(record.get("bits"), record)
    points = sorted((r["model_size_mb"], _ppl(r), f"{bits}-bit") for bits, r in newest.items())
    return Series(title, [p[0] for p in points], [p[1] for p in points], labels=[p[2] for p in points])


def quantization_items(records: list[tuple[dict, Path]]) -> list:
    """Per (model, data, stage) run at two or more bits: a table of every record; then one figure of ppl vs
    model size, a line per group through the newest record of each bits, each point labelled by its bits."""
    groups = _groups(records)
    keys = list(groups)
    titles = {key: _group_title(key, keys) for key in keys}
    tables = [_quant_table(key, titles[key], group) for key, group in groups.items()]
    series = [s for s in (_quant_series(titles[k], g) for k, g in groups.items()) if s.x]
    if not series:
        return tables
    repeated = [f"{titles[k]} {b}-bit" for k, g in groups.items()
                for b in dict.fromkeys(r.get("bits") for r, _ in g) if sum(r.get("bits") == b for r, _ in g) > 1]
    warning = "; ".join(w for w in (warnings_of(series), f"several runs, the newest drawn: {', '.join(repeated)}"
                                    if repeated else "") if w)
    figure = Figure("quantization_ppl_vs_size", "ppl vs model size (points labelled by bits)",
                    "model size (MB, as stored)", "perplexity", series,
                    _joined(line for g in groups.values() for line in _quant_provenance(g)),
                    "the files in the tables' `file` column", warning)
    return [*tables, figure]
