#!/usr/bin/env bash
# Per-task tuning at 90% sparsity on SmolLM2-135M-Instruct (configs/tune/smollm2_90.yaml), then tuned vs default
# on the 40 held-out rows of each task (docs/tuning.md, Measured). Every step resumes where a killed run stopped.
#
#   bash benchmarks/tune_smollm2.sh [STEP ...]    # steps: data tune default tuned table (default: all, in order)
#   LB_TUNE_DATA=DIR LB_TUNE_OUT=DIR ...           # defaults: benchmark_data/tune_smollm2, benchmark_results/tune_smollm2
#
# The data: RULER niah_single_2 at 2k tokens, 40 evaluation rows (seed 42, stratified needle depths) followed by
# 8 tuning rows generated with seed 43 (stratified over 8 depths, in bit-reversed order so that ASHA's first
# rungs of 2 and 4 rows already spread over the depths); SQuAD v2 from ../shared/data (rows 0-39 evaluated,
# 40-47 tuned on). `default` and `tuned` can run at once (two processes); `tuned` needs `tune` done.
set -euo pipefail
cd "$(dirname "$0")/.."
data=${LB_TUNE_DATA:-benchmark_data/tune_smollm2}
out=${LB_TUNE_OUT:-benchmark_results/tune_smollm2}
shared=${LB_SHARED_DIR:-../shared}
model=${LB_SMOLLM2_DIR:-$HOME/.cache/lightning_bench/smollm2-135m-instruct}
ruler=$data/ruler/2048/niah_single_2.jsonl
steps=${*:-data tune default tuned table}

grid=(--model.pretrained "$model" --tasks '[ruler/niah_single_2, squad_v2]' --methods '[h2o, snapkv]'
      --attention_sparsity '{topk: "sink:0.02,local:0.03,oracle_topk:0.05"}' --ratios '[0.9]'
      --protocols '[query_aware]' --max_samples 40 --max_context 2048 --attention_error true --threads 1
      --data_dir "$data" --results_dir "$out")

for step in $steps; do
  case $step in
    data)
      if [ ! -s "$ruler" ]; then
        for seed in 42 43; do
          lightning_bench generate_ruler --tokenizer "$model" --data_dir "$data/src$seed/ruler" --lengths 2048 \
            --num_samples "$([ $seed = 42 ] && echo 40 || echo 8)" --seed $seed --haystack essay \
            --essay "$shared/data/pg19" --tasks niah_single_2
        done
        mkdir -p "$(dirname "$ruler")"
        python - "$data" "$ruler" <<'EOF'
import os, sys
data, out = sys.argv[1:]
evaluation = open(f"{data}/src42/ruler/2048/niah_single_2.jsonl").readlines()
tuning = open(f"{data}/src43/ruler/2048/niah_single_2.jsonl").readlines()
with open(out + ".tmp", "w") as f:
    f.writelines(evaluation + [tuning[i] for i in (0, 4, 2, 6, 1, 5, 3, 7)])
os.replace(out + ".tmp", out)
EOF
      fi
      [ -e "$data/squad_v2.0" ] || ln -s "$(cd "$shared/data/squad_v2.0" && pwd)" "$data/squad_v2.0"
      sha256sum "$ruler" ;;
    tune)  # 3 configs x 2 tasks, 12 trials each (a finished entry is not searched again)
      lightning_bench tune --config configs/tune/smollm2_90.yaml --data_dir "$data" --tuned_configs "$out/tuned"
      lightning_bench tune show "$out/tuned" ;;
    default) lightning_bench downstream "${grid[@]}" --name heldout_default ;;
    tuned) lightning_bench downstream "${grid[@]}" --name heldout_tuned --tuned_configs "$out/tuned" ;;
    table) python benchmarks/tuned_vs_default.py "$out/heldout_default/cells" "$out/heldout_tuned/cells" \
             --tuned_configs "$out/tuned" ;;
    *) echo "tune_smollm2.sh: unknown step $step (data tune default tuned table)" >&2; exit 2 ;;
  esac
done
