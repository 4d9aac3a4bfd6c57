#!/usr/bin/env bash
# Everything that needs the GPU machine, in one call: build tokamak for sm_90, then the steps asked for
# (default all): tests (ctest -L gpu), hf (comparison with transformers), kernels (fused-kernel bandwidth),
# attention (our attention backward against cuDNN's; ATTN_PROFILE=1: its stall sampling), moments (bf16 and
# int8 AdamW moments against f32), fp8head (the LM head in FP8: quality), fixtures (tokenizer fixtures from
# python tokenizers/tiktoken), kprof (Nsight Compute on the kernels under the kernel bar), bench (tokamak vs
# the PyTorch peer). Usage: tests/gpu/run.sh [step,step...] [test-regex]. Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
# Every log goes to $LOGS; at the end they are packed into $OUT/logs.tgz with the few files worth
# looking at beside it (the device tool brings back at most 8 files).
RESULTS=${OUT:-$PWD/gpu-out}
export OUT=/tmp/gpu-logs
rm -rf "$OUT"; mkdir -p "$OUT" "$RESULTS"
pack() {
  # Written aside and renamed, so that a call killed mid-write still brings back the last whole archive.
  tar czf "$RESULTS/logs.tgz.new" -C "$OUT" --exclude='step_*' --exclude='trace.json' --exclude='*.safetensors' \
    --exclude='*.bin' . 2>/dev/null && mv "$RESULTS/logs.tgz.new" "$RESULTS/logs.tgz"
  [ -f "$OUT/gpu-run/report.html" ] && cp "$OUT/gpu-run/report.html" "$RESULTS/report-gpu.html"
}
trap pack EXIT
STEPS=${1:-tests,hf,kernels,attention,curve,moments,fp8,fp8head,margin,report,profile,needless,plan,offload,budget,seven,docmask,chunks,gemms,tuning,ncu,kprof,fixtures,bench}
REGEX=${2:-.}
source tests/gpu/env.sh
BUILD=build-gpu
start=$(date +%s)
has() { [[ ",$STEPS," == *",$1,"* ]]; }
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release $TK_CMAKE_ARGS > "$OUT/cmake.log" 2>&1 \
  || { grep -B2 -A10 "Error" "$OUT/cmake.log" | head -40; exit 1; }
# -k 0: one broken target (say, a CPU test) does not stop the rest from being built and run.
ninja -C $BUILD -j16 -k 0 > "$OUT/build.log" 2>&1 || grep -E "error|FAILED" "$OUT/build.log" | head -20
[ -x $BUILD/tokamak ] || exit 1
echo "build: $(( $(date +%s) - start ))s"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv,noheader
if has tests; then
  (cd $BUILD && ctest -L gpu -R "$REGEX" --output-on-failure --timeout 300) > "$OUT/gpu-tests.log" 2>&1
  grep -E "tests passed|FAILED|Failed|\*\*\*|Expected|Which is|error" "$OUT/gpu-tests.log" | head -40
  echo "tests: $(( $(date +%s) - start ))s"; pack
fi
if has hf; then
  PYTHONUNBUFFERED=1 python3 tests/hf/compare_hf.py --tokamak $BUILD/tokamak > "$OUT/hf.log" 2>&1
  tail -3 "$OUT/hf.log"
  PYTHONUNBUFFERED=1 python3 tests/hf/compare_hf.py --tokamak $BUILD/tokamak --device cuda --tol 2e-2 \
    > "$OUT/hf-cuda.log" 2>&1
  grep -E "FAIL|PASS" "$OUT/hf-cuda.log" | tail -8
  echo "hf: $(( $(date +%s) - start ))s"; pack
fi
if has fixtures && [ -f tests/fixtures/tokenizer/make_fixtures_py.py ]; then
  PYTHONUNBUFFERED=1 python3 tests/fixtures/tokenizer/make_fixtures_py.py --out "$OUT" > "$OUT/fixtures.log" 2>&1
  tail -5 "$OUT/fixtures.log"
fi
if has kernels && [ -x $BUILD/bench/kernels_bench ]; then
  $BUILD/bench/kernels_bench ${KERNELS:-} > "$OUT/kernels_bench.log" 2>&1; tail -${KERNELS_LINES:-30} "$OUT/kernels_bench.log"
  echo "kernels: $(( $(date +%s) - start ))s"; pack
fi
if has curve && [ -f data/brown/meta.json ]; then
  # 300 steps of the tiny model on Brown: CUDA bf16 against the CPU fp32 reference, and CUDA twice.
  CURVE=(train --data data/brown --model tiny --batch 4 --seq 128 --steps 300 --lr 3e-3 --warmup 10
         --eval-every 0 --eval-tokens 0 --save-every 0 --seed 7 --overwrite)
  $BUILD/tokamak "${CURVE[@]}" --device cpu --out "$OUT/curve-cpu" > "$OUT/curve-cpu.log" 2>&1 &
  $BUILD/tokamak "${CURVE[@]}" --device cuda --out "$OUT/curve-cuda" > "$OUT/curve-cuda.log" 2>&1
  $BUILD/tokamak "${CURVE[@]}" --device cuda --out "$OUT/curve-cuda2" > "$OUT/curve-cuda2.log" 2>&1
  wait
  python3 tests/gpu/curve.py "$OUT/curve-cpu" "$OUT/curve-cuda" "$OUT/curve-cuda2" | tee "$OUT/curve.txt" | tail -6
  # The same with document masking (attention within documents, positions restarting at each).
  $BUILD/tokamak "${CURVE[@]}" --doc-mask --device cpu --out "$OUT/curve-doc-cpu" > "$OUT/curve-doc-cpu.log" 2>&1 &
  $BUILD/tokamak "${CURVE[@]}" --doc-mask --device cuda --out "$OUT/curve-doc-cuda" > "$OUT/curve-doc-cuda.log" 2>&1
  $BUILD/tokamak "${CURVE[@]}" --doc-mask --device cuda --out "$OUT/curve-doc-cuda2" > "$OUT/curve-doc-cuda2.log" 2>&1
  wait
  python3 tests/gpu/curve.py "$OUT/curve-doc-cpu" "$OUT/curve-doc-cuda" "$OUT/curve-doc-cuda2" \
    | tee "$OUT/curve-doc.txt" | tail -4
  echo "curve: $(( $(date +%s) - start ))s"; pack
fi
if has moments && [ -f data/brown/meta.json ]; then
  # AdamW moments in bf16 and int8 against f32 on CUDA: 300 steps of the 124M model on Brown (mean loss of the
  # last 50 steps), with a second f32 run from another seed for the spread that a different start gives; then a
  # 1B model's step time and peak memory.
  MOM=(train --data data/brown --model gpt2-small-llama --batch 8 --seq 512 --steps 300 --lr 1e-3 --warmup 20
       --eval-every 0 --eval-tokens 0 --save-every 0 --overwrite --device cuda)
  for m in f32 bf16 int8 f32:8; do
    seed=7; [[ $m == *:* ]] && seed=${m#*:}
    $BUILD/tokamak "${MOM[@]}" --seed $seed --moments ${m%:*} --out "$OUT/moments-$m" > "$OUT/moments-$m.log" 2>&1 \
      || tail -3 "$OUT/moments-$m.log"
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/moments.txt"
import json, sys
def tail_mean(m):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/moments-{m}/log.jsonl")]
    rows = [r for r in rows if "loss" in r and "val_loss" not in r and r.get("type", "train") == "train"]
    return sum(r["loss"] for r in rows[-50:]) / len(rows[-50:])
ref = tail_mean("f32")
for m in ("bf16", "int8", "f32:8"):
    what = "f32, seed 8" if m == "f32:8" else m
    print(f"moments {what}: last 50 steps mean loss {tail_mean(m):.4f} vs f32 {ref:.4f} ({tail_mean(m) - ref:+.4f})")
PY
  for m in f32 bf16 int8; do
    echo "bench llama3.2-1b --moments $m: $($BUILD/tokamak bench --model llama3.2-1b --batch 8 --seq 2048 \
      --device cuda --moments $m 2>&1 | tail -1)"
  done | tee -a "$OUT/moments.txt"
  echo "moments: $(( $(date +%s) - start ))s"; pack
fi
if has report && [ -f data/brown/meta.json ]; then
  # A GPU run for the report: train, then profile into the same run directory, then the page.
  RUN=(--data data/brown --model gpt2-small-llama --batch 8 --seq 512 --lr 1e-3 --warmup 20 --device cuda)
  $BUILD/tokamak train "${RUN[@]}" --steps 120 --eval-every 40 --eval-tokens 4096 --save-every 0 \
    --out "$OUT/gpu-run" --overwrite > "$OUT/gpu-run.log" 2>&1 || tail -5 "$OUT/gpu-run.log"
  grep -A14 "memory held" "$OUT/gpu-run.log" | head -16
  $BUILD/tokamak profile "${RUN[@]}" --out "$OUT/gpu-run" > "$OUT/gpu-run-profile.log" 2>&1 || tail -5 "$OUT/gpu-run-profile.log"
  $BUILD/tokamak report "$OUT/gpu-run" > /dev/null 2>&1 || echo "report failed"
  ls -la "$OUT/gpu-run" | head -20
  echo "report: $(( $(date +%s) - start ))s"; pack
fi
if has profile && [ -f data/brown/meta.json ]; then
  # The profile of the benchmark shapes.
  for m in ${PROFILE_MODELS:-qwen2.5-0.5b,llama3.2-1b}; do
    for one in ${m//,/ }; do
      $BUILD/tokamak profile --data data/brown --model "$one" --batch 8 --seq 2048 --device cuda \
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
if has offload && [ -f data/brown/meta.json ]; then
  # The offloaded optimizer (and gradients) against the on-device ones: same losses, same final weights and
  # state, bitwise. 3 micro-batches a step, so that offloaded gradients go down, up and down again; no
  # clipping, since gradients in host memory get the host's norm (the same sum in another order).
  for o in none optimizer optimizer,gradients; do
    $BUILD/tokamak train --data data/brown --model gpt2-small-llama --batch 8 --seq 512 --batch-tokens 12288 --steps 8 \
      --warmup 2 --grad-clip 0 --eval-tokens 0 --save-every 0 --device cuda --offload $o --offload-chunk 10000000 \
      --out "$OUT/off-$o" --overwrite > "$OUT/off-$o.log" 2>&1 || tail -5 "$OUT/off-$o.log"
  done
  grep -h "^step 8" "$OUT"/off-*.log
  python3 - "$OUT/off-none" "$OUT/off-optimizer" "$OUT/off-optimizer,gradients" <<'PY'
import glob, hashlib, json, os, sys
def losses(d): return [json.loads(l)["loss"] for l in open(d + "/log.jsonl") if '"loss"' in l]
def digests(d):
    ck = sorted(glob.glob(d + "/step_*"))[-1]
    return {os.path.basename(f): hashlib.sha256(open(f, "rb").read()).hexdigest()[:16]
            for f in sorted(glob.glob(ck + "/*")) if not f.endswith(".json")}
a = sys.argv[1]
for b in sys.argv[2:]:
    print(os.path.basename(b), "losses equal:", losses(a) == losses(b), losses(a)[-1], losses(b)[-1])
    da, db = digests(a), digests(b)
    print(os.path.basename(b), "checkpoint files equal:", da == db, da if da != db else "")
PY
  echo "offload: $(( $(date +%s) - start ))s"; pack
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
  # with (timing now) and with again (read from the cache); then two short runs sharing the cache: bitwise equal.
  export XDG_CACHE_HOME=/tmp/tk-tuning-cache; rm -rf $XDG_CACHE_HOME
  for m in ${TUNING_MODELS:-qwen2.5-0.5b llama3.2-1b}; do
    for flags in "--no-gemm-tuning" "--gemm-tuning" "--gemm-tuning"; do
      echo "$m ${flags:-heuristic}: $($BUILD/tokamak bench --model $m --batch 8 --seq 2048 --device cuda $flags 2>&1 | grep -E "GEMM tuning|tok/s" | tr '\n' ' ')"
    done
  done | tee "$OUT/tuning.txt"
  TRAIN=(train --data data/brown --model gpt2-small-llama --batch 8 --seq 512 --steps 30 --warmup 5 --eval-tokens 0
         --save-every 0 --device cuda --gemm-tuning --overwrite)
  rm -rf $XDG_CACHE_HOME
  $BUILD/tokamak "${TRAIN[@]}" --out "$OUT/tune-a" > "$OUT/tune-a.log" 2>&1 || tail -3 "$OUT/tune-a.log"
  $BUILD/tokamak "${TRAIN[@]}" --out "$OUT/tune-b" > "$OUT/tune-b.log" 2>&1 || tail -3 "$OUT/tune-b.log"
  grep -h "GEMM tuning" "$OUT"/tune-a.log "$OUT"/tune-b.log | cut -c1-200 | tee -a "$OUT/tuning.txt"
  python3 -c "import json,sys; l=lambda d: [json.loads(x)['loss'] for x in open(d+'/log.jsonl') if '\"loss\"' in x]; a,b=l(sys.argv[1]),l(sys.argv[2]); print('tuned runs bitwise equal losses:', a==b, a[-1], b[-1])" \
    "$OUT/tune-a" "$OUT/tune-b" | tee -a "$OUT/tuning.txt"
  cp $XDG_CACHE_HOME/tokamak/gemm-algorithms.json "$OUT/" 2>/dev/null; unset XDG_CACHE_HOME
  echo "tuning: $(( $(date +%s) - start ))s"; pack
fi
if has fp8 && [ -f data/brown/meta.json ]; then
  # FP8 linears (--fp8): 300 steps of the 124M model on Brown against bf16 (mean loss of the last 50 steps, and
  # a second bf16 seed for the natural spread) and two FP8 runs bitwise equal; the bench step times FP8 too.
  F8=(train --data data/brown --model gpt2-small-llama --batch 8 --seq 512 --steps 300 --lr 1e-3 --warmup 20
      --eval-every 0 --eval-tokens 0 --overwrite --device cuda)
  # fp8 with current scaling; fp8d and fp8b with delayed scaling (the default; fp8d saved at step 150, resumed below).
  # fp8m: delayed scaling with --fp8-margin 0 (no headroom; the default is 1).
  for r in bf16:7 fp8:7 fp8b:7 fp8d:7 fp8m:7 bf16:8; do
    p=${r%:*}; flags=(--save-every 0)
    case $p in fp8) flags+=(--fp8 --fp8-scaling current) ;; fp8b) flags+=(--fp8) ;; fp8m) flags+=(--fp8 --fp8-margin 0) ;; fp8d) flags=(--fp8 --fp8-scaling delayed --save-every 150) ;; esac
    $BUILD/tokamak "${F8[@]}" --seed ${r#*:} "${flags[@]}" --out "$OUT/fp8-$p-${r#*:}" > "$OUT/fp8-$p-${r#*:}.log" 2>&1 \
      || tail -3 "$OUT/fp8-$p-${r#*:}.log"
  done
  # Resumed from step 150 (the checkpoint carries the amax histories): steps 151-300 as in the whole run.
  $BUILD/tokamak train --resume "$OUT/fp8-fp8d-7/step_000150" --out "$OUT/fp8-resumed" > "$OUT/fp8-resumed.log" 2>&1 \
    || tail -3 "$OUT/fp8-resumed.log"
  python3 - "$OUT" <<'PY' | tee "$OUT/fp8.txt"
import json, sys
def rows(run):
    out = []
    for l in open(f"{sys.argv[1]}/fp8-{run}/log.jsonl"):
        r = json.loads(l)
        if "loss" in r and "val_loss" not in r and r.get("type", "train") == "train":
            out.append(r)
    return out
def losses(run):
    return [r["loss"] for r in rows(run)]
def tail(run):
    l = losses(run)[-50:]
    return sum(l) / len(l)
ref = tail("bf16-7")
for run, what in (("fp8-7", "fp8 (current scaling)"), ("fp8d-7", "fp8 (delayed scaling)"),
                  ("fp8m-7", "fp8 (delayed scaling, margin 0)"), ("bf16-8", "bf16, seed 8")):
    print(f"{what}: last 50 steps mean loss {tail(run):.4f} vs bf16 {ref:.4f} ({tail(run) - ref:+.4f})")
print("two fp8 (delayed) runs bitwise equal losses:", losses("fp8d-7") == losses("fp8b-7"))
whole = {r["step"]: r["loss"] for r in rows("fp8d-7")}
resumed = {r["step"]: r["loss"] for r in rows("resumed")}
same = bool(resumed) and all(whole.get(k) == v for k, v in resumed.items())
print(f"fp8 (delayed) resumed at step 150: {len(resumed)} steps, losses bitwise those of the whole run: {same}")
PY
  echo "fp8: $(( $(date +%s) - start ))s"; pack
fi
if has fp8head && [ -f data/brown/meta.json ]; then
  # The LM head in FP8 (--fp8-lm-head): 300 steps of the 124M model on Brown, its vocabulary padded to 50304 (a
  # multiple of 16, as the FP8 GEMMs need), against --fp8 alone and bf16 (mean loss of the last 50 steps; bf16 with
  # a second seed for the natural spread), and two runs bitwise equal.
  FH=(train --data data/brown --model gpt2-small-llama --vocab-size 50304 --batch 8 --seq 512 --steps 300 --lr 1e-3
      --warmup 20 --eval-every 0 --eval-tokens 0 --save-every 0 --overwrite --device cuda)
  for r in bf16:7 bf16:8 fp8:7 head:7 head2:7 head:8; do
    p=${r%:*}; flags=()
    case $p in fp8) flags=(--fp8) ;; head|head2) flags=(--fp8 --fp8-lm-head) ;; esac
    $BUILD/tokamak "${FH[@]}" --seed ${r#*:} "${flags[@]}" --out "$OUT/fh-$p-${r#*:}" > "$OUT/fh-$p-${r#*:}.log" 2>&1 \
      || tail -3 "$OUT/fh-$p-${r#*:}.log"
  done
  python3 - "$OUT" <<'PY' | tee "$OUT/fp8head.txt"
import json, sys
def losses(run):
    return [r["loss"] for r in map(json.loads, open(f"{sys.argv[1]}/fh-{run}/log.jsonl"))
            if "loss" in r and "val_loss" not in r and r.get("type", "train") == "train"]
def tail(run):
    l = losses(run)[-50:]
    return sum(l) / len(l)
ref = tail("bf16-7")
for run, what in (("bf16-8", "bf16, seed 8"), ("fp8-7", "--fp8"), ("head-7", "--fp8 --fp8-lm-head"),
                  ("head-8", "--fp8 --fp8-lm-head, seed 8")):
    print(f"{what}: last 50 steps mean loss {tail(run):.4f} vs bf16 {ref:.4f} ({tail(run) - ref:+.4f})")
print(f"--fp8 --fp8-lm-head against bf16, seed 8: {tail('head-8') - tail('bf16-8'):+.4f}")
print("two --fp8-lm-head runs bitwise equal losses:", losses("head-7") == losses("head2-7"))
PY
  echo "fp8head: $(( $(date +%s) - start ))s"; pack
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
      --logits-chunk $mib 2>&1 | tail -1)"
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
    echo "plan $r: $($BUILD/tokamak plan --model llama3.2-1b --batch 8 --seq 2048 --gpu "NVIDIA H200" --bandwidth 4300 --json \
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
if has bench; then
  bash bench/run.sh "${BENCH_CONFIGS:-qwen2.5-0.5b,llama3.2-1b,qwen2.5-1.5b}"
fi
echo "total: $(( $(date +%s) - start ))s"
