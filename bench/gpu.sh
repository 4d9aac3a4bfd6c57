#!/usr/bin/env bash
# The GPU machine's benchmarks and profiles, in one call: build every target for sm_90 (tests/gpu/harness.sh), then
# the steps asked for (default all): kernels (fused-kernel bandwidth), moments (a 1B step with each AdamW moment
# type), profile (tokamak profile of the bench shapes), needless (the advice on a needlessly recomputed run), plan
# (recompute policies and --memory-budget against tokamak plan), budget and seven (--memory-budget runs), eight
# (Llama-3.1-8B on one GPU), docmask (the cost of --doc-mask), chunks (the LM head's logits chunk), gemms (cuBLASLt's
# first choice against its fastest), tuning (the speed of --gemm-tuning), margin (FP8 delayed scaling's margin), ncu
# (every kernel of a step, Nsight Compute), attention (our attention backward against cuDNN's; ATTN_PROFILE=1: its
# stall sampling), kprof (Nsight Compute on the kernels under the kernel bar), bench (tokamak against the PyTorch
# peer: bench/run.sh). Not in the default: peercache (each of bench's peer rows run once, filling the peer's compile
# cache for a bench step in a later call on the same machine). Correctness is tests/gpu/run.sh's. Usage: bench/gpu.sh
# [step,step...]. Logs in $OUT/bench-logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-kernels,moments,profile,needless,plan,budget,seven,eight,docmask,chunks,gemms,tuning,margin,ncu,attention,kprof,bench}
PACK=bench-logs
source tests/gpu/harness.sh
if has kernels && [ -x $BUILD/bench/kernels_bench ]; then
  $BUILD/bench/kernels_bench ${KERNELS:-} > "$OUT/kernels_bench.log" 2>&1; tail -${KERNELS_LINES:-30} "$OUT/kernels_bench.log"
  echo "kernels: $(( $(date +%s) - start ))s"; pack
fi
if has moments; then
  # A 1B model's step time and peak memory with AdamW moments in f32, bf16 and int8.
  for m in f32 bf16 int8; do
    echo "bench llama3.2-1b --moments $m: $($BUILD/tokamak bench --model llama3.2-1b --batch 8 --seq 2048 \
      --device cuda --precision bf16 --moments $m 2>&1 | tail -1)"
  done | tee "$OUT/moments-bench.txt"
  echo "moments: $(( $(date +%s) - start ))s"; pack
fi
if has profile && [ -f data/brown/meta.json ]; then
  # The profile of the benchmark shapes, with the models' own vocabularies (as bench/run.sh's rows have them; Brown's
  # GPT-2 tokens would otherwise give each model their 50,257 and a third to two fifths of its LM head).
  for m in ${PROFILE_MODELS:-qwen2.5-0.5b,llama3.2-1b}; do
    for one in ${m//,/ }; do
      vocab=(); case $one in qwen2.5-*) vocab=(--vocab-size 151936) ;; llama3*) vocab=(--vocab-size 128256) ;; esac
      $BUILD/tokamak profile --data data/brown --model "$one" "${vocab[@]}" --batch 8 --seq 2048 --device cuda \
        ${PROFILE_FLAGS:-} --out "$OUT/profile-$one" > "$OUT/profile-$one.log" 2>&1 || tail -5 "$OUT/profile-$one.log"
      head -60 "$OUT/profile-$one.log" | tail -45
    done
  done
  echo "profile: $(( $(date +%s) - start ))s"; pack
fi
if has needless && [ -f data/brown/meta.json ]; then
  # A run made slow on purpose by needless recompute (block, with most of the GPU free): the advice
  # should name it first.
  $BUILD/tokamak profile --data data/brown --model qwen2.5-0.5b --batch 8 --seq 2048 --device cuda --recompute block \
    --out "$OUT/needless" > "$OUT/needless.log" 2>&1 || tail -5 "$OUT/needless.log"
  grep -iE "step|MFU|recompute" "$OUT/needless.log" | head -12
  sed -n '/dvice/,$p' "$OUT/needless.log" | head -30
  echo "needless: $(( $(date +%s) - start ))s"; pack
fi
if has budget && [ -f data/brown/meta.json ]; then
  # Issue 6's bar: --memory-budget 16GiB against the unconstrained run, same global batch, one call.
  GB=${BUDGET_TOKENS:-262144}
  for m in ${BUDGET_MODELS:-llama3.2-1b,qwen2.5-1.5b}; do
    for one in ${m//,/ }; do
      for flags in "" "--memory-budget ${BUDGET:-16GiB}"; do
        $BUILD/tokamak train --data data/brown --model $one --batch 8 --seq 2048 --batch-tokens $GB --steps ${BUDGET_STEPS:-3} \
          --warmup 1 --eval-tokens 0 --save-every -1 --device cuda $flags ${BUDGET_EXTRA:-} --out /tmp/budget-run --overwrite \
          > "$OUT/budget-$one${flags:+-16}.log" 2>&1 || { tail -4 "$OUT/budget-$one${flags:+-16}.log"; continue; }
        python3 - "$one ${flags:-unconstrained}" /tmp/budget-run/log.jsonl /tmp/budget-run/memory.json <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
mem = json.load(open(sys.argv[3]))
tail = rows[1:] or rows
tps = sum(r["tokens_per_s"] for r in tail) / len(tail)
peak = max(r["memory_bytes"] for r in rows) / 2**30
print(f"{sys.argv[1]:<36} {tps:>9.0f} tok/s  device in use {peak:6.2f} GiB  tokamak holds {mem['total_bytes']/2**30:6.2f} GiB  "
      "losses " + " ".join("%.5f" % r["loss"] for r in rows))
PY
        grep -E "memory budget|predicted" "$OUT/budget-$one${flags:+-16}.log" | head -3
      done
    done
  done | tee "$OUT/budget.txt"
  echo "budget: $(( $(date +%s) - start ))s"; pack
fi
if has eight && [ -f data/brown/meta.json ]; then
  # Llama-3.1-8B on one GPU at sequence 2048 (FP8 with the FP8 LM head, and bf16) and 8192 (FP8), 16,384 tokens a
  # step, bf16 moments, the plan chosen by --memory-budget; tokens/s and MFU of the steps after the first; then the
  # profile of one of them (about 90 s more).
  EIGHT=(train --data data/brown --model llama3.1-8b --vocab-size 128256 --batch-tokens 16384 --memory-budget 136GiB
         --moments bf16 --steps ${EIGHT_STEPS:-6} --warmup 1 --eval-tokens 0 --save-every -1 --device cuda --overwrite)
  for flags in "--seq 2048 --batch 8 --precision fp8 --fp8-lm-head" "--seq 2048 --batch 8 --precision bf16" \
               "--seq 8192 --batch 2 --precision fp8 --fp8-lm-head"; do
    log="$OUT/eight-${flags// /_}.log"
    $BUILD/tokamak "${EIGHT[@]}" $flags --out /tmp/eight-run > "$log" 2>&1 || { tail -4 "$log"; continue; }
    grep -E "memory budget" "$log" | head -1
    python3 - "8B $flags" /tmp/eight-run/log.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l and '"step"' in l]
tail = rows[1:] or rows
tps = sum(r["tokens_per_s"] for r in tail) / len(tail)
mfu = sum(r.get("mfu", 0) for r in tail) / len(tail)
peak = max(r["memory_bytes"] for r in rows) / 2**30
print(f"{sys.argv[1]:<52} {tps:>8.0f} tok/s  MFU {100 * mfu:5.1f}%  device in use {peak:6.2f} GiB")
PY
  done | tee "$OUT/eight.txt"
  # The profile of one of them (EIGHT_PROFILE; "" for none): bf16 by default, the setting furthest below its goal.
  profile=${EIGHT_PROFILE-"--seq 2048 --batch 8 --precision bf16"}
  if [ -n "$profile" ]; then
    $BUILD/tokamak profile --data data/brown --model llama3.1-8b --vocab-size 128256 --batch-tokens 16384 \
      --memory-budget 136GiB --moments bf16 --warmup-steps 1 --measure-steps 2 --device cuda $profile \
      --out "$OUT/profile-eight" > "$OUT/profile-eight.log" 2>&1 || tail -5 "$OUT/profile-eight.log"
    grep -A45 "^profile of" "$OUT/profile-eight.log" | head -60
  fi
  echo "eight: $(( $(date +%s) - start ))s"; pack
fi
if has seven && [ -f data/brown/meta.json ]; then
  # Issue 6's 7B bar: a Qwen2.5-7B shape within 24 GiB (the plan picks gradient offload; bf16 moments keep the
  # pinned host state at 85 GiB of this machine's 128).
  $BUILD/tokamak train --data data/brown --model qwen2.5-7b --batch 8 --seq 2048 --batch-tokens 16384 --steps 3 \
    --warmup 1 --eval-tokens 0 --save-every -1 --device cuda --memory-budget 24GiB --moments ${SEVEN_MOMENTS:-bf16} \
    --out /tmp/seven-run --overwrite > "$OUT/seven.log" 2>&1 || tail -5 "$OUT/seven.log"
  grep -E "memory budget|^step|offload" "$OUT/seven.log" | cut -c1-160
  grep -A22 "memory held" "$OUT/seven.log" | head -24
  echo "seven: $(( $(date +%s) - start ))s"; pack
fi
if has docmask && [ -f data/brown/meta.json ]; then
  # The cost of --doc-mask on the 0.5B bench shape: the same run with and without it (mean of steps 3-6).
  for flags in "" "--doc-mask"; do
    $BUILD/tokamak train --data data/brown --model qwen2.5-0.5b --batch 8 --seq 2048 --steps 6 --warmup 1 \
      --eval-tokens 0 --save-every -1 --device cuda $flags --out /tmp/docmask-run --overwrite > "$OUT/docmask${flags}.log" 2>&1 \
      || { tail -3 "$OUT/docmask${flags}.log"; continue; }
    python3 - "qwen2.5-0.5b ${flags:-causal}" /tmp/docmask-run/log.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
tail = rows[2:]
print(f"{sys.argv[1]:<28} {sum(r['tokens_per_s'] for r in tail) / len(tail):>9.0f} tok/s  losses "
      + " ".join("%.4f" % r["loss"] for r in rows))
PY
  done | tee "$OUT/docmask.txt"
  echo "docmask: $(( $(date +%s) - start ))s"; pack
fi
if has gemms && [ -x $BUILD/bench/gemm_bench ]; then
  # cuBLASLt's first heuristic choice against the fastest of its first 16, for every GEMM of a step.
  $BUILD/bench/gemm_bench ${GEMM_MODELS:-qwen2.5-0.5b llama3.2-1b} > "$OUT/gemm_bench.log" 2>&1; grep -E "^[a-z].*:|^lm_head|^qkv|^gate" "$OUT/gemm_bench.log" | head -40
  echo "gemms: $(( $(date +%s) - start ))s"; pack
fi
if has tuning; then
  # GEMM algorithms chosen by timing (--gemm-tuning), from an empty cache: the 0.5B and 1B bench shapes without,
  # with (timing now) and with again (read from the cache). That tuned runs stay bitwise: tests/gpu/run.sh tuning.
  export XDG_CACHE_HOME=/tmp/tk-tuning-cache; rm -rf $XDG_CACHE_HOME
  for m in ${TUNING_MODELS:-qwen2.5-0.5b llama3.2-1b}; do
    for flags in "--no-gemm-tuning" "--gemm-tuning" "--gemm-tuning"; do
      echo "$m ${flags:-heuristic}: $($BUILD/tokamak bench --model $m --batch 8 --seq 2048 --device cuda --precision bf16 $flags 2>&1 | grep -E "GEMM tuning|tok/s" | tr '\n' ' ')"
    done
  done | tee "$OUT/tuning.txt"
  cp $XDG_CACHE_HOME/tokamak/gemm-algorithms.json "$OUT/" 2>/dev/null; unset XDG_CACHE_HOME
  echo "tuning: $(( $(date +%s) - start ))s"; pack
fi
if has margin; then
  # Delayed scaling's margin (--fp8-margin): step time and the guards' recasts over the bench's timed steps.
  for m in ${MARGIN_MODELS:-qwen2.5-0.5b llama3.2-1b}; do
    for g in 0 1 2; do
      echo "$m --fp8-margin $g: $($BUILD/tokamak bench --model $m --batch 8 --seq 2048 --device cuda --fp8 \
        --fp8-margin $g --json 2>/dev/null | tail -1)"
    done
  done | tee "$OUT/margin.txt"
  echo "margin: $(( $(date +%s) - start ))s"; pack
fi
if has chunks; then
  # The LM head's logits chunk on the 0.5B bench shape (V = 151,936): 512 MiB (the default, 10 chunks of 1,664
  # rows), 1 GiB and 2 GiB: fewer passes over the f32 LM-head gradient and larger GEMMs, for more memory.
  for mib in 512 1024 2048; do
    echo "logits chunk $mib MiB: $($BUILD/tokamak bench --model qwen2.5-0.5b --batch 8 --seq 2048 --device cuda \
      --precision bf16 --logits-chunk $mib 2>&1 | tail -1)"
  done | tee "$OUT/chunks.txt"
  echo "chunks: $(( $(date +%s) - start ))s"; pack
fi
if has plan && [ -f data/brown/meta.json ]; then
  # Recompute policies and --memory-budget on the 1B shape: measured peak and tokens/s against the plan.
  for run in "none" "norm,swiglu" "norm,swiglu,attention,qkv" "block" "budget:28GiB"; do
    if [[ $run == budget:* ]]; then FLAGS=(--memory-budget "${run#budget:}"); else FLAGS=(--recompute "$run"); fi
    $BUILD/tokamak train --data data/brown --model llama3.2-1b --batch 8 --seq 2048 --steps 8 --warmup 2 \
      --eval-tokens 0 --save-every -1 --device cuda "${FLAGS[@]}" --out /tmp/plan-run --overwrite > /tmp/plan-run.log 2>&1 \
      || { tail -3 /tmp/plan-run.log; continue; }
    python3 - "$run" /tmp/plan-run/log.jsonl /tmp/plan-run/memory.json <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
mem = json.load(open(sys.argv[3]))
tail = rows[3:]
tps = sum(r["tokens_per_s"] for r in tail) / len(tail)
peak = max(r["memory_bytes"] for r in rows) / 2**30
print(f"{sys.argv[1]:<28} {tps:>9.0f} tok/s  device in use {peak:6.2f} GiB  tokamak holds {mem['total_bytes']/2**30:6.2f} GiB  "
      f"losses {rows[0]['loss']:.6f} {rows[-1]['loss']:.6f}")
PY
    grep "memory budget" /tmp/plan-run.log
  done | tee "$OUT/plan-measured.txt"
  for r in none norm,swiglu norm,swiglu,attention,qkv block; do
    echo "plan $r: $($BUILD/tokamak plan --model llama3.2-1b --batch 8 --seq 2048 --gpu "NVIDIA H200" --bandwidth 4300 --precision bf16 --logits-chunk 512 --json \
      | python3 -c "import json,sys; j=json.load(sys.stdin); print([round(c['total_bytes']/2**30,2) for c in j['candidates'] if c['recompute']=='$r' and c['micro_batch']==8 and c['offload']=='none'][0], 'GiB', [round(c['predicted_tokens_per_s']) for c in j['candidates'] if c['recompute']=='$r' and c['micro_batch']==8 and c['offload']=='none'][0], 'tok/s')")"
  done | tee -a "$OUT/plan-measured.txt"
  echo "plan: $(( $(date +%s) - start ))s"; pack
fi
if has ncu && command -v ncu >/dev/null; then
  # Every kernel of one Qwen2.5-0.5B step (after one warm-up step), timed by Nsight Compute.
  timeout 240 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
    $BUILD/tokamak bench --model qwen2.5-0.5b --batch 8 --seq 2048 --steps 1 --warmup 1 --device cuda \
    ${NCU_FLAGS:-} > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
  python3 bench/kernel_breakdown.py "$OUT/ncu.csv" --skip "${NCU_SKIP:-half}" > "$OUT/ncu-breakdown.txt" 2>&1
  head -${NCU_LINES:-30} "$OUT/ncu-breakdown.txt"
  echo "ncu: $(( $(date +%s) - start ))s"; pack
fi
if has attention && [ -x $BUILD/bench/attention_bench ]; then
  # One layer's attention backward, ours against cuDNN's (0.5B and 1B shapes); with ATTN_PROFILE=1 also Nsight
  # Compute's source-level stall sampling of ours, summed by bench/ncu_stalls.py.
  timeout 120 $BUILD/bench/attention_bench 20 > "$OUT/attention_bench.log" 2>&1; cat "$OUT/attention_bench.log"
  if [ -n "${ATTN_PROFILE:-}" ] && command -v ncu >/dev/null; then
    timeout 200 ncu --set full --import-source yes -k regex:attention_backward_kernel -s 1 -c 1 -o "$OUT/attn" \
      $BUILD/bench/attention_bench 2 > "$OUT/attn-ncu.log" 2>&1
    ncu -i "$OUT/attn.ncu-rep" --page source --csv --print-source sass > "$OUT/attn-sass.csv" 2>> "$OUT/attn-ncu.log"
    python3 bench/ncu_stalls.py "$OUT/attn-sass.csv" --top ${ATTN_TOP:-20} | tee "$OUT/attn-stalls.txt"
    rm -f "$OUT/attn.ncu-rep"
  fi
  echo "attention: $(( $(date +%s) - start ))s"; pack
fi
if has kprof && command -v ncu >/dev/null && [ -x $BUILD/bench/kernels_bench ]; then
  # Nsight Compute's full sections on one launch of each kernel still under the kernel bar, at kernels_bench's
  # first shape (d = 896): what bounds it (memory throughput, occupancy, stall reasons) before the next rewrite.
  for k in ${KPROF_KERNELS:-rmsnorm_backward_staged_kernel sort_ids_kernel embedding_backward_tile_kernel embedding_backward_join_kernel}; do
    timeout 120 ncu --kernel-name "regex:$k" --launch-skip 3 --launch-count 1 --set full \
      $BUILD/bench/kernels_bench ${KPROF_FAMILIES:-rmsnorm embedding} > "$OUT/kprof-$k.txt" 2>&1
    echo "== $k"
    grep -E "^ +(Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Block Limit|L2 Hit Rate|Eligible Warps|Issued Warp|No Eligible)" \
      "$OUT/kprof-$k.txt" | head -16
    grep -iE "stall|bottleneck|est\. speedup" "$OUT/kprof-$k.txt" | head -6
  done
  echo "kprof: $(( $(date +%s) - start ))s"; pack
fi
if has peercache; then
  # Each of bench's peer rows run once (2 steps), to fill the peer's compile cache: a bench step on the same machine
  # then compiles the peer in about a quarter of the time (the three configs of the README's table: 123 s against
  # 434 s on an H200), which lets that table fit one 10-minute call after this one.
  PYTHONUNBUFFERED=1 python3 bench/torch_peer.py --configs "${BENCH_CONFIGS:-qwen2.5-0.5b,llama3.2-1b}" \
    --modes compile,compile-fp8 --steps 2 --warm 1 --no-ceilings 2> "$OUT/peercache.err" | tee "$OUT/peercache.jsonl" |
    cut -c1-160
  echo "peercache: $(( $(date +%s) - start ))s"; pack
fi
if has bench; then
  bash bench/run.sh "${BENCH_CONFIGS:-qwen2.5-0.5b,llama3.2-1b}"
fi
echo "total: $(( $(date +%s) - start ))s"
