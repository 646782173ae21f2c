# shellcheck shell=bash
# Shared by scripts/demo.sh, scripts/test.sh and .ci/run, which source it (it runs nothing
# by itself). Provides:
#   TIDE_ROOT          the repository root
#   tide_log MSG...    a message with the time and the time since the first script started
#   tide_deps          installs the Debian packages tide needs, only those missing
#   tide_configure DIR ARGS...   cmake configure of DIR (with ccache when it is installed)
#   tide_build DIR ARGS...       cmake --build DIR with $TIDE_JOBS jobs (default: nproc)
# It does not install a CUDA toolkit: CUDA is built only when nvcc is already on PATH.

TIDE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# dataset-fashion-mnist: the IDX files (about 30 MB) under /usr/share/datasets/fashion-mnist
# that `tide train fashion-mnist` and the train suite's Fashion-MNIST test read; without it
# that test skips.
# Not listed, because the default build does not need them: libblis-dev for -DTIDE_BLAS=blis,
# and the GEMM libraries that tide_bench_gemm_libs compares (-DTIDE_BENCH_GEMM_LIBS=ON;
# bench/CMakeLists.txt has the apt-get line).
# clang and libclang-rt-dev: CI's Clang build, the libFuzzer targets (scripts/fuzz.sh); the
# sanitizer and libFuzzer runtimes are in libclang-rt-dev, only recommended by clang.
# clang-format: CI's format check (scripts/format.sh --check).
# libopenmpi-dev and openmpi-bin: dist/'s MPI process group and `mpirun` for its 2-rank tests
# (tide builds without them, and those tests then skip).
# nlohmann-json3-dev: the JSON reader of GPT-2's encoder.json (text/gpt2_files.cpp), header-only.
# libdnnl-dev: oneDNN, whose sgemm runs the CPU's float GEMMs (TIDE_BLAS=auto) and whose
# matmul runs its bfloat16 GEMMs (TIDE_BF16_GEMM=auto; cmake/Blas.cmake). Without it float
# GEMMs go to OpenBLAS and bfloat16 ones take the float32 GEMM.
# ocl-icd-opencl-dev: only recommended by libdnnl-dev, but oneDNN's CMake config looks for
# OpenCL and fails the configure without it.
# chromium: the train suite loads the memory report in headless Chromium (the test skips
# without it).
TIDE_DEB_PACKAGES=(cmake g++ make libopenblas-dev libgtest-dev libgmock-dev googletest
                   libbenchmark-dev zlib1g-dev pkg-config dataset-fashion-mnist
                   clang libclang-rt-dev clang-format libopenmpi-dev openmpi-bin
                   nlohmann-json3-dev chromium libdnnl-dev ocl-icd-opencl-dev)
: "${TIDE_START:=$(date +%s)}"
export TIDE_START

tide_log() {
  local el=$(($(date +%s) - TIDE_START))
  printf '[%s +%dm%02ds] %s\n' "$(date +%H:%M:%S)" $((el / 60)) $((el % 60)) "$*"
}

tide_deps() {
  if ! command -v dpkg >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
    tide_log "no dpkg/apt-get: not installing packages; needs ${TIDE_DEB_PACKAGES[*]}"
    return 0
  fi
  local missing=() p status
  for p in "${TIDE_DEB_PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)  # what dpkg -s shows
    [[ $status == *"install ok installed"* ]] || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    tide_log "packages: all present"
    return 0
  fi
  local as_root=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      tide_log "missing packages and neither root nor sudo: install ${missing[*]}" >&2
      return 1
    fi
    as_root=(sudo)
  fi
  tide_log "installing ${missing[*]}"
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${missing[@]}"
}

tide_configure() {
  local dir=$1
  shift
  local launcher=()
  if command -v ccache >/dev/null 2>&1; then
    launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  tide_log "configure $dir: $*"
  cmake -S "$TIDE_ROOT" -B "$dir" "${launcher[@]}" "$@"
}

tide_build() {
  local dir=$1
  shift
  tide_log "build $dir $*"
  cmake --build "$dir" -j "${TIDE_JOBS:-$(nproc)}" "$@"
}
