#!/usr/bin/env bash
# The side-by-side benchmark, one call on a GPU machine: builds tokamak (unless build-gpu has it), runs tokamak's
# `bench` and then the PyTorch peer (bench/torch_peer.py: the GEMM and copy ceilings, torch.compile, and torchao's
# float8 training where torchao imports) on the same shapes, and prints the table with each tokamak row's ratio to
# the compiled bf16 peer and to the fastest FP8 peer (bench/compare.py). bench/NOTES.md has the settings.
# Usage: bench/run.sh [configs] [peer-modes]. configs: presets, comma-separated (default qwen2.5-0.5b,llama3.2-1b),
# each at micro-batch 8 x 2048 (gpt2-small-llama 16 x 1024), or BATCH and SEQ for all. peer-modes: by default compile,
# and compile-fp8 where torchao's sources are found (TORCHAO_PATH, default .shared/torchao, or an installed torchao);
# compile-fp8-rowwise on request (slower than tensorwise on every shape measured, and its compilation alone takes
# over 2 minutes). tokamak runs each config in bf16, with --fp8 (FP8 linears, delayed scaling) and with --fp8
# --fp8-lm-head, unless NO_FP8=1 (PRECS picks among bf16, fp8, fp8c: --fp8 --fp8-scaling current, and fp8h; bf16 is
# --precision bf16, since the default, auto, takes FP8 where it pays). The defaults took 331 s of the GPU machine's
# 10 minutes a call on an H100, build included (the peer's compilation most of it: 20-55 s a config in bf16, 60-125 s
# with torchao). With llama3.2-3b too (an H200: 90-95 GiB) about 540 s on a fresh machine, build not included, and
# 229 s once the peer's compile cache is filled (`bench/gpu.sh peercache` in a call before it on the same machine; the
# cache's folder is tests/gpu/env.sh's TORCHINDUCTOR_CACHE_DIR). TK_BENCH_FLAGS adds flags
# to every tokamak run (e.g. "--logits-chunk 1024"), CONFIG_FLAGS to one config's only, e.g.
# CONFIG_FLAGS="qwen2.5-0.5b=--logits-chunk 2048;llama3.2-1b=--moments bf16". NO_PEER=1 skips the peer; STEPS (6)
# timed steps each. PEER_COMPILE_SCOPE=block compiles the peer's blocks apart, as torchtitan does: seconds instead of
# a minute or two a row, but 1.6-2.5% slower steps (0.5B, one H100), so the table's peer is compiled whole (model).
# PEER_MEMORY_PRECS (e.g. "fp8h"): after the peer, those precisions again within the fastest FP8
# peer's peak memory of each config (`bench --memory-budget`: the planner's fastest setting that fits it). Results in $OUT: table.md, tokamak.jsonl, peer.jsonl, and the logs in bench-logs.tgz (inside
# bench/gpu.sh, the logs stay in its folder, which it packs).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/bench-out}
mkdir -p "$OUT"
LOGS=$OUT
if [ -z "${TK_GPU_HARNESS:-}" ]; then
  LOGS=$(mktemp -d)
  trap 'tar czf "$OUT/bench-logs.tgz" -C "$LOGS" . && rm -rf "$LOGS"' EXIT
fi
CONFIGS=${1:-qwen2.5-0.5b,llama3.2-1b}
STEPS=${STEPS:-6}
BUILD=build-gpu
source tests/gpu/env.sh
if [ ! -x $BUILD/tokamak ] || [ -n "${REBUILD:-}" ]; then
  cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release $TK_CMAKE_ARGS > "$LOGS/bench-cmake.log" 2>&1
  ninja -C $BUILD -j16 tokamak > "$LOGS/bench-build.log" 2>&1 || { tail -30 "$LOGS/bench-build.log"; exit 1; }
fi
: > "$OUT/tokamak.jsonl"
# One tokamak row: config $1 in precision $2 (bf16; fp8: the linear layers' GEMMs in FP8; fp8c: FP8 with current
# scaling, --fp8-scaling current; fp8h: the LM head's GEMMs in FP8 too, --fp8-lm-head), with the config's shape and
# CONFIG_FLAGS, and any further flags after them; a failure leaves an error row.
run_tokamak() {
  local c=$1 prec=$2; shift 2
  # Same shapes as the peer's (torch_peer.py's MICRO_BATCH).
  local B=8 T=2048
  [ "$c" = gpt2-small-llama ] && { B=16; T=1024; }
  B=${BATCH:-$B}; T=${SEQ:-$T}
  local cflags=() entries e flags=(--precision bf16)
  IFS=';' read -ra entries <<< "${CONFIG_FLAGS:-}"
  for e in "${entries[@]}"; do [ "${e%%=*}" = "$c" ] && read -ra cflags <<< "${e#*=}"; done
  [ "$prec" = fp8 ] && flags=(--fp8); [ "$prec" = fp8c ] && flags=(--fp8 --fp8-scaling current)
  [ "$prec" = fp8h ] && flags=(--fp8 --fp8-lm-head)
  local log="$LOGS/tokamak-$c-$prec${1:+-budget}.log" began=$SECONDS
  $BUILD/tokamak bench --model "$c" --batch $B --seq $T --steps "$STEPS" --json "${flags[@]}" "${cflags[@]}" "$@" \
    ${TK_BENCH_FLAGS:-} 2> "$log" | tee -a "$OUT/tokamak.jsonl" \
    || { echo "{\"config\": \"$c\", \"engine\": \"tokamak $prec $*\", \"error\": \"tokamak bench failed\"}" >> "$OUT/tokamak.jsonl"; tail -5 "$log"; }
  echo "($c $prec: $((SECONDS - began)) s in all)"
}
for c in ${CONFIGS//,/ }; do
  # bf16, then (unless NO_FP8 is set) FP8.
  precs=${PRECS:-"bf16 fp8 fp8h"}; [ -n "${NO_FP8:-}" ] && precs=bf16
  for prec in $precs; do run_tokamak "$c" "$prec"; done
done
if [ -z "${NO_PEER:-}" ]; then
  # torchao's FP8 where its sources are found (a look, not an import: that would take a Python start with torch,
  # ~10 s); if they then fail to import, the peer's FP8 rows say so.
  MODES=${2:-compile}
  torchao_dir=${TORCHAO_PATH:-.shared/torchao}
  if [ -z "${2:-}" ] && { [ -d "$torchao_dir/torchao/float8" ] ||
    python3 -c "import importlib.util as u, sys; sys.exit(u.find_spec('torchao') is None)" 2> /dev/null; }; then
    MODES=compile,compile-fp8
  fi
  echo "peer: $MODES"
  # One peer process for every config (a Python start with torch takes ~10 s), the table so far printed after each
  # config's last mode: a call cut by its time limit still shows the configs it finished.
  : > "$OUT/peer.jsonl"
  PYTHONUNBUFFERED=1 python3 bench/torch_peer.py --configs "$CONFIGS" --modes "$MODES" --steps "$STEPS" \
    --compile-scope "${PEER_COMPILE_SCOPE:-model}" ${BATCH:+--batch $BATCH} ${SEQ:+--seq $SEQ} 2>> "$LOGS/peer.err" |
    while IFS= read -r row; do
      echo "$row" | tee -a "$OUT/peer.jsonl"
      [[ "$row" == *"\"mode\": \"${MODES##*,}\""* && "$row" != *"\"config\": \"${CONFIGS##*,}\""* ]] &&
        python3 bench/compare.py "$OUT/peer.jsonl" "$OUT/tokamak.jsonl"
    done
  for c in ${CONFIGS//,/ }; do
    [ -n "${PEER_MEMORY_PRECS:-}" ] || break
    budget=$(python3 bench/compare.py --fp8-peer-memory "$c" "$OUT/peer.jsonl")
    [ -n "$budget" ] || { echo "$c: no FP8 peer row, so no run within its memory"; continue; }
    for prec in $PEER_MEMORY_PRECS; do run_tokamak "$c" "$prec" --memory-budget "${budget}GiB"; done
  done
fi
python3 bench/compare.py "$OUT/peer.jsonl" "$OUT/tokamak.jsonl" | tee "$OUT/table.md"
