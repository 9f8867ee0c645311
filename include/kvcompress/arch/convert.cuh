// SPDX-License-Identifier: Apache-2.0
// kvcompress — hardware number conversions, with the core/ codecs as the reference.
//
// Device tests check these against core/codecs.hpp bit for bit (NaN included).
#pragma once

#include "../config.hpp"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "../core/array.hpp"
#include "../core/codecs.hpp"

KVC_NAMESPACE_BEGIN
namespace arch {

/// Two floats -> two bf16 (round to nearest even), packed low = a, high = b.
KVC_DEVICE uint32_t float2_to_bf16x2(float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

KVC_DEVICE uint16_t float_to_bf16(float a) {
  const __nv_bfloat16 v = __float2bfloat16_rn(a);
  uint16_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

/// Two floats -> two e4m3 (round to nearest even, saturate to +-448), packed low = a.
/// sm_89+ has one instruction for it; elsewhere the toolkit's emulation runs.
KVC_DEVICE uint16_t float2_to_e4m3x2(float a, float b) {
  return static_cast<uint16_t>(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3));
}

KVC_DEVICE uint8_t float_to_e4m3(float a) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(a, __NV_SATFINITE, __NV_E4M3));
}

/// Converts a float fragment to bf16 bits, two at a time.
template <int N>
KVC_DEVICE Array<uint16_t, N> to_bf16(const Array<float, N>& x) {
  static_assert(N % 2 == 0, "convert pairs");
  Array<uint16_t, N> out;
  KVC_PRAGMA_UNROLL
  for (int i = 0; i < N; i += 2) {
    const uint32_t pair = float2_to_bf16x2(x[i], x[i + 1]);
    out[i] = static_cast<uint16_t>(pair & 0xffffu);
    out[i + 1] = static_cast<uint16_t>(pair >> 16);
  }
  return out;
}

}  // namespace arch
KVC_NAMESPACE_END

KVC_NAMESPACE_BEGIN
namespace arch {

/// Hardware e4m3 converter with the contract of kvc::SoftwareE4m3 (RNE, satfinite, NaN ->
/// 0x7f), for the quantizer functors' Convert parameter.
struct HardwareE4m3 {
  KVC_DEVICE static uint8_t convert(float x) { return float_to_e4m3(x); }
  /// Two at once (one instruction on sm_89+), low byte = a.
  KVC_DEVICE static uint16_t convert2(float a, float b) { return float2_to_e4m3x2(a, b); }
};

}  // namespace arch
KVC_NAMESPACE_END
