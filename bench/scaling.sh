#!/usr/bin/env bash
# Data-parallel scaling, one call on a machine with several GPUs: tokamak `train --gpus 1` and `--gpus N` for each
# ZeRO stage, then the PyTorch peer (bench/torch_peer.py, torch.compile) on 1 GPU and on N with DDP and FSDP2, and
# the table of tokens/s, per-GPU memory and scaling efficiency (rate on N GPUs / (N x rate on 1); bench/scaling.py).
# The global batch grows with N (each GPU keeps its micro-batch), as the peer's does. Carries and settings as
# bench/run.sh's; data/brown is prepared from .cache/ when missing (tokamak trains on its tokens, the peer on random
# ones: the step's work is the same).
# Usage: bench/scaling.sh N [configs] [zero stages]   e.g. bench/scaling.sh 2 llama3.2-1b 0,1,2,3
# PRECS (default "bf16 fp8") picks tokamak's precisions; STEPS (12) steps each, the first 4 not timed.
set -uo pipefail
cd "$(dirname "$0")/.."
N=${1:?usage: bench/scaling.sh N [configs] [zero stages]}
CONFIGS=${2:-llama3.2-1b}
STAGES=${3:-0,1,2,3}
STEPS=${STEPS:-12}
OUT=${OUT:-$PWD/bench-out}
BUILD=build-gpu
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
mkdir -p "$OUT"
source tests/gpu/env.sh
if [ ! -x $BUILD/tokamak ]; then
  cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release $TK_CMAKE_ARGS > "$OUT/scaling-cmake.log" 2>&1
  ninja -C $BUILD -j"$(nproc)" tokamak > "$OUT/scaling-build.log" 2>&1 || { tail -30 "$OUT/scaling-build.log"; exit 1; }
fi
[ -f data/brown/meta.json ] || $BUILD/tokamak prepare --tokenizer .cache/gpt2 --input .cache/brown --out data/brown \
  > "$OUT/scaling-prepare.log" 2>&1
: > "$OUT/scaling-tokamak.jsonl"
for c in ${CONFIGS//,/ }; do
  # The preset's own vocabulary (trained from scratch, a preset would take the data's GPT-2 one).
  vocab=(); case $c in llama3*) vocab=(--vocab-size 128256) ;; qwen2.5*) vocab=(--vocab-size 151936) ;; esac
  for prec in ${PRECS:-bf16 fp8}; do
    for run in 1:0 $(for z in ${STAGES//,/ }; do echo "$N:$z"; done); do
      g=${run%:*}; z=${run#*:}
      # FP8 linears are not implemented with ZeRO 3: that run is bf16's only.
      [ "$prec" = fp8 ] && [ "$z" = 3 ] && continue
      dir=/tmp/scaling-$c-$prec-$g-$z
      # One GPU: the plain run; N: one micro-batch of 8 x 2048 a GPU a step.
      ranks=(); [ "$g" -gt 1 ] && ranks=(--gpus "$g" --zero "$z")
      timeout 900 $BUILD/tokamak train "${ranks[@]}" --model "$c" --data data/brown "${vocab[@]}" \
        --batch 8 --seq 2048 --batch-tokens $((g * 8 * 2048)) --steps "$STEPS" --warmup 2 --eval-tokens 0 \
        --save-every -1 --precision "$prec" \
        --out "$dir" --overwrite > "$OUT/scaling-$c-$prec-$g-$z.log" 2>&1 || tail -4 "$OUT/scaling-$c-$prec-$g-$z.log"
      python3 bench/scaling.py row "$dir" "$c" "$prec" "$g" "$z" >> "$OUT/scaling-tokamak.jsonl"
    done
  done
done
if [ -z "${NO_PEER:-}" ]; then
  : > "$OUT/scaling-peer.jsonl"
  PYTHONUNBUFFERED=1 python3 bench/torch_peer.py --configs "$CONFIGS" --modes compile --steps "$STEPS" --gpus 1 \
    --no-ceilings 2> "$OUT/scaling-peer-1.err" | grep '^{' >> "$OUT/scaling-peer.jsonl"
  PYTHONUNBUFFERED=1 python3 bench/torch_peer.py --configs "$CONFIGS" --modes compile --steps "$STEPS" --gpus "$N" \
    --dist ddp,fsdp --no-ceilings 2> "$OUT/scaling-peer-$N.err" | grep '^{' >> "$OUT/scaling-peer.jsonl"
fi
python3 bench/scaling.py table "$OUT/scaling-tokamak.jsonl" "$OUT/scaling-peer.jsonl" | tee "$OUT/scaling.md"
