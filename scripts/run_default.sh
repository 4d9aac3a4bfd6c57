#!/usr/bin/env bash
# The main job: set up and build (scripts/setup.sh), prepare the Brown corpus, train the default model on
# it, then sample from it. On a GPU: GPT-2's tokenizer and a GPT-2-small-sized Llama. On a CPU: a 4096-token
# byte-level BPE learned from Brown itself (`tokamak train-tokenizer`, about a second) and the tiny preset
# with that vocabulary, ~5 minutes of training on 2 cores. Safe to run again: the tokenizer and the data
# are made once, and each run replaces the previous one in runs/default.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

# The binary this machine runs: CUDA code for its own GPU (all of tokamak's GPU generations take minutes more on a
# few cores), or none where no GPU is visible. The tests and benchmarks are built by scripts/test.sh.
if nvidia-smi -L >/dev/null 2>&1; then
  CUDA_ARGS="-DTOKAMAK_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native"
else
  CUDA_ARGS="-DTOKAMAK_CUDA=OFF"
fi
TOKAMAK_CMAKE_ARGS="$CUDA_ARGS ${TOKAMAK_CMAKE_ARGS:-}" TOKAMAK_BUILD_TARGETS=tokamak bash scripts/setup.sh
TK=${TOKAMAK_BUILD_DIR:-$ROOT/build}/tokamak

# A dataset is complete once meta.json exists: prepare writes it last, after every shard.
prepared() { [ -f "$1/meta.json" ] && grep -q '"format": "tokamak-shards"' "$1/meta.json"; }

if [[ "$("$TK" info)" == *cuda* ]] && nvidia-smi -L >/dev/null 2>&1; then
  GPU=1
  DATA=data/brown
  prepared "$DATA" || "$TK" prepare --tokenizer .cache/gpt2 --input .cache/brown --out "$DATA" --val-fraction 0.02
else
  GPU=
  TOKENIZER=data/brown-bpe4k
  DATA=data/brown-4k
  [ -f "$TOKENIZER/tokenizer.json" ] || "$TK" train-tokenizer --input .cache/brown --vocab-size 4096 --out "$TOKENIZER"
  prepared "$DATA" ||
    "$TK" prepare --tokenizer "$TOKENIZER/tokenizer.json" --input .cache/brown --out "$DATA" --val-fraction 0.02
fi
echo "run_default: data in $DATA"

RUN=runs/default
if [ -n "$GPU" ]; then
  # GPU: a 124M-parameter model over about 2.5 passes of the corpus (~3.3M tokens, seconds on an H200).
  # 8 x 512 tokens per micro-batch; validation reads 4096 tokens of the held-out 2% of Brown (10 documents).
  TRAIN=(--model gpt2-small-llama --batch 8 --seq 512 --steps "${STEPS:-800}" --lr 1e-3 --warmup 80
         --eval-every 200 --eval-tokens 4096 --save-every 400)
else
  # CPU: the tiny preset (4 layers, width 256) with the data's 4096-token vocabulary (a preset takes its data's
  # tokenizer's): 900 steps of 8 x 128 tokens, ~920K tokens (about half the corpus), about 5 minutes at the ~3K
  # tokens/s that 2 cores give.
  TRAIN=(--model tiny --batch 8 --seq 128 --steps "${STEPS:-900}" --lr 3e-3 --warmup 20
         --eval-every 300 --eval-tokens 8192 --save-every 450)
fi
"$TK" train --data "$DATA" --out "$RUN" --overwrite --device auto --min-lr-ratio 0.1 --keep-checkpoints 2 "${TRAIN[@]}"

echo
echo "run_default: a sample from the trained model:"
"$TK" generate --model "$RUN" --prompt "The jury said" --max-new-tokens 60 --temperature 0.8 --top-k 50 --seed 1
"$TK" report "$RUN" > /dev/null
echo
echo "run_default: the run directory is $ROOT/$RUN (log.jsonl, config.json, checkpoints step_*);"
echo "run_default: its report (loss, throughput, memory) is $ROOT/$RUN/report.html"
