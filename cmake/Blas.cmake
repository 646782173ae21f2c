# The BLAS behind tide's CPU GEMMs (ops/cpu/linalg.cpp calls cblas_sgemm / cblas_dgemm).
#   TIDE_BLAS=auto      (default) onednn where oneDNN is installed (libdnnl-dev, which
#                       scripts/deps.sh installs for the bfloat16 GEMMs too), else openblas.
#   TIDE_BLAS=openblas  OpenBLAS, libopenblas-dev. On Debian the library that runs is the
#                       libopenblas.so.0 alternative: the pthread build unless
#                       update-alternatives chose openmp or serial.
#   TIDE_BLAS=blis      BLIS through its CBLAS layer, libblis-dev (Debian: the OpenMP build
#                       by default, the libblis.so.4 alternative; libblis-pthread-dev beside).
#   TIDE_BLAS=onednn    float GEMMs through oneDNN's dnnl_sgemm (libdnnl-dev), serial in
#                       row parts on tide's pool (ops/cpu/linalg.cpp); oneDNN has no double
#                       GEMM, so OpenBLAS stays for those.
# Why oneDNN where it is installed: faster than OpenBLAS on two of the three CPUs measured,
# an AMD EPYC with AVX-512 (the textbook MLP step 0.92x eager, 0.94x traced) and a Xeon with
# AMX (the character GPT's GEMMs 0.72x, its step 0.79x traced; the MLP step 0.94x), slower
# on an Ice Lake (its GEMMs 1.2x): bench/RESULTS.md, "oneDNN's GEMM in the step", "GEMM
# libraries" and "The character GPT against PyTorch with oneDNN's GEMMs".
# libxsmm and Eigen were measured too but have no CBLAS; ATLAS has one but Debian's
# generic build ran the MLP step's GEMMs at ~10 % of OpenBLAS's rate, so it is not offered.
#
# Sets BLAS::BLAS (FindBLAS), TIDE_CBLAS_INCLUDE_DIR (the folder holding that library's
# cblas.h) and TIDE_BLAS_VENDOR (FindBLAS's BLA_VENDOR, which tideConfig.cmake reuses).
set(TIDE_BLAS auto CACHE STRING "BLAS for the CPU GEMMs: auto, openblas, blis or onednn")
set_property(CACHE TIDE_BLAS PROPERTY STRINGS auto openblas blis onednn)
# TIDE_BLAS_CHOSEN: the library auto resolved to (the others: themselves).
set(TIDE_BLAS_CHOSEN ${TIDE_BLAS})
if(TIDE_BLAS STREQUAL "auto")
  find_package(dnnl CONFIG QUIET)
  if(dnnl_FOUND)
    set(TIDE_BLAS_CHOSEN onednn)
  else()
    set(TIDE_BLAS_CHOSEN openblas)
  endif()
endif()

if(TIDE_BLAS_CHOSEN STREQUAL "openblas" OR TIDE_BLAS_CHOSEN STREQUAL "onednn")
  set(TIDE_BLAS_VENDOR OpenBLAS)
  set(_tide_cblas_suffixes openblas)
  set(_tide_blas_package libopenblas-dev)
elseif(TIDE_BLAS_CHOSEN STREQUAL "blis")
  set(TIDE_BLAS_VENDOR FLAME)
  # Debian has no unsuffixed BLIS cblas.h; the variants' headers declare the same calls.
  set(_tide_cblas_suffixes blis blis-openmp blis-pthread)
  set(_tide_blas_package "libblis-dev")
else()
  message(FATAL_ERROR "TIDE_BLAS='${TIDE_BLAS}': expected auto, openblas, blis or onednn")
endif()

set(BLA_VENDOR ${TIDE_BLAS_VENDOR})
find_package(BLAS)
if(NOT BLAS_FOUND)
  message(FATAL_ERROR "TIDE_BLAS=${TIDE_BLAS}: ${TIDE_BLAS_VENDOR} BLAS not found "
                      "(Debian: apt-get install ${_tide_blas_package})")
endif()
# OpenBLAS keeps the cache entry TIDE_CBLAS_INCLUDE_DIR it always had (a -D of it still
# wins); BLIS has its own entry, so switching TIDE_BLAS in a build folder takes effect.
if(NOT TIDE_BLAS_CHOSEN STREQUAL "blis")
  find_path(TIDE_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES ${_tide_cblas_suffixes})
  set(_tide_cblas_dir ${TIDE_CBLAS_INCLUDE_DIR})
else()
  # The multiarch folder's own cblas.h is OpenBLAS's on Debian: look in the BLIS folders
  # first.
  find_path(TIDE_BLIS_CBLAS_INCLUDE_DIR cblas.h
            PATHS /usr/include/${CMAKE_LIBRARY_ARCHITECTURE} /usr/local/include
            PATH_SUFFIXES ${_tide_cblas_suffixes} NO_DEFAULT_PATH)
  find_path(TIDE_BLIS_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES ${_tide_cblas_suffixes})
  set(_tide_cblas_dir ${TIDE_BLIS_CBLAS_INCLUDE_DIR})
endif()
if(NOT _tide_cblas_dir)
  message(FATAL_ERROR "TIDE_BLAS=${TIDE_BLAS}: cblas.h not found "
                      "(Debian: apt-get install ${_tide_blas_package})")
endif()
set(TIDE_CBLAS_INCLUDE_DIR ${_tide_cblas_dir})  # for BLIS, shadows the OpenBLAS entry
# oneDNN: DNNL::dnnl, which the caller links; TIDE_SGEMM_ONEDNN tells ops/cpu/linalg.cpp.
# (TIDE_BF16_GEMM, below, may use oneDNN too.)
set(TIDE_SGEMM_ONEDNN OFF)
if(TIDE_BLAS_CHOSEN STREQUAL "onednn")
  find_package(dnnl CONFIG)
  if(NOT dnnl_FOUND)
    message(FATAL_ERROR "TIDE_BLAS=onednn: oneDNN not found (Debian: apt-get install "
                        "libdnnl-dev), or set dnnl_DIR to its cmake folder")
  endif()
  set(TIDE_SGEMM_ONEDNN ON)
  message(STATUS "tide BLAS: float GEMMs through oneDNN ${dnnl_VERSION}, the rest OpenBLAS")
endif()
message(STATUS "tide BLAS: ${TIDE_BLAS_CHOSEN} (TIDE_BLAS=${TIDE_BLAS}; ${BLAS_LIBRARIES}; "
               "${TIDE_CBLAS_INCLUDE_DIR}/cblas.h)")
# The CPU's bfloat16 GEMMs (ops/cpu/half_gemm.cpp; float16's always take the float32 path):
#   TIDE_BF16_GEMM=auto     (default) oneDNN's matmul when oneDNN is installed (libdnnl-dev,
#                           which scripts/deps.sh installs), else float32
#   TIDE_BF16_GEMM=onednn   oneDNN's matmul: AMX or AVX512_BF16 where the CPU has them, with
#                           float32 accumulation; fails to configure without oneDNN
#   TIDE_BF16_GEMM=float32  the operands widened to float32, the float32 GEMM, one rounding
# Measured in bench/RESULTS.md ("bfloat16 GEMMs on the CPU").
set(TIDE_BF16_GEMM auto CACHE STRING "CPU bfloat16 GEMMs: auto, onednn or float32")
set_property(CACHE TIDE_BF16_GEMM PROPERTY STRINGS auto onednn float32)
set(TIDE_BF16_GEMM_ONEDNN OFF)
if(TIDE_BF16_GEMM STREQUAL "auto" OR TIDE_BF16_GEMM STREQUAL "onednn")
  if(NOT dnnl_FOUND)
    find_package(dnnl CONFIG QUIET)
  endif()
  if(dnnl_FOUND)
    set(TIDE_BF16_GEMM_ONEDNN ON)
  elseif(TIDE_BF16_GEMM STREQUAL "onednn")
    message(FATAL_ERROR "TIDE_BF16_GEMM=onednn: oneDNN not found (Debian: apt-get install "
                        "libdnnl-dev), or set dnnl_DIR to its cmake folder")
  endif()
elseif(NOT TIDE_BF16_GEMM STREQUAL "float32")
  message(FATAL_ERROR "TIDE_BF16_GEMM='${TIDE_BF16_GEMM}': expected auto, onednn or float32")
endif()
if(TIDE_BF16_GEMM_ONEDNN)
  message(STATUS "tide bfloat16 GEMMs: oneDNN ${dnnl_VERSION}'s matmul")
else()
  message(STATUS "tide bfloat16 GEMMs: through the float32 GEMM")
endif()
# Whether tide links oneDNN at all (tideConfig.cmake finds it for a static tide's users).
if(TIDE_SGEMM_ONEDNN OR TIDE_BF16_GEMM_ONEDNN)
  set(TIDE_USES_ONEDNN ON)
else()
  set(TIDE_USES_ONEDNN OFF)
endif()
unset(_tide_cblas_dir)
unset(_tide_cblas_suffixes)
unset(_tide_blas_package)
