#!/usr/bin/env bash
# One benchmark of two tide_bench binaries (two builds: a BLAS choice, a change), paired
# round by round, because on a shared VM the machine's speed drifts from minute to minute:
# each round runs A then B (B then A in even rounds) for ~1 s each. Prints every round's
# ms and B/A, then the medians and the median of the per-round ratios.
#
# usage: bench/step_pairs.sh A_TIDE_BENCH B_TIDE_BENCH ROUNDS FILTER
#   e.g. bench/step_pairs.sh build/bench/tide_bench build-onednn/bench/tide_bench 10 \
#          '^BM_TextbookMlpStep/pool:0/blas:0/real_time$'
set -euo pipefail
a=${1:?usage: step_pairs.sh A B ROUNDS FILTER}
b=${2:?usage: step_pairs.sh A B ROUNDS FILTER}
rounds=${3:?usage: step_pairs.sh A B ROUNDS FILTER}
filter=${4:?usage: step_pairs.sh A B ROUNDS FILTER}
ms() {  # binary -> ms of one ~1 s run of the benchmark
  "$1" --benchmark_filter="$filter" --benchmark_min_time=1 2>/dev/null |
    awk '/^BM_/ {t=$2; u=$3; if (u=="ns") t/=1e6; if (u=="us") t/=1e3; if (u=="s") t*=1e3; print t; exit}'
}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1 /proc/loadavg); A = $a; B = $b; $filter"
raw=$(mktemp)
for ((r = 1; r <= rounds; ++r)); do
  if ((r % 2)); then ta=$(ms "$a"); tb=$(ms "$b"); else tb=$(ms "$b"); ta=$(ms "$a"); fi
  [[ -n "$ta" && -n "$tb" ]] || { echo "round $r: no result (is the filter right?)" >&2; exit 1; }
  echo "$ta $tb" | awk -v r="$r" '{printf "round %2d  A %8.2f ms  B %8.2f ms  B/A %.3f\n", r, $1, $2, $2 / $1}'
  echo "$ta $tb" >> "$raw"
done
med() { sort -g | awk '{v[NR] = $1} END {printf "%.3f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
ratios() { awk '{printf "%.3f\n", $2 / $1}' "$raw" | sort -g; }
echo "median A $(awk '{print $1}' "$raw" | med) ms, B $(awk '{print $2}' "$raw" | med) ms;" \
     "median B/A $(ratios | med) (range $(ratios | head -1)-$(ratios | tail -1))"
rm -f "$raw"
