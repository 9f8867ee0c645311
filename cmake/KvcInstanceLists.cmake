# SPDX-License-Identifier: Apache-2.0
# kvc_instance_lists(<target> [PRIVATE|PUBLIC|INTERFACE]
#                    [RATIOS <r>...] [HEAD_DIMS <d>...]
#                    [DTYPES kFloat32|kBFloat16...] [LAYOUTS <kvc::CacheLayout name>...])
#
# LAYOUTS: kFp8DsMla kBf16Rows kFp8Rows kMxfp8 kNvfp4 kNvfp4Rows kFp8DsMlaV32 (the entries of
# KVC_BUILTIN_LAYOUTS in layout/cache.hpp, read from the header at configure; where the header
# is not beside this file the names are not checked here, and the compiler rejects a wrong one).
#
# Restricts the instances that kvc::compress / insert / fused compile in <target> (the
# KVC_RATIOS, KVC_HEAD_DIMS, KVC_DTYPES, KVC_LAYOUTS lists of launch/dispatch.hpp) by
# setting them as compile definitions (default scope PRIVATE). A list left out keeps its
# default. Use it rather than plain target_compile_definitions("KVC_RATIOS=1,2"): nvcc
# splits -D values at commas, so the CUDA definitions need an escaped comma. Example
# (vLLM's configuration, 12 kernels instead of 472 in a TU calling all three ops):
#
#   kvc_instance_lists(my_app RATIOS 1 2 HEAD_DIMS 512 DTYPES kFloat32 LAYOUTS kFp8DsMla)
#
# Every TU of one program must see the same lists, so put them on every target of the
# program that includes kvcompress (or PUBLIC on a library that the others link).
# The layout names come from KVC_BUILTIN_LAYOUTS in layout/cache.hpp (source tree or
# installed tree), so a new built-in format needs no edit here.
set(_kvc_builtin_layouts "")
foreach(_kvc_header "${CMAKE_CURRENT_LIST_DIR}/../include/kvcompress/layout/cache.hpp"
                    "${CMAKE_CURRENT_LIST_DIR}/../../../include/kvcompress/layout/cache.hpp")
  if(EXISTS "${_kvc_header}")
    file(READ "${_kvc_header}" _kvc_text)
    string(REGEX MATCHALL "\n  X\\(k[A-Za-z0-9]+," _kvc_entries "${_kvc_text}")
    foreach(_kvc_entry IN LISTS _kvc_entries)
      string(REGEX REPLACE "^\n  X\\((k[A-Za-z0-9]+),$" "\\1" _kvc_name "${_kvc_entry}")
      list(APPEND _kvc_builtin_layouts ${_kvc_name})
    endforeach()
    if(NOT _kvc_builtin_layouts)
      message(FATAL_ERROR "KvcInstanceLists.cmake: no KVC_BUILTIN_LAYOUTS entries found in ${_kvc_header}")
    endif()
    break()
  endif()
endforeach()

function(kvc_instance_lists target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "PRIVATE;PUBLIC;INTERFACE" ""
                        "RATIOS;HEAD_DIMS;DTYPES;LAYOUTS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kvc_instance_lists: unexpected arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  set(scope PRIVATE)
  foreach(s PUBLIC INTERFACE)
    if(arg_${s})
      set(scope ${s})
    endif()
  endforeach()
  set(allowed_DTYPES kFloat32 kBFloat16)
  set(allowed_LAYOUTS ${_kvc_builtin_layouts})
  foreach(kind RATIOS HEAD_DIMS DTYPES LAYOUTS)
    if(NOT DEFINED arg_${kind})
      continue()
    endif()
    foreach(v IN LISTS arg_${kind})
      if(kind MATCHES "^(RATIOS|HEAD_DIMS)$")
        if(NOT v MATCHES "^[1-9][0-9]*$")
          message(FATAL_ERROR "kvc_instance_lists: ${kind} value '${v}' is not an integer >= 1")
        endif()
      elseif(allowed_${kind} AND NOT v IN_LIST allowed_${kind})
        list(JOIN allowed_${kind} " " allowed)
        message(FATAL_ERROR "kvc_instance_lists: ${kind} value '${v}' is not one of ${allowed}")
      endif()
    endforeach()
    list(JOIN arg_${kind} "$<COMMA>" cxx_list)
    list(JOIN arg_${kind} "\\$<COMMA>" cuda_list)
    target_compile_definitions(${target} ${scope}
      "$<$<COMPILE_LANGUAGE:CUDA>:KVC_${kind}=${cuda_list}>"
      "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:KVC_${kind}=${cxx_list}>")
  endforeach()
endfunction()
