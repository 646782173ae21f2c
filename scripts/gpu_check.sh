#!/usr/bin/env bash
# One command on a GPU machine (docs/gpu.md): builds tide with CUDA, runs the GPU tests (the
# CUDA suites run for real there instead of skipping), compute-sanitizer memcheck, the
# experiments with --device cuda, the CUDA benchmarks and the PyTorch anchors, and writes
# one report.
#   bash scripts/gpu_check.sh [STAGE] [REPORT_DIR]
# STAGE: quick, all (default), gpt, or one of build, test, sanitize, experiments, bench.
#   gpt: builds the tide command, then GPT-2 124M (batch 8, context 1024) for TIDE_GPT_STEPS
#     (30) steps each, in each of TIDE_GPT_PRECISIONS ("float32 tf32 bfloat16": float32,
#     float32 with TF32 GEMMs, bfloat16 autocast / AMP): tide eager and traced, PyTorch eager
#     and torch.compile (bench/peers/gpt_step.py), each boxed at TIDE_GPT_BOX (120) seconds;
#     the JSON lines are gpt_<framework>_<mode>_<precision>.json in the report folder. Needs
#     .data/text (bash scripts/gpu_prepare.sh here).
#   quick: build, every GPU test, memcheck of the tests no GPU has run yet (QUICK_MEMCHECK
#     below), the benchmarks with 3 repetitions, the PyTorch anchor and the targets'
#     verdicts, each stage time-boxed (TIDE_QUICK_BOX_* seconds) so that a slow one cannot
#     eat the others: about 6 minutes on an H200 with 16 cores. Prepare with
#     `bash scripts/gpu_prepare.sh` here first.
#   all: every suite, the experiments, the benchmarks, then memcheck on everything
#     (430-570 s: one device command at best).
# The build stays in build-gpu/ (bench alone builds just tide_bench_cuda when there is no
# build yet). REPORT_DIR defaults to $OUT (the device tool's output folder) or
# build-gpu/report; the report is gpu_check.md there, with each stage's log beside it.
# Dependencies: a GPU machine may have no package registry. When .deps/tide-gpu-deps.tar.xz
# is there (bash scripts/gpu_deps.sh pack, on a Debian machine, then carry .deps) and the
# machine lacks any header the build needs (cblas.h, GoogleTest, Google Benchmark, zlib,
# nlohmann-json),
# the build uses that bundle, after checking that it holds each of them.
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

# What configure needs from outside CUDA, as headers: a machine that lacks any of them
# builds against the carried bundle (an image with cblas.h but no GoogleTest included).
needed_headers=(cblas.h gtest/gtest.h gmock/gmock.h benchmark/benchmark.h zlib.h nlohmann/json.hpp)
has_header() {  # has_header ROOT H: H under ROOT/include or a multiarch/suffix folder there
  local root=$1 h=$2
  compgen -G "$root/include/$h" >/dev/null || compgen -G "$root/include/*/$h" >/dev/null ||
    compgen -G "$root/include/*/*/$h" >/dev/null
}
deps() {
  local sys_root=${TIDE_SYSTEM_ROOT:-/usr} missing=() h
  for h in "${needed_headers[@]}"; do has_header "$sys_root" "$h" || missing+=("$h"); done
  if [ ${#missing[@]} -eq 0 ]; then
    log "dependencies: the system's"
    return 0
  fi
  if [ ! -f .deps/tide-gpu-deps.tar.xz ]; then
    log "dependencies: the system lacks ${missing[*]} and no bundle was carried (.deps/): run" \
      "'bash scripts/gpu_prepare.sh' where the packages are and carry .deps"
    return 1
  fi
  local prefix lacking=()
  prefix=$(bash scripts/gpu_deps.sh unpack "${TIDE_DEPS_DIR:-/tmp/tide-gpu-deps}") || return 1
  for h in "${needed_headers[@]}"; do has_header "$prefix" "$h" || lacking+=("$h"); done
  if [ ${#lacking[@]} -ne 0 ]; then
    log "dependencies: the carried bundle lacks ${lacking[*]}: pack it again (scripts/gpu_deps.sh pack)"
    return 1
  fi
  export CMAKE_PREFIX_PATH=$prefix${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export LD_LIBRARY_PATH=$prefix/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  log "dependencies: the carried bundle at $prefix (the system lacks ${missing[*]})"
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
    # The CNN in bfloat16 autocast: cuDNN's 16-bit convolutions in training.
    for mode in eager traced; do
      run "train_cnn_${mode}_bfloat16" "$tide" train fashion-mnist --model cnn --mode $mode \
        --device cuda --epochs 2 --dtype bfloat16 --data "$data"
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
# Time: tide_bench_cuda has 54 benchmarks (bench_cuda.cpp 25; bench_cuda_cnn.cpp: 9 tide
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

# The GPU tests no GPU has run yet: `quick` runs memcheck on these alone. Empty this list
# (and note the run in bench/RESULTS.md) once a GPU has run them.
QUICK_MEMCHECK=(
  'CudaEngine.ARefusedGraphCallLeavesNoErrorForTheNextOp'
  'CudaTrace.ChainedIterationsOfTwoStatesEqualEagerWithEitherEdges'
  'CudaTrace.AnInvalidFloatCountRunsNoIterationOnTheDevice'
  'CudaTraceLibraries.*'
  'CudaNccl.ATracedDataParallelStepIsOneGraphAndEqualsEager'
  'CudaPhilox.*'
  '*EveryDeviceGivesTheScalarFormulasBits*'
  'Conv.TheFastestAlgorithmsAgreeWithTheDeterministicOnes'
  'Conv.BatchNorm*'
  'Norm.*'
  'Attention.*'
  'Linalg.*Batched*'
  'Elementwise.Gelu*'
  'Dropout*'
  'CudaFunctors.*'
  'Linalg.SwapAxes*'
  'Optim.GradScale*'
  'Optim.WarmupCosine*'
  'CudaTrace.ClippedScheduledStepEqualsEagerBitwise'
  'CudaTrace.GptCharStepIsOneGraphAndEqualsEager'
  'HalfGemm.*'
  'MatmulPrecision.*'
  'Reduce.*'
  'Half.AttentionIsOneKernelWithTheFloat32Bits'
  'Half.TakeRowsMovesSixteenBitRows'
  'Half.Conv2d*'
  'Linalg.LinearGelu*'
)

# boxed SECONDS NAME CMD...: run, killed after SECONDS (exit 124 in the report). quick's
# boxes (170 + 70 + 45 + 45 + 30 s) add up to 6 minutes, the budget of one device call.
boxed() {
  local secs=$1 name=$2
  shift 2
  run "$name" timeout --kill-after=10 "$secs" "$@"
}

quick() {
  local t0=$SECONDS
  configure || return
  boxed "${TIDE_QUICK_BOX_BUILD:-170}" build cmake --build build-gpu -j "$jobs" || return
  boxed "${TIDE_QUICK_BOX_TEST:-70}" ctest_cuda ctest --test-dir build-gpu --output-on-failure \
    -L cuda --timeout 90
  if command -v compute-sanitizer >/dev/null; then
    local filter
    filter=$(IFS=:; echo "${QUICK_MEMCHECK[*]}")
    boxed "${TIDE_QUICK_BOX_MEMCHECK:-45}" memcheck_new env TIDE_CUDA_SEGMENTS=0 \
      compute-sanitizer --tool memcheck --error-exitcode 3 --report-api-errors no \
      build-gpu/tests/tide_cuda_tests --gtest_brief=1 --gtest_filter="$filter"
  else
    log "compute-sanitizer: not on PATH, memcheck skipped"
  fi
  boxed "${TIDE_QUICK_BOX_BENCH:-45}" bench_cuda build-gpu/bench/tide_bench_cuda \
    --benchmark_repetitions=3 --benchmark_min_time=0.1 --benchmark_report_aggregates_only=true \
    --benchmark_out_format=json --benchmark_out="$report_dir/tide_bench_cuda.json"
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    timeout 30 python3 bench/torch_cuda_anchor.py --reps 3 >"$report_dir/torch_cuda.json" ||
      log "torch anchor failed or passed its 30 s"
  else
    log "PyTorch with CUDA: not available, no anchor"
  fi
  run summary python3 bench/summarize_cuda.py "$report_dir"
  log "quick: $((SECONDS - t0)) s"
}

gpt() {
  if [ ! -f build-gpu/CMakeCache.txt ]; then configure || return; fi
  run build_cli cmake --build build-gpu -j "$jobs" --target tide_cli || return
  local tide=build-gpu/examples/tide steps=${TIDE_GPT_STEPS:-30} box=${TIDE_GPT_BOX:-120} mode
  local data=.data/text/shakespeare.txt
  if [ ! -f "$data" ] || [ ! -f .data/text/gpt2/vocab.bpe ]; then
    log "gpt: no .data/text (bash scripts/gpu_prepare.sh, then carry .data), skipped"
    return
  fi
  local precisions=${TIDE_GPT_PRECISIONS:-float32 tf32 bfloat16} prec flags
  local torch_ok=0
  python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null && torch_ok=1
  [ $torch_ok = 1 ] || log "PyTorch with CUDA: not available, no GPT anchor"
  for prec in $precisions; do
    case $prec in
      float32) flags="" ;;
      tf32) flags="--tf32" ;;
      bfloat16 | float16) flags="--dtype $prec" ;;
      *) log "gpt: unknown precision $prec (float32, tf32, bfloat16, float16)"; return 1 ;;
    esac
    for mode in eager traced; do
      boxed "$box" "gpt_tide_${mode}_$prec" "$tide" gpt train --preset gpt2-124m --device cuda \
        --mode $mode --steps "$steps" --batch 8 --eval-every 0 --eval-batches 2 \
        --sample-tokens 0 --data "$data" $flags --json "$report_dir/gpt_tide_${mode}_$prec.json"
    done
    [ $torch_ok = 1 ] || continue
    for mode in eager compile; do
      boxed "$box" "gpt_torch_${mode}_$prec" sh -c "python3 bench/peers/gpt_step.py \
        --preset gpt2-124m --device cuda --mode $mode --steps $steps --batch 8 \
        --eval-batches 2 $flags > '$report_dir/gpt_torch_${mode}_$prec.json'"
    done
  done
  log "gpt: $(cat "$report_dir"/gpt_*.json 2>/dev/null | tr '\n' ' ')"
}

: >"$report"
log "# tide gpu_check: $stage, $(date -u +'%Y-%m-%d %H:%M UTC')"
log "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'nvidia-smi: not available')"
log "nvcc: $(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo 'not found')"
deps || { log "gpu_check $stage: FAILED (dependencies)"; exit 1; }
cudnn_path
case "$stage" in
  quick) quick ;;
  build) build ;;
  test) tests ;;
  sanitize) sanitize ;;
  experiments) experiments ;;
  bench) bench ;;
  gpt) gpt ;;
  all) build && { tests; experiments; bench; sanitize; } ;;  # the slowest, memcheck, last
  *) echo "usage: bash scripts/gpu_check.sh [quick|all|gpt|build|test|sanitize|experiments|bench] [REPORT_DIR]" >&2; exit 2 ;;
esac
log "gpu_check $stage: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
