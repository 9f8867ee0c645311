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

namespace {

__global__ void e2m1_kernel(const float* in, int64_t n, uint8_t* hw, uint8_t* sw, int* native) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *native = KVC_HAS_NATIVE_E2M1;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; 2 * i + 1 < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    hw[i] = kvc::arch::float2_to_e2m1x2(in[2 * i], in[2 * i + 1]);
    sw[i] = kvc::float2_to_e2m1x2(in[2 * i], in[2 * i + 1]);
  }
}

}  // namespace

TEST_CASE("e2m1 pairs: the native conversion (Blackwell targets) equals the software encoder") {
  // Every e2m1 value, every midpoint and its float neighbours, saturation, specials, signs,
  // then the dense sweep; paired with a shifted copy so both nibbles see every input.
  std::vector<float> base;
  const float mags[] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (int i = 0; i < 8; ++i) {
    base.push_back(mags[i]);
    if (i < 7) {
      const float mid = 0.5f * (mags[i] + mags[i + 1]);
      base.insert(base.end(), {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e30f)});
    }
  }
  for (float x : {6.5f, 7.f, 1e30f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(), 1e-30f})
    base.push_back(x);
  const size_t fixed = base.size();
  for (size_t i = 0; i < fixed; ++i) base.push_back(-base[i]);
  std::vector<float> in = base;
  for (size_t i = 0; i < base.size(); ++i) in.push_back(base[(i + 7) % base.size()]), in.push_back(base[i]);
  std::mt19937_64 rng(11);
  for (int i = 0; i < (1 << 18); ++i) {
    const uint32_t u = (static_cast<uint32_t>(rng()) & 0x8fffffffu) | 0x3c000000u;  // |x| in [2^-7, 2^9)
    float x;
    std::memcpy(&x, &u, 4);
    in.push_back(x);
  }
  if (in.size() % 2) in.push_back(0.f);
  const int64_t n = static_cast<int64_t>(in.size());
  kvctest::DeviceArray<float> d_in(in);
  kvctest::DeviceArray<uint8_t> hw(std::vector<uint8_t>(in.size() / 2, 0x55)), sw(std::vector<uint8_t>(in.size() / 2, 0xaa));
  kvctest::DeviceArray<int> native(std::vector<int>{-1});
  e2m1_kernel<<<256, 256>>>(d_in.ptr(), n, hw.ptr(), sw.ptr(), native.ptr());
  KVC_CHECK_CUDA(cudaGetLastError());
  kvctest::sync();
  const auto h = hw.download(), s = sw.download();
  const int is_native = native.download()[0];
  MESSAGE("e2m1: this device build ", is_native ? "uses the native cvt.rn.satfinite.e2m1x2"
                                                : "has no native e2m1 conversion (software on both sides)");
  for (int64_t i = 0; 2 * i + 1 < n; ++i) {
    const uint8_t host = kvc::float2_to_e2m1x2(in[2 * i], in[2 * i + 1]);
    if (s[i] != host) FAIL("e2m1 host/device codec differ at pair ", i);
    if (h[i] != s[i])
      FAIL("e2m1 of (", in[2 * i], ", ", in[2 * i + 1], "): native ", kvctest::hex(h[i]), " software ",
           kvctest::hex(s[i]));
  }
}
