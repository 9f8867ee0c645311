// SPDX-License-Identifier: Apache-2.0
// doctest main of the device tier. Without a usable CUDA device it says so loudly and
// exits 77, which ctest (SKIP_RETURN_CODE 77) reports as Skipped instead of Passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>

int main(int argc, char** argv) {
  int device_count = 0;
  const cudaError_t err = cudaGetDeviceCount(&device_count);
  if (err != cudaSuccess || device_count == 0) {
    const char* why = err != cudaSuccess ? cudaGetErrorString(err)
                                         : "cudaGetDeviceCount returned 0 devices";
    std::printf("kvc_device_tests: SKIPPED \xE2\x80\x94 no CUDA device (%s)\n", why);
    std::fflush(stdout);
    return 77;
  }

  int device = 0;
  cudaGetDevice(&device);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  std::printf("kvc_device_tests: device %d: %s, %d SMs, sm_%d%d, %d device(s) visible\n",
              device, prop.name, prop.multiProcessorCount, prop.major, prop.minor,
              device_count);
  std::fflush(stdout);

  doctest::Context context(argc, argv);
  return context.run();
}
