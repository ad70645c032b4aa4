#!/usr/bin/env bash
# benchmarks/gpu_real_sglang.py on a GPU machine prepared by the shared real-SGLang recipe (its site
# in .dev/: site.tar.xz, whl/, real-sglang/), from the checkout's root, each part within one 10-minute call:
#   bash benchmarks/gpu_real_sglang_recipe.sh a    # bench vs bench_serving + not-enough-memory, capture OOM, unsupported (~6 min)
#   bash benchmarks/gpu_real_sglang_recipe.sh b    # kill -9 of the tuner mid-trial, then resume (~5 min)
# Env: DEADLINE (s, default 570), ROUNDS (bench rounds, 3), TESTS (pytest -k of part a), TUNER_SRC (the
# tuner's source root, default: this checkout). $OUT (default /tmp/rsg/out) gets real-PART.tar.xz.
set -u
PART=${1:-a}
T0=$(date +%s)
REPO=$PWD
SRC=${TUNER_SRC:-$REPO}
OUTD=${OUT:-/tmp/rsg/out}; mkdir -p "$OUTD"
W=/tmp/rsg; CACHE=$W/cache; SITE=$W/site; TSITE=$W/tuner-site; RES=$W/real-$PART
mkdir -p "$SITE" "$TSITE" "$CACHE" "$W/tok" "$RES"
finish() {
  pgrep -fa "sglang" | grep -v pgrep | cut -c1-200 > "$RES/left-procs.txt"
  nvidia-smi > "$RES/nvidia-smi-end.txt" 2>&1
  tar -C "$W" -cf - "real-$PART" 2>/dev/null | xz -T0 -6 > "$OUTD/real-$PART.tar.xz"
  ls -la "$OUTD"
}
trap finish EXIT
if [ ! -f "$SITE/.ok" ]; then
  xz -T0 -dc .dev/site.tar.xz | tar -x -C "$SITE" && touch "$SITE/.ok"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$TSITE" .dev/whl/*.whl 2>&1 | grep -v "root' user"
fi
touch "$W/optb"   # sgl_kernel's AOT norms (the recipe's option B): no flashinfer JIT on the machine
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export TVM_FFI_CACHE_DIR=$CACHE/tvm-ffi TRITON_CACHE_DIR=$CACHE/triton FLASHINFER_WORKSPACE_BASE=$CACHE/flashinfer
export XDG_CACHE_HOME=$CACHE/xdg TORCHINDUCTOR_CACHE_DIR=$CACHE/inductor
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
export PYTHONPATH=$REPO/.dev/real-sglang/optb:$SITE:$TSITE:$SRC
if [ ! -f "$W/tok/tokenizer.json" ]; then   # a Llama-style tokenizer (32000 tokens), made offline
  if [ -f .dev/tok.tar.xz ]; then xz -dc .dev/tok.tar.xz | tar -x -C "$W/tok"
  else python3 .dev/real-sglang/make_tiny.py "$W/tok" --vocab 32000 --no-weights 2>&1 | tail -1; fi
fi
python3 -c "import pytest" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target "$TSITE" .dev/whl-extra/*.whl 2>&1 | tail -2
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader
LEFT=$(( ${DEADLINE:-570} - ($(date +%s) - T0) ))
echo "[$(( $(date +%s) - T0 ))s] setup done; ${LEFT}s left"
cd "$SRC"
if [ "$PART" = a ]; then
  timeout -s INT -k 20 "$LEFT" python3 benchmarks/gpu_real_sglang.py all --tokenizer "$W/tok" --out "$RES" \
    --rounds "${ROUNDS:-3}" --tests "${TESTS:-not kill_9}" ${BENCH_ARGS:-}
else
  timeout -s INT -k 20 "$LEFT" python3 benchmarks/gpu_real_sglang.py all --tokenizer "$W/tok" --out "$RES" \
    --no-bench --tests "kill_9"
fi
echo "rc=$? at $(( $(date +%s) - T0 ))s"
