#!/usr/bin/env bash
# Runs the benchmark suites the way bench/RESULTS.md records them and prints the machine
# context first. Usage: bench/run.sh [BUILD_DIR] [OUT_DIR] [ROUNDS] [REPS]
# (defaults: build, ., 5, 5). Takes ~5 minutes on an idle 2-core machine.
#
#  1. tide_bench, every benchmark, REPS repetitions in random interleaved order
#     -> OUT_DIR/tide_bench.json
#  2. the textbook-MLP comparison in ROUNDS rounds; each round runs, one after the other,
#     tide's step and GEMM floor, then tide_bench_torch's textbook step once per libtorch
#     environment below (when tide_bench_torch was built, -DTIDE_BENCH_LIBTORCH=ON), so
#     load drift on a shared machine hits every configuration alike
#     -> OUT_DIR/mlp_tide.r<r>.json, OUT_DIR/mlp_torch.<env>_r<r>.json
#  3. the other libtorch anchors once -> OUT_DIR/tide_bench_torch.json
#  4. bench/summarize.py OUT_DIR: medians over all repetitions, and the target ratios (the
#     MLP ratios from step 2's rounds only, the trainer's from step 1).
#
# libtorch environments (settings its OpenMP runtime reads only at startup; the in-process
# ones, at::set_num_threads and OpenBLAS's count, are benchmark arguments):
#   default   nothing set (out of the box)
#   passive   OMP_WAIT_POLICY=passive: OpenMP threads sleep at once instead of spinning
# tide itself is never given an environment variable. OPENBLAS_CORETYPE is not changed.
set -euo pipefail
build=${1:-build}
out=${2:-.}
rounds=${3:-5}
reps=${4:-5}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
rm -f "$out"/tide_bench*.json "$out"/mlp_*.json

echo "date:              $(date)"
echo "nproc:             $(nproc)"
echo "cpu:               $(lscpu | grep 'Model name' | sed 's/Model name: *//')"
echo "openblas:          $(readlink -f /etc/alternatives/libopenblas.so.0-x86_64-linux-gnu 2>/dev/null || echo '?')"
echo "OPENBLAS_CORETYPE: ${OPENBLAS_CORETYPE:-(unset)}"
echo "load average:      $(cut -d' ' -f1-3 /proc/loadavg)"

common=(--benchmark_enable_random_interleaving=true --benchmark_display_aggregates_only=true
        --benchmark_out_format=json)

"$build/bench/tide_bench" --benchmark_repetitions="$reps" "${common[@]}" \
  --benchmark_out="$out/tide_bench.json"

torch="$build/bench/tide_bench_torch"
mlp='BM_TextbookMlpStep|BM_TextbookGemmFloor'
for ((r = 1; r <= rounds; ++r)); do
  echo "== MLP comparison, round $r of $rounds (load $(cut -d' ' -f1 /proc/loadavg))"
  "$build/bench/tide_bench" --benchmark_filter="$mlp" --benchmark_repetitions=1 "${common[@]}" \
    --benchmark_out="$out/mlp_tide.r$r.json"
  if [[ -x "$torch" ]]; then
    "$torch" --benchmark_filter=Textbook --benchmark_repetitions=1 "${common[@]}" \
      --benchmark_out="$out/mlp_torch.default_r$r.json"
    OMP_WAIT_POLICY=passive "$torch" --benchmark_filter=Textbook --benchmark_repetitions=1 \
      "${common[@]}" --benchmark_out="$out/mlp_torch.passive_r$r.json"
  fi
done
if [[ -x "$torch" ]]; then
  # The other libtorch anchors (tiny add, small MLP), once, out of the box.
  "$torch" --benchmark_filter='BM_TorchTinyAdd|BM_TorchMlpStep' --benchmark_repetitions="$reps" \
    "${common[@]}" --benchmark_out="$out/tide_bench_torch.json"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
python3 "$here/summarize.py" "$out"
