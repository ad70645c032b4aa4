#!/usr/bin/env bash
# Check the tuner's flag rendering against a really installed SGLang (CPU only).
#
# Creates a venv under ~/.cache/sglang-tuner/ (or reuses it when complete): the CPU build of torch,
# sglang without its dependency tree, and the few packages that
# `sglang.srt.server_args` needs to import. Then runs tests/real_sglang with
# TUNER_SGLANG_PYTHON pointing at it. The tests themselves run in the
# project's own environment (PYTHON, default .venv/bin/python).
#
#   bash scripts/ci_real_sglang.sh            # build or reuse, then test
#   SGLANG_VENV=/tmp/x bash scripts/ci_real_sglang.sh   (default: a venv cached outside the checkout)
set -euo pipefail

cd "$(dirname "$0")/.."
SGLANG_VERSION="${SGLANG_VERSION:-0.5.23}"
VENV="${SGLANG_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/sglang-tuner/venv-sglang-$SGLANG_VERSION}"
PYTHON="${PYTHON:-.venv/bin/python}"
BASE_PYTHON="${BASE_PYTHON:-python3.11}"
STAMP="$VENV/.tuner-complete"

# What ServerArgs imports on CPU, found by importing until it worked (sglang 0.5.23).
# triton is the big one (about 1 GB): sglang.srt.utils.common imports it unconditionally.
LIGHT_DEPS=(
  "numpy==2.4.6" "orjson==3.13.0" "psutil==7.2.2" "pybase64==1.5.1" "requests==2.34.2"
  "triton==3.9.0" "packaging==26.4" "pillow==13.0.0" "starlette==1.10.0" "msgspec==0.23.0"
  "pydantic==2.14.4" "pyzmq==27.3.0" "tqdm==4.70.1" "ipython==9.18.1" "aiohttp==3.14.5"
)
WANT="sglang==$SGLANG_VERSION torch==2.13.0 ${LIGHT_DEPS[*]}"

start=$(date +%s)
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "ci_real_sglang: reusing $VENV (sglang $SGLANG_VERSION)"
else
  echo "ci_real_sglang: building $VENV (sglang $SGLANG_VERSION)"
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$BASE_PYTHON" -m venv "$VENV"
  pip_q=("$VENV/bin/pip" install --quiet --disable-pip-version-check --no-warn-conflicts)
  "${pip_q[@]}" torch==2.13.0             # the CPU wheel on local disk
  "${pip_q[@]}" --no-deps "sglang==$SGLANG_VERSION"
  "${pip_q[@]}" "${LIGHT_DEPS[@]}"
  "$VENV/bin/python" -c "import argparse; from sglang.srt.server_args import ServerArgs; ServerArgs.add_cli_args(argparse.ArgumentParser())"
  echo "$WANT" > "$STAMP"
  echo "ci_real_sglang: built in $(( $(date +%s) - start )) s, $(du -sh "$VENV" | cut -f1)"
fi

TUNER_SGLANG_PYTHON="$(cd "$VENV" && pwd)/bin/python" "$PYTHON" -m pytest tests/real_sglang -q -p no:cacheprovider
echo "ci_real_sglang: done in $(( $(date +%s) - start )) s"
