// SPDX-License-Identifier: Apache-2.0
// kvcompress — the one place kernels are launched: plain or with PDL (LaunchOptions).
#pragma once

#include "../config.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <string>

#include "../core/status.hpp"
#include "options.hpp"

KVC_NAMESPACE_BEGIN
namespace detail {

/// The Status of a launch from the launch call's own result. The runtime's last-error state
/// is neither read nor reset: an earlier, unrelated failure (a cudaMalloc, say) is the
/// caller's to see, not this launch's.
inline Status launch_status(const char* kernel, cudaError_t err) {
  if (err != cudaSuccess)
    return Status::cuda(err, std::string(kernel) + " launch failed: " + cudaGetErrorString(err));
  return Status::success();
}

/// Whether the current device runs programmatic dependent launches (sm_90 and newer).
/// The compute capability of a device ordinal does not change while the process runs, so
/// the answer is cached per ordinal (the current device is still asked for on every call);
/// a failed query is not cached.
inline bool device_supports_pdl() {
  constexpr int kCachedDevices = 64;
  // 0 = not asked yet, 1 = no PDL, 2 = PDL. Constant-initialised ("= {}"; without it g++
  // -std=c++17 guards the static), so the lookup is one relaxed load.
  static std::atomic<signed char> cache[kCachedDevices] = {};
  int device = 0;
  // A failed query launches without PDL; its error is left in place (not reset) like any
  // other, and the launch reports its own result.
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  const bool cached = device >= 0 && device < kCachedDevices;
  if (cached) {
    const signed char known = cache[device].load(std::memory_order_relaxed);
    if (known != 0) return known == 2;
  }
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess)
    return false;
  const bool pdl = major >= 9;
  if (cached) cache[device].store(static_cast<signed char>(pdl ? 2 : 1), std::memory_order_relaxed);
  return pdl;
}

/// How many blocks of `threads` threads of kernel `Kernel` the current device runs at once:
/// its SMs times the blocks per SM its registers and shared memory allow. Cached per device
/// ordinal like device_supports_pdl (a kernel's resources and a device's size do not change
/// while the process runs); 0 when a query fails (not cached), and the caller falls back to a
/// rule that does not need it. Every launch of one `Kernel` must pass the same `threads`.
template <auto Kernel>
int wave_blocks(int threads) {
  constexpr int kCachedDevices = 64;
  static std::atomic<int> cache[kCachedDevices] = {};  // 0: not asked yet
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  const bool cached = device >= 0 && device < kCachedDevices;
  if (cached) {
    const int known = cache[device].load(std::memory_order_relaxed);
    if (known != 0) return known;
  }
  int sms = 0, per_sm = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, threads, 0) != cudaSuccess)
    return 0;
  const int blocks = sms * per_sm;
  if (cached && blocks > 0) cache[device].store(blocks, std::memory_order_relaxed);
  return blocks;
}

/// Launches `kernel` on `grid` x `block` threads on `stream` through cudaLaunchKernelEx, with
/// the programmatic stream serialization attribute when `options.pdl` is set and the device
/// supports it (no attribute otherwise). Returns that call's own result: a launch error, or
/// a sticky error of an earlier kernel, which the runtime reports on any call.
template <class... KernelArgs, class... Args>
Status launch_kernel(const char* name, void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                     cudaStream_t stream, const LaunchOptions& options, Args&&... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = options.pdl && device_supports_pdl() ? 1 : 0;
  return launch_status(name, cudaLaunchKernelEx(&config, kernel, static_cast<Args&&>(args)...));
}

}  // namespace detail
KVC_NAMESPACE_END
