#!/usr/bin/env bash
# Instructions per tiny op: runs BUILD/bench/tide_enqueue_ir under callgrind with
# 50 000 and 250 000 ops and prints the difference per op -- enqueue and execution on both
# threads, start-up cancelled. Deterministic, unlike a timing on a shared VM.
# usage: bench/enqueue_instructions.sh BUILD_DIR      (needs valgrind)
set -euo pipefail
bin=${1:?usage: enqueue_instructions.sh BUILD_DIR}/bench/tide_enqueue_ir
ir() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" 2>&1 |
    awk '/Collected/ {gsub(",", "", $4); print $4}'
}
a=$(ir 50000)
b=$(ir 250000)
echo "instructions per op: $(( (b - a) / 200000 ))  ($bin)"
