#!/usr/bin/env bash
# Which source folders each folder's files include: one line per folder of src/, tests/ and bench/.
# A target in CMakeLists.txt links the libraries of the folders listed for it, and no others:
# core tk_core, data tk_data, model tk_model, io tk_io, train tk_train, report tk_report, ops/cpu tk_ops_cpu,
# ops/cuda tk_cuda, dist and dist/nccl tk_dist; ops tk_ops (backend.h, device_info.h; ops.h and its other host
# headers are headers only); cli is the tokamak executable.
# Run it after adding an include across folders.
set -euo pipefail
cd "$(dirname "$0")/.."

# The folder of every '#include "folder/file.h"' in the given files (ops/cpu and ops/cuda apart from ops).
included_folders() {
  grep -hoE '^#include "[a-z_]+/[a-z_/]*\.[a-z]+"' "$@" | sed -E 's/^#include "//; s#/[^/]*"$##' | sort -u
}

for dir in src/core src/data src/model src/ops src/ops/cpu src/ops/cuda src/io src/dist src/dist/nccl src/train \
           src/report src/cli tests/cpu tests/dist tests/gpu bench; do
  files=$(find "$dir" -maxdepth 1 -type f \( -name '*.h' -o -name '*.cuh' -o -name '*.cpp' -o -name '*.cu' \))
  self=${dir#src/}
  # A folder including its own headers says nothing about links: dropped.
  printf '%-10s -> %s\n' "$self" "$(included_folders $files | { grep -vx "$self" || true; } | tr '\n' ' ')"
done
