#!/usr/bin/env bash
# Builds every fuzz target (tests/fuzz/*_fuzz.cpp) with clang's libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer in its own build directory, then runs each for an equal share of SECONDS
# (default 60), starting from its committed corpus (tests/fuzz/corpus/<target>/). Fails on any crash,
# uncaught exception, leak, timeout or sanitizer report, leaving the input under BUILD/fuzz/artifacts/.
# SECONDS=0 runs each committed corpus once (the regression inputs) and nothing more.
#
#   tests/fuzz/run.sh 600                       # ten minutes in all
#   build-fuzz/fuzz/shard_fuzz ARTIFACT         # reproduce one finding
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
TOTAL=${1:-60}
BUILD=${TOKAMAK_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}

TOKAMAK_EXTRA_APT="clang libclang-rt-14-dev libomp-dev" TOKAMAK_SETUP_PACKAGES_ONLY=1 bash scripts/setup.sh

# The libraries carry coverage instrumentation (fuzzer-no-link); only the targets link libFuzzer's main.
# No -DNDEBUG: assertions stay on. The CPU backend only: no fuzz target reaches CUDA code. At -O1 clang
# leaves the CPU ops' `omp simd` loops scalar and would say so for each (-Wno-pass-failed).
SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Fuzz -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="-O1 -g $SANITIZE -fsanitize=fuzzer-no-link -Wno-pass-failed" -DCMAKE_EXE_LINKER_FLAGS="$SANITIZE" \
  -DTOKAMAK_CUDA=OFF -DTOKAMAK_TESTS=OFF -DTOKAMAK_FUZZ=ON >/dev/null
targets=$(cd tests/fuzz && ls ./*_fuzz.cpp | sed 's|^\./||; s|\.cpp$||')
# shellcheck disable=SC2086
cmake --build "$BUILD" --parallel "$(nproc)" --target $targets

n=$(echo "$targets" | wc -w)
share=$(( TOTAL / n )); [ "$TOTAL" -gt 0 ] && [ "$share" -lt 1 ] && share=1
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:symbolize=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
failed=()
for t in $targets; do
  work="$BUILD/fuzz/corpus/$t" artifacts="$BUILD/fuzz/artifacts/$t/"
  rm -rf "$artifacts"  # a finding of an earlier run is not this run's
  mkdir -p "$work" "$artifacts" "tests/fuzz/corpus/$t"
  if [ "$TOTAL" -gt 0 ]; then limit=(-max_total_time="$share"); else limit=(-runs=0); fi
  # New inputs go to the work corpus (first directory); the committed one is only read.
  if "$BUILD/fuzz/$t" "${limit[@]}" -timeout=20 -rss_limit_mb=2560 -print_final_stats=1 \
       -artifact_prefix="$artifacts" "$work" "tests/fuzz/corpus/$t" >"$BUILD/fuzz/$t.log" 2>&1; then
    echo "fuzz: $t: $(grep -o 'stat::number_of_executed_units: [0-9]*' "$BUILD/fuzz/$t.log" | grep -o '[0-9]*$' || echo '?') runs, no finding"
  else
    echo "fuzz: $t FAILED: the end of $BUILD/fuzz/$t.log follows; the input is in $artifacts"
    tail -n 40 "$BUILD/fuzz/$t.log"
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} target(s) failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: $n targets, ${share}s each, no finding"
