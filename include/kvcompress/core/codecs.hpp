// SPDX-License-Identifier: Apache-2.0
// kvcompress — scalar codecs: bf16, fp8 e4m3 (OCP "fn" variant), fp4 e2m1, UE8M0 scale codes.
//
// Plain integer code that compiles on the host and on the device. On the device the
// kernels use hardware conversions from arch/convert.cuh, which the device tests check
// against these functions bit for bit.
#pragma once

#include "../config.hpp"

#include <cmath>
#include <cstdint>

#include "bit.hpp"

KVC_NAMESPACE_BEGIN

// ---------------------------------------------------------------------------------------
// bf16: the upper 16 bits of an IEEE float.

/// Storage type of a bf16 value in kvcompress interfaces: the raw bits. Host-compilable,
/// layout-compatible with __nv_bfloat16.
struct bf16_t {
  uint16_t bits;
};

/// Canonical NaN produced by every float -> bf16 conversion in kvcompress (the hardware's).
inline constexpr uint16_t kBf16NaN = 0x7fff;

KVC_HOST_DEVICE float bf16_to_float(uint16_t bits) { return bits_float(uint32_t{bits} << 16); }

KVC_HOST_DEVICE float to_float(float x) { return x; }
KVC_HOST_DEVICE float to_float(bf16_t x) { return bf16_to_float(x.bits); }

/// float -> bf16, round to nearest even; overflow rounds to inf; NaN -> kBf16NaN.
KVC_HOST_DEVICE uint16_t float_to_bf16(float x) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return kBf16NaN;
  const uint32_t bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + bias) >> 16);
}

// ---------------------------------------------------------------------------------------
// e4m3 ("fn"): 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is
// NaN; largest finite 448 (0x7e); subnormals step 2^-9.

inline constexpr uint8_t kE4m3NaN = 0x7f;      // canonical NaN (the hardware's)
inline constexpr uint8_t kE4m3MaxCode = 0x7e;  // +448
inline constexpr float kE4m3Max = 448.0f;

KVC_HOST_DEVICE float e4m3_to_float(uint8_t code) {
  const uint32_t sign = uint32_t{code & 0x80u} << 24;
  const uint32_t exponent = (code >> 3) & 0xfu;
  const uint32_t mantissa = code & 0x7u;
  if ((code & 0x7fu) == 0x7fu) return bits_float(0x7fc00000u | sign);
  float magnitude;
  if (exponent == 0)
    magnitude = static_cast<float>(mantissa) * exp2i(-9);
  else
    magnitude = bits_float(((exponent - 7u + 127u) << 23) | (mantissa << 20));
  return bits_float(float_bits(magnitude) | sign);
}

/// float -> e4m3, round to nearest even, saturating to +-448 ("satfinite"); NaN -> 0x7f.
KVC_HOST_DEVICE uint8_t float_to_e4m3(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t magnitude_bits = u & 0x7fffffffu;
  if (magnitude_bits > 0x7f800000u) return kE4m3NaN;
  const int exponent = static_cast<int>(magnitude_bits >> 23);
  const uint32_t significand = (magnitude_bits & 0x7fffffu) | 0x800000u;  // 1.m as 24 bits
  uint32_t code;
  if (exponent >= 121) {
    // Normal e4m3 range (|x| >= 2^-6): keep 3 mantissa bits; a carry moves to the exponent.
    if (exponent > 127 + 8) return static_cast<uint8_t>(sign | kE4m3MaxCode);
    code = (static_cast<uint32_t>(exponent - 127 + 7) << 3) +
           shift_right_rne(magnitude_bits & 0x7fffffu, 20);
  } else if (exponent == 0) {
    code = 0;  // float subnormals are far below half of e4m3's smallest subnormal
  } else {
    // Subnormal e4m3: |x| / 2^-9 rounded to an integer; 8 means 2^-6, code 0x08, as wanted.
    const int shift = 141 - exponent;  // significand * 2^(exponent - 150 + 9)
    code = shift > 25 ? 0u : shift_right_rne(significand, shift);
  }
  if (code > kE4m3MaxCode) code = kE4m3MaxCode;
  return static_cast<uint8_t>(sign | code);
}

// ---------------------------------------------------------------------------------------
// e2m1 (OCP FP4): 1 sign, 2 exponent (bias 1), 1 mantissa bit; magnitudes 0, 0.5, 1, 1.5,
// 2, 3, 4, 6 for codes 0..7, bit 3 the sign; no infinities, no NaN.

inline constexpr float kE2m1Max = 6.0f;

KVC_HOST_DEVICE float e2m1_to_float(uint8_t code) {
  const uint32_t m = code & 0x7u;
  // Codes 0..3 step 0.5; from code 2 on, each pair of codes doubles the exponent.
  const float magnitude = m < 4u ? 0.5f * static_cast<float>(m)
                                 : static_cast<float>((m & 1u) ? 3u << ((m - 4u) >> 1)
                                                                : 2u << ((m - 4u) >> 1));
  return (code & 0x8u) ? -magnitude : magnitude;
}

/// float -> e2m1, round to nearest, ties to the even code, saturating to +-6 ("satfinite",
/// +-inf included); the sign from the fp32 sign bit (-0 and negative values rounding to 0
/// give 0x8); NaN -> 0 (e2m1 has no NaN). The codes are evenly spaced within three ranges
/// (step 0.5 below 2, 1 below 4, 2 from 4), so the magnitude code is the range's first code
/// plus |x| / step rounded to an integer, ties to even: the even integer is the even code
/// at every midpoint (0.25, 0.75, ..., 5). The rounding is one fma with 2^23 (exact
/// |x| / step < 2^23 plus 2^23 rounds to the integer in the low mantissa bits), no branch.
KVC_HOST_DEVICE uint8_t float_to_e2m1(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t mag = u & 0x7fffffffu;
  // min(|x|, 8): every magnitude from 7 on (inf included) saturates to code 7 below.
  const float a = bits_float(mag < 0x41000000u ? mag : 0x41000000u);
  const float inverse_step = a < 2.0f ? 2.0f : a < 4.0f ? 1.0f : 0.5f;
  const uint32_t first = a < 2.0f ? 0u : a < 4.0f ? 2u : 4u;
  const uint32_t m = first + (float_bits(fmaf(a, inverse_step, 8388608.0f)) & 0x7u);
  const uint32_t code = (m < 7u ? m : 7u) | ((u >> 28) & 0x8u);
  return static_cast<uint8_t>(mag > 0x7f800000u ? 0u : code);
}

/// Two e2m1 codes in one byte: `a` in the low nibble, `b` in the high one.
KVC_HOST_DEVICE uint8_t float2_to_e2m1x2(float a, float b) {
  return static_cast<uint8_t>(float_to_e2m1(a) | (float_to_e2m1(b) << 4));
}

// ---------------------------------------------------------------------------------------
// UE8M0: an unsigned power-of-two scale 2^(code - 127); code 255 is NaN.

/// Scale code for the exponent e: clamp(e + 127, 0, 255).
KVC_HOST_DEVICE constexpr uint8_t ue8m0_from_exponent(int e) {
  const int code = e + 127;
  return static_cast<uint8_t>(code < 0 ? 0 : (code > 255 ? 255 : code));
}

KVC_HOST_DEVICE float ue8m0_to_float(uint8_t code) {
  if (code == 255) return bits_float(0x7fc00000u);
  return code == 0 ? exp2i(-127) : bits_float(uint32_t{code} << 23);
}

KVC_NAMESPACE_END
