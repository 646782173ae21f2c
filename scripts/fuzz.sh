#!/usr/bin/env bash
# libFuzzer runs of tide's loaders: bash scripts/fuzz.sh [SECONDS]
# Configures build-fuzz with Clang (TIDE_BUILD_FUZZ=ON, CPU only, no tests, benchmarks or
# examples), builds the targets in fuzz/ and runs each for SECONDS (default 60), the two
# side by side, over a copy of fuzz/corpus/<target> (the checked-in corpus is not changed).
# Fails on any finding: a crash, an exception other than tide::Error, a sanitizer report,
# a leak, an input that runs over 30 s (a hang: the bound is loose so that a busy machine
# does not fail the run) or one that takes over 2 GB. The input that found it is
# kept under build-fuzz/findings/ and printed in hex; add it to fuzz/corpus/<target>/ and
# a regression test with the fix. TIDE_JOBS sets the build parallelism (default: nproc).
# tide_fuzz_bpe also fuzzes GPT-2's vocabulary, fetched here first (scripts/fetch_text_data.sh);
# when that fails it fuzzes its toy vocabulary alone and says so.
# Not done here: installing clang (scripts/deps.sh lists it), merging new inputs back.
set -euo pipefail
# shellcheck source=scripts/deps.sh
source "$(dirname "${BASH_SOURCE[0]}")/deps.sh"
cd "$TIDE_ROOT"

secs=${1:-60}
if ! [[ $secs =~ ^[0-9]+$ ]] || [ "$secs" -eq 0 ]; then
  echo "usage: $0 [SECONDS]  (seconds of fuzzing per target, default 60)" >&2
  exit 2
fi
build="build-fuzz"
targets=(safetensors idx bpe text_corpus)

if ! command -v clang++ >/dev/null 2>&1; then
  tide_log "clang++ not found: install Debian's clang and libclang-rt-dev (scripts/deps.sh)" >&2
  exit 1
fi
# -O0 for the library, which fuzz/CMakeLists.txt builds with ASan; the loaders and the
# targets are built at -O1 with UBSan and coverage too (see there: compile time).
CC=clang CXX=clang++ tide_configure "$build" -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g -O0" -DTIDE_BUILD_FUZZ=ON -DTIDE_CUDA=OFF \
  -DTIDE_SANITIZE= -DTIDE_BUILD_TESTS=OFF -DTIDE_BUILD_BENCH=OFF -DTIDE_BUILD_EXAMPLES=OFF
tide_build "$build" --target "${targets[@]/#/tide_fuzz_}"

if ! bash scripts/fetch_text_data.sh; then
  tide_log "no GPT-2 files: tide_fuzz_bpe fuzzes its toy vocabulary only" >&2
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
findings="$build/findings"
rm -rf "$findings"
mkdir -p "$findings"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
pids=()
for t in "${targets[@]}"; do
  mkdir -p "$work/$t"
  cp fuzz/corpus/"$t"/* "$work/$t/"
  tide_log "fuzz $t for ${secs}s over $(find "$work/$t" -type f | wc -l) seed inputs"
  "$build/fuzz/tide_fuzz_$t" -max_total_time="$secs" -max_len=4096 -timeout=30 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$findings/$t-" "$work/$t" \
    >"$work/$t.log" 2>&1 &
  pids+=($!)
done

failed=0
for i in "${!targets[@]}"; do
  t=${targets[$i]}
  rc=0
  wait "${pids[$i]}" || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log" | tail -n 1)
  found=0
  for f in "$findings/$t"-*; do
    if [ -e "$f" ]; then found=1; fi
  done
  if [ "$rc" -eq 0 ] && [ "$found" -eq 0 ]; then
    tide_log "fuzz $t: ${execs:-?} inputs in ${secs}s," \
      "corpus now $(find "$work/$t" -type f | wc -l) inputs, no finding"
    continue
  fi
  failed=1
  tide_log "fuzz $t: FINDING (exit status $rc); the fuzzer's report:" >&2
  tail -n 60 "$work/$t.log" >&2
  for f in "$findings/$t"-*; do
    [ -e "$f" ] || continue
    echo "input $f ($(wc -c <"$f") bytes), first 512 bytes:" >&2
    head -c 512 "$f" | od -An -tx1 >&2
  done
done
if [ "$failed" -ne 0 ]; then
  tide_log "fuzzing found a defect: fix it, add the input to fuzz/corpus/ and a test" >&2
  exit 1
fi
