#!/usr/bin/env bash
# SmolLM2-135M-Instruct, prompted, on the shared samples of GLUE, SuperGLUE, SQuAD v2 and MMLU
# (docs/downstream.md has the figures this printed). Usage:
#   bash benchmarks/downstream_smollm2.sh SMOLLM2_DIR [RESULTS_DIR]
# Each command adds its benchmarks to RESULTS_DIR/hf-<model>_downstream.json (the k-shot runs go to
# their own results dirs, since a re-run of the same tasks replaces them). ~1 h on 2 CPU cores.
set -euo pipefail
MODEL=${1:?give the SmolLM2 folder made by ../shared/scripts/smollm2.sh}
OUT=${2:-benchmark_results/downstream_smollm2}
DATA=${LB_SHARED_DIR:-../shared}/data
run() { lightning_bench test --model hf --model.pretrained "$MODEL" --data.data_dir "$DATA" \
          --trainer.enable_progress_bar false "$@"; }
run --task glue --results_dir "$OUT"
run --task superglue --data.max_samples 1000 --results_dir "$OUT"
run --task squad_v2 --data.max_samples 500 --results_dir "$OUT"
# 2-shot (shots drawn from the other questions of the sample: the offline files have no train split)
run --task squad_v2 --data.max_samples 500 --data.num_fewshot 2 --data.fewshot_source eval --results_dir "$OUT/squad_v2_2shot"
run --task mmlu --results_dir "$OUT"
run --task mmlu --data.num_fewshot 5 --data.max_samples 20 --results_dir "$OUT/mmlu_5shot"
python benchmarks/summarize_downstream.py "$OUT"/*_downstream.json "$OUT"/squad_v2_2shot/*_downstream.json \
    "$OUT"/mmlu_5shot/*_downstream.json
