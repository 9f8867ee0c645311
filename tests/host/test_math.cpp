// SPDX-License-Identifier: Apache-2.0
// Host tier: small integer and float math of core/bit.hpp (ceil_log2, exp2i, bit_ceil,
// shift_right_rne, ...) against the reference or against plain arithmetic in the test.
#include <doctest/doctest.h>

#include <kvcompress/core/bit.hpp>
#include <kvcompress/layout/ring.hpp>

#include "reference/reference.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>

namespace {

uint32_t fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float bitsf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

struct CeilLog2Checker {
  int64_t checked = 0, mismatches = 0;
  std::string first;
  void operator()(float v) {
    ++checked;
    const int got = kvc::ceil_log2(v);
    const int want = kvcref::ceil_log2_exact(static_cast<double>(v));
    if (got != want && mismatches++ == 0) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "ceil_log2(%a = bits 0x%08x) = %d, reference %d", v, fbits(v),
                    got, want);
      first = buf;
    }
  }
};

// Round-to-nearest-even of m / 2^s in plain integer arithmetic on 64 bits.
uint64_t div_pow2_rne(uint64_t m, int s) {
  const uint64_t d = uint64_t{1} << s;
  const uint64_t q = m / d, r = m % d;
  if (2 * r > d) return q + 1;
  if (2 * r < d) return q;
  return q + (q & 1);
}

}  // namespace

// constexpr functions are checked at compile time too (libcu++ style).
static_assert(kvc::bit_ceil(0) == 1, "");
static_assert(kvc::bit_ceil(1) == 1, "");
static_assert(kvc::bit_ceil(2) == 2, "");
static_assert(kvc::bit_ceil(3) == 4, "");
static_assert(kvc::bit_ceil(9) == 16, "");
static_assert(kvc::bit_ceil(130) == 256, "");
static_assert(kvc::bit_ceil((uint64_t{1} << 40) + 1) == uint64_t{1} << 41, "");
static_assert(kvc::is_pow2(1) && kvc::is_pow2(64) && !kvc::is_pow2(0) && !kvc::is_pow2(-8) &&
                  !kvc::is_pow2(12),
              "");
static_assert(kvc::ceil_div(10, 4) == 3 && kvc::ceil_div(12, 4) == 3 && kvc::ceil_div(0, 4) == 0, "");
static_assert(kvc::shift_right_rne(0x5u, 1) == 2u, "2.5 -> 2 (tie, even)");
static_assert(kvc::shift_right_rne(0x7u, 1) == 4u, "3.5 -> 4 (tie, odd rounds up)");
static_assert(kvc::shift_right_rne(0x6u, 2) == 2u, "1.5 -> 2");
static_assert(kvc::shift_right_rne(0xau, 2) == 2u, "2.5 -> 2");
static_assert(kvc::shift_right_rne(0x9u, 2) == 2u, "2.25 -> 2");
static_assert(kvc::shift_right_rne(0xbu, 2) == 3u, "2.75 -> 3");
static_assert(kvc::shift_right_rne(0xffffffffu, 1) == 0x80000000u, "carry out of the top half");
static_assert(kvc::shift_right_rne(0xc0000000u, 31) == 2u, "1.5 -> 2 at the widest shift");
static_assert(kvc::shift_right_rne(0x40000000u, 31) == 0u, "0.5 -> 0");
static_assert(kvc::ring_capacity(2, 0) == 8, "");
static_assert(kvc::ring_capacity(2, 7) == 16, "");
static_assert(kvc::ring_capacity(128, 1) == 256, "");
static_assert(kvc::ring_capacity(1, 0) == 8, "");
static_assert(kvc::ring_capacity_sufficient(8, 2, 7) && !kvc::ring_capacity_sufficient(8, 2, 8), "");

TEST_CASE("ceil_log2: every power of two 2^-149..2^127 and one float ulp either side") {
  CeilLog2Checker check;
  for (int e = -149; e <= 127; ++e) {
    const float p = std::ldexp(1.f, e);
    REQUIRE(static_cast<double>(p) == std::ldexp(1.0, e));
    CHECK_MESSAGE(kvc::ceil_log2(p) == e, "2^", e);
    check(p);
    if (e < 127) {
      const float up = std::nextafter(p, std::numeric_limits<float>::infinity());
      CHECK_MESSAGE(kvc::ceil_log2(up) == e + 1, "2^", e, " + 1 ulp");
      check(up);
    }
    if (e > -149) {
      const float down = std::nextafter(p, 0.f);
      // 2^-148 - 1 ulp is 2^-149 itself.
      CHECK_MESSAGE(kvc::ceil_log2(down) == (e == -148 ? -149 : e), "2^", e, " - 1 ulp");
      check(down);
    }
  }
  check(std::numeric_limits<float>::max());
  CHECK(kvc::ceil_log2(std::numeric_limits<float>::max()) == 128);
  CHECK(check.checked == 277 + 276 + 276 + 1);
  INFO(check.first);
  CHECK(check.mismatches == 0);
}

TEST_CASE("ceil_log2: random positive floats, and float subnormals") {
  std::mt19937_64 rng(0xce11);
  CeilLog2Checker check;
  for (int i = 0; i < 500000; ++i) {
    const uint32_t u = static_cast<uint32_t>(rng()) & 0x7fffffffu;
    if (u == 0 || u >= 0x7f800000u) continue;  // defined for positive finite v only
    check(bitsf(u));
  }
  for (uint32_t u = 1; u < (1u << 23); u += 97) check(bitsf(u));
  for (uint32_t u = 1; u < (1u << 23); u <<= 1) {  // subnormal powers of two and neighbours
    check(bitsf(u));
    check(bitsf(u + 1));
    check(bitsf(u - 1 > 0 ? u - 1 : 1));
  }
  check(bitsf(0x007fffffu));  // largest subnormal: ceil is -126
  CHECK(kvc::ceil_log2(bitsf(0x007fffffu)) == -126);
  CHECK(kvc::ceil_log2(bitsf(0x00000003u)) == -147);
  CHECK(check.checked > 500000);
  INFO(check.first);
  CHECK(check.mismatches == 0);
}

TEST_CASE("exp2i: exact 2^e for e in -149..127") {
  int mismatches = 0;
  std::string first;
  for (int e = -149; e <= 127; ++e) {
    const float got = kvc::exp2i(e);
    if (static_cast<double>(got) != std::ldexp(1.0, e) && mismatches++ == 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "exp2i(%d) = %a (bits 0x%08x)", e, got, fbits(got));
      first = buf;
    }
  }
  INFO(first);
  CHECK(mismatches == 0);
  CHECK(fbits(kvc::exp2i(-149)) == 0x00000001u);
  CHECK(fbits(kvc::exp2i(-127)) == 0x00400000u);
  CHECK(fbits(kvc::exp2i(-128)) == 0x00200000u);
  CHECK(fbits(kvc::exp2i(-126)) == 0x00800000u);
  CHECK(fbits(kvc::exp2i(0)) == 0x3f800000u);
  CHECK(fbits(kvc::exp2i(127)) == 0x7f000000u);
}

TEST_CASE("bit_ceil matches a plain loop; float_bits/bits_float round-trip") {
  for (uint64_t x = 0; x <= 5000; ++x) {
    uint64_t p = 1;
    while (p < x) p *= 2;
    CHECK_MESSAGE(kvc::bit_ceil(x) == p, "x = ", x);
  }
  for (int k = 1; k < 63; ++k) {
    const uint64_t p = uint64_t{1} << k;
    CHECK(kvc::bit_ceil(p) == p);
    CHECK(kvc::bit_ceil(p + 1) == 2 * p);
    CHECK(kvc::bit_ceil(p - 1) == (k == 1 ? 1 : p));
  }
  std::mt19937_64 rng(7);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t u = static_cast<uint32_t>(rng());
    CHECK(kvc::float_bits(kvc::bits_float(u)) == u);
  }
  CHECK(kvc::float_bits(1.f) == 0x3f800000u);
  CHECK(kvc::bits_float(0xc0000000u) == -2.f);
}

TEST_CASE("shift_right_rne: every m < 2^13 and s in 1..12, plus wide values and s up to 31") {
  int mismatches = 0;
  std::string first;
  auto check = [&](uint32_t m, int s) {
    const uint64_t want = div_pow2_rne(m, s);
    const uint32_t got = kvc::shift_right_rne(m, s);
    if (got != want && mismatches++ == 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "shift_right_rne(0x%08x, %d) = 0x%08x, want 0x%08llx", m, s,
                    got, static_cast<unsigned long long>(want));
      first = buf;
    }
  };
  for (uint32_t m = 0; m < (1u << 13); ++m)
    for (int s = 1; s <= 12; ++s) check(m, s);
  std::mt19937_64 rng(0x5411);
  for (int i = 0; i < 200000; ++i) {
    const int s = 1 + static_cast<int>(rng() % 31);
    uint32_t m = static_cast<uint32_t>(rng());
    if (i % 3 == 0) m = (m & ~((1u << s) - 1u)) | (1u << (s - 1));  // force a tie
    check(m, s);
  }
  INFO(first);
  CHECK(mismatches == 0);
}
