#!/usr/bin/env bash
# Re-runs the published figures that do not depend on timing, with the code of CHECKOUT, into OUT, so a
# refactor can be compared with the code before it (benchmarks/compare_figures.py BEFORE AFTER):
#   bash benchmarks/figures_unchanged.sh CHECKOUT OUT [step ...]     # steps: all (default) or some of
#   ppl sst2 squad_v2 task_h2o stream_h2o sweep downstream ruler
# CHECKOUT is a git worktree of the code to run (its configs too); the model is SmolLM2-135M-Instruct
# ($LB_SMOLLM2_DIR, from ../shared/scripts/smollm2.sh). Every step writes into its own folder of OUT and
# is skipped when that folder has its done marker, so an interrupted run resumes. The commands use the
# spellings older checkouts know (`--output`, `--sparsity`, `--out`): newer code takes them with a note.
set -euo pipefail
code=$(cd "${1:?checkout folder}" && pwd); out=$(mkdir -p "${2:?output folder}" && cd "$2" && pwd); shift 2
shared=${LB_SHARED_DIR:-$(cd "$code/../shared" && pwd)}
model=${LB_SMOLLM2_DIR:-$HOME/.cache/lightning_bench/smollm2-135m-instruct}
steps=${*:-all}
export LB_SMOLLM2_DIR=$model OMP_NUM_THREADS=${THREADS:-1}
# the checkout's package, not the installed one; run from the checkout so its configs are the ones read
lb() { (cd "$code" && PYTHONPATH="$code" python -m lightning_bench.cli "$@"); }
step() {
  local name=$1; shift
  [[ $steps == all || " $steps " == *" $name "* ]] || return 0
  [[ -e $out/$name/.done ]] && { echo "$name: done before"; return 0; }
  mkdir -p "$out/$name"; echo "$name: $(date -u +%T)"
  "$@" > "$out/$name/log.txt" 2>&1 || { echo "$name failed: $out/$name/log.txt" >&2; tail -5 "$out/$name/log.txt" >&2; return 1; }
  touch "$out/$name/.done"
}
data_ruler=$out/ruler_data
step ppl lb test --config configs/test/smollm2_wikitext2.yaml --model.pretrained "$model" \
  --data.eval_max_documents 3 --data.seq_len 1024 --bits 32 --results_dir "$out/ppl"
step sst2 lb test --model hf --model.pretrained "$model" --task glue/sst2 --data.data_dir "$shared/data" \
  --data.max_samples 500 --results_dir "$out/sst2"
step squad_v2 lb test --model hf --model.pretrained "$model" --task squad_v2 --data.data_dir "$shared/data" \
  --data.max_samples 20 --results_dir "$out/squad_v2"
step task_h2o lb test --model hf --model.pretrained "$model" --task squad_v2 --data.data_dir "$shared/data" \
  --data.max_samples 10 --sparsity h2o --sparsity.ratio 0.5 --results_dir "$out/task_h2o"
step stream_h2o lb test --config configs/test/smollm2_wikitext2.yaml --model.pretrained "$model" \
  --data.eval_max_documents 1 --data.seq_len 256 --sparsity h2o --sparsity.ratio 0.5 --sparsity.chunk_size 16 \
  --results_dir "$out/stream_h2o"
step sweep lb sweep --config configs/perplexity/quick_test.yaml --output "$out/sweep/quick_test.json"
step downstream lb downstream --config configs/downstream/quick_test.yaml --data_dir "$shared/data" \
  --results_dir "$out/downstream"
# one cell of the measured RULER grid (measurements/long_context/cells), recomputed from freshly generated data
ruler() {
  # the measured grid's depths were drawn: a generator that stratifies them by default is asked to draw
  local drawn=(); lb generate_ruler --help 2>&1 | grep -q -- "--depths" && drawn=(--depths drawn)
  lb generate_ruler --tokenizer "$model" --out "$data_ruler/ruler" --lengths 4096 --num_samples 10 \
    --haystack essay --essay "$shared/data/pg19" --tasks niah_single_1 "${drawn[@]}"
  lb downstream --config configs/downstream/long_context.yaml --data_dir "$data_ruler" --results_dir "$out/ruler" \
    --tasks '[ruler/niah_single_1]' --methods '[h2o]' --sparsity '[0.5]' --protocols '[query_aware]'
}
step ruler ruler
echo "figures in $out"
