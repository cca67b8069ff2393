# Finds spmd's dependencies and wraps each in an imported target:
#   spmd::eigen spmd::blas spmd::openmp spmd::catch2 spmd::cli11 spmd::toml
#   spmd::json
# fmt is not among them: spmd's tables are printf formats (nccl-tests' own,
# which its layout test diffs) and its messages str_cat (runtime/error.h).
# Debian's packages are found in /usr/include; on machines without them
# (the lent GPU machine) SPMD_DEPS_DIR holds header-only copies, searched first.
# Nothing is downloaded.

set(_spmd_hint_dirs)
if(SPMD_DEPS_DIR)
  list(APPEND _spmd_hint_dirs ${SPMD_DEPS_DIR} ${SPMD_DEPS_DIR}/include)
endif()

function(spmd_header_dep target header)
  cmake_parse_arguments(ARG "" "" "SUFFIXES" ${ARGN})
  find_path(${target}_INCLUDE_DIR ${header}
            HINTS ${_spmd_hint_dirs}
            PATH_SUFFIXES ${ARG_SUFFIXES})
  if(NOT ${target}_INCLUDE_DIR)
    message(FATAL_ERROR "spmd: cannot find ${header}; run scripts/setup.sh, or set SPMD_DEPS_DIR")
  endif()
  add_library(spmd_dep_${target} INTERFACE)
  # /usr/include is every compiler's default; naming it again (-isystem) would
  # break nvcc's host compiler, whose <cmath> relies on #include_next.
  if(NOT ${target}_INCLUDE_DIR STREQUAL "/usr/include")
    target_include_directories(spmd_dep_${target} SYSTEM INTERFACE ${${target}_INCLUDE_DIR})
  endif()
  add_library(spmd::${target} ALIAS spmd_dep_${target})
endfunction()

spmd_header_dep(eigen Eigen/Core SUFFIXES eigen3)
spmd_header_dep(catch2 catch2/catch.hpp)
spmd_header_dep(cli11 CLI/CLI.hpp)
spmd_header_dep(toml toml++/toml.h)
spmd_header_dep(json nlohmann/json.hpp)

# OpenMP for intra-op parallelism (honours OMP_NUM_THREADS).
find_package(OpenMP REQUIRED COMPONENTS CXX)
add_library(spmd_dep_openmp INTERFACE)
target_link_libraries(spmd_dep_openmp INTERFACE OpenMP::OpenMP_CXX)
add_library(spmd::openmp ALIAS spmd_dep_openmp)

# BLAS under Eigen's products: Debian's OpenMP build of OpenBLAS when present
# (one OpenMP thread pool for BLAS and our loops), else Eigen's own GEMM.
# SPMD_USE_OPENBLAS=OFF builds the fallback on purpose (as on a machine without it).
option(SPMD_USE_OPENBLAS "Send Eigen's products to OpenBLAS when it is found" ON)
if(SPMD_USE_OPENBLAS)
  find_library(SPMD_OPENBLAS_LIBRARY NAMES openblas
               PATHS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp
               NO_DEFAULT_PATH)
  if(NOT SPMD_OPENBLAS_LIBRARY)
    find_library(SPMD_OPENBLAS_LIBRARY NAMES openblas)
  endif()
else()
  unset(SPMD_OPENBLAS_LIBRARY CACHE)
endif()
add_library(spmd_dep_blas INTERFACE)
if(SPMD_OPENBLAS_LIBRARY)
  set(SPMD_BLAS "OpenBLAS (${SPMD_OPENBLAS_LIBRARY})")
  target_link_libraries(spmd_dep_blas INTERFACE ${SPMD_OPENBLAS_LIBRARY})
  target_compile_definitions(spmd_dep_blas INTERFACE SPMD_HAVE_OPENBLAS=1)
else()
  set(SPMD_BLAS "none (Eigen's own GEMM)")
endif()
add_library(spmd::blas ALIAS spmd_dep_blas)
