#!/usr/bin/env bash
# The side-by-side benchmark, one call on a GPU machine: builds tokamak, measures the GEMM and copy
# ceilings and the PyTorch peer (torch.compile) and tokamak on the same shapes, and prints a table
# with the ratios. Usage: bench/run.sh [configs] [peer-modes]; needs the peer script in .shared/.
# TK_BENCH_FLAGS adds flags to tokamak's runs (e.g. "--logits-chunk 1024"); tokamak runs each config in bf16 and
# again with --fp8 (FP8 linears, delayed scaling) and with --fp8 --fp8-scaling current, unless NO_FP8=1 (PRECS picks
# among bf16, fp8, fp8c and fp8h: --fp8 --fp8-lm-head). CONFIG_FLAGS adds flags to one config's tokamak runs only, e.g.
# CONFIG_FLAGS="qwen2.5-0.5b=--logits-chunk 2048;llama3.2-1b=--moments bf16".
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/bench-out}
mkdir -p "$OUT"
CONFIGS=${1:-qwen2.5-0.5b,llama3.2-1b,qwen2.5-1.5b}
MODES=${2:-compile}
STEPS=${STEPS:-10}
BUILD=build-gpu
source tests/gpu/env.sh
if [ ! -x $BUILD/tokamak ] || [ -n "${REBUILD:-}" ]; then
  cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release $TK_CMAKE_ARGS > "$OUT/bench-cmake.log" 2>&1
  ninja -C $BUILD -j16 tokamak > "$OUT/bench-build.log" 2>&1 || { tail -30 "$OUT/bench-build.log"; exit 1; }
fi
: > "$OUT/tokamak.jsonl"
for c in ${CONFIGS//,/ }; do
  # Same shapes as the peer: micro-batch 8 x 2048 (16 x 1024 for the GPT-2-sized model).
  B=8; T=2048
  cflags=()
  IFS=';' read -ra entries <<< "${CONFIG_FLAGS:-}"
  for e in "${entries[@]}"; do [ "${e%%=*}" = "$c" ] && read -ra cflags <<< "${e#*=}"; done
  [ "$c" = gpt2s-llama ] && { B=16; T=1024; }
  # bf16, then (unless NO_FP8 is set) the same with the linear layers' GEMMs in FP8.
  # fp8c: FP8 with current scaling (--fp8-scaling current); fp8h: the LM head's GEMMs in FP8 too (--fp8-lm-head).
  precs=${PRECS:-"bf16 fp8 fp8c"}; [ -n "${NO_FP8:-}" ] && precs=bf16
  for prec in $precs; do
    flags=(); [ "$prec" = fp8 ] && flags=(--fp8); [ "$prec" = fp8c ] && flags=(--fp8 --fp8-scaling current)
    [ "$prec" = fp8h ] && flags=(--fp8 --fp8-lm-head)
    $BUILD/tokamak bench --model "$c" --batch $B --seq $T --steps "$STEPS" --json "${flags[@]}" "${cflags[@]}" ${TK_BENCH_FLAGS:-} \
      2> "$OUT/tokamak-$c-$prec.log" | tee -a "$OUT/tokamak.jsonl" \
      || { echo "{\"config\": \"$c\", \"engine\": \"tokamak $prec\", \"error\": \"tokamak bench failed\"}" >> "$OUT/tokamak.jsonl"; tail -5 "$OUT/tokamak-$c-$prec.log"; }
  done
done
if [ -z "${NO_PEER:-}" ]; then
  PYTHONUNBUFFERED=1 python3 .shared/torch_peer.py --configs "$CONFIGS" --modes "$MODES" --steps "$STEPS" 2> "$OUT/peer.err" | tee "$OUT/peer.jsonl"
fi
python3 bench/compare.py "$OUT/peer.jsonl" "$OUT/tokamak.jsonl" | tee "$OUT/table.md"
