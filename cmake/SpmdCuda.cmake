# Decides SPMD_WITH_CUDA from SPMD_CUDA (AUTO|ON|OFF) and, when on, enables the
# CUDA language and finds cudart, cuBLAS/cuBLASLt and NCCL. Looks in
# /usr/local/cuda when nvcc is not on PATH.

set(SPMD_WITH_CUDA OFF)
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
  find_path(SPMD_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include)
  find_library(SPMD_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu)
  if(NOT SPMD_NCCL_INCLUDE_DIR OR NOT SPMD_NCCL_LIBRARY)
    message(FATAL_ERROR "spmd: CUDA is on but NCCL (nccl.h, libnccl) was not found")
  endif()
  add_library(spmd_dep_nccl INTERFACE)
  target_include_directories(spmd_dep_nccl SYSTEM INTERFACE ${SPMD_NCCL_INCLUDE_DIR})
  target_link_libraries(spmd_dep_nccl INTERFACE ${SPMD_NCCL_LIBRARY} CUDA::cudart)
  add_library(spmd::nccl ALIAS spmd_dep_nccl)
endif()
