// SPDX-License-Identifier: Apache-2.0
// A consumer of the installed kvcompress package: one .cu that includes the umbrella
// header, uses a functor in its own kernel and sizes a ring with kvc::ring_capacity.
#include <kvcompress/kvcompress.cuh>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CUDA_CHECK(expr)                                                                  \
  do {                                                                                    \
    const cudaError_t err_ = (expr);                                                      \
    if (err_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                  \
                   cudaGetErrorString(err_));                                             \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

using Rope = kvc::Rotary<kvc::RopeStyle::kGptJ, 64>;

// Ring rows for ratio 2 with 3 speculative tokens, known at compile time (constexpr).
constexpr int kCapacity = kvc::ring_capacity(/*ratio=*/2, /*num_speculative_tokens=*/3);
static_assert(kCapacity == 8, "max(8, bit_ceil(3 + 2))");

// One thread per GPT-J pair (2i, 2i+1) of a 64-dim rope slice.
__global__ void rotate_pairs(const float* x, const float* cos_sin, float* out) {
  const int i = threadIdx.x;
  if (i >= Rope::kHalf) return;
  const float c = cos_sin[i], s = cos_sin[Rope::kHalf + i];
  out[2 * i] = Rope::rotate(x[2 * i], x[2 * i + 1], c, s, /*first=*/true);
  out[2 * i + 1] = Rope::rotate(x[2 * i + 1], x[2 * i], c, s, /*first=*/false);
}

int main() {
  std::printf("kvcompress %d.%d.%d, ring capacity for ratio 2 + 3 drafts: %d rows\n",
              kvc::kVersionMajor, kvc::kVersionMinor, kvc::kVersionPatch, kCapacity);
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("kvc_consumer_example: no CUDA device, skipping (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;  // ctest's SKIP_RETURN_CODE
  }

  kvc::Array<float, 64> x;
  std::vector<float> cos_sin(64);
  for (int j = 0; j < 64; ++j) x[j] = std::sin(0.37f * j) * 3.f;
  for (int i = 0; i < 32; ++i) {
    const double angle = 5.0 * std::pow(10000.0, -2.0 * i / 64);  // position 5
    cos_sin[i] = static_cast<float>(std::cos(angle));
    cos_sin[32 + i] = static_cast<float>(std::sin(angle));
  }

  float *d_x, *d_cos_sin, *d_out;
  CUDA_CHECK(cudaMalloc(&d_x, 64 * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&d_cos_sin, 64 * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&d_out, 64 * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(d_x, x.data, 64 * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_cos_sin, cos_sin.data(), 64 * sizeof(float), cudaMemcpyHostToDevice));
  rotate_pairs<<<1, 32>>>(d_x, d_cos_sin, d_out);
  CUDA_CHECK(cudaGetLastError());
  std::vector<float> out(64);
  CUDA_CHECK(cudaMemcpy(out.data(), d_out, 64 * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaFree(d_x));
  CUDA_CHECK(cudaFree(d_cos_sin));
  CUDA_CHECK(cudaFree(d_out));

  // The same functor on the host, one thread owning the whole slice. Rotary carries the
  // product's rounding error with fma, so host and device agree bit for bit.
  const kvc::Array<float, 64> want = Rope::apply(x, cos_sin.data(), cos_sin.data() + 32);
  if (std::memcmp(want.data, out.data(), sizeof want.data) != 0) {
    std::printf("kvc_consumer_example: device rotation differs from the host's\n");
    return 1;
  }
  std::printf("kvc_consumer_example: 64 rotated values match the host bit for bit. OK\n");
  return 0;
}
