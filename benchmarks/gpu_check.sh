#!/usr/bin/env bash
# The GPU check (docs/gpu.md): every figure of issue 28 item 4 in one JSON, in under 8 minutes on one H100.
#
#   bash benchmarks/gpu_check.sh --out gpu_check.json [--model SMOLLM2_DIR] [--data DATA_ROOT] [--only eval,mfu]
#   bash benchmarks/gpu_check.sh --dry-run --out /tmp/x.json      # CPU, tiny sizes: what the test suite runs
#
# On the GPU machine (no package index there) the kit that benchmarks/gpu_pack.sh made travels as
# .gpu/part1..N (gpu_pack.sh): this script unpacks it into /tmp (the pure-Python packages the image lacks, a slim
# bitsandbytes, the data files, the tokenizer), rebuilds SmolLM2 from the split GGUF, and points the check
# at them. Without .gpu (or with --model / --dry-run) the installed environment and ../shared/data are used.
# Extra arguments go to benchmarks/gpu_check.py (--help lists them).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

extra=()
case " $* " in
  *" --dry-run "* | *" --model "* | *" --model="*) ;;   # nothing to unpack
  *)
    if compgen -G ".gpu/part*/manifest.txt" >/dev/null; then
      kit=${LB_GPU_KIT_DIR:-/tmp/lb_gpu_kit}
      mkdir -p "$kit"
      [ -f .gpu/part1/kit.tar.gz ] || { echo "gpu_check: .gpu/part1 is missing (was the machine given back between the calls? docs/gpu.md)" >&2; exit 3; }
      [ -d "$kit/site" ] || tar -xzf .gpu/part1/kit.tar.gz -C "$kit"
      export PYTHONPATH="$kit/site${PYTHONPATH:+:$PYTHONPATH}"
      model="$kit/smollm2-135m-instruct"
      if [ ! -f "$model/model.safetensors" ]; then
        manifest=$(ls .gpu/part*/manifest.txt | head -n 1)
        # the GGUF, reassembled from its chunks in order (part1 holds chunk 0, ...), checked against its sha256
        cat .gpu/part*/smollm2.gguf.* > "$kit/model.gguf"
        want=$(awk '$2 == "model.gguf" {print $1}' "$manifest")
        got=$(sha256sum "$kit/model.gguf" | cut -d' ' -f1)
        if [ "$want" != "$got" ]; then
          echo "gpu_check: the reassembled GGUF does not match its sha256 (a part is missing: $(ls -d .gpu/part* | tr '\n' ' ')); the SmolLM2 sections will fail" >&2
        else
          echo "[gpu_check] dequantizing the SmolLM2 GGUF into $model" >&2
          # as ../shared/scripts/smollm2.sh does (transformers + gguf), then the tokenizer files made here
          if TQDM_DISABLE=1 "$PY" - "$kit" "$model.tmp" <<'EOF'
import shutil, sys, torch
from pathlib import Path
from transformers import AutoModelForCausalLM
kit, dst = Path(sys.argv[1]), sys.argv[2]
model = AutoModelForCausalLM.from_pretrained(kit, gguf_file="model.gguf", dtype=torch.float32)
try:
    model.save_pretrained(dst)
except Exception:  # a GGUF-loaded model may refuse to serialize: rebuild it plainly
    fresh = type(model)(model.config)
    fresh.load_state_dict(model.state_dict())
    fresh.save_pretrained(dst)
for f in (kit / "tokenizer").iterdir():
    shutil.copy(f, dst)
EOF
          then rm -rf "$model" && mv "$model.tmp" "$model"
          else echo "gpu_check: dequantizing the GGUF failed (above); the SmolLM2 sections will fail" >&2
          fi
        fi
        rm -f "$kit/model.gguf"
      fi
      extra=(--model "$model" --data "$kit/data")
    fi
    ;;
esac
exec "$PY" benchmarks/gpu_check.py "$@" ${extra[@]+"${extra[@]}"}
