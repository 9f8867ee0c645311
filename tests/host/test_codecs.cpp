// SPDX-License-Identifier: Apache-2.0
// Host tier: the library's scalar codecs (core/codecs.hpp) against the independent float64
// reference (tests/reference/reference.hpp). Every comparison is exact (or NaN-ness for NaN
// codes, where the library returns its canonical NaN); the first mismatch is reported in hex.
#include <doctest/doctest.h>

#include <kvcompress/core/codecs.hpp>

#include "reference/reference.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

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

std::string hex(uint64_t v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

bool e4m3_is_nan(uint8_t c) { return (c & 0x7fu) == 0x7fu; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7fffu) > 0x7f80u; }

/// Counts e4m3 encoder mismatches against the reference and keeps the first one.
struct E4m3Checker {
  int64_t checked = 0, mismatches = 0;
  std::string first;
  void operator()(float x) {
    ++checked;
    const uint8_t got = kvc::float_to_e4m3(x);
    const uint8_t want = kvcref::e4m3_rne_satfinite(static_cast<double>(x));
    const bool ok = std::isnan(x) ? (e4m3_is_nan(got) && e4m3_is_nan(want)) : got == want;
    if (!ok && mismatches++ == 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "float_to_e4m3(%a = bits 0x%08x) = 0x%02x, reference 0x%02x", x,
                    fbits(x), got, want);
      first = buf;
    }
  }
};

struct Bf16Checker {
  int64_t checked = 0, mismatches = 0;
  std::string first;
  void operator()(float x) {
    ++checked;
    const uint16_t got = kvc::float_to_bf16(x);
    const uint16_t want = kvcref::bf16_from_float(x);
    const bool ok = std::isnan(x) ? (bf16_is_nan(got) && bf16_is_nan(want)) : got == want;
    if (!ok && mismatches++ == 0) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "float_to_bf16(%a = bits 0x%08x) = 0x%04x, reference 0x%04x", x,
                    fbits(x), got, want);
      first = buf;
    }
  }
};

#define KVC_REPORT(checker)                                                   \
  do {                                                                        \
    INFO("checked ", (checker).checked, " values, ", (checker).mismatches,   \
         " mismatches; first: ", (checker).first);                           \
    CHECK((checker).mismatches == 0);                                         \
    CHECK((checker).checked > 0);                                             \
  } while (0)

}  // namespace

// ---------------------------------------------------------------------------------------
// e4m3 decode

TEST_CASE("e4m3_to_float: all 256 codes equal the reference decoder") {
  int mismatches = 0;
  std::string first;
  for (int c = 0; c < 256; ++c) {
    const float got = kvc::e4m3_to_float(static_cast<uint8_t>(c));
    const double want = kvcref::e4m3_to_double(static_cast<uint8_t>(c));
    bool ok;
    if (std::isnan(want))
      ok = std::isnan(got);
    else
      ok = static_cast<double>(got) == want && std::signbit(got) == std::signbit(want);
    if (!ok && mismatches++ == 0) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "code 0x%02x: library %a (bits 0x%08x), reference %a", c, got,
                    fbits(got), want);
      first = buf;
    }
  }
  INFO(first);
  CHECK(mismatches == 0);
  // The two NaN codes and the extremes, by hand.
  CHECK(std::isnan(kvc::e4m3_to_float(0x7f)));
  CHECK(std::isnan(kvc::e4m3_to_float(0xff)));
  CHECK(kvc::e4m3_to_float(0x7e) == 448.f);
  CHECK(kvc::e4m3_to_float(0xfe) == -448.f);
  CHECK(kvc::e4m3_to_float(0x01) == std::ldexp(1.f, -9));
  CHECK(kvc::e4m3_to_float(0x08) == std::ldexp(1.f, -6));
  CHECK(fbits(kvc::e4m3_to_float(0x80)) == 0x80000000u);
}

TEST_CASE("e4m3: float_to_e4m3(e4m3_to_float(c)) == c for every non-NaN code") {
  int mismatches = 0;
  std::string first;
  for (int c = 0; c < 256; ++c) {
    if (e4m3_is_nan(static_cast<uint8_t>(c))) continue;
    const uint8_t back = kvc::float_to_e4m3(kvc::e4m3_to_float(static_cast<uint8_t>(c)));
    if (back != c && mismatches++ == 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "code 0x%02x decodes and re-encodes to 0x%02x", c, back);
      first = buf;
    }
  }
  INFO(first);
  CHECK(mismatches == 0);
  CHECK(kvc::float_to_e4m3(-0.0f) == 0x80);
  CHECK(kvc::float_to_e4m3(0.0f) == 0x00);
}

// ---------------------------------------------------------------------------------------
// e4m3 encode

TEST_CASE("float_to_e4m3: midpoints between adjacent codes, and one float ulp either side") {
  E4m3Checker check;
  int ties_to_even_checked = 0;
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = kvc::e4m3_to_float(static_cast<uint8_t>(c));
    const float hi = kvc::e4m3_to_float(static_cast<uint8_t>(c + 1));
    // Midpoints need one more bit than e4m3 has (5 significant bits): exact in float.
    const float mid = static_cast<float>((static_cast<double>(lo) + static_cast<double>(hi)) / 2);
    REQUIRE(static_cast<double>(mid) == (static_cast<double>(lo) + static_cast<double>(hi)) / 2);
    for (float sign : {1.f, -1.f}) {
      const float m = sign * mid;
      check(m);
      check(std::nextafter(m, 0.f));
      check(std::nextafter(m, sign * 1000.f));
      // Independent of the reference: a tie goes to the even code.
      const uint8_t even = static_cast<uint8_t>((c % 2 == 0 ? c : c + 1) | (sign < 0 ? 0x80 : 0));
      CHECK_MESSAGE(kvc::float_to_e4m3(m) == even, "tie between codes ", c, " and ", c + 1);
      ++ties_to_even_checked;
    }
  }
  CHECK(ties_to_even_checked == 2 * 0x7e);
  KVC_REPORT(check);
}

TEST_CASE("float_to_e4m3: dense sweep of the e4m3 range and the subnormal range") {
  E4m3Checker check;
  // Every float in [2^-12, 2^10) whose mantissa is a multiple of 2^-15 (i.e. step 2^(e-15)
  // in binade e): 22 binades * 256 values * both signs.
  for (uint32_t u = fbits(std::ldexp(1.f, -12)); u < fbits(1024.f); u += 1u << 8) {
    check(bitsf(u));
    check(-bitsf(u));
  }
  // The e4m3 subnormal range and below, [2^-16, 2^-6], every 2^-24 apart (the steps hit all
  // multiples of 2^-10, i.e. every subnormal midpoint).
  for (int i = 0; i <= (1 << 18); ++i) {
    const float x = std::ldexp(static_cast<float>(i), -24);
    check(x);
    check(-x);
  }
  // float subnormals and zeros.
  for (uint32_t u = 0; u < (1u << 23); u += 4099) {
    check(bitsf(u));
    check(bitsf(u | 0x80000000u));
  }
  check(0.f);
  check(-0.f);
  KVC_REPORT(check);
}

TEST_CASE("float_to_e4m3: random floats of every exponent, and random floats within +-512") {
  std::mt19937_64 rng(0xe4e3);
  E4m3Checker check;
  for (int i = 0; i < 600000; ++i) check(bitsf(static_cast<uint32_t>(rng())));
  std::uniform_real_distribution<float> near(-512.f, 512.f);
  for (int i = 0; i < 300000; ++i) check(near(rng));
  std::uniform_real_distribution<float> small(-1.f / 32, 1.f / 32);
  for (int i = 0; i < 100000; ++i) check(small(rng));
  KVC_REPORT(check);
}

TEST_CASE("float_to_e4m3: saturation at and beyond 448, infinities, NaN") {
  E4m3Checker check;
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {448.f, std::nextafter(448.f, 0.f), std::nextafter(448.f, 1e9f), 456.f,
                  std::nextafter(464.f, 0.f), 464.f, std::nextafter(464.f, 1e9f), 480.f, 512.f,
                  1e30f, std::numeric_limits<float>::max(), inf}) {
    check(x);
    check(-x);
  }
  KVC_REPORT(check);
  // By hand: satfinite never produces the NaN codes from a finite or infinite input.
  CHECK(kvc::float_to_e4m3(448.f) == 0x7e);
  CHECK(kvc::float_to_e4m3(std::nextafter(464.f, 0.f)) == 0x7e);
  CHECK(kvc::float_to_e4m3(464.f) == 0x7e);
  CHECK(kvc::float_to_e4m3(480.f) == 0x7e);
  CHECK(kvc::float_to_e4m3(1e30f) == 0x7e);
  CHECK(kvc::float_to_e4m3(inf) == 0x7e);
  CHECK(kvc::float_to_e4m3(-inf) == 0xfe);
  CHECK(kvc::float_to_e4m3(-480.f) == 0xfe);
  // 432 is the tie between 416 (0x7d, odd) and 448 (0x7e, even).
  CHECK(kvc::float_to_e4m3(432.f) == 0x7e);
  CHECK(kvc::float_to_e4m3(std::nextafter(432.f, 0.f)) == 0x7d);

  // NaN: the library returns its canonical NaN whatever the payload and sign.
  for (uint32_t u : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0x7fa5a5a5u}) {
    const uint8_t got = kvc::float_to_e4m3(bitsf(u));
    CHECK_MESSAGE(got == kvc::kE4m3NaN, "NaN bits ", hex(u, 8), " gave ", hex(got, 2));
    CHECK(e4m3_is_nan(kvcref::e4m3_rne_satfinite(static_cast<double>(bitsf(u)))));
  }
}

// ---------------------------------------------------------------------------------------
// bf16

TEST_CASE("bf16_to_float: all 65536 codes exactly equal the reference decoder") {
  int mismatches = 0;
  std::string first;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float got = kvc::bf16_to_float(static_cast<uint16_t>(b));
    const double want = kvcref::bf16_to_double(static_cast<uint16_t>(b));
    const bool ok = std::isnan(want) ? std::isnan(got)
                                     : (static_cast<double>(got) == want &&
                                        std::signbit(got) == std::signbit(want));
    if (!ok && mismatches++ == 0) {
      char buf[128];
      std::snprintf(buf, sizeof buf, "bf16 0x%04x: library %a, reference %a", b, got, want);
      first = buf;
    }
  }
  INFO(first);
  CHECK(mismatches == 0);
}

TEST_CASE("float_to_bf16: every bf16 code with low halves 0, 1, tie-1, tie, tie+1, max, random") {
  std::mt19937_64 rng(0xbf16);
  Bf16Checker check;
  for (uint32_t hi = 0; hi < 65536; ++hi) {
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu,
                        static_cast<uint32_t>(rng() & 0xffffu)})
      check(bitsf((hi << 16) | lo));
  }
  KVC_REPORT(check);
}

TEST_CASE("float_to_bf16: random floats, ties, overflow, subnormals, NaN by hand") {
  std::mt19937_64 rng(0x5eed);
  Bf16Checker check;
  for (int i = 0; i < 400000; ++i) check(bitsf(static_cast<uint32_t>(rng())));
  KVC_REPORT(check);

  // Ties go to the even code.
  CHECK(kvc::float_to_bf16(bitsf(0x3f808000u)) == 0x3f80);  // 1 + 2^-8: even below
  CHECK(kvc::float_to_bf16(bitsf(0x3f818000u)) == 0x3f82);  // odd below: up
  CHECK(kvc::float_to_bf16(bitsf(0xbf818000u)) == 0xbf82);
  // Overflow: the largest bf16 plus half an ulp rounds to inf (odd 0x7f7f rounds up).
  CHECK(kvc::float_to_bf16(bitsf(0x7f7f7fffu)) == 0x7f7f);
  CHECK(kvc::float_to_bf16(bitsf(0x7f7f8000u)) == 0x7f80);
  CHECK(kvc::float_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(kvc::float_to_bf16(-std::numeric_limits<float>::max()) == 0xff80);
  CHECK(kvc::float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  // Subnormals round like any other value; the carry into the normal range works.
  CHECK(kvc::float_to_bf16(bitsf(0x00008000u)) == 0x0000);
  CHECK(kvc::float_to_bf16(bitsf(0x00018000u)) == 0x0002);
  CHECK(kvc::float_to_bf16(bitsf(0x007fffffu)) == 0x0080);
  CHECK(kvc::float_to_bf16(bitsf(0x80000001u)) == 0x8000);
  // NaN: canonical 0x7fff whatever the payload (a payload only in the low half included).
  for (uint32_t u : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const uint16_t got = kvc::float_to_bf16(bitsf(u));
    CHECK_MESSAGE(got == kvc::kBf16NaN, "NaN bits ", hex(u, 8), " gave ", hex(got, 4));
    CHECK(bf16_is_nan(kvcref::bf16_from_float(bitsf(u))));
  }
  // Round trip of every non-NaN bf16 code.
  int round_trip_mismatches = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    if (bf16_is_nan(static_cast<uint16_t>(b))) continue;
    if (kvc::float_to_bf16(kvc::bf16_to_float(static_cast<uint16_t>(b))) != b) ++round_trip_mismatches;
  }
  CHECK(round_trip_mismatches == 0);
  CHECK(kvc::to_float(kvc::bf16_t{0x3fc0}) == 1.5f);
  CHECK(kvc::to_float(2.5f) == 2.5f);
}

// ---------------------------------------------------------------------------------------
// UE8M0

TEST_CASE("ue8m0_from_exponent clamps; ue8m0_to_float is 2^(code-127)") {
  static_assert(kvc::ue8m0_from_exponent(0) == 127, "");
  static_assert(kvc::ue8m0_from_exponent(-200) == 0, "");
  static_assert(kvc::ue8m0_from_exponent(200) == 255, "");
  static_assert(kvc::ue8m0_from_exponent(-127) == 0, "");
  static_assert(kvc::ue8m0_from_exponent(-128) == 0, "");
  static_assert(kvc::ue8m0_from_exponent(-126) == 1, "");
  static_assert(kvc::ue8m0_from_exponent(127) == 254, "");
  static_assert(kvc::ue8m0_from_exponent(128) == 255, "");
  static_assert(kvc::ue8m0_from_exponent(129) == 255, "");
  for (int e = -300; e <= 300; ++e) {
    const int want = e + 127 < 0 ? 0 : (e + 127 > 255 ? 255 : e + 127);
    CHECK_MESSAGE(kvc::ue8m0_from_exponent(e) == want, "e = ", e);
  }
  for (int c = 0; c < 255; ++c) {
    const float got = kvc::ue8m0_to_float(static_cast<uint8_t>(c));
    CHECK_MESSAGE(static_cast<double>(got) == std::ldexp(1.0, c - 127), "code ", c);
  }
  CHECK(std::isnan(kvc::ue8m0_to_float(255)));
  CHECK(fbits(kvc::ue8m0_to_float(0)) == 0x00400000u);  // 2^-127, a float subnormal
  CHECK(kvc::ue8m0_to_float(127) == 1.f);
}
