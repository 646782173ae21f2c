# MPI for dist/ (docs/data-parallel.md). Optional: without it tide builds and tests as before, and
# dist::init() says at run time that this build has no MPI (dist/mpi_none.cpp).
# TIDE_MPI: AUTO (use MPI when found), ON (fail without it), OFF. Sets TIDE_WITH_MPI.
# tide calls MPI's C API from C++ (MPI::MPI_CXX); the C++ bindings, removed in MPI-3, are
# kept out (MPI_CXX_SKIP_MPICXX), and C need not be enabled as a language.
set(TIDE_MPI AUTO CACHE STRING "Build the MPI process group: AUTO (when MPI is found), ON, OFF")
set_property(CACHE TIDE_MPI PROPERTY STRINGS AUTO ON OFF)
set(TIDE_WITH_MPI OFF)
if(NOT TIDE_MPI STREQUAL "OFF")
  set(MPI_CXX_SKIP_MPICXX ON CACHE BOOL "Leave out MPI's deprecated C++ bindings")
  find_package(MPI COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(TIDE_WITH_MPI ON)
  elseif(TIDE_MPI STREQUAL "ON")
    message(FATAL_ERROR "TIDE_MPI=ON but no MPI was found (Debian: apt-get install "
                        "libopenmpi-dev openmpi-bin)")
  endif()
endif()
message(STATUS "tide: MPI ${TIDE_WITH_MPI}")
