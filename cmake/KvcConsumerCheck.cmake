# SPDX-License-Identifier: Apache-2.0
# cmake -P script: configures and builds a tiny consumer project that uses
# kvcompress::kvcompress through find_package, add_subdirectory or FetchContent.
#
#   cmake -DMODE=find_package|add_subdirectory|fetchcontent
#         -DKVC_SOURCE_DIR=<repo> -DKVC_PREFIX=<install prefix> -DWORK_DIR=<scratch>
#         -DMAIN_SOURCE=<consumer main.cpp> -DGENERATOR=<gen> -DCXX_COMPILER=<c++>
#         [-DCUDAToolkit_ROOT=<dir>] -P KvcConsumerCheck.cmake
#
# The consumer is CXX-only: including the .hpp headers must not need nvcc or the CUDA
# language, and an embedded kvcompress must not add its tests or enable CUDA.
#
# MODE=project configures and builds an existing CUDA consumer project instead
# (examples/06_consumer_project) with find_package against KVC_PREFIX, then runs its
# executable; exit code 77 (no GPU) counts as success:
#
#   cmake -DMODE=project -DPROJECT_SOURCE=<dir> -DCUDA_COMPILER=<nvcc>
#         [-DCUDA_ARCHITECTURES=<a,b,...>] -DKVC_PREFIX=... -DWORK_DIR=... -DGENERATOR=...
#         -DCXX_COMPILER=... [-DCUDAToolkit_ROOT=<dir>] -P KvcConsumerCheck.cmake

if(MODE STREQUAL "project")
  set(required MODE KVC_PREFIX WORK_DIR PROJECT_SOURCE GENERATOR CXX_COMPILER CUDA_COMPILER)
else()
  set(required MODE KVC_SOURCE_DIR WORK_DIR MAIN_SOURCE GENERATOR CXX_COMPILER)
endif()
foreach(var IN LISTS required)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "KvcConsumerCheck: -D${var}=... is required")
  endif()
endforeach()

if(MODE STREQUAL "project")
  file(REMOVE_RECURSE "${WORK_DIR}")
  set(configure_args -S "${PROJECT_SOURCE}" -B "${WORK_DIR}/build" -G "${GENERATOR}"
      "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" "-DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}"
      -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${KVC_PREFIX}")
  if(DEFINED CUDA_ARCHITECTURES AND NOT "${CUDA_ARCHITECTURES}" STREQUAL "")
    string(REPLACE "," ";" archs "${CUDA_ARCHITECTURES}")
    list(APPEND configure_args "-DCMAKE_CUDA_ARCHITECTURES=${archs}")
  endif()
  foreach(var CUDAToolkit_ROOT)
    if(DEFINED ${var} AND NOT "${${var}}" STREQUAL "")
      list(APPEND configure_args "-D${var}=${${var}}")
    endif()
  endforeach()
  execute_process(COMMAND "${CMAKE_COMMAND}" ${configure_args} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer project: configure failed (${rc})")
  endif()
  # The project must have found the installed package, not a source tree or another copy.
  file(STRINGS "${WORK_DIR}/build/CMakeCache.txt" found REGEX "^kvcompress_DIR:")
  string(FIND "${found}" "${KVC_PREFIX}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "consumer project: kvcompress found outside the install prefix: ${found}")
  endif()
  execute_process(COMMAND "${CMAKE_COMMAND}" --build "${WORK_DIR}/build" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer project: build failed (${rc})")
  endif()
  execute_process(COMMAND "${WORK_DIR}/build/kvc_consumer_example" RESULT_VARIABLE rc)
  if(rc EQUAL 77)
    message(STATUS "consumer project: built; no GPU, so its run was skipped (exit 77)")
  elseif(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer project: kvc_consumer_example exited with ${rc}")
  else()
    message(STATUS "consumer project: OK")
  endif()
  return()
endif()

if(MODE STREQUAL "find_package")
  set(use_kvc "find_package(kvcompress 0.2 CONFIG REQUIRED)
string(FIND \"\${kvcompress_DIR}\" \"${KVC_PREFIX}\" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR \"kvcompress found outside the install prefix: \${kvcompress_DIR}\")
endif()
message(STATUS \"kvcompress \${kvcompress_VERSION} from \${kvcompress_DIR}\")")
elseif(MODE STREQUAL "add_subdirectory")
  set(use_kvc "add_subdirectory(\"${KVC_SOURCE_DIR}\" kvcompress-build)")
elseif(MODE STREQUAL "fetchcontent")
  # SOURCE_DIR without a download method: FetchContent uses the tree as it is.
  set(use_kvc "include(FetchContent)
FetchContent_Declare(kvcompress SOURCE_DIR \"${KVC_SOURCE_DIR}\")
FetchContent_MakeAvailable(kvcompress)")
else()
  message(FATAL_ERROR "KvcConsumerCheck: unknown MODE '${MODE}'")
endif()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/src")
configure_file("${MAIN_SOURCE}" "${WORK_DIR}/src/main.cpp" COPYONLY)
file(WRITE "${WORK_DIR}/src/CMakeLists.txt" "cmake_minimum_required(VERSION 3.24)
project(kvc_consumer LANGUAGES CXX)
${use_kvc}
if(NOT TARGET kvcompress::kvcompress)
  message(FATAL_ERROR \"kvcompress::kvcompress is not defined\")
endif()
if(TARGET kvc_host_tests OR TARGET kvc_device_tests)
  message(FATAL_ERROR \"an embedded kvcompress must not add its tests\")
endif()
get_property(langs GLOBAL PROPERTY ENABLED_LANGUAGES)
if(\"CUDA\" IN_LIST langs)
  message(FATAL_ERROR \"kvcompress enabled the CUDA language in a header-only consumer\")
endif()
add_executable(kvc_consumer main.cpp)
target_link_libraries(kvc_consumer PRIVATE kvcompress::kvcompress)
")

set(configure_args -S "${WORK_DIR}/src" -B "${WORK_DIR}/build" -G "${GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}" -DCMAKE_BUILD_TYPE=Release)
if(MODE STREQUAL "find_package")
  list(APPEND configure_args "-DCMAKE_PREFIX_PATH=${KVC_PREFIX}")
endif()
foreach(var CUDAToolkit_ROOT)
  if(DEFINED ${var} AND NOT "${${var}}" STREQUAL "")
    list(APPEND configure_args "-D${var}=${${var}}")
  endif()
endforeach()

execute_process(COMMAND "${CMAKE_COMMAND}" ${configure_args} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer (${MODE}): configure failed (${rc})")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${WORK_DIR}/build" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer (${MODE}): build failed (${rc})")
endif()
execute_process(COMMAND "${WORK_DIR}/build/kvc_consumer" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "consumer (${MODE}): kvc_consumer exited with ${rc}")
endif()
message(STATUS "consumer (${MODE}): OK")
