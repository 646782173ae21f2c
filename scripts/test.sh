#!/usr/bin/env bash
# Builds tide in build/ (Release, with tests, benchmarks and examples, CUDA when nvcc is
# found) and runs the test suite. Benchmarks are compiled, not run.
# Usage: bash scripts/test.sh   (TIDE_JOBS=N sets the build parallelism, default nproc)
set -euo pipefail
# shellcheck source=scripts/deps.sh
source "$(dirname "${BASH_SOURCE[0]}")/deps.sh"
cd "$TIDE_ROOT"

tide_deps
tide_configure build -DCMAKE_BUILD_TYPE=Release -DTIDE_BUILD_TESTS=ON -DTIDE_BUILD_BENCH=ON \
  -DTIDE_BUILD_EXAMPLES=ON
tide_build build
tide_log "ctest build"
ctest --test-dir build --output-on-failure --no-tests=error
tide_log "tests passed"
