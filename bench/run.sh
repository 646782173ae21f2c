#!/usr/bin/env bash
# Runs the benchmark suites the way bench/RESULTS.md records them and prints the machine
# context first. Usage: bench/run.sh [BUILD_DIR] [OUT_DIR]   (defaults: build, .)
# Writes OUT_DIR/tide_bench.json (and tide_bench_torch.json when that was built). Takes
# about two minutes; it does not change OPENBLAS_CORETYPE or any other setting.
set -euo pipefail
build=${1:-build}
out=${2:-.}
flags=(--benchmark_repetitions=5 --benchmark_report_aggregates_only=true)

echo "date:              $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "nproc:             $(nproc)"
echo "cpu:               $(lscpu | grep 'Model name' | sed 's/Model name: *//')"
echo "OPENBLAS_CORETYPE: ${OPENBLAS_CORETYPE:-(unset)}"
echo "load average:      $(cut -d' ' -f1-3 /proc/loadavg)"

"$build/bench/tide_bench" "${flags[@]}" --benchmark_out="$out/tide_bench.json" \
  --benchmark_out_format=json
if [[ -x "$build/bench/tide_bench_torch" ]]; then
  "$build/bench/tide_bench_torch" "${flags[@]}" --benchmark_out="$out/tide_bench_torch.json" \
    --benchmark_out_format=json
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
