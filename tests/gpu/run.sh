#!/usr/bin/env bash
# The GPU machine's correctness checks, in one call: build every target for sm_90 (tests/gpu/harness.sh), then the
# steps asked for (default all): tests (ctest -L gpu), hf (comparison with transformers: the model, the exports of
# both tokenizer kinds, and the run's TensorBoard files read by TensorBoard's reader), curve (the tiny model's
# 300 steps on CUDA against the CPU reference, and with --doc-mask), moments (bf16 and int8 AdamW moments against
# f32: quality), fp8 and fp8head (FP8 linears and the FP8 LM head against bf16: quality, bitwise reruns and resume),
# report (a GPU run, its profile and its page), offload (offloaded optimizer and gradients: bitwise the on-device
# run; bench --memory-budget within its budget), dist (the data-parallel path over NCCL at world size 1 against the plain runs: tests/gpu/dist_check.py),
# tuning (tuned GEMM runs bitwise equal). Benchmarks and profiles are bench/gpu.sh's; the Python tokenizer
# fixtures tests/fixtures/tokenizer/make_fixtures_gpu.sh's.
# Usage: tests/gpu/run.sh [step,step...] [test-regex]. Logs in $OUT/logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-tests,hf,curve,moments,fp8,fp8head,report,offload,dist,tuning}
REGEX=${2:-.}
PACK=logs
source tests/gpu/harness.sh
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
  PYTHONUNBUFFERED=1 python3 tests/hf/export_check.py --tokamak $BUILD/tokamak --device cuda > "$OUT/hf-export.log" 2>&1
  tail -6 "$OUT/hf-export.log"
  PYTHONUNBUFFERED=1 python3 tests/hf/tensorboard_check.py --tokamak $BUILD/tokamak --device cuda \
    > "$OUT/hf-tensorboard.log" 2>&1
  tail -3 "$OUT/hf-tensorboard.log"
  # Chat templates: needs .cache/chat_templates and .cache/llama3 (scripts/fetch_*.sh) carried to this machine.
  PYTHONUNBUFFERED=1 python3 tests/hf/chat_template_check.py --tokamak $BUILD/tokamak > "$OUT/hf-chat.log" 2>&1
  grep -E "^(PASS|FAIL)|Error" "$OUT/hf-chat.log" | head -20
  echo "hf: $(( $(date +%s) - start ))s"; pack
fi
if has curve && [ -f data/brown/meta.json ]; then
  # 300 steps of the tiny model on Brown: CUDA bf16 against the CPU fp32 reference, and CUDA twice.
  CURVE=(train --data data/brown --model tiny --batch 4 --seq 128 --steps 300 --lr 3e-3 --warmup 10
         --eval-every 0 --eval-tokens 0 --save-every 0 --seed 7 --overwrite --precision bf16)
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
  # last 50 steps), with a second f32 run from another seed for the spread that a different start gives (their
  # step time and memory: bench/gpu.sh moments).
  MOM=(train --data data/brown --model gpt2-small-llama --batch 8 --seq 512 --steps 300 --lr 1e-3 --warmup 20
       --eval-every 0 --eval-tokens 0 --save-every 0 --overwrite --device cuda --precision bf16)
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
  # bench --memory-budget: the planner's setting for 5 GiB (9.3 GiB planned as given) runs, within the budget.
  $BUILD/tokamak bench --model gpt2-small-llama --batch 16 --seq 1024 --steps 4 --precision bf16 --json \
    --memory-budget 5GiB > "$OUT/bench-budget.json" 2> "$OUT/bench-budget.log" || tail -5 "$OUT/bench-budget.log"
  python3 - "$OUT/bench-budget.json" <<'PY'
import json, sys
r = json.loads(open(sys.argv[1]).read())
print(f"bench within 5 GiB: {r['engine']}: {r['peak_mem_gib']} GiB (within: {r['peak_mem_gib'] <= 5.0}), "
      f"{r['micro_batch']} x {r['accumulation']} micro-batches, {r['tokens_per_step']} tokens a step, {r['tok_s']} tok/s")
PY
  echo "offload: $(( $(date +%s) - start ))s"; pack
fi
if has dist && [ -f data/brown/meta.json ]; then
  # The data-parallel path at world size 1 (NCCL, one rank: the same calls as many ranks): every ZeRO stage, FP8, int8
  # moments and the gradient offload against the plain run of the same settings, 4 micro-batches a step (ZeRO 2 and 3
  # reduce-scatter each one's gradients into the rank's slice), the communication fields of each step and a profile over
  # NCCL; then Llama-3.2-1B's speed, plain against --gpus 1 at ZeRO 0 (within 1%: the path itself) and ZeRO 2 (within
  # 2%: at world size 1 its reduce-scatter is NCCL copying the f32 gradients into the slice: about 10 GB read and
  # written a step, 2.7 ms of an H200's memory bandwidth beside the backward, 1.2% of the step, with 0.3 to 0.6 ms of it
  # exposed). The GPU tests of the communicator and of the gradient reduction are in the tests step
  # (dist_collectives_gpu_test, dist_grad_reduce_gpu_test).
  export NCCL_NVLS_ENABLE=0
  DP=(train --data data/brown --model gpt2-small-llama --batch 8 --seq 512 --batch-tokens 16384 --steps 12 --warmup 2
      --lr 1e-3 --eval-tokens 0 --save-every 0 --device cuda --overwrite)
  dp_run() { local name=$1; shift; $BUILD/tokamak "${DP[@]}" "$@" --out "$OUT/dp-$name" > "$OUT/dp-$name.log" 2>&1 \
            || tail -5 "$OUT/dp-$name.log"; }
  dp_run bf16 --precision bf16
  for z in 0 1 2 3; do dp_run bf16-z$z --precision bf16 --gpus 1 --zero $z; done
  dp_run fp8 --precision fp8
  for z in 1 3; do dp_run fp8-z$z --precision fp8 --gpus 1 --zero $z; done
  dp_run int8 --precision bf16 --moments int8
  dp_run int8-z1 --precision bf16 --moments int8 --gpus 1 --zero 1
  # The gradient slice in host memory (ZeRO 2 with --offload optimizer,gradients) against the one-GPU offload.
  dp_run offload --precision bf16 --offload optimizer,gradients
  dp_run offload-z2 --precision bf16 --offload optimizer,gradients --gpus 1 --zero 2
  python3 tests/gpu/dist_check.py losses "$OUT/dp-bf16" "$OUT/dp-bf16-z0" 0 "$OUT/dp-bf16-z1" 1e-3 "$OUT/dp-bf16-z2" 1e-3 \
    "$OUT/dp-bf16-z3" 1e-3 | tee "$OUT/dist.txt"
  python3 tests/gpu/dist_check.py losses "$OUT/dp-fp8" "$OUT/dp-fp8-z1" 1e-3 "$OUT/dp-fp8-z3" 1e-3 | tee -a "$OUT/dist.txt"
  python3 tests/gpu/dist_check.py losses "$OUT/dp-int8" "$OUT/dp-int8-z1" 1e-3 | tee -a "$OUT/dist.txt"
  python3 tests/gpu/dist_check.py losses "$OUT/dp-offload" "$OUT/dp-offload-z2" 1e-3 | tee -a "$OUT/dist.txt"
  grep -h "communication over" "$OUT/dp-bf16-z2.log" | tee -a "$OUT/dist.txt"
  # tokamak profile over NCCL (its ops decorated, the communicator ordering against the backend beneath).
  $BUILD/tokamak profile --data data/brown --model gpt2-small-llama --batch 8 --seq 512 --batch-tokens 16384 \
    --device cuda --precision bf16 --gpus 1 --zero 2 --out "$OUT/dp-profile" > "$OUT/dp-profile.log" 2>&1 \
    || tail -5 "$OUT/dp-profile.log"
  grep -A3 "communication and data wait, per step" "$OUT/dp-profile.log" | tee -a "$OUT/dist.txt"
  ONE=(train --data data/brown --model llama3.2-1b --vocab-size 128256 --batch 8 --seq 2048 --steps 14 --warmup 2
       --eval-tokens 0 --save-every 0 --device cuda --precision bf16 --overwrite)
  for v in plain z0 z2; do
    flags=(); [ $v != plain ] && flags=(--gpus 1 --zero ${v#z})
    $BUILD/tokamak "${ONE[@]}" "${flags[@]}" --out "$OUT/dp-1b-$v" > "$OUT/dp-1b-$v.log" 2>&1 || tail -5 "$OUT/dp-1b-$v.log"
  done
  python3 tests/gpu/dist_check.py speed "$OUT/dp-1b-plain" "$OUT/dp-1b-z0" 0.01 "$OUT/dp-1b-z2" 0.02 | tee -a "$OUT/dist.txt"
  echo "dist: $(( $(date +%s) - start ))s"; pack
fi
if has tuning && [ -f data/brown/meta.json ]; then
  # GEMM algorithms chosen by timing (--gemm-tuning): two short runs sharing one cache, from an empty one (the first
  # times and writes it, the second reads it), bitwise equal. The speed of tuning: bench/gpu.sh tuning.
  export XDG_CACHE_HOME=/tmp/tk-tuning-cache
  TRAIN=(train --data data/brown --model gpt2-small-llama --batch 8 --seq 512 --steps 30 --warmup 5 --eval-tokens 0
         --save-every 0 --device cuda --gemm-tuning --overwrite)
  rm -rf $XDG_CACHE_HOME
  $BUILD/tokamak "${TRAIN[@]}" --out "$OUT/tune-a" > "$OUT/tune-a.log" 2>&1 || tail -3 "$OUT/tune-a.log"
  $BUILD/tokamak "${TRAIN[@]}" --out "$OUT/tune-b" > "$OUT/tune-b.log" 2>&1 || tail -3 "$OUT/tune-b.log"
  grep -h "GEMM tuning" "$OUT"/tune-a.log "$OUT"/tune-b.log | cut -c1-200 | tee "$OUT/tuning.txt"
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
    case $p in bf16) flags+=(--precision bf16) ;; fp8) flags+=(--fp8 --fp8-scaling current) ;; fp8b) flags+=(--fp8) ;; fp8m) flags+=(--fp8 --fp8-margin 0) ;; fp8d) flags=(--fp8 --fp8-scaling delayed --save-every 150) ;; esac
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
  # a second seed for the natural spread), and two runs bitwise equal; auto, the default precision, with no flag.
  FH=(train --data data/brown --model gpt2-small-llama --vocab-size 50304 --batch 8 --seq 512 --steps 300 --lr 1e-3
      --warmup 20 --eval-every 0 --eval-tokens 0 --save-every 0 --overwrite --device cuda)
  for r in bf16:7 bf16:8 fp8:7 head:7 head2:7 head:8 auto:7; do
    p=${r%:*}; flags=()
    case $p in bf16) flags=(--precision bf16) ;; fp8) flags=(--fp8) ;; head|head2) flags=(--fp8 --fp8-lm-head) ;; esac
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
                  ("head-8", "--fp8 --fp8-lm-head, seed 8"), ("auto-7", "the default (--precision auto)")):
    print(f"{what}: last 50 steps mean loss {tail(run):.4f} vs bf16 {ref:.4f} ({tail(run) - ref:+.4f})")
print(f"--fp8 --fp8-lm-head against bf16, seed 8: {tail('head-8') - tail('bf16-8'):+.4f}")
print("two --fp8-lm-head runs bitwise equal losses:", losses("head-7") == losses("head2-7"))
PY
  echo "fp8head: $(( $(date +%s) - start ))s"; pack
fi
echo "total: $(( $(date +%s) - start ))s"
