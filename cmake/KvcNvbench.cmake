# SPDX-License-Identifier: Apache-2.0
# nvbench for bench/kvc_nvbench.cu (the benchmark), from PyPI's cuda-bench wheel (`pip install cuda-bench==0.3.0`:
# nvbench's headers, libnvbench.so, libnvbench_main.a and a CMake package per CUDA major,
# under cuda/bench/cu<major>/nvbench) or any nvbench install prefix.
#
#   KVC_NVBENCH      ON (default): look for nvbench; OFF: do not.
#   KVC_NVBENCH_DIR  the nvbench prefix (holding include/nvbench and lib/). Empty: asks
#                    python3 for the wheel's (cuda.bench.get_nvbench_prefix(<CUDA major>)).
#   KVC_REQUIRE_NVBENCH  ON (the `bench` configure preset): without nvbench, stop the
#                    configure with one line saying why and how to get it.
#
# Sets KVC_NVBENCH_FOUND and, when found, the imported targets nvbench::nvbench and
# nvbench::main. Without nvbench one STATUS line says why (a FATAL_ERROR line with
# KVC_REQUIRE_NVBENCH).
#
# nvbench's own package config (lib/cmake/nvbench) needs CMake >= 3.30.4 (its
# cmake_minimum_required would stop an older CMake with an error) and a CUDA::nvml target;
# with an older CMake (Debian's 3.25, CI's) the same files are imported directly below.
option(KVC_NVBENCH "Build kvc_nvbench when nvbench (pip install cuda-bench==0.3.0) is found" ON)
option(KVC_REQUIRE_NVBENCH "Fail at configure time when nvbench is not found (the bench preset)" OFF)
set(KVC_NVBENCH_DIR "" CACHE PATH
    "nvbench install prefix (include/nvbench, lib/libnvbench.so); empty: the cuda-bench wheel's, via python3")

set(KVC_NVBENCH_FOUND OFF)
set(kvc_nvb_why "")
if(NOT KVC_NVBENCH)
  set(kvc_nvb_why "KVC_NVBENCH=OFF")
elseif(NOT KVC_CUDA_ENABLED)
  set(kvc_nvb_why "CUDA is not enabled")
else()
  set(kvc_nvb_prefix "${KVC_NVBENCH_DIR}")
  if(kvc_nvb_prefix STREQUAL "")
    find_package(Python3 COMPONENTS Interpreter QUIET)
    string(REGEX MATCH "^[0-9]+" kvc_nvb_cuda_major "${CMAKE_CUDA_COMPILER_VERSION}")
    if(Python3_Interpreter_FOUND)
      execute_process(
        COMMAND "${Python3_EXECUTABLE}" -c
                "import cuda.bench as b; print(b.get_nvbench_prefix(${kvc_nvb_cuda_major}))"
        RESULT_VARIABLE kvc_nvb_rc OUTPUT_VARIABLE kvc_nvb_out ERROR_QUIET
        OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 60)
      if(kvc_nvb_rc EQUAL 0 AND IS_DIRECTORY "${kvc_nvb_out}")
        set(kvc_nvb_prefix "${kvc_nvb_out}")
      else()
        string(CONCAT kvc_nvb_why "no cuda-bench wheel for CUDA ${kvc_nvb_cuda_major} in ${Python3_EXECUTABLE}: "
                        "pip install cuda-bench==0.3.0 (or set KVC_NVBENCH_DIR)")
      endif()
    else()
      set(kvc_nvb_why "no python3 to find the cuda-bench wheel: pip install cuda-bench==0.3.0 (or set KVC_NVBENCH_DIR)")
    endif()
  endif()
  if(NOT kvc_nvb_prefix STREQUAL "")
    set(kvc_nvb_lib "${kvc_nvb_prefix}/lib/libnvbench.so")
    set(kvc_nvb_main "${kvc_nvb_prefix}/lib/libnvbench_main.a")
    set(kvc_nvb_inc "${kvc_nvb_prefix}/include")
    if(NOT EXISTS "${kvc_nvb_inc}/nvbench/nvbench.cuh" OR NOT EXISTS "${kvc_nvb_lib}"
       OR NOT EXISTS "${kvc_nvb_main}")
      string(CONCAT kvc_nvb_why "${kvc_nvb_prefix} has no include/nvbench/nvbench.cuh, lib/libnvbench.so and "
                      "lib/libnvbench_main.a")
    elseif(CMAKE_VERSION VERSION_GREATER_EQUAL 3.30.4)
      # The package config aliases nvbench::nvml to CUDA::nvml, which FindCUDAToolkit creates
      # only where it finds libnvidia-ml (a driver or the toolkit's stub). Without one, an
      # empty stand-in: the link then relies on kvc_nvbench's --allow-shlib-undefined below.
      if(NOT TARGET CUDA::nvml)
        add_library(CUDA::nvml INTERFACE IMPORTED)
        set(kvc_nvb_fake_nvml ON)
      endif()
      find_package(nvbench CONFIG QUIET NO_DEFAULT_PATH PATHS "${kvc_nvb_prefix}/lib/cmake/nvbench")
      if(nvbench_FOUND AND TARGET nvbench::nvbench AND TARGET nvbench::main)
        set(KVC_NVBENCH_FOUND ON)
        set(kvc_nvb_how "package config ${nvbench_CONFIG}")
      else()
        set(kvc_nvb_why "find_package(nvbench CONFIG) failed in ${kvc_nvb_prefix}/lib/cmake/nvbench")
      endif()
    else()
      # What lib/cmake/nvbench/nvbench-targets.cmake declares, for CMake < 3.30.4.
      add_library(nvbench::nvbench SHARED IMPORTED)
      set_target_properties(nvbench::nvbench PROPERTIES
        IMPORTED_LOCATION "${kvc_nvb_lib}"
        IMPORTED_SONAME "libnvbench.so"
        INTERFACE_COMPILE_FEATURES cuda_std_17
        INTERFACE_INCLUDE_DIRECTORIES "${kvc_nvb_inc}"
        INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${kvc_nvb_inc}"
        INTERFACE_LINK_LIBRARIES CUDA::toolkit)
      add_library(nvbench::main STATIC IMPORTED)
      set_target_properties(nvbench::main PROPERTIES
        IMPORTED_LOCATION "${kvc_nvb_main}"
        IMPORTED_LINK_INTERFACE_LANGUAGES CUDA
        INTERFACE_LINK_LIBRARIES "nvbench::nvbench;CUDA::toolkit")
      if(TARGET CUDA::nvml)
        set_property(TARGET nvbench::nvbench APPEND PROPERTY INTERFACE_LINK_LIBRARIES CUDA::nvml)
      endif()
      set(KVC_NVBENCH_FOUND ON)
      string(CONCAT kvc_nvb_how "${kvc_nvb_prefix} imported directly (CMake ${CMAKE_VERSION} < 3.30.4, "
                      "which nvbench's package config requires)")
    endif()
  endif()
endif()

if(KVC_NVBENCH_FOUND)
  get_target_property(kvc_nvb_location nvbench::nvbench IMPORTED_LOCATION_RELEASE)
  if(NOT kvc_nvb_location)
    get_target_property(kvc_nvb_location nvbench::nvbench IMPORTED_LOCATION)
  endif()
  get_filename_component(KVC_NVBENCH_LIBRARY_DIR "${kvc_nvb_location}" DIRECTORY)
  message(STATUS "kvcompress: nvbench found (${kvc_nvb_how}); target kvc_nvbench "
                 "(not in 'all': the bench preset or --target kvc_nvbench builds it)")
elseif(KVC_REQUIRE_NVBENCH)
  message(FATAL_ERROR "kvcompress: the benchmark needs nvbench: ${kvc_nvb_why}; nothing was built.")
else()
  message(STATUS "kvcompress: kvc_nvbench not built: ${kvc_nvb_why}")
endif()
unset(kvc_nvb_why)
