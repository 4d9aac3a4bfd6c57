# Sourced by the scripts run on the GPU machine (tests/gpu/run.sh, bench/gpu.sh) from the repository root,
# after they set STEPS (the steps asked for) and PACK (the archive's name). Every log goes to $OUT, a folder of
# its own; at each pack and at exit the logs are packed into $RESULTS/$PACK.tgz with the few files worth looking
# at beside it (the device tool brings back at most 8 files). Then env.sh, the build of every target into
# build-gpu, and has() to ask whether a step was asked for.
RESULTS=${OUT:-$PWD/gpu-out}
export OUT=/tmp/gpu-$PACK
export TK_GPU_HARNESS=1  # bench/run.sh then leaves its logs in $OUT, packed with the rest
rm -rf "$OUT"; mkdir -p "$OUT" "$RESULTS"
pack() {
  # Written aside and renamed, so that a call killed mid-write still brings back the last whole archive.
  tar czf "$RESULTS/$PACK.tgz.new" -C "$OUT" --exclude='step_*' --exclude='trace.json' --exclude='*.safetensors' \
    --exclude='*.bin' . 2>/dev/null && mv "$RESULTS/$PACK.tgz.new" "$RESULTS/$PACK.tgz"
  [ -f "$OUT/gpu-run/report.html" ] && cp "$OUT/gpu-run/report.html" "$RESULTS/report-gpu.html"
}
trap pack EXIT
source tests/gpu/env.sh
BUILD=build-gpu
start=$(date +%s)
has() { [[ ",$STEPS," == *",$1,"* ]]; }
cmake -S . -B $BUILD -G Ninja -DCMAKE_BUILD_TYPE=Release $TK_CMAKE_ARGS > "$OUT/cmake.log" 2>&1 \
  || { grep -B2 -A10 "Error" "$OUT/cmake.log" | head -40; exit 1; }
# -k 0: one broken target (say, a CPU test) does not stop the rest from being built and run. TARGETS (e.g.
# "tokamak") builds only those, for a call whose steps need no more.
ninja -C $BUILD -j16 -k 0 ${TARGETS:-} > "$OUT/build.log" 2>&1 || grep -E "error|FAILED" "$OUT/build.log" | head -20
[ -x $BUILD/tokamak ] || exit 1
echo "build: $(( $(date +%s) - start ))s"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv,noheader
