#!/usr/bin/env bash
# The measured grid of docs/long_context.md, one protocol per process (2 cores: run both protocols side by side,
# one thread each), then the combined report. Cells are reused on a rerun, so an interrupted run resumes
# where it stopped. Usage:
#   bash benchmarks/long_context_grid.sh ruler   RULER_DATA RESULTS PROTOCOL   # RULER_DATA holds ruler/4096/
#   bash benchmarks/long_context_grid.sh samples SHARED_DATA RESULTS PROTOCOL  # InfiniteBench passkey + LooGLE
#   bash benchmarks/long_context_grid.sh report  RULER_DATA RESULTS SHARED_DATA  # both protocols, every preset
# RULER_DATA is made by the generate_ruler command at the top of docs/long_context.md.
set -euo pipefail
what=${1:?ruler, samples or report}; data=${2:?data folder}; out=${3:?results folder}
# the preset first: options after --config override it
run() { lightning_bench downstream --config "$1" --results_dir "$out" --threads "${THREADS:-1}" "${@:2}"; }
case "$what" in
  ruler)   run configs/downstream/long_context.yaml --data_dir "$data" --protocols "[${4:?protocol}]" ;;
  samples) run configs/downstream/long_context_samples.yaml --data_dir "$data" --protocols "[${4:?protocol}]" ;;
  report)  run configs/downstream/long_context.yaml --data_dir "$data"
           run configs/downstream/long_context_samples.yaml --data_dir "${4:?shared data folder}"
           for name in long_context long_context_samples; do
             python benchmarks/downstream_table.py "$out/$name/${name}_results.json"
           done ;;
  *) echo "long_context_grid.sh: unknown '$what'; use ruler, samples or report" >&2; exit 2 ;;
esac
