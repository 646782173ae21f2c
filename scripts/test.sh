#!/usr/bin/env bash
# Builds tide in build/ (Release, with tests, benchmarks and examples, CUDA when nvcc is
# found) and runs the test suite, then the op-level suites again with outputs allocated at
# execution. Benchmarks are compiled, not run.
# Usage: bash scripts/test.sh   (TIDE_JOBS=N sets the build parallelism, default nproc)
set -euo pipefail
# shellcheck source=scripts/deps.sh
source "$(dirname "${BASH_SOURCE[0]}")/deps.sh"
cd "$TIDE_ROOT"

tide_deps
tide_configure build -DCMAKE_BUILD_TYPE=Release -DTIDE_BUILD_TESTS=ON -DTIDE_BUILD_BENCH=ON \
  -DTIDE_BUILD_EXAMPLES=ON
tide_build build
# The Shakespeare corpus and GPT-2's BPE files for the text suite (idempotent; fails on a
# checksum mismatch).
bash scripts/fetch_text_data.sh
tide_log "ctest build"
ctest --test-dir build --output-on-failure --no-tests=error
# The ops, autograd, nn, trace and API suites once more with outputs allocated at execution
# (Engine::set_allocation): their results must not change. The engine and train suites
# check each allocation mode's memory behaviour themselves.
tide_log "ctest build, TIDE_ALLOC=execution"
TIDE_ALLOC=execution ctest --test-dir build --output-on-failure --no-tests=error \
  -L "ops|autograd|nn|trace|api"
tide_log "tests passed"
