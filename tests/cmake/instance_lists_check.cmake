# SPDX-License-Identifier: Apache-2.0
# cmake -DKVC_SOURCE_DIR=<repo> -DWORK_DIR=<scratch dir> -P instance_lists_check.cmake
# Host tier: cmake/KvcInstanceLists.cmake read KVC_BUILTIN_LAYOUTS from layout/cache.hpp,
# and kvc_instance_lists() rejects bad arguments with its message (each call in a child
# cmake -P, as a FATAL_ERROR ends the script that raises it).
cmake_minimum_required(VERSION 3.24)
include("${KVC_SOURCE_DIR}/cmake/KvcInstanceLists.cmake")

# Every X(kName, ::kvc::Type) entry of the header, matched here independently of the module.
file(READ "${KVC_SOURCE_DIR}/include/kvcompress/layout/cache.hpp" text)
string(REGEX MATCHALL "X\\(k[A-Za-z0-9]+, ::kvc::" entries "${text}")
list(LENGTH entries want)
list(LENGTH _kvc_builtin_layouts got)
if(NOT got EQUAL want OR want LESS 7)
  message(FATAL_ERROR "layout names read from the header: ${_kvc_builtin_layouts} (${got}), "
                      "X entries in it: ${want}")
endif()
foreach(name kFp8DsMla kMxfp8 kNvfp4 kNvfp4Rows kFp8DsMlaV32)
  if(NOT name IN_LIST _kvc_builtin_layouts)
    message(FATAL_ERROR "${name} missing from the layout names read: ${_kvc_builtin_layouts}")
  endif()
endforeach()

if(NOT DEFINED WORK_DIR)
  message(FATAL_ERROR "-DWORK_DIR=<scratch dir> is required")
endif()
set(dir "${WORK_DIR}")
file(MAKE_DIRECTORY "${dir}")
function(expect_failure label args regex)
  file(WRITE "${dir}/${label}.cmake"
       "cmake_minimum_required(VERSION 3.24)\ninclude(\"${KVC_SOURCE_DIR}/cmake/KvcInstanceLists.cmake\")\nkvc_instance_lists(t ${args})\n")
  string(REPLACE " " "[ \n]+" regex "${regex}")  # CMake wraps long messages
  execute_process(COMMAND "${CMAKE_COMMAND}" -P "${dir}/${label}.cmake"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(rc EQUAL 0 OR NOT "${out}${err}" MATCHES "${regex}")
    message(FATAL_ERROR "kvc_instance_lists(t ${args}): exit ${rc}, expected a failure matching "
                        "'${regex}'; got: ${out}${err}")
  endif()
endfunction()
expect_failure(layout "LAYOUTS kFp8DsMla kNvfp8" "LAYOUTS value 'kNvfp8' is not one of kFp8DsMla kBf16Rows")
expect_failure(ratio "RATIOS 2 x" "RATIOS value 'x' is not an integer >= 1")
expect_failure(dtype "DTYPES kFloat16" "DTYPES value 'kFloat16' is not one of kFloat32 kBFloat16")
expect_failure(extra "RATIOS 2 BOGUS" "RATIOS value 'BOGUS' is not an integer")
message(STATUS "kvc_instance_lists: layout names ${_kvc_builtin_layouts}; bad arguments rejected")
