# SPDX-License-Identifier: Apache-2.0
# Fails when a source file of the project lacks an SPDX-License-Identifier line among its
# first three lines. Run by ctest (test kvc_spdx_headers, label host):
#   cmake -DKVC_SOURCE_DIR=<repo> -P cmake/KvcCheckSpdx.cmake
if(NOT KVC_SOURCE_DIR)
  message(FATAL_ERROR "KVC_SOURCE_DIR is not set")
endif()
set(missing "")
set(count 0)
foreach(dir include tests examples bench scripts cmake python)
  file(GLOB_RECURSE files RELATIVE "${KVC_SOURCE_DIR}"
       "${KVC_SOURCE_DIR}/${dir}/*.hpp" "${KVC_SOURCE_DIR}/${dir}/*.cuh" "${KVC_SOURCE_DIR}/${dir}/*.cu"
       "${KVC_SOURCE_DIR}/${dir}/*.cpp" "${KVC_SOURCE_DIR}/${dir}/*.h" "${KVC_SOURCE_DIR}/${dir}/*.py"
       "${KVC_SOURCE_DIR}/${dir}/*.sh" "${KVC_SOURCE_DIR}/${dir}/*.cmake" "${KVC_SOURCE_DIR}/${dir}/CMakeLists.txt")
  foreach(f IN LISTS files)
    file(STRINGS "${KVC_SOURCE_DIR}/${f}" head LIMIT_COUNT 3)
    math(EXPR count "${count} + 1")
    if(NOT head MATCHES "SPDX-License-Identifier: Apache-2.0")
      list(APPEND missing "${f}")
    endif()
  endforeach()
endforeach()
if(missing)
  list(JOIN missing "\n  " text)
  message(FATAL_ERROR "no SPDX-License-Identifier line in:\n  ${text}")
endif()
message(STATUS "SPDX-License-Identifier present in all ${count} source files")
