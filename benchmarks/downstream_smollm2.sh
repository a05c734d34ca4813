#!/usr/bin/env bash
# SmolLM2-135M-Instruct, prompted, on the shared samples of GLUE, SuperGLUE, SQuAD v2 and MMLU
# (docs/downstream.md has the figures this printed). Usage:
#   bash benchmarks/downstream_smollm2.sh SMOLLM2_DIR [RESULTS_DIR] [MAX_SAMPLES]
# MAX_SAMPLES (default 500) caps each task at its first N examples (MMLU: N/25 per subject), so the
# whole script fits ~1 h on 2 CPU cores; `none` scores every example. Each command adds its
# benchmarks to RESULTS_DIR/hf-<model>_downstream.json; the k-shot runs get their own results dirs
# (a re-run of the same tasks would replace the 0-shot entries).
set -euo pipefail
MODEL=${1:?give the SmolLM2 folder made by ../shared/scripts/smollm2.sh}
OUT=${2:-benchmark_results/downstream_smollm2}
N=${3:-500}
DATA=${LB_SHARED_DIR:-../shared}/data
limit() { [ "$N" = none ] && echo "" || echo "--data.max_samples $1"; }
run() { lightning_bench test --model hf --model.pretrained "$MODEL" --data.data_dir "$DATA" \
          --trainer.enable_progress_bar false "$@"; }
MMLU_N=$([ "$N" = none ] && echo none || echo $(( N / 25 > 0 ? N / 25 : 1 )))
run --task glue $(limit "$N") --results_dir "$OUT"
run --task superglue $(limit "$N") --results_dir "$OUT"
run --task mmlu $(limit "$MMLU_N") --results_dir "$OUT"
run --task squad_v2 $(limit $(( ${N/none/6078} * 2 / 5 ))) --results_dir "$OUT"
# k-shot: MMLU from its dev split (the original protocol); SQuAD v2 from the other questions of the
# sample (the offline files have no train split), never from the same passage
run --task mmlu --data.num_fewshot 5 $(limit "$MMLU_N") --results_dir "$OUT/mmlu_5shot"
run --task squad_v2 --data.num_fewshot 2 --data.fewshot_source eval $(limit $(( ${N/none/6078} * 2 / 5 ))) \
    --results_dir "$OUT/squad_v2_2shot"
python benchmarks/summarize_downstream.py "$OUT"/*_downstream.json "$OUT"/mmlu_5shot/*_downstream.json \
    "$OUT"/squad_v2_2shot/*_downstream.json
