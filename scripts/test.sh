#!/usr/bin/env bash
# The test command: installs and builds what is needed (scripts/setup.sh), then runs the CPU test
# suite with ctest. GPU tests (label gpu) run on a GPU machine with tests/gpu/run.sh instead.
set -euo pipefail
cd "$(dirname "$0")/.."
# chromium (and a font for it): the test of `tokamak report` renders its page headless and checks the screenshot.
TOKAMAK_EXTRA_APT="chromium fonts-dejavu-core" bash scripts/setup.sh
BUILD=${TOKAMAK_BUILD_DIR:-$PWD/build}
cd "$BUILD"
ctest -L cpu --output-on-failure --timeout 900 -j "$(nproc)"
