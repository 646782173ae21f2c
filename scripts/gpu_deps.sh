#!/usr/bin/env bash
# Packs what tide's build needs beyond CUDA (OpenBLAS, GoogleTest, Google Benchmark, zlib,
# nlohmann-json),
# taken from this machine's Debian packages, into .deps/tide-gpu-deps.tar.xz, for a GPU
# machine that has the CUDA toolkit and CMake but no package registry. scripts/gpu_check.sh
# unpacks it there and builds against it alone when the machine lacks the packages.
#   bash scripts/gpu_deps.sh pack     here (installs the packages first when missing)
#   bash scripts/gpu_deps.sh unpack D there: unpacks into D (prints the prefix to use)
# The archive holds shared OpenBLAS with its Fortran runtime (libgfortran, libquadmath),
# static GoogleTest/GoogleMock and zlib, shared Google Benchmark, the nlohmann-json headers,
# their headers and CMake package files, laid out as under /usr. About 10 MB. .deps/ is
# ignored by git: carry it.
set -euo pipefail
# shellcheck source=scripts/deps.sh
source "$(dirname "${BASH_SOURCE[0]}")/deps.sh"
cd "$TIDE_ROOT"
archive=.deps/tide-gpu-deps.tar.xz
arch=x86_64-linux-gnu

pack() {
  tide_deps
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  local lib=$tmp/usr/lib/$arch inc=$tmp/usr/include
  mkdir -p "$lib/cmake" "$inc"
  # OpenBLAS (pthread build) where FindBLAS looks, and the runtime it needs.
  cp -L /usr/lib/$arch/openblas-pthread/libopenblas.so.0 "$lib/"
  ln -s libopenblas.so.0 "$lib/libopenblas.so"
  cp -L /usr/lib/$arch/openblas-pthread/../libgfortran.so.5 "$lib/" 2>/dev/null ||
    cp -L /lib/$arch/libgfortran.so.5 "$lib/"
  cp -L /lib/$arch/libquadmath.so.0 "$lib/"
  cp /usr/include/$arch/openblas-pthread/{cblas.h,openblas_config.h} "$inc/"
  # GoogleTest and GoogleMock (static) with their CMake package.
  cp /usr/lib/$arch/lib{gtest,gtest_main,gmock,gmock_main}.a "$lib/"
  cp -r /usr/lib/$arch/cmake/GTest "$lib/cmake/"
  cp -r /usr/include/gtest /usr/include/gmock "$inc/"
  # Google Benchmark (shared in Debian) with its CMake package.
  cp /usr/lib/$arch/libbenchmark.so.1.7.1 "$lib/"  # the name its CMake package imports
  ln -s libbenchmark.so.1.7.1 "$lib/libbenchmark.so.1debian"  # its soname
  ln -s libbenchmark.so.1.7.1 "$lib/libbenchmark.so"
  cp /usr/lib/$arch/libbenchmark_main.a "$lib/"
  cp -r /usr/lib/$arch/cmake/benchmark "$lib/cmake/"
  cp -r /usr/include/benchmark "$inc/"
  # zlib (static: the GPU machine may have the runtime but not the headers).
  cp /usr/lib/$arch/libz.a "$lib/"
  cp /usr/include/{zlib.h,zconf.h} "$inc/"
  # nlohmann-json (header-only) with its CMake package, which lives under share/.
  cp -r /usr/include/nlohmann "$inc/"
  mkdir -p "$tmp/usr/share/cmake"
  cp -r /usr/share/cmake/nlohmann_json "$tmp/usr/share/cmake/"
  mkdir -p .deps
  tar -C "$tmp" -cJf "$archive" usr
  tide_log "packed $archive ($(du -h "$archive" | cut -f1))"
}

unpack() {
  local dest=${1:?usage: gpu_deps.sh unpack DIR}
  [ -f "$archive" ] || { echo "no $archive: run 'bash scripts/gpu_deps.sh pack' where the packages are, and carry .deps" >&2; exit 1; }
  mkdir -p "$dest"
  tar -C "$dest" -xJf "$archive"
  echo "$dest/usr"
}

case "${1:-}" in
  pack) pack ;;
  unpack) unpack "${2:-}" ;;
  *) echo "usage: bash scripts/gpu_deps.sh pack | unpack DIR" >&2; exit 2 ;;
esac
