// kvcompress — the one place kernels are launched: plain or with PDL (LaunchOptions).
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "../core/status.hpp"
#include "options.hpp"

namespace kvc {
namespace detail {

inline Status launch_status(const char* kernel, cudaError_t err = cudaSuccess) {
  if (err == cudaSuccess) err = cudaGetLastError();
  if (err != cudaSuccess)
    return Status::cuda(err, std::string(kernel) + " launch failed: " + cudaGetErrorString(err));
  return Status::success();
}

/// Whether the current device runs programmatic dependent launches (sm_90 and newer).
inline bool device_supports_pdl() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    (void)cudaGetLastError();  // leave no sticky error behind for the launch check
    return false;
  }
  return major >= 9;
}

/// Launches `kernel<<<grid, block, 0, stream>>>(args...)`, with the programmatic stream
/// serialization attribute when `options.pdl` is set and the device supports it.
template <class... KernelArgs, class... Args>
Status launch_kernel(const char* name, void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                     cudaStream_t stream, const LaunchOptions& options, Args&&... args) {
  if (!options.pdl || !device_supports_pdl()) {
    kernel<<<grid, block, 0, stream>>>(static_cast<Args&&>(args)...);
    return launch_status(name);
  }
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = 1;
  return launch_status(name, cudaLaunchKernelEx(&config, kernel, static_cast<Args&&>(args)...));
}

}  // namespace detail
}  // namespace kvc
