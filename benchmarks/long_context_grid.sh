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
# the preset first: options after --config override it; the folders are protocol version 2's (version 1's
# long_context/ and long_context_samples/ are archived and refused by the current command)
run() { lightning_bench downstream --config "$1" --results_dir "$out" --threads "${THREADS:-1}" "${@:2}"; }
# RULER: dense on the 12 tasks first (which can the model do?), then every method on the 7 where SmolLM2's
# dense scored above 20 (docs/long_context.md); another model: read the dense pass's summary and set RULER_TASKS
RULER_TASKS=${RULER_TASKS:-"[ruler/niah_single_1, ruler/niah_single_2, ruler/niah_single_3, ruler/niah_multikey_1,
  ruler/niah_multivalue, ruler/niah_multiquery, ruler/fwe]"}
ruler() { run configs/downstream/long_context.yaml --name long_context_v2 --data_dir "$data" "$@"; }
samples() { run configs/downstream/long_context_samples.yaml --name long_context_samples_v2 "$@"; }
case "$what" in
  ruler)   ruler --methods '[dense]' --protocols '[query_aware]'
           ruler --tasks "$RULER_TASKS" --protocols "[${4:?protocol}]" ;;
  samples) samples --data_dir "$data" --protocols "[${4:?protocol}]" ;;
  report)  ruler --methods '[dense]' --protocols '[query_aware]'   # the dense-only tasks' cells, if missing
           ruler --tasks "$RULER_TASKS"
           samples --data_dir "${4:?shared data folder}"
           for name in long_context_v2 long_context_samples_v2; do
             python benchmarks/downstream_table.py "$out/$name/cells" --compact
           done ;;
  *) echo "long_context_grid.sh: unknown '$what'; use ruler, samples or report" >&2; exit 2 ;;
esac
