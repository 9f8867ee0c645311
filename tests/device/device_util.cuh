// SPDX-License-Identifier: Apache-2.0
// Device-tier helpers: checked CUDA calls, device buffers with poisoning, comparisons.
#pragma once

#include <doctest/doctest.h>
#include <thrust/device_vector.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define KVC_CHECK_CUDA(expr)                                                          \
  do {                                                                                \
    const cudaError_t kvc_err_ = (expr);                                              \
    REQUIRE_MESSAGE(kvc_err_ == cudaSuccess, #expr, ": ", cudaGetErrorString(kvc_err_)); \
  } while (0)

#define KVC_CHECK_STATUS(expr)                                          \
  do {                                                                  \
    const kvc::Status kvc_s_ = (expr);                                  \
    REQUIRE_MESSAGE(kvc_s_.ok(), #expr, ": ", kvc_s_.message());        \
  } while (0)

namespace kvctest {

/// A device copy of a host vector of trivially copyable elements.
template <class T>
struct DeviceArray {
  thrust::device_vector<T> data;
  DeviceArray() = default;
  explicit DeviceArray(const std::vector<T>& host) : data(host.begin(), host.end()) {}
  T* ptr() { return thrust::raw_pointer_cast(data.data()); }
  const T* ptr() const { return thrust::raw_pointer_cast(data.data()); }
  std::vector<T> download() const {
    std::vector<T> host(data.size());
    KVC_CHECK_CUDA(cudaMemcpy(host.data(), ptr(), host.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  void upload(const std::vector<T>& host) {
    data.resize(host.size());
    KVC_CHECK_CUDA(cudaMemcpy(ptr(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
};

/// Random bytes to poison an output buffer with (unwritten bytes then show up as mismatches).
inline std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t n) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

inline std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

inline void sync() { KVC_CHECK_CUDA(cudaDeviceSynchronize()); }

}  // namespace kvctest
