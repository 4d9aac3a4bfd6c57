#!/usr/bin/env bash
# Builds tokamak on the GPU machine (sm_90) and runs the GPU tests, then whatever extra steps are
# asked for: `tests/gpu/run.sh [test-regex] [-- extra command...]`. Logs go to $OUT (or ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
REGEX=${1:-.}
BUILD=build-gpu
start=$(date +%s)
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCUDNN_INCLUDE_DIR=/usr/include/x86_64-linux-gnu > "$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
ninja -C $BUILD -j16 > "$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -40; tail -20 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start ))s"
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv,noheader
(cd $BUILD && ctest -L gpu -R "$REGEX" --output-on-failure --timeout 300) 2>&1 | tee "$OUT/gpu-tests.log" | grep -vE "^\[ *(RUN|OK) " | tail -60
echo "total: $(( $(date +%s) - start ))s"
