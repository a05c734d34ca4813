#!/usr/bin/env bash
# One 4k RULER group's wall, two checkouts side by side (one thread each, started together, so both share
# the machine alike): the long_context preset on ruler/niah_single_1, query_aware, the six methods every
# checkout since c279d5e has (dense + streaming_llm, snapkv, tova, knorm, h2o at 0.5 and 0.9: 11 cells, one
# prefill per example), the first SAMPLES examples.
#
#   bash benchmarks/group_wall.sh BEFORE_CHECKOUT DATA [SAMPLES=4] [OUT=/tmp/group_wall] [-- EXTRA downstream options]
#
# BEFORE_CHECKOUT: a git worktree of the older commit; the newer side is this checkout. DATA holds
# ruler/4096/ (generate_ruler, as configs/downstream/long_context.yaml says). Prints each side's
# "11 cells of ... in S s" line and its wall and peak RSS (GNU time). The summaries land in OUT/<side>.log.
set -euo pipefail
BEFORE=$(cd "$1" && pwd); DATA=$(cd "$2" && pwd); SAMPLES=${3:-4}; OUT=${4:-/tmp/group_wall}
shift $(( $# < 4 ? $# : 4 )); [ "${1:-}" = "--" ] && shift
AFTER=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python}
[ -e "$OUT" ] && { echo "group_wall: $OUT exists; give another OUT" >&2; exit 2; }
mkdir -p "$OUT"
side() {  # name checkout
  (cd "$2" && PYTHONPATH="$2" /usr/bin/time -f "$1: wall %e s, peak RSS %M KB" "$PY" -c \
    "import sys; from lightning_bench.cli import main; sys.exit(main())" downstream \
    --config configs/downstream/long_context.yaml --data_dir "$DATA" --results_dir "$OUT" --name "$1" \
    --tasks '[ruler/niah_single_1]' --protocols '[query_aware]' --methods '[dense,streaming_llm,snapkv,tova,knorm,h2o]' \
    --max_samples "$SAMPLES" --threads 1 "${@:3}" > "$OUT/$1.log" 2>&1)
}
side before "$BEFORE" & side after "$AFTER" "$@" & wait
for name in before after; do grep "cells of" "$OUT/$name.log"; tail -n 1 "$OUT/$name.log"; done
