// SPDX-License-Identifier: Apache-2.0
// Device tier: the hardware conversions of arch/convert.cuh equal the core/ codecs bit for
// bit (the host tier checks the core codecs against the independent reference).
#include <kvcompress/arch/convert.cuh>
#include <kvcompress/core/codecs.hpp>

#include <cmath>
#include <limits>

#include "device_util.cuh"

namespace {

__global__ void convert_kernel(const float* in, int64_t n, uint16_t* bf16_hw, uint16_t* bf16_sw,
                               uint8_t* e4m3_hw, uint8_t* e4m3_sw) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    bf16_hw[i] = kvc::arch::float_to_bf16(in[i]);
    bf16_sw[i] = kvc::float_to_bf16(in[i]);
    e4m3_hw[i] = kvc::arch::float_to_e4m3(in[i]);
    e4m3_sw[i] = kvc::float_to_e4m3(in[i]);
  }
}

std::vector<float> conversion_inputs() {
  std::vector<float> v;
  // Every e4m3 value, the midpoints between neighbours and one float ulp either side.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    const float a = kvc::e4m3_to_float(static_cast<uint8_t>(c));
    v.push_back(a);
    if ((c & 0x7f) < 0x7e) {
      const float b = kvc::e4m3_to_float(static_cast<uint8_t>(c + 1));
      const float mid = 0.5f * (a + b);
      v.insert(v.end(), {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e30f),
                         std::nextafter(mid, -1e30f)});
    }
  }
  // Saturation and specials.
  for (float x : {448.f, 449.f, 463.99f, 464.f, 465.f, 480.f, 1e10f, 3.4e38f,
                  std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::denorm_min(), 1e-40f, 0.f, -0.f}) {
    v.push_back(x);
    v.push_back(-x);
  }
  v.push_back(-std::numeric_limits<float>::quiet_NaN());
  // bf16 ties: 1 + 2^-8 + k * 2^-7 and their neighbours, over many binades.
  for (int e = -130; e < 128; e += 3)
    for (int k = 0; k < 4; ++k) {
      const float tie = std::ldexp(1.f + std::ldexp(1.f, -8) + k * std::ldexp(1.f, -7), e);
      v.insert(v.end(), {tie, std::nextafter(tie, 0.f), -tie});
    }
  // A dense random sweep over every exponent.
  std::mt19937_64 rng(7);
  for (int i = 0; i < (1 << 20); ++i) {
    const uint32_t u = static_cast<uint32_t>(rng());
    float x;
    std::memcpy(&x, &u, sizeof x);
    v.push_back(x);
  }
  // Every float in [2^-12, 2^10) with the low 13 bits random (the e4m3 range, dense).
  for (uint32_t bits = 0x39800000u; bits < 0x44800000u; bits += 0x2000u)
    v.push_back([&] { float x; uint32_t u = bits | (static_cast<uint32_t>(rng()) & 0x1fffu); std::memcpy(&x, &u, 4); return x; }());
  return v;
}

}  // namespace

TEST_CASE("hardware bf16 and e4m3 conversions equal the core codecs bit for bit") {
  const std::vector<float> in = conversion_inputs();
  const int64_t n = static_cast<int64_t>(in.size());
  kvctest::DeviceArray<float> d_in(in);
  kvctest::DeviceArray<uint16_t> bhw(std::vector<uint16_t>(in.size(), 0x5555)),
      bsw(std::vector<uint16_t>(in.size(), 0xaaaa));
  kvctest::DeviceArray<uint8_t> ehw(std::vector<uint8_t>(in.size(), 0x55)),
      esw(std::vector<uint8_t>(in.size(), 0xaa));
  convert_kernel<<<512, 256>>>(d_in.ptr(), n, bhw.ptr(), bsw.ptr(), ehw.ptr(), esw.ptr());
  KVC_CHECK_CUDA(cudaGetLastError());
  kvctest::sync();
  const auto b_hw = bhw.download(), b_sw = bsw.download();
  const auto e_hw = ehw.download(), e_sw = esw.download();
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &in[static_cast<size_t>(i)], 4);
    // Host codec == device codec (same code, two compilers); hardware == codec.
    if (b_sw[i] != kvc::float_to_bf16(in[i])) FAIL("bf16 host/device codec differ at ", kvctest::hex(u));
    if (e_sw[i] != kvc::float_to_e4m3(in[i])) FAIL("e4m3 host/device codec differ at ", kvctest::hex(u));
    if (b_hw[i] != b_sw[i])
      FAIL("bf16 of ", kvctest::hex(u), ": hardware ", kvctest::hex(b_hw[i]), " codec ", kvctest::hex(b_sw[i]));
    if (e_hw[i] != e_sw[i])
      FAIL("e4m3 of ", kvctest::hex(u), ": hardware ", kvctest::hex(e_hw[i]), " codec ", kvctest::hex(e_sw[i]));
  }
}
