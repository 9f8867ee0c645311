# SPDX-License-Identifier: Apache-2.0
# kvc_instance_lists(<target> [PRIVATE|PUBLIC|INTERFACE]
#                    [RATIOS <r>...] [HEAD_DIMS <d>...]
#                    [DTYPES kFloat32|kBFloat16...] [LAYOUTS kFp8DsMla|kBf16Rows|kFp8Rows...])
#
# Restricts the instances that kvc::compress / insert / fused compile in <target> (the
# KVC_RATIOS, KVC_HEAD_DIMS, KVC_DTYPES, KVC_LAYOUTS lists of launch/dispatch.hpp) by
# setting them as compile definitions (default scope PRIVATE). A list left out keeps its
# default. Use it rather than plain target_compile_definitions("KVC_RATIOS=1,2"): nvcc
# splits -D values at commas, so the CUDA definitions need an escaped comma. Example
# (vLLM's configuration, 12 kernels instead of 352 in a TU calling all three ops):
#
#   kvc_instance_lists(my_app RATIOS 1 2 HEAD_DIMS 512 DTYPES kFloat32 LAYOUTS kFp8DsMla)
#
# Every TU of one program must see the same lists, so put them on every target of the
# program that includes kvcompress (or PUBLIC on a library that the others link).
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
  set(allowed_LAYOUTS kFp8DsMla kBf16Rows kFp8Rows)
  foreach(kind RATIOS HEAD_DIMS DTYPES LAYOUTS)
    if(NOT DEFINED arg_${kind})
      continue()
    endif()
    foreach(v IN LISTS arg_${kind})
      if(kind MATCHES "^(RATIOS|HEAD_DIMS)$")
        if(NOT v MATCHES "^[1-9][0-9]*$")
          message(FATAL_ERROR "kvc_instance_lists: ${kind} value '${v}' is not an integer >= 1")
        endif()
      elseif(NOT v IN_LIST allowed_${kind})
        message(FATAL_ERROR "kvc_instance_lists: ${kind} value '${v}' is not one of ${allowed_${kind}}")
      endif()
    endforeach()
    list(JOIN arg_${kind} "$<COMMA>" cxx_list)
    list(JOIN arg_${kind} "\\$<COMMA>" cuda_list)
    target_compile_definitions(${target} ${scope}
      "$<$<COMPILE_LANGUAGE:CUDA>:KVC_${kind}=${cuda_list}>"
      "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:KVC_${kind}=${cxx_list}>")
  endforeach()
endfunction()
