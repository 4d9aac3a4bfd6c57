#!/usr/bin/env bash
# Which source folders each folder's files include: one line per folder of src/, tests/ and bench/; then the checks
# of docs/design.md's layering: a folder of src/ includes only the folders before it in LAYERS (no arrow runs back
# up), and no header includes itself through others (no file loop). Exits 1 naming each violation.
# A target in CMakeLists.txt links the libraries of the folders listed for it, and no others:
# core tk_core, data tk_data, ops tk_ops (device_info.h, gpu_clocks.h; ops.h and its other host headers are headers
# only), ops/cpu tk_ops_cpu, ops/cuda tk_cuda, backend tk_backend, dist and dist/nccl tk_dist, model tk_model, io
# tk_io, optim tk_optim, plan tk_plan, train tk_train, profile tk_profile, report tk_report; cli is the tokamak
# executable. Run it after adding an include across folders (ctest runs it as include_layers).
set -euo pipefail
cd "$(dirname "$0")/.."

# The layers, lowest first (docs/design.md's table). A folder inside a layer's folder that is no layer itself
# (dist/nccl, data/chat_template) is part of that layer's library: layer_of names it.
LAYERS="core data ops ops/cpu ops/cuda backend dist model io optim plan train profile report cli"
layer_of() {
  local best="" l
  for l in $LAYERS; do
    if [ "$1" = "$l" ] || [ "${1#"$l"/}" != "$1" ]; then [ ${#l} -gt ${#best} ] && best=$l; fi
  done
  echo "${best:-$1}"
}

# The folder of every '#include "folder/file.h"' in the given files (ops/cpu and ops/cuda apart from ops).
included_folders() {
  grep -hoE '^#include "[a-z_]+/[a-z_/]*\.[a-z]+"' "$@" | sed -E 's/^#include "//; s#/[^/]*"$##' | sort -u
}

failed=0
for dir in $(for l in $LAYERS; do echo "src/$l"; done | sed 's#^src/dist$#src/dist src/dist/nccl#; s#^src/data$#src/data src/data/chat_template#') \
           tests/cpu tests/dist tests/gpu bench; do
  files=$(find "$dir" -maxdepth 1 -type f \( -name '*.h' -o -name '*.cuh' -o -name '*.cpp' -o -name '*.cu' \))
  self=${dir#src/}
  # A folder including its own headers says nothing about links: dropped.
  deps=$(included_folders $files | { grep -vx "$self" || true; } | tr '\n' ' ')
  printf '%-10s -> %s\n' "$self" "$deps"
  case "$dir" in src/*) ;; *) continue ;; esac
  # Every folder it includes must stand before it in LAYERS (dist/nccl counting as dist).
  layer=$(layer_of "$self")
  below=${LAYERS%% "$layer" *}
  [ "$below" = "$LAYERS" ] && below=${LAYERS% "$layer"}
  for d in $deps; do
    d=$(layer_of "$d")
    [ "$d" = "$layer" ] && continue
    if ! printf ' %s \n' "$below" | grep -q " $d "; then
      echo "include_deps: src/$self includes src/$d, which is not below it in the layers" >&2
      failed=1
    fi
  done
done

# No file loop: the graph of quoted includes between src/ files has no cycle.
if ! python3 - <<'EOF'
import os, re, sys
root = "src"
edges = {}
for folder, _, files in os.walk(root):
    for f in files:
        if not f.endswith((".h", ".cuh", ".cpp", ".cu")):
            continue
        path = os.path.join(folder, f)
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8", errors="replace") as fh:
            edges[rel] = [m for m in re.findall(r'^#include "([^"]+)"', fh.read(), re.M)
                          if os.path.exists(os.path.join(root, m))]
state, stack, loops = {}, [], []
def visit(n):
    state[n] = 1
    stack.append(n)
    for m in edges.get(n, []):
        if state.get(m) == 1:
            loops.append(stack[stack.index(m):] + [m])
        elif m not in state:
            visit(m)
    stack.pop()
    state[n] = 2
sys.setrecursionlimit(10000)
for n in sorted(edges):
    if n not in state:
        visit(n)
for loop in loops:
    print("include_deps: a file loop: " + " -> ".join(loop), file=sys.stderr)
sys.exit(1 if loops else 0)
EOF
then
  failed=1
fi
exit $failed
