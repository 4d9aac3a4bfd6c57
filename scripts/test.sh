#!/usr/bin/env bash
# The test command: installs and builds what is needed (scripts/setup.sh), then runs the CPU test
# suite with ctest; then the same suite built with AddressSanitizer and UndefinedBehaviorSanitizer
# (build-asan/, CPU backend), and every fuzz target for a bounded time (tests/fuzz/run.sh, build-fuzz/).
# GPU tests (label gpu) run on a GPU machine with tests/gpu/run.sh instead.
# TOKAMAK_SANITIZE=0 or TOKAMAK_FUZZ_SECONDS=0 leave out the sanitizer suite or the fuzzing (the fuzz
# targets then still run their committed corpora once).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
# chromium (and a font for it): the test of `tokamak report` renders its page headless and checks the screenshot.
# python3-jinja2: the chat template tests render every construct with jinja2 too and compare.
# Every CUDA generation tokamak builds for by default (CMakeLists.txt), so that the CUDA code compiles in CI, also
# after scripts/run_default.sh configured build/ for this machine alone.
TOKAMAK_CMAKE_ARGS="-DTOKAMAK_CUDA=ON -UCMAKE_CUDA_ARCHITECTURES ${TOKAMAK_CMAKE_ARGS:-}" \
  TOKAMAK_EXTRA_APT="chromium fonts-dejavu-core python3-jinja2" bash scripts/setup.sh
BUILD=${TOKAMAK_BUILD_DIR:-$ROOT/build}
(cd "$BUILD" && ctest -L cpu --output-on-failure --timeout 900 -j "$(nproc)")

if [ "${TOKAMAK_SANITIZE:-1}" != 0 ]; then
  # Memory errors and undefined behaviour that a plain run survives: the CPU suite again, built with the
  # sanitizers (-O1 keeps it fast enough; CUDA off, since the GPU tests do not run here anyway).
  ASAN_BUILD=${TOKAMAK_ASAN_BUILD_DIR:-$ROOT/build-asan}
  SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
  cmake -S "$ROOT" -B "$ASAN_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DTOKAMAK_CUDA=OFF \
    -DCMAKE_CXX_FLAGS="-O1 -g $SANITIZE" -DCMAKE_EXE_LINKER_FLAGS="$SANITIZE" >/dev/null
  tests=$(cd tests/cpu && ls ./*_test.cpp | sed 's|^\./||; s|\.cpp$||')
  # shellcheck disable=SC2086
  cmake --build "$ASAN_BUILD" --parallel "$(nproc)" --target tokamak $tests
  # The tests of tests/dist (ranks under mpirun) run in the plain pass above only: they are not built here, and
  # Open MPI's own allocations would read as leaks. verify_asan_link_order=0: one test preloads a library of its
  # own (LD_PRELOAD) into the tokamak it starts, ahead of the ASan runtime.
  (cd "$ASAN_BUILD" && ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:verify_asan_link_order=0" UBSAN_OPTIONS="print_stacktrace=1" \
    ctest -L cpu -E '^dist_' --output-on-failure --timeout 1800 -j "$(nproc)")
fi

bash tests/fuzz/run.sh "${TOKAMAK_FUZZ_SECONDS:-120}"
