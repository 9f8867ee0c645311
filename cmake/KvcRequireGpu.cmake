# SPDX-License-Identifier: Apache-2.0
# KVC_REQUIRE_GPU=ON (the `bench` configure preset): stop at configure time, with one line,
# when this machine has no usable NVIDIA GPU, instead of compiling kvc_nvbench for minutes to
# have it skip. A GPU counts as usable when `nvidia-smi -L` lists one or, without
# nvidia-smi, when the driver lists one under /proc/driver/nvidia/gpus. Turn it off
# (-DKVC_REQUIRE_GPU=OFF) to build the bench on a machine without a GPU anyway.
set(kvc_gpu "")
find_program(KVC_NVIDIA_SMI nvidia-smi)
if(KVC_NVIDIA_SMI)
  execute_process(COMMAND "${KVC_NVIDIA_SMI}" -L RESULT_VARIABLE kvc_smi_rc
                  OUTPUT_VARIABLE kvc_smi_out ERROR_VARIABLE kvc_smi_err TIMEOUT 30)
  if(kvc_smi_rc EQUAL 0 AND kvc_smi_out MATCHES "GPU [0-9]+: ([^\n]*)")
    set(kvc_gpu "${CMAKE_MATCH_1}")
  else()
    string(STRIP "${kvc_smi_out}${kvc_smi_err}" kvc_why)
    string(REGEX REPLACE "\n.*" "" kvc_why "${kvc_why}")
    set(kvc_why "nvidia-smi -L: ${kvc_why}")
  endif()
else()
  file(GLOB kvc_proc_gpus "/proc/driver/nvidia/gpus/*")
  if(kvc_proc_gpus)
    list(GET kvc_proc_gpus 0 kvc_gpu)
  else()
    set(kvc_why "no nvidia-smi and no GPU under /proc/driver/nvidia/gpus")
  endif()
endif()
if(kvc_gpu STREQUAL "")
  message(FATAL_ERROR "kvcompress: no usable NVIDIA GPU (${kvc_why}); the bench needs one, so "
          "nothing was built. Host-only results: cmake --workflow --preset host. "
          "Build the bench anyway: -DKVC_REQUIRE_GPU=OFF.")
endif()
message(STATUS "kvcompress: GPU for the bench: ${kvc_gpu}")
unset(kvc_gpu)
