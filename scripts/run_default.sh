#!/usr/bin/env bash
# The main job: set up and build (scripts/setup.sh), prepare the Brown corpus with GPT-2's tokenizer,
# train the default model on it (the "tiny" preset on a CPU, ~6 minutes of training on 2 cores; a
# GPT-2-small-sized Llama when a CUDA GPU is present), then sample from it. Safe to run again: the data
# is prepared once, and each run replaces the previous one in runs/default.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

bash scripts/setup.sh
TK=${TOKAMAK_BUILD_DIR:-$ROOT/build}/tokamak

# A dataset is complete once meta.json exists: prepare writes it last, after every shard.
DATA=data/brown
if [ -f "$DATA/meta.json" ] && grep -q '"format": "tokamak-shards"' "$DATA/meta.json"; then
  echo "run_default: $DATA is already prepared"
else
  "$TK" prepare --tokenizer .cache/gpt2 --input .cache/brown --out "$DATA" --val-fraction 0.02
fi

RUN=runs/default
if [[ "$("$TK" info)" == *cuda* ]] && nvidia-smi -L >/dev/null 2>&1; then
  # GPU: a 124M-parameter model over about 2.5 passes of the corpus (~3.3M tokens, seconds on an H200).
  # 8 x 512 tokens per micro-batch: the validation split of Brown (2 documents) holds one such batch.
  TRAIN=(--model gpt2-small-llama --batch 8 --seq 512 --steps "${STEPS:-800}" --lr 1e-3 --warmup 80
         --eval-every 200 --eval-tokens 4096 --save-every 400)
else
  # CPU: the tiny preset with small steps (4 x 128 tokens) and a high learning rate: 480 steps,
  # ~246K tokens, about 5 minutes at the ~850 tokens/s that 2 cores give.
  TRAIN=(--model tiny --batch 4 --seq 128 --steps "${STEPS:-480}" --lr 3e-3 --warmup 10
         --eval-every 120 --eval-tokens 4096 --save-every 240)
fi
"$TK" train --data "$DATA" --out "$RUN" --overwrite --device auto --min-lr-ratio 0.1 --keep-checkpoints 2 "${TRAIN[@]}"

echo
echo "run_default: a sample from the trained model:"
"$TK" generate --model "$RUN" --prompt "The jury said" --max-new-tokens 60 --temperature 0.8 --top-k 50 --seed 1
echo
echo "run_default: the run directory is $ROOT/$RUN (log.jsonl, config.json, checkpoints step_*)"
