#!/usr/bin/env bash
# randn throughput, round by round (a shared VM's speed drifts): each round times, in an
# order that rotates, tide's BM_RandnThroughput in binary A (e.g. a build before a change)
# and in binary B, B's BM_PhiloxPlainLoop (raw Philox blocks, no transform), and PyTorch's
# torch.randn(1000, 1000) in PYTHON. All in ms per 1M float32 normals; then the medians.
#
# usage: bench/randn_pairs.sh A_TIDE_BENCH B_TIDE_BENCH PYTHON ROUNDS [THREADS]
#   THREADS: the BM_RandnThroughput argument (tide's intra-op threads), default 2; PyTorch
#   runs with its default thread count.
set -euo pipefail
a=${1:?usage: randn_pairs.sh A B PYTHON ROUNDS [THREADS]}
b=${2:?usage: randn_pairs.sh A B PYTHON ROUNDS [THREADS]}
py=${3:?usage: randn_pairs.sh A B PYTHON ROUNDS [THREADS]}
rounds=${4:?usage: randn_pairs.sh A B PYTHON ROUNDS [THREADS]}
threads=${5:-2}
ms() {  # binary filter -> ms of one ~1 s run
  "$1" --benchmark_filter="$2" --benchmark_min_time=1 2>/dev/null |
    awk '/^BM_/ {t=$2; u=$3; if (u=="ns") t/=1e6; if (u=="us") t/=1e3; if (u=="s") t*=1e3; print t; exit}'
}
torch_ms() {  # the median of 50 waited calls after 5 warm-up calls
  "$py" - <<'PY'
import statistics, time, torch
torch.manual_seed(7)
for _ in range(5): torch.randn(1000, 1000)
ts = []
for _ in range(50):
    t = time.perf_counter(); torch.randn(1000, 1000); ts.append(time.perf_counter() - t)
print(statistics.median(ts) * 1e3)
PY
}
run() {
  case $1 in
    A) ms "$a" "^BM_RandnThroughput/$threads/real_time\$" ;;
    B) ms "$b" "^BM_RandnThroughput/$threads/real_time\$" ;;
    P) ms "$b" '^BM_PhiloxPlainLoop/real_time$' ;;
    T) torch_ms ;;
  esac
}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1 /proc/loadavg);" \
     "A = $a; B = $b; tide threads $threads; torch $("$py" -c 'import torch; print(torch.__version__, torch.get_num_threads(), "threads")')"
raw=$(mktemp)
orders=("A B P T" "B T A P" "T P B A" "P A T B")
for ((r = 1; r <= rounds; ++r)); do
  declare -A t=()
  for k in ${orders[$(((r - 1) % 4))]}; do t[$k]=$(run "$k"); done
  printf 'round %2d  A %7.2f  B %7.2f  Philox %6.2f  torch %6.2f ms\n' "$r" "${t[A]}" "${t[B]}" "${t[P]}" "${t[T]}"
  echo "${t[A]} ${t[B]} ${t[P]} ${t[T]}" >> "$raw"
  unset t
done
med() { sort -g | awk '{v[NR] = $1} END {printf "%.2f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
echo "median ms per 1M: A $(awk '{print $1}' "$raw" | med), B $(awk '{print $2}' "$raw" | med)," \
     "Philox loop $(awk '{print $3}' "$raw" | med), torch $(awk '{print $4}' "$raw" | med)"
rm -f "$raw"
