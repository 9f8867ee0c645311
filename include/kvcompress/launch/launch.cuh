// SPDX-License-Identifier: Apache-2.0
// kvcompress — the one place kernels are launched: plain or with PDL (LaunchOptions).
#pragma once

#include "../config.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <string>
#include <type_traits>

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

/// A value that depends only on a device ordinal and cannot change while the process runs
/// (a compute capability; how many blocks of a kernel a device holds at once), computed by
/// `query(device)` for the current device on its first use and then read with one relaxed
/// load (the current device is still asked for on every call). Each `Tag` has its own cache.
/// `query` returns a positive value, or 0 when it fails: 0 is returned and not cached, so a
/// failed query is asked again next time; ordinals past the cache's 64 are asked every time.
template <class Tag, class Query>
int per_device_value(Query query) {
  constexpr int kCachedDevices = 64;
  // Constant-initialised ("= {}"; without it g++ -std=c++17 guards the static), so the
  // lookup is one relaxed load; 0 = not asked yet.
  static std::atomic<int> cache[kCachedDevices] = {};
  int device = 0;
  // A failed query's error is left in place (not reset) like any other; the launch that
  // follows reports its own result.
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  const bool cached = device >= 0 && device < kCachedDevices;
  if (cached) {
    const int known = cache[device].load(std::memory_order_relaxed);
    if (known != 0) return known;
  }
  const int value = query(device);
  if (cached && value > 0) cache[device].store(value, std::memory_order_relaxed);
  return value > 0 ? value : 0;
}

struct ComputeCapabilityTag {};

/// The current device's compute capability major version (9 on an H100); 0 when the query
/// fails (the caller then picks what runs everywhere).
inline int device_cc_major() {
  return per_device_value<ComputeCapabilityTag>([](int device) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return 0;
    return major;
  });
}

/// Whether the current device runs programmatic dependent launches (sm_90 and newer); a
/// failed query launches without PDL.
inline bool device_supports_pdl() { return device_cc_major() >= 9; }

/// How many blocks of `threads` threads of kernel `Kernel` the current device runs at once:
/// its SMs times the blocks per SM its registers and shared memory allow; 0 when a query
/// fails, and the caller falls back to a rule that does not need it. Every launch of one
/// `Kernel` must pass the same `threads` (the answer is cached per device and kernel).
template <auto Kernel>
int wave_blocks(int threads) {
  return per_device_value<std::integral_constant<decltype(Kernel), Kernel>>([threads](int device) {
    int sms = 0, per_sm = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, threads, 0) != cudaSuccess)
      return 0;
    return sms * per_sm;
  });
}

/// Launches `kernel` on `grid` x `block` threads on `stream` through cudaLaunchKernelEx, with
/// the programmatic stream serialization attribute when `options.pdl` is set and the device
/// supports it (no attribute otherwise), in thread-block clusters of `cluster` blocks along
/// x when `cluster` > 1 (sm_90; grid.x a multiple of it). Returns that call's own result: a
/// launch error, or a sticky error of an earlier kernel, which the runtime reports on any call.
template <class... KernelArgs, class... Args>
Status launch_kernel_in_clusters(const char* name, void (*kernel)(KernelArgs...), dim3 grid,
                                 dim3 block, unsigned cluster, cudaStream_t stream,
                                 const LaunchOptions& options, Args&&... args) {
  cudaLaunchAttribute attribute[2];
  unsigned count = 0;
  if (options.pdl && device_supports_pdl()) {
    attribute[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (cluster > 1) {
    attribute[count].id = cudaLaunchAttributeClusterDimension;
    attribute[count].val.clusterDim.x = cluster;
    attribute[count].val.clusterDim.y = 1;
    attribute[count].val.clusterDim.z = 1;
    ++count;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = count;
  return launch_status(name, cudaLaunchKernelEx(&config, kernel, static_cast<Args&&>(args)...));
}

/// launch_kernel_in_clusters without clusters.
template <class... KernelArgs, class... Args>
Status launch_kernel(const char* name, void (*kernel)(KernelArgs...), dim3 grid, dim3 block,
                     cudaStream_t stream, const LaunchOptions& options, Args&&... args) {
  return launch_kernel_in_clusters(name, kernel, grid, block, 1u, stream, options,
                                   static_cast<Args&&>(args)...);
}

}  // namespace detail
KVC_NAMESPACE_END
