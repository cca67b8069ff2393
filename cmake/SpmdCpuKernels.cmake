# spmd_cpu_kernels(TARGET lib NAMESPACE ns SOURCES src... [FLAGS flag...] [SEALED])
#
# Compiles the CPU backend's hot loops (tensor/cpu/kernels.h) once for one
# capability, into the object library spmd_cpu_kernels_<ns>, with `FLAGS`
# (-march=...) and SPMD_CPU_CAP=<ns>, and adds them to `lib`, which then
# sees SPMD_CPU_HAVE_<NS>=1.
#
# SEALED, for flags that differ from the library's: the objects are first
# linked into one relocatable object (ld -r, with the COMDAT groups of
# inline functions and templates dissolved into plain sections) in which
# objcopy makes every symbol but spmd_cpu_backend_<ns> local. The library's
# own copies of Eigen, the standard library and loops.h then never resolve
# to this capability's copies, nor these to the library's. (-fno-gnu-unique
# makes the static variables of inline functions plain weak symbols, which
# objcopy can localize, instead of GNU-unique ones, which it cannot.)

# Whether this toolchain can seal: GNU ld's --force-group-allocation (binutils
# 2.30) and an objcopy.
set(SPMD_CAN_SEAL_KERNELS OFF)
if(CMAKE_OBJCOPY AND CMAKE_LINKER)
  execute_process(COMMAND ${CMAKE_LINKER} --help OUTPUT_VARIABLE _spmd_ld_help ERROR_QUIET)
  string(FIND "${_spmd_ld_help}" "--force-group-allocation" _spmd_ld_pos)
  if(_spmd_ld_pos GREATER -1)
    set(SPMD_CAN_SEAL_KERNELS ON)
  endif()
endif()

function(spmd_cpu_kernels)
  cmake_parse_arguments(K "SEALED" "TARGET;NAMESPACE" "SOURCES;FLAGS" ${ARGN})
  set(objs spmd_cpu_kernels_${K_NAMESPACE})
  add_library(${objs} OBJECT ${K_SOURCES})
  target_compile_definitions(${objs} PRIVATE SPMD_CPU_CAP=${K_NAMESPACE})
  target_compile_options(${objs} PRIVATE -fno-math-errno ${K_FLAGS})
  if(K_SEALED)
    target_compile_options(${objs} PRIVATE -fno-gnu-unique)
  endif()
  target_include_directories(${objs} PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(${objs} PRIVATE spmd_runtime spmd::eigen spmd::openmp)
  if(SPMD_OPENBLAS_LIBRARY)
    target_compile_definitions(${objs} PRIVATE EIGEN_USE_BLAS)  # as the rest of the library
  endif()
  spmd_warnings(${objs})
  string(TOUPPER ${K_NAMESPACE} upper)
  target_compile_definitions(${K_TARGET} PRIVATE SPMD_CPU_HAVE_${upper}=1)
  if(NOT K_SEALED)
    target_sources(${K_TARGET} PRIVATE $<TARGET_OBJECTS:${objs}>)
    return()
  endif()
  set(sealed ${CMAKE_CURRENT_BINARY_DIR}/${objs}.o)
  add_custom_command(OUTPUT ${sealed}
    COMMAND ${CMAKE_LINKER} -r --force-group-allocation -o ${sealed}.all $<TARGET_OBJECTS:${objs}>
    COMMAND ${CMAKE_OBJCOPY} --keep-global-symbol=spmd_cpu_backend_${K_NAMESPACE}
            ${sealed}.all ${sealed}
    DEPENDS ${objs} $<TARGET_OBJECTS:${objs}>
    COMMAND_EXPAND_LISTS VERBATIM
    COMMENT "Sealing the ${K_NAMESPACE} CPU kernels (one global symbol: spmd_cpu_backend_${K_NAMESPACE})")
  target_sources(${K_TARGET} PRIVATE ${sealed})
endfunction()
