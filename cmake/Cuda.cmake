# CUDA language setup. Never needs a GPU at configure time: the architecture list is fixed
# (override with -DCMAKE_CUDA_ARCHITECTURES=...). Sets TIDE_WITH_CUDA.
set(TIDE_WITH_CUDA OFF)
if(NOT TIDE_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  # The CUDA sources use CUDA 13's graph API (cudaGraphAddNode with edge data, whose CUDA 12
  # form is another function) and the runtime's library loading (cudaLibraryLoadData, which
  # CUDA 12.4 lacks); an older toolkit would fail deep in the build, so it is refused here.
  set(TIDE_MIN_CUDA 13.0)
  if(CMAKE_CUDA_COMPILER)
    execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --version OUTPUT_VARIABLE _tide_nvcc_out
                    ERROR_QUIET)
    string(REGEX MATCH "release ([0-9]+\\.[0-9]+)" _tide_nvcc_release "${_tide_nvcc_out}")
    set(_tide_nvcc_version "${CMAKE_MATCH_1}")
    if(_tide_nvcc_version AND _tide_nvcc_version VERSION_LESS TIDE_MIN_CUDA)
      string(CONCAT _tide_old "tide's CUDA backend needs CUDA ${TIDE_MIN_CUDA} or later; "
                    "${CMAKE_CUDA_COMPILER} is CUDA ${_tide_nvcc_version}")
      if(TIDE_CUDA STREQUAL "ON")
        message(FATAL_ERROR "${_tide_old}")
      endif()
      message(WARNING "${_tide_old}: building without CUDA (-DTIDE_CUDA=OFF silences this)")
      set(_tide_cuda_too_old ON)
    endif()
  endif()
  if(_tide_cuda_too_old)
    # AUTO with an older toolkit: the CPU build only (warned above).
  elseif(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 75 80 86 90 CACHE STRING "CUDA architectures")
    endif()
    enable_language(CUDA)
    # CMake 3.25 knows no C++20 flag for nvcc; nvcc >= 12 accepts -std=c++20.
    if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
    endif()
    set(CMAKE_CUDA_STANDARD 20)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    find_package(CUDAToolkit REQUIRED)
    set(TIDE_WITH_CUDA ON)
  elseif(TIDE_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TIDE_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "tide: CUDA ${TIDE_WITH_CUDA}")

# NCCL for dist/ (docs/data-parallel.md): its header comes with the CUDA toolkit; the library is
# loaded at run time (dist/nccl.cpp), so only nccl.h is needed to build. Sets TIDE_WITH_NCCL.
set(TIDE_WITH_NCCL OFF)
if(TIDE_WITH_CUDA)
  find_path(TIDE_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(TIDE_NCCL_INCLUDE_DIR)
    set(TIDE_WITH_NCCL ON)
  endif()
endif()
message(STATUS "tide: NCCL ${TIDE_WITH_NCCL}")
