#!/usr/bin/env bash
# One command on a GPU machine (DESIGN §8): builds tide with CUDA, runs every test (the CUDA
# suites run for real there instead of skipping), compute-sanitizer memcheck on the CUDA
# tests, the experiments with --device cuda, the CUDA benchmarks and the PyTorch anchors,
# and writes one report.
#   bash scripts/gpu_check.sh [STAGE] [REPORT_DIR]
# STAGE: all (default), or one of build, test, sanitize, experiments, bench, so that a short
# lease can run them in separate calls (the build stays in build-gpu/; bench alone builds
# just tide_bench_cuda when there is no build yet). REPORT_DIR defaults
# to $OUT (the device tool's output folder) or build-gpu/report; the report is
# gpu_check.md there, with each stage's log beside it.
# Dependencies: a GPU machine may have no package registry. When .deps/tide-gpu-deps.tar.xz
# is there (bash scripts/gpu_deps.sh pack, on a Debian machine, then carry .deps) and the
# machine has no cblas.h, the build uses that bundle alone.
# TIDE_CUDA_ARCH (default 90, Hopper) sets the architectures compiled; TIDE_FASHION_MNIST the
# data folder for the CNN run (a carried copy, when the machine has none); TIDE_MEMCHECK_TIMEOUT
# the seconds memcheck may take (560), TIDE_CTEST_TIMEOUT each test (900) and TIDE_BENCH_REPS
# the benchmarks' repetitions (5), so that `all` fits what is left of a lease.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
stage=${1:-all}
report_dir=${2:-${OUT:-build-gpu/report}}
mkdir -p "$report_dir"
report=$report_dir/gpu_check.md
jobs=$(nproc)
status=0

log() { printf '%s\n' "$*" | tee -a "$report"; }
run() {  # run NAME CMD...: logs the command, its exit code and the log's tail
  local name=$1
  shift
  log "### $name"
  log '```'
  log "\$ $*"
  local t0=$SECONDS
  "$@" >"$report_dir/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$report_dir/$name.log" >>"$report"
  log "(exit $rc, $((SECONDS - t0)) s; full log: $name.log)"
  log '```'
  [ $rc -eq 0 ] || status=1
  return $rc
}

deps() {
  if [ -f .deps/tide-gpu-deps.tar.xz ] && ! ls /usr/include/cblas.h /usr/include/*/cblas.h \
      /usr/include/*/*/cblas.h >/dev/null 2>&1; then
    local prefix
    prefix=$(bash scripts/gpu_deps.sh unpack /tmp/tide-gpu-deps)
    export CMAKE_PREFIX_PATH=$prefix
    export LD_LIBRARY_PATH=$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    log "dependencies: the carried bundle at $prefix"
  else
    log "dependencies: the system's"
  fi
}

configure() {
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  [ -f build-gpu/CMakeCache.txt ] && gen=()
  run configure cmake -S . -B build-gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTIDE_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${TIDE_CUDA_ARCH:-90}" -DTIDE_BUILD_TESTS=ON \
    -DTIDE_BUILD_BENCH=ON -DTIDE_BUILD_EXAMPLES=ON
}

build() {
  configure && run build cmake --build build-gpu -j "$jobs"
}

tests() {
  # Every suite; the CUDA ones (label cuda) run for real here instead of skipping, among them
  # the NCCL group as one rank (tests/cuda/test_cuda_dist.cpp) and every conv/pool/batch-norm
  # case of tests/ops on cuda:0.
  run ctest ctest --test-dir build-gpu --output-on-failure -j 4 --timeout "${TIDE_CTEST_TIMEOUT:-900}"
  run cuda_fault build-gpu/tests/tide_cuda_fault_test  # its checks, line by line
  # The traced mode again with ordinary edges between tide's kernels (TIDE_CUDA_PDL=0; the
  # default joins them by programmatic edges).
  run trace_ordinary_edges env TIDE_CUDA_PDL=0 build-gpu/tests/tide_cuda_tests --gtest_brief=1 \
    --gtest_filter='CudaTrace.*'
}

sanitize() {
  if ! command -v compute-sanitizer >/dev/null; then
    log "compute-sanitizer: not on PATH, skipped"
    return
  fi
  # Access errors only. Not reported: API errors (the out-of-memory tests provoke
  # cudaMalloc failures on purpose; tide handles them) and leaks at exit (each stream keeps
  # its 32 MiB cuBLASLt workspace and timeline, and the allocators their caches, for the
  # process's life: 140 MB in 1355 blocks after the CUDA tests on an H200, 2026-11-26).
  # TIDE_CUDA_SEGMENTS=0: a cudaMalloc per block, so that memcheck sees every block's bounds
  # (small blocks otherwise share 2 MiB segments: core/segment_source.h).
  run memcheck env TIDE_CUDA_SEGMENTS=0 timeout "${TIDE_MEMCHECK_TIMEOUT:-560}" \
    compute-sanitizer --tool memcheck --error-exitcode 3 \
    --report-api-errors no build-gpu/tests/tide_cuda_tests --gtest_brief=1
}

experiments() {
  local tide=build-gpu/examples/tide
  run demo "$tide" demo --device cuda
  run bench_async "$tide" bench-async --device cuda --runs 3
  run loop "$tide" loop --device cuda --n 10000 --runs 3
  run mlp_memory "$tide" mlp-memory --device cuda --policy all --mode all --batches 50 \
    --csv "$report_dir/mlp_memory_cuda.csv"
  # Training, eager then traced (CUDA graphs): the MLP and the CNN (cuDNN convolutions,
  # tide's pooling and batch-norm kernels), when the data is here.
  local data=${TIDE_FASHION_MNIST:-/usr/share/datasets/fashion-mnist} model mode
  if [ -d "$data" ]; then
    for model in mlp cnn; do
      for mode in eager traced; do
        run "train_${model}_$mode" "$tide" train fashion-mnist --model $model --mode $mode \
          --device cuda --epochs 2 --data "$data"
      done
    done
  else
    log "train: no Fashion-MNIST at $data, skipped"
  fi
}

# cuDNN for the convolutions (their op cases in the tests, the CNN, the benchmarks and the
# direct anchor): tide opens libcudnn.so.9 at run time. When the loader does not know it,
# PyTorch's wheel (nvidia-cudnn-cu*) may have it.
cudnn_path() {
  local inc h found=
  inc=$(dirname "$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)")/../include
  for h in "$inc"/cudnn.h /usr/include/cudnn.h /usr/include/*/cudnn.h; do
    [ -f "$h" ] && found=$h
  done
  [ -n "$found" ] ||
    log "cuDNN: no cudnn.h beside nvcc or in /usr/include: tide builds without GPU convolutions"
  if ldconfig -p 2>/dev/null | grep 'libcudnn\.so\.9' >/dev/null; then  # not -q: pipefail
    log "cuDNN: libcudnn.so.9 known to the loader"
    return
  fi
  local lib
  lib=$(python3 -c 'import os, nvidia.cudnn as c; print(os.path.join(list(c.__path__)[0], "lib"))' \
    2>/dev/null)
  if [ -n "$lib" ] && [ -e "$lib/libcudnn.so.9" ]; then
    export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    log "cuDNN: from PyTorch's wheel, $lib"
  else
    log "cuDNN: libcudnn.so.9 not found: GPU convolutions fail in the tests, skip in the benchmarks"
  fi
}

# Builds tide_bench_cuda alone when the build stage has not run (a fresh machine: about
# 1 min on 16 cores), so `bash scripts/gpu_check.sh bench` is enough for the numbers.
# Time: tide_bench_cuda has 48 benchmarks (bench_cuda.cpp 19; bench_cuda_cnn.cpp: 9 tide
# convolutions, 18 cuDNN ones, 2 CNN steps); at 0.2 s per repetition, 5 repetitions, with
# set-up (cuDNN's first handle, traces), expect 1.5-3 min, then about 1 min for the PyTorch
# anchors: well inside a device command's 10 minutes.
bench() {
  if [ ! -f build-gpu/CMakeCache.txt ]; then configure || return; fi
  run build_bench cmake --build build-gpu -j "$jobs" --target tide_bench_cuda || return
  run bench_cuda build-gpu/bench/tide_bench_cuda --benchmark_repetitions="${TIDE_BENCH_REPS:-5}" \
    --benchmark_min_time=0.2 --benchmark_report_aggregates_only=true \
    --benchmark_out_format=json --benchmark_out="$report_dir/tide_bench_cuda.json"
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    python3 bench/torch_cuda_anchor.py --reps 5 >"$report_dir/torch_cuda.json" ||
      log "torch anchor failed"
  else
    log "PyTorch with CUDA: not available, no anchor"
  fi
  run summary python3 bench/summarize_cuda.py "$report_dir"
}

: >"$report"
log "# tide gpu_check: $stage, $(date -u +'%Y-%m-%d %H:%M UTC')"
log "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi: not available')"
log "nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found')"
deps
cudnn_path
case "$stage" in
  build) build ;;
  test) tests ;;
  sanitize) sanitize ;;
  experiments) experiments ;;
  bench) bench ;;
  all) build && { tests; experiments; bench; sanitize; } ;;  # the slowest, memcheck, last
  *) echo "usage: bash scripts/gpu_check.sh [all|build|test|sanitize|experiments|bench] [REPORT_DIR]" >&2; exit 2 ;;
esac
log "gpu_check $stage: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
