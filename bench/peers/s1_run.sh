#!/usr/bin/env bash
# S1 (10 x (randn 1000x1000; matmul), all work done) side by side: tide's bench-async
# ("tide (wait_all)", median of its runs) and the peers of bench/peers/s1_step.py, in
# ROUNDS rounds whose order rotates, on a shared machine whose speed drifts.
#   bash bench/peers/s1_run.sh BUILD_DIR [ROUNDS=3]
# The peers come from run.sh's venv (bench/peers/common.sh: $TIDE_PEERS_VENV or
# ~/.cache/tide-peers-venv; run bench/peers/run.sh once to create it).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:?usage: s1_run.sh BUILD_DIR [ROUNDS]}
rounds=${2:-3}
venv=${TIDE_PEERS_VENV:-$HOME/.cache/tide-peers-venv}
py=$venv/bin/python
[ -x "$py" ] || { echo "no venv at $venv: run bench/peers/run.sh first" >&2; exit 1; }
configs=(tide torch tf jax)
declare -A all
for r in $(seq 1 "$rounds"); do
  n=${#configs[@]}
  for k in $(seq 0 $((n - 1))); do
    c=${configs[$(((k + r) % n))]}
    if [ "$c" = tide ]; then
      ms=$("$build/examples/tide" bench-async --runs 5 |
        awk -F'|' '/tide \(wait_all\)/ && NF > 3 && !done {gsub(/ /, "", $3); print $3; done = 1}')
      case $ms in *ms) ms=${ms%ms} ;; *s) ms=$(awk -v s="${ms%s}" 'BEGIN {print s * 1000}') ;; esac
    else
      ms=$("$py" "$here/s1_step.py" --framework "$c" --reps 5 2>/dev/null |
        "$py" -c 'import json, sys; print(round(json.loads(sys.stdin.read())["median_ms"], 1))')
    fi
    echo "round $r: $c $ms ms"
    all[$c]+="$ms "
  done
done
echo "== S1 medians over $rounds rounds (ms, all work done)"
for c in "${configs[@]}"; do
  python3 -c 'import statistics, sys
v = [float(x) for x in sys.argv[2:]]
print("%-6s %8.1f   (rounds: %s)" % (sys.argv[1], statistics.median(v), " ".join(sys.argv[2:])))' "$c" ${all[$c]}
done
