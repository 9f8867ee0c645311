// SPDX-License-Identifier: Apache-2.0
// kvcompress — bit casts and small integer math (host and device).
//
// Hand-written rather than <cuda/std/bit> / cuda::ceil_div on purpose: core/ is included by
// host-only code that must build with a plain C++17 compiler where the CUDA toolkit (and so
// CCCL) may be absent (KVC_ENABLE_CUDA=OFF, host-only consumers), and the library then
// needs no CCCL dependency at all. The functions are a few lines each and tested on the
// host (tests/host/test_math.cpp).
#pragma once

#include <cstdint>
#include <cstring>

#include "../config.hpp"

KVC_NAMESPACE_BEGIN

/// Bits of a float as an unsigned integer (and back), on host and device.
KVC_HOST_DEVICE uint32_t float_bits(float x) {
#if KVC_DEVICE_PASS
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

KVC_HOST_DEVICE float bits_float(uint32_t u) {
#if KVC_DEVICE_PASS
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

/// Smallest power of two >= x (x >= 1); bit_ceil(0) == 1.
KVC_HOST_DEVICE constexpr uint64_t bit_ceil(uint64_t x) {
  uint64_t p = 1;
  while (p < x) p <<= 1;
  return p;
}

KVC_HOST_DEVICE constexpr bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

/// Index of the lowest set bit of x (x != 0): log2(x) for a power of two.
KVC_HOST_DEVICE int lowest_bit(uint32_t x) {
#if KVC_DEVICE_PASS
  return __ffs(x) - 1;
#else
  return __builtin_ctz(x);
#endif
}

KVC_HOST_DEVICE constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/// Largest power of two <= cap that divides n (n >= 1).
KVC_HOST_DEVICE constexpr int largest_pow2_divisor(int n, int cap) {
  int d = 1;
  while (d * 2 <= cap && n % (d * 2) == 0) d *= 2;
  return d;
}

/// Largest divisor of n that is <= cap (n >= 1, cap >= 1).
KVC_HOST_DEVICE constexpr int largest_divisor(int n, int cap) {
  int d = cap < n ? cap : n;
  while (n % d != 0) --d;
  return d;
}

/// Exact ceil(log2(v)) of a positive finite float, read from its bits: the smallest e with
/// 2^e >= v. Normal v: the exponent, plus one when the mantissa is non-zero. Subnormal v:
/// v = m * 2^-149, so -149 + ceil(log2(m)). Not defined for v <= 0, inf or NaN.
KVC_HOST_DEVICE int ceil_log2(float v) {
  const uint32_t u = float_bits(v);
  const int exponent = static_cast<int>((u >> 23) & 0xffu);
  const uint32_t mantissa = u & 0x7fffffu;
  if (exponent != 0) return exponent - 127 + (mantissa != 0 ? 1 : 0);
  int e = 0;
  while ((uint32_t{1} << e) < mantissa) ++e;
  return -149 + e;
}

/// 2^e as a float, exact for -149 <= e <= 127 (subnormal results included).
KVC_HOST_DEVICE float exp2i(int e) {
  if (e >= -126) return bits_float(static_cast<uint32_t>(e + 127) << 23);
  return bits_float(uint32_t{1} << (e + 149));
}

/// a / b, the IEEE division rounded to nearest even on host and device (also in builds
/// with --use_fast_math, which would otherwise turn `/` into a reciprocal multiply).
KVC_HOST_DEVICE float div_rn(float a, float b) {
#if KVC_DEVICE_PASS
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

/// Shift `m` right by `s` bits (1 <= s <= 31), rounding to nearest, ties to even.
KVC_HOST_DEVICE constexpr uint32_t shift_right_rne(uint32_t m, int s) {
  const uint32_t q = m >> s;
  const uint32_t rem = m & ((uint32_t{1} << s) - 1u);
  const uint32_t half = uint32_t{1} << (s - 1);
  return q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
}

KVC_NAMESPACE_END
