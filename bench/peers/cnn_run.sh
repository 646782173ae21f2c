#!/usr/bin/env bash
# The Fashion-MNIST CNN's training step (bench/bench_cnn.cpp) in tide and in PyTorch, in
# alternating rounds, and the ratios; then each convolution alone, tide's
# im2col + GEMM against the oneDNN kernels PyTorch runs.
#
# Usage: bench/peers/cnn_run.sh BUILD_DIR [ROUNDS=5]
#   BUILD_DIR   a tide build with tide_bench (-DTIDE_BUILD_BENCH=ON), e.g. build
# Environment (all optional):
#   TIDE_PEERS_VENV  the venv (default ~/.cache/tide-peers-venv, shared with run.sh); only
#                    torch and numpy are installed here when missing
#   STEPS=40         timed steps per configuration per round (peer); tide: ~STEPS steps
#   OUT              where the raw results go (default a new /tmp/tide-cnn.XXXXXX)
#   PYTHON=python3   the interpreter that creates the venv and summarizes
#
# Each round runs, in an order rotated per round (each goes first as often as the others):
#   tide-eager   tide_bench BM_CnnStep/traced:0
#   tide-traced  tide_bench BM_CnnStep/traced:1 (trace::function of the whole step)
#   torch        bench/peers/cnn_step.py (eager nn.Sequential + torch.optim.Adam)
# A configuration's ms/step in a round is the median of its step times (tide: of its
# repetitions' means); the summary gives the median over rounds and tide / torch per round.
# Nothing sets a thread count for either framework.
set -euo pipefail
build=${1:?usage: bench/peers/cnn_run.sh BUILD_DIR [ROUNDS=5]}
rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
venv=${TIDE_PEERS_VENV:-$HOME/.cache/tide-peers-venv}
steps=${STEPS:-40}
py=${PYTHON:-python3}
out=${OUT:-$(mktemp -d /tmp/tide-cnn.XXXXXX)}
mkdir -p "$out"
bench="$build/bench/tide_bench"
[[ -x "$bench" ]] || { echo "no $bench: build tide with -DTIDE_BUILD_BENCH=ON" >&2; exit 1; }

. "$here/common.sh"
peers_venv_torch  # sets vpy

peers_context \
  "torch:         $("$vpy" -c 'import torch; print(torch.__version__)')" \
  "command:       bench/peers/cnn_run.sh $* (STEPS=$steps)" \
  "out:           $out"

# tide's repetitions: 3 of ~steps/3 steps each (google-benchmark 1.7 has no fixed iteration
# count, so the time is sized from one calibration run).
"$bench" --benchmark_filter='^BM_CnnStep/traced:0/real_time$' --benchmark_min_time=0.5 \
  --benchmark_format=json > "$out/calibration.json" 2>/dev/null
min_time=$("$py" -c "import json; ms = json.load(open('$out/calibration.json'))['benchmarks'][0]['real_time']; print(round(max(0.2, 0.8 * $steps / 3 * ms / 1e3), 2))")

for ((r = 1; r <= rounds; ++r)); do
  order=$("$py" -c "c = ['tide-eager', 'tide-traced', 'torch']; k = $r % 3; print(' '.join(c[k:] + c[:k]))")
  echo "== round $r of $rounds: $order (load $(load))"
  for c in $order; do
    f="$out/r$r.$c.json"
    case $c in
      tide-eager | tide-traced)
        arg=$([[ $c == tide-eager ]] && echo 0 || echo 1)
        "$bench" --benchmark_filter="^BM_CnnStep/traced:$arg/real_time\$" --benchmark_repetitions=3 \
          --benchmark_min_time="$min_time" --benchmark_format=json > "$f" 2> "$f.log" ;;
      torch) "$vpy" "$here/cnn_step.py" --steps "$steps" > "$f" 2> "$f.log" ;;
    esac
  done
done

echo "== each convolution alone (load $(load))"
"$bench" --benchmark_filter='^BM_CnnConv(GemmFloor)?/' --benchmark_repetitions=3 --benchmark_min_time=0.3 \
  --benchmark_format=json > "$out/convs.tide.json" 2> "$out/convs.tide.log"
"$vpy" "$here/cnn_step.py" --convs --steps 20 > "$out/convs.torch.jsonl" 2> "$out/convs.torch.log"
echo "load at end:   $(load)" | tee -a "$out/context.txt"

"$py" - "$out" "$rounds" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def tide_ms(f):
    reps = [b for b in json.load(open(f))["benchmarks"] if b.get("run_type") == "iteration"]
    return statistics.median(b["real_time"] for b in reps)

per = {c: [] for c in ("tide-eager", "tide-traced", "torch")}
for r in range(1, rounds + 1):
    for c in per:
        f = f"{out}/r{r}.{c}.json"
        per[c].append(tide_ms(f) if c.startswith("tide") else
                      json.loads(open(f).read().strip().splitlines()[-1])["ms_per_step_median"])
print("\nms per step, per round:")
for c, v in per.items():
    print(f"  {c:12s} " + " ".join(f"{x:7.1f}" for x in v) + f"   median {statistics.median(v):7.1f}")
for c in ("tide-eager", "tide-traced"):
    ratios = [a / b for a, b in zip(per[c], per["torch"])]
    print(f"  {c} / torch per round: " + " ".join(f"{x:.3f}" for x in ratios) +
          f"   median {statistics.median(ratios):.3f}")

names = {0: "forward", 1: "input_grad", 2: "weight_grad"}
convs = ["1->32 28x28", "32->64 14x14"]
tide, floor = {}, {}
for b in json.load(open(f"{out}/convs.tide.json"))["benchmarks"]:
    if b.get("aggregate_name") == "median":
        c, p = [int(x.split(":")[1]) for x in b["run_name"].split("/")[1:3]]
        into = floor if b["run_name"].startswith("BM_CnnConvGemmFloor") else tide
        into[(convs[c], names[p])] = b["real_time"] / 1e3  # us -> ms
torch = {(d["conv"], d["pass"]): d["ms_median"]
         for d in map(json.loads, open(f"{out}/convs.torch.jsonl").read().split("\n")[:-1])}
print("\neach convolution alone at batch 128, ms (median): tide im2col + GEMM vs PyTorch oneDNN;")
print("floor: tide's per-sample GEMMs alone through cblas_sgemm")
for k in sorted(torch):
    t = tide.get(k)
    print(f"  {k[0]:13s} {k[1]:12s} tide {t:7.2f}   floor {floor.get(k, float('nan')):7.2f}"
          f"   torch {torch[k]:7.2f}   tide/torch {t / torch[k]:.2f}")
EOF
