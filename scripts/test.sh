#!/usr/bin/env bash
# The test command: installs and builds what is needed (scripts/setup.sh), then runs the CPU test
# suite with ctest. GPU tests (label gpu) run on a GPU machine with tests/gpu/run.sh instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD=${TOKAMAK_BUILD_DIR:-$PWD/build}
cd "$BUILD"
ctest -L cpu --output-on-failure --timeout 900 -j "$(nproc)"
