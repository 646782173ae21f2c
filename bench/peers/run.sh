#!/usr/bin/env bash
# The textbook MLP step (bench/bench_mlp.cpp) in tide and in its peers -- TensorFlow
# (tf.function), PyTorch (eager), JAX (jax.jit) -- in one run, and the ratios.
#
# Usage: bench/peers/run.sh BUILD_DIR [ROUNDS=3]
#   BUILD_DIR   a tide build with tide_bench (-DTIDE_BUILD_BENCH=ON), e.g. build
# Environment (all optional):
#   TIDE_PEERS_VENV  the peers' venv, created if missing (default ~/.cache/tide-peers-venv)
#   STEPS=100        timed steps per framework per round
#   WARMUP=10        untimed steps before them (peers; tide: see below)
#   TIDE_REPS=5      tide_bench repetitions per round, ~STEPS/TIDE_REPS steps each
#   OUT              where the raw results go (default a new /tmp/tide-peers.XXXXXX)
#   PYTHON=python3   the interpreter that creates the venv and summarizes
#
# Each round runs every configuration once, one after the other, in an order shuffled per
# round (so load drift on a shared machine does not always hit the same one):
#   tide-eager      tide_bench BM_TextbookMlpStep/pool:0/blas:0 (tide's own thread setup)
#   tide-traced     tide_bench BM_TextbookStepTraced/streams:1 (if built)
#   tide-traced-s2  tide_bench BM_TextbookStepTraced/streams:2 (if built)
#   tf, torch, jax  bench/peers/mlp_step.py --framework ... in the venv
# tide's step is timed by google-benchmark: each repetition builds the model afresh and
# times its steps (the calibration run before round 1 and the benchmark's own first
# iteration-count trial are the warm-up); ms/step of a round = the median of its
# repetitions' means. A peer's ms/step of a round = the median of its STEPS step times.
# Every step ends with the host reading the loss (tide: wait_all + item, peers: float()).
# Nothing sets a thread count or oneDNN switch for anyone (torch: set_num_threads(cores),
# its default anyway); what each used is printed.
set -euo pipefail
build=${1:?usage: bench/peers/run.sh BUILD_DIR [ROUNDS=3]}
rounds=${2:-3}
here=$(cd "$(dirname "$0")" && pwd)
venv=${TIDE_PEERS_VENV:-$HOME/.cache/tide-peers-venv}
steps=${STEPS:-100}
warmup=${WARMUP:-10}
tide_reps=${TIDE_REPS:-5}
py=${PYTHON:-python3}
out=${OUT:-$(mktemp -d /tmp/tide-peers.XXXXXX)}
mkdir -p "$out"
bench="$build/bench/tide_bench"
[[ -x "$bench" ]] || { echo "no $bench: build tide with -DTIDE_BUILD_BENCH=ON" >&2; exit 1; }

# ---- the venv ------------------------------------------------------------------------------
. "$here/common.sh"
peers_venv_full  # sets vpy

# ---- machine context -------------------------------------------------------------------------
peers_context \
  "build:         $build ($(grep -m1 CMAKE_BUILD_TYPE: "$build/CMakeCache.txt" 2>/dev/null | cut -d= -f2))" \
  "command:       bench/peers/run.sh $* (STEPS=$steps WARMUP=$warmup TIDE_REPS=$tide_reps)" \
  "out:           $out"

# ---- which configurations ---------------------------------------------------------------------
declare -A filter=(
  [tide-eager]='^BM_TextbookMlpStep/pool:0/blas:0/real_time$'
  [tide-traced]='^BM_TextbookStepTraced/streams:1/real_time$'
  [tide-traced-s2]='^BM_TextbookStepTraced/streams:2/real_time$'
)
tests=$("$bench" --benchmark_list_tests)
configs=()
for c in tide-eager tide-traced tide-traced-s2; do
  if grep -Eq "${filter[$c]}" <<<"$tests"; then configs+=("$c"); else echo "(no ${filter[$c]} in $bench)"; fi
done
configs+=(tf torch jax)

# ---- calibration: tide's first-step loss, and ms/step to size the repetitions ------------------
"$bench" --benchmark_filter="${filter[tide-eager]}" --benchmark_min_time=0 \
  --benchmark_format=json > "$out/tide_first_step.json" 2>/dev/null
"$bench" --benchmark_filter="${filter[tide-eager]}" --benchmark_min_time=0.5 \
  --benchmark_format=json > "$out/tide_calibration.json" 2>/dev/null
est_ms=$("$py" -c "import json; print(json.load(open('$out/tide_calibration.json'))['benchmarks'][0]['real_time'])")
# google-benchmark 1.7 has no fixed iteration count: a repetition runs until min_time has
# passed, so ask for ~0.8 x the steps' expected time (it overshoots up to 1.4x).
per_rep=$(( (steps + tide_reps - 1) / tide_reps ))
min_time=$("$py" -c "print(round(max(0.05, 0.8 * $per_rep * $est_ms / 1e3), 3))")
echo "tide calibration: ${est_ms} ms/step -> $tide_reps repetitions of --benchmark_min_time=$min_time (~$per_rep steps each)"

# ---- the rounds ------------------------------------------------------------------------------
echo -e "round\tconfig\tstart_utc\tload1_before\tload1_after" > "$out/load.tsv"
for ((r = 1; r <= rounds; ++r)); do
  order=$("$py" -c "import random, sys; c = sys.argv[1:]; random.Random($r).shuffle(c); print(' '.join(c))" "${configs[@]}")
  echo "== round $r of $rounds: $order (load $(load))"
  for c in $order; do
    l0=$(cut -d' ' -f1 /proc/loadavg); t0=$(date -u +%H:%M:%S)
    f="$out/r$r.$c.json"
    case $c in
      tide-*)
        "$bench" --benchmark_filter="${filter[$c]}" --benchmark_repetitions="$tide_reps" \
          --benchmark_min_time="$min_time" --benchmark_format=json > "$f" 2> "$f.log" ;;
      *)
        "$vpy" "$here/mlp_step.py" --framework "$c" --steps "$steps" --warmup "$warmup" \
          > "$f" 2> "$f.log" ;;
    esac
    l1=$(cut -d' ' -f1 /proc/loadavg)
    echo -e "$r\t$c\t$t0\t$l0\t$l1" >> "$out/load.tsv"
    "$py" - "$f" "$c" <<'EOF'
import json, statistics, sys
f, c = sys.argv[1], sys.argv[2]
if c.startswith("tide"):
    reps = [b for b in json.load(open(f))["benchmarks"] if b.get("run_type") == "iteration"]
    ms = statistics.median(b["real_time"] for b in reps)
    n = sum(b["iterations"] for b in reps)
    print(f"   {c:15s} {ms:8.2f} ms/step  ({len(reps)} reps, {n} steps)")
else:
    d = json.loads(open(f).read().strip().splitlines()[-1])
    print(f"   {c:15s} {d['ms_per_step_median']:8.2f} ms/step  ({d['steps']} steps, {d['version']}, first-step loss {d['loss_first']:.4f})")
EOF
  done
done
echo "load at end:   $(load)" | tee -a "$out/context.txt"
echo "date at end:   $(date -u '+%Y-%m-%d %H:%M:%S') UTC" | tee -a "$out/context.txt"

"$py" "$here/summarize.py" "$out"
