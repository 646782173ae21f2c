#!/usr/bin/env bash
# PyTorch DDP (gloo, CPU) on the textbook MLP step: 2 ranks with the gradient all-reduce
# overlapped with backward (DDP's default) vs after backward, and the 1-process step as the
# baseline -- the peer figures for tide_bench_dist. See bench/peers/ddp_step.py for what one run does.
#
# Usage: bench/peers/ddp_run.sh [ROUNDS=5]
# Environment (all optional):
#   TIDE_PEERS_VENV  the venv (default ~/.cache/tide-peers-venv, the one run.sh uses); only
#                    requirements.txt's torch and numpy pins are installed if torch is missing
#   STEPS=60         timed steps per configuration per round
#   WARMUP=10        untimed steps before them
#   RANKS=2          ranks of the DDP runs
#   BUCKET_MB        DDP bucket_cap_mb for overlap-on (default: DDP's own, 25 MiB)
#   OFF_REDUCE=per-param  overlap-off all-reduce: per-param (one call per gradient) or flat
#   OUT              where the raw results go (default a new /tmp/tide-ddp.XXXXXX)
#   PYTHON=python3   the interpreter that creates the venv and summarizes
#   TIDE_BENCH_DIST  path of tide's build/bench/tide_bench_dist: each round then also runs
#                    it as $RANKS ranks under mpirun (1 thread per rank: TIDE_NUM_THREADS=1,
#                    OPENBLAS_NUM_THREADS=1), so tide's figures share the rounds' load
#   MPIRUN="mpirun --oversubscribe"  how tide's ranks are started
#
# Each round runs every configuration once, the order rotated by one each round (so load
# drift on a shared machine does not always hit the same one):
#   on      ddp_step.py --ranks $RANKS --overlap on   (threads 1 per rank)
#   off     ddp_step.py --ranks $RANKS --overlap off  (threads 1 per rank)
#   single1 ddp_step.py --ranks 1 --threads 1         (full batch, no DDP)
#   single2 ddp_step.py --ranks 1 --threads 2         (full batch, no DDP)
# Every run gets OMP_NUM_THREADS=1 and MKL_NUM_THREADS=1, except single2, which gets 2 (the
# thread count it is asked to use). The table shows the median over rounds of each round's
# rank-0 median ms/step, and the on/off ratio.
set -euo pipefail
rounds=${1:-5}
here=$(cd "$(dirname "$0")" && pwd)
venv=${TIDE_PEERS_VENV:-$HOME/.cache/tide-peers-venv}
steps=${STEPS:-60}
warmup=${WARMUP:-10}
ranks=${RANKS:-2}
off_reduce=${OFF_REDUCE:-per-param}
py=${PYTHON:-python3}
out=${OUT:-$(mktemp -d /tmp/tide-ddp.XXXXXX)}
mkdir -p "$out"

# ---- the venv (shared with run.sh; only torch + numpy needed here) -------------------------
. "$here/common.sh"
peers_venv_torch  # sets vpy

# ---- machine context -------------------------------------------------------------------------
peers_context \
  "torch:         $("$vpy" -c 'import torch; print(torch.__version__)')" \
  "command:       bench/peers/ddp_run.sh $rounds (STEPS=$steps WARMUP=$warmup RANKS=$ranks BUCKET_MB=${BUCKET_MB:-default} OFF_REDUCE=$off_reduce)" \
  "out:           $out"

configs=(on off single1 single2)
[[ -n "${TIDE_BENCH_DIST:-}" ]] && configs+=(tide)
mpirun_cmd=${MPIRUN:-mpirun --oversubscribe}
bucket=()
[[ -n "${BUCKET_MB:-}" ]] && bucket=(--bucket-mb "$BUCKET_MB")
echo -e "round\tconfig\tstart_utc\tload1_before\tload1_after" > "$out/load.tsv"
for ((r = 1; r <= rounds; ++r)); do
  order=()
  for ((i = 0; i < ${#configs[@]}; ++i)); do
    order+=("${configs[$(( (i + r - 1) % ${#configs[@]} ))]}")
  done
  echo "== round $r of $rounds: ${order[*]} (load $(load))"
  for c in "${order[@]}"; do
    l0=$(cut -d' ' -f1 /proc/loadavg); t0=$(date -u +%H:%M:%S)
    f="$out/r$r.$c.json"
    common=(--steps "$steps" --warmup "$warmup")
    if [[ $c == tide ]]; then
      TIDE_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 OMPI_MCA_btl=self,vader \
        $mpirun_cmd -n "$ranks" "$TIDE_BENCH_DIST" --benchmark_format=json \
        --benchmark_out="$out/r$r.tide.gbench.json" > "$f.log" 2>&1 ||
        { echo "   tide failed:"; tail -20 "$f.log"; exit 1; }
      echo -e "$r\t$c\t$t0\t$l0\t$(cut -d' ' -f1 /proc/loadavg)" >> "$out/load.tsv"
      "$py" -c "
import json, sys
for b in json.load(open(sys.argv[1]))['benchmarks']:
    print(f\"   tide {b['name']:58s} {b['real_time']:8.2f} ms\")
" "$out/r$r.tide.gbench.json"
      continue
    fi
    case $c in
      on)      threads=1; a=(--ranks "$ranks" --overlap on "${bucket[@]}") ;;
      off)     threads=1; a=(--ranks "$ranks" --overlap off --off-reduce "$off_reduce") ;;
      single1) threads=1; a=(--ranks 1 --threads 1) ;;
      single2) threads=2; a=(--ranks 1 --threads 2) ;;
    esac
    OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads \
      "$vpy" "$here/ddp_step.py" "${a[@]}" "${common[@]}" > "$f" 2> "$f.log" ||
      { echo "   $c failed:"; tail -20 "$f.log"; exit 1; }
    l1=$(cut -d' ' -f1 /proc/loadavg)
    echo -e "$r\t$c\t$t0\t$l0\t$l1" >> "$out/load.tsv"
    "$py" -c "
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
print(f\"   {sys.argv[2]:8s} {d['ms_per_step_median']:8.2f} ms/step  (min {d['ms_per_step_min']:.2f}, max {d['ms_per_step_max']:.2f}; loss {d['loss_last_global']:.6f}; load {sys.argv[3]} -> {sys.argv[4]})\")
" "$f" "$c" "$l0" "$l1"
  done
done
echo "load at end:   $(load)" | tee -a "$out/context.txt"
echo "date at end:   $(date -u '+%Y-%m-%d %H:%M:%S') UTC" | tee -a "$out/context.txt"

echo
"$py" "$here/ddp_summarize.py" "$out"
