#!/usr/bin/env bash
# Counting-Stars (English) on SmolLM2-135M-Instruct: 32 stars at nominal lengths 1000..6000 over the offline pg19
# books, dense and three eviction methods at 0.5, query-agnostic (docs/long_context.md). Resumable: cells already
# in measurements/counting_stars_smollm2/ are skipped. LB_CS_DATA sets where the generated rows go.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${LB_CS_DATA:-benchmark_data/counting_stars_smollm2}
SHARED=${LB_SHARED_DIR:-../shared}
[ -f "$DATA/counting_stars/manifest.json" ] || lightning_bench counting_stars_generate --haystack "$SHARED/data/pg19" \
  --lengths 1000 1500 2000 2500 3000 3500 4000 4500 5000 5500 6000 --data_dir "$DATA/counting_stars"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} lightning_bench downstream --config configs/downstream/long_context.yaml \
  --tasks counting_stars --data_dir "$DATA" --methods dense snapkv streaming_llm h2o --ratios 0.5 \
  --protocols query_agnostic --max_context 8192 --results_dir measurements --name counting_stars_smollm2 --threads 1
