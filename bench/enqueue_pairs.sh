#!/usr/bin/env bash
# Per-op engine costs of two tide_bench binaries, paired round by round: on a
# shared 2-vCPU VM the cost of moving a cache line between the cores changes by 4x from one
# second to the next (the hypervisor moves the vCPUs), so only runs taken moments apart are
# compared. Each round runs, for every benchmark, A then B (B then A in odd rounds), each
# for ~0.1 s, and first the spinning thread hand-off anchor (BM_ThreadHandoffAnchor_Spin,
# one cache-line round trip between two threads) from B, which says which state the
# machine was in. Prints per benchmark the medians of A and B, the median of the per-round
# ratios B/A and their range.
#
# usage: bench/enqueue_pairs.sh A_TIDE_BENCH B_TIDE_BENCH [ROUNDS=12]
#   e.g. bench/enqueue_pairs.sh old-build/bench/tide_bench build/bench/tide_bench 16
set -euo pipefail
a=${1:?usage: enqueue_pairs.sh A_TIDE_BENCH B_TIDE_BENCH [ROUNDS]}
b=${2:?usage: enqueue_pairs.sh A_TIDE_BENCH B_TIDE_BENCH [ROUNDS]}
rounds=${3:-12}
benches="EnqueueTinyAdd TinyAddThroughput SyncEveryOp SyncModeTinyAdd"

ns() {  # binary benchmark -> real time in ns of one short run
  "$1" --benchmark_filter="^BM_$2(/real_time)?\$" --benchmark_min_time=0.1 2>/dev/null |
    awk -v n="BM_$2" '$1 ~ "^"n {t=$2; u=$3; if (u=="us") t*=1000; if (u=="ms") t*=1e6; print t}'
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
echo "# A = $a"
echo "# B = $b"
raw=$(mktemp)
for ((r = 1; r <= rounds; ++r)); do
  echo "anchor $(ns "$b" ThreadHandoffAnchor_Spin) 0" >> "$raw"
  for m in $benches; do
    if ((r % 2)); then ta=$(ns "$a" "$m"); tb=$(ns "$b" "$m")
    else tb=$(ns "$b" "$m"); ta=$(ns "$a" "$m"); fi
    echo "$m $ta $tb" >> "$raw"
  done
done
python3 - "$raw" "$rounds" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, ta, tb = line.split()
    rows.setdefault(name, []).append((float(ta), float(tb)))
anchor = sorted(t for t, _ in rows.pop("anchor"))
q = lambda f: anchor[min(len(anchor) - 1, int(f * len(anchor)))]
print(f"spinning hand-off anchor (B's binary): median {statistics.median(anchor):.0f} ns, "
      f"quartiles {q(0.25):.0f}-{q(0.75):.0f} ns over {sys.argv[2]} rounds")
print("| benchmark | A median ns | B median ns | B/A median of rounds | B/A range |")
print("|---|---:|---:|---:|---|")
for name, v in rows.items():
    r = [tb / ta for ta, tb in v]
    print(f"| {name} | {statistics.median(t for t, _ in v):.0f} | "
          f"{statistics.median(t for _, t in v):.0f} | {statistics.median(r):.3f} | "
          f"{min(r):.2f}-{max(r):.2f} |")
EOF
rm -f "$raw"
