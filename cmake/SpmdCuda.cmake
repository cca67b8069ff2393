# Decides SPMD_WITH_CUDA from SPMD_CUDA (AUTO|ON|OFF) and, when on, enables the
# CUDA language and finds cudart, cuBLAS/cuBLASLt and NCCL. Looks in
# /usr/local/cuda when nvcc is not on PATH. NCCL is looked for in the CUDA
# toolkit's folders and the system's, or in SPMD_NCCL_ROOT alone when that is
# set; without it the CUDA tensor backend is built and the NCCL backend is not
# (SPMD_WITH_NCCL OFF, with a note), as PyTorch builds without USE_NCCL.

set(SPMD_NCCL_ROOT "" CACHE PATH
    "Folder holding NCCL (include/nccl.h, lib/libnccl.so); empty: the CUDA toolkit's and the system's")

# Sets SPMD_WITH_NCCL in the caller's scope, and spmd::nccl when found.
function(spmd_find_nccl)
  # A changed SPMD_NCCL_ROOT searches again (find_* keep a found path cached).
  if(NOT "${SPMD_NCCL_ROOT}" STREQUAL "${_SPMD_NCCL_ROOT_SEARCHED}")
    unset(SPMD_NCCL_INCLUDE_DIR CACHE)
    unset(SPMD_NCCL_LIBRARY CACHE)
    set(_SPMD_NCCL_ROOT_SEARCHED "${SPMD_NCCL_ROOT}" CACHE INTERNAL "")
  endif()
  if(SPMD_NCCL_ROOT)
    set(where "SPMD_NCCL_ROOT=${SPMD_NCCL_ROOT}")
    find_path(SPMD_NCCL_INCLUDE_DIR nccl.h HINTS ${SPMD_NCCL_ROOT} PATH_SUFFIXES include
              NO_DEFAULT_PATH)
    find_library(SPMD_NCCL_LIBRARY nccl HINTS ${SPMD_NCCL_ROOT} PATH_SUFFIXES lib lib64
                 NO_DEFAULT_PATH)
  else()
    set(where "${CUDAToolkit_INCLUDE_DIRS}, ${CUDAToolkit_LIBRARY_DIR} and the system's folders")
    find_path(SPMD_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
    find_library(SPMD_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
  endif()
  if(NOT SPMD_NCCL_INCLUDE_DIR OR NOT SPMD_NCCL_LIBRARY)
    message(NOTICE "spmd: note: NCCL (nccl.h, libnccl) was not found"
            " (looked in ${where}); building the CUDA tensor backend without the NCCL "
            "backend (the tcp backend carries CUDA tensors through host buffers). Set "
            "SPMD_NCCL_ROOT to NCCL's folder to build it.")
    set(SPMD_WITH_NCCL OFF PARENT_SCOPE)
    return()
  endif()
  add_library(spmd_dep_nccl INTERFACE)
  target_include_directories(spmd_dep_nccl SYSTEM INTERFACE ${SPMD_NCCL_INCLUDE_DIR})
  target_link_libraries(spmd_dep_nccl INTERFACE ${SPMD_NCCL_LIBRARY} CUDA::cudart)
  add_library(spmd::nccl ALIAS spmd_dep_nccl)
  set(SPMD_WITH_NCCL ON PARENT_SCOPE)
endfunction()

set(SPMD_WITH_CUDA OFF)
set(SPMD_WITH_NCCL OFF)
if(NOT SPMD_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(SPMD_WITH_CUDA ON)
  elseif(SPMD_CUDA STREQUAL "ON")
    message(FATAL_ERROR "spmd: SPMD_CUDA=ON but no nvcc was found (looked on PATH and in /usr/local/cuda)")
  endif()
endif()

if(SPMD_WITH_CUDA)
  set(CMAKE_CUDA_ARCHITECTURES ${SPMD_CUDA_ARCHS})
  set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 knows no CUDA20 dialect for nvcc; kernels are C++17
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # cuda_staging (CUDA tensors over the TCP backend) needs cudart alone.
  add_library(spmd_dep_cudart INTERFACE)
  target_link_libraries(spmd_dep_cudart INTERFACE CUDA::cudart)
  add_library(spmd::cudart ALIAS spmd_dep_cudart)
  spmd_find_nccl()
endif()
