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

// The fp4 conversion instruction exists on the Blackwell family targets (sm_100a/f,
// sm_103a, sm_110a, sm_120a/f, ...), the condition the toolkit's cuda_fp4.h uses; everywhere
// else (sm_80 .. sm_90, plain sm_100 / sm_120) the core/ encoder runs.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000 && defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && \
    __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000 && __CUDA_ARCH_FAMILY_SPECIFIC__ < 1300
#define KVC_HAS_NATIVE_E2M1 1
#else
#define KVC_HAS_NATIVE_E2M1 0
#endif

/// Two floats -> two e2m1 codes in one byte, low nibble = a (round to nearest even,
/// saturate to +-6, NaN -> 0 as core/ float_to_e2m1 does: the instruction's NaN result is
/// not used, a NaN input is replaced by +0 first).
KVC_DEVICE uint8_t float2_to_e2m1x2(float a, float b) {
#if KVC_HAS_NATIVE_E2M1
  a = a != a ? 0.f : a;
  b = b != b ? 0.f : b;
  uint16_t out;
  // cvt packs its first source operand into the high nibble.
  asm("{ .reg .b8 t;\n cvt.rn.satfinite.e2m1x2.f32 t, %2, %1;\n mov.b16 %0, {t, 0};\n}"
      : "=h"(out)
      : "f"(a), "f"(b));
  return static_cast<uint8_t>(out);
#else
  return ::kvc::float2_to_e2m1x2(a, b);
#endif
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

/// Hardware converter with the contract of kvc::SoftwareConvert (e4m3: RNE, satfinite, NaN
/// -> 0x7f; e2m1 pairs), for the quantizer functors' and record codecs' Convert parameter.
struct HardwareConvert {
  KVC_DEVICE static uint8_t convert(float x) { return float_to_e4m3(x); }
  /// Two at once (one instruction on sm_89+), low byte = a.
  KVC_DEVICE static uint16_t convert2(float a, float b) { return float2_to_e4m3x2(a, b); }
  /// Two e2m1 codes, low nibble = a (the instruction on Blackwell targets, else software).
  KVC_DEVICE static uint8_t e2m1x2(float a, float b) { return float2_to_e2m1x2(a, b); }
};
/// The name of HardwareConvert from before it converted to e2m1 as well.
using HardwareE4m3 = HardwareConvert;

}  // namespace arch
KVC_NAMESPACE_END
