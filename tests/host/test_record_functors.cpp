// SPDX-License-Identifier: Apache-2.0
// Host tier: the record-side functors of Op B (contract §2) — Ue8m0TileQuantizer,
// PerTensorE4m3Quantizer, Rotary — and the cache layouts' byte maps (layout/cache.hpp),
// against the independent float64 reference (tests/reference/reference.hpp) and against
// values worked out by hand in this file.
#include <doctest/doctest.h>

#include <kvcompress/functor/quantize.hpp>
#include <kvcompress/functor/rotary.hpp>
#include <kvcompress/layout/cache.hpp>

#include "reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kFltMax = std::numeric_limits<float>::max();

uint32_t fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// Counts checks and mismatches and keeps the first mismatch's description.
struct Tally {
  int64_t checked = 0, mismatches = 0;
  std::string first;
  template <class Describe>
  void operator()(bool ok, Describe&& describe) {
    ++checked;
    if (!ok && mismatches++ == 0) first = describe();
  }
};

#define KVC_TALLY_REPORT(t)                                                          \
  do {                                                                               \
    INFO("checked ", (t).checked, ", mismatches ", (t).mismatches, "; first: ", (t).first); \
    CHECK((t).checked > 0);                                                          \
    CHECK((t).mismatches == 0);                                                      \
  } while (0)

std::string fmt(const char* format, ...) {
  char buf[320];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  return buf;
}

// ---------------------------------------------------------------------------------------
// contract §2 layout a, the tile recipe, written out with the float64 reference.

using Tile = kvc::Ue8m0TileQuantizer<64>;

/// fp32(1/448): the double quotient rounded once to float (checked against 1.0f/448.0f).
const float kInv448 = static_cast<float>(1.0 / 448.0);

/// e = ceil(log2(max(amax, 1e-4f) * fp32(1/448))), the multiply in fp32.
int spec_exponent(float amax) {
  const float a = std::max(amax, 1e-4f);
  const float v = static_cast<float>(static_cast<double>(a) * static_cast<double>(kInv448));
  return kvcref::ceil_log2_exact(static_cast<double>(v));
}

/// e4m3_rne_satfinite(clamp(x * 2^-e, -448, 448)), the scaling exact in double.
uint8_t spec_tile_code(float x, int e) {
  double v = std::ldexp(static_cast<double>(x), -e);
  if (!std::isnan(v)) v = std::min(448.0, std::max(-448.0, v));
  return kvcref::e4m3_rne_satfinite(v);
}

/// A random positive finite float with exponent field in [lo, hi] and random mantissa.
float random_float(std::mt19937_64& rng, int lo, int hi) {
  std::uniform_int_distribution<int> ex(lo, hi);
  std::uniform_int_distribution<uint32_t> man(0, 0x7fffffu);
  return from_bits((static_cast<uint32_t>(ex(rng)) << 23) | man(rng));
}

}  // namespace

TEST_CASE("Ue8m0TileQuantizer<64>::exponent follows the spec recipe (floor, fp32 multiply, exact ceil log2)") {
  CHECK(kInv448 == 1.0f / 448.0f);
  CHECK(Tile::kTileSize == 64);
  CHECK(Tile::kMinAmax == 1e-4f);

  std::vector<float> amaxes;
  for (int k = -30; k <= 30; ++k) {
    const float x = std::ldexp(448.0f, k);
    amaxes.push_back(x);
    amaxes.push_back(std::nextafterf(x, 0.f));
    amaxes.push_back(std::nextafterf(x, kInf));
    const float p = std::ldexp(1.0f, k);  // plain powers of two too
    amaxes.push_back(p);
    amaxes.push_back(std::nextafterf(p, 0.f));
    amaxes.push_back(std::nextafterf(p, kInf));
  }
  const float floor_amax = 1e-4f;
  for (float f : {floor_amax, std::nextafterf(floor_amax, 0.f), std::nextafterf(floor_amax, kInf),
                  std::nextafterf(std::nextafterf(floor_amax, kInf), kInf), 0.f, 5e-5f, 1e-30f,
                  std::numeric_limits<float>::denorm_min(), kFltMax, 1e38f, 448.f, 449.f, 1.f})
    amaxes.push_back(f);
  std::mt19937_64 rng(0x5eed01);
  for (int i = 0; i < 20000; ++i) amaxes.push_back(random_float(rng, 1, 254));
  for (int i = 0; i < 2000; ++i) amaxes.push_back(random_float(rng, 100, 140));  // near the floor and 1

  Tally t;
  for (float amax : amaxes) {
    const int got = Tile::exponent(amax, false, false);
    const int got_sanitize = Tile::exponent(amax, false, true);  // sanitize only matters for bad tiles
    const int want = spec_exponent(amax);
    t(got == want && got_sanitize == want, [&] {
      return fmt("amax %a: exponent %d (sanitize %d), spec %d", amax, got, got_sanitize, want);
    });
  }
  KVC_TALLY_REPORT(t);

  // Hand-checked anchors.
  CHECK(Tile::exponent(448.f, false, false) == spec_exponent(448.f));
  CHECK(Tile::exponent(0.f, false, false) == Tile::exponent(1e-4f, false, false));
  // 1e-4 / 448 = 2.23e-7, between 2^-23 (1.19e-7) and 2^-22 (2.38e-7).
  CHECK(Tile::exponent(0.f, false, false) == -22);
  CHECK(Tile::exponent(3.f, false, false) == -7);    // 3/448 = 0.0067 in (2^-8, 2^-7]
  CHECK(Tile::exponent(1000.f, false, false) == 2);  // 1000/448 = 2.23 in (2, 4]
  // max_j |x| = 448 * 2^k: v = 2^k * (448 * fp32(1/448)) rounded; the result is k or k+1,
  // whichever the spec recipe gives; the floor makes every amax below 1e-4 the same.
  for (int k = -10; k <= 30; ++k) {
    const int e = Tile::exponent(std::ldexp(448.f, k), false, false);
    CHECK((e == k || e == k + 1));
  }
}

TEST_CASE("Ue8m0TileQuantizer::scale_code is clamp(e + 127, 0, 255)") {
  Tally t;
  for (int e = -400; e <= 400; ++e) {
    const int want = std::min(255, std::max(0, e + 127));
    const int got = Tile::scale_code(e);
    t(got == want, [&] { return fmt("e %d: code %d, want %d", e, got, want); });
  }
  KVC_TALLY_REPORT(t);
  CHECK(Tile::scale_code(0) == 127);
  CHECK(Tile::scale_code(-22) == 105);
  CHECK(Tile::scale_code(-127) == 0);
  CHECK(Tile::scale_code(-128) == 0);
  CHECK(Tile::scale_code(128) == 255);
  CHECK(Tile::scale_code(127) == 254);
}

TEST_CASE("Ue8m0TileQuantizer::quantize: ties, one ulp either side, saturation, subnormals, -0") {
  const int exponents[] = {-22, -9, -1, 0, 1, 3, 20, 60, 119};
  Tally t;
  auto check_one = [&](float x, int e, const char* what) {
    const int got = Tile::quantize<kvc::SoftwareE4m3>(x, e);
    const int want = spec_tile_code(x, e);
    t(got == want, [&] {
      return fmt("%s: x %a, e %d (x*2^-e %a): code 0x%02x, spec 0x%02x", what, x, e,
                 std::ldexp(static_cast<double>(x), -e), got, want);
    });
  };
  for (int e : exponents) {
    // Every code and every midpoint between adjacent codes, scaled up by 2^e, both signs,
    // and one float ulp either side of the scaled value.
    for (int c = 0; c <= 0x7e; ++c) {
      const double v = kvcref::e4m3_to_double(static_cast<uint8_t>(c));
      const double mid = c < 0x7e ? 0.5 * (v + kvcref::e4m3_to_double(static_cast<uint8_t>(c + 1)))
                                  : 464.0;  // beyond 448: the tie to the virtual next value
      for (double s : {v, mid}) {
        for (float sign : {1.f, -1.f}) {
          const float x = sign * static_cast<float>(std::ldexp(s, e));
          REQUIRE(static_cast<double>(x) == sign * std::ldexp(s, e));  // exact in float
          check_one(x, e, "code/tie");
          check_one(std::nextafterf(x, 0.f), e, "tie - ulp");
          check_one(std::nextafterf(x, sign * kInf), e, "tie + ulp");
        }
      }
      // A tie must round to the even code (independent of the reference's search).
      if (c < 0x7e) {
        const float x = static_cast<float>(std::ldexp(mid, e));
        const int got = Tile::quantize<kvc::SoftwareE4m3>(x, e);
        t(got == (c % 2 == 0 ? c : c + 1),
          [&] { return fmt("tie between 0x%02x and 0x%02x, e %d: code 0x%02x", c, c + 1, e, got); });
      }
    }
    // Saturation: scaled magnitude slightly above 448, well above, and infinities.
    for (double s : {448.0, 448.0 * (1 + 0x1p-23), 449.0, 460.0, 464.0, 479.99, 480.0, 1e4, 1e30}) {
      for (float sign : {1.f, -1.f}) {
        const double xd = sign * std::ldexp(s, e);
        if (!(std::fabs(xd) <= kFltMax)) continue;
        const float x = static_cast<float>(xd);
        check_one(x, e, "saturation");
        const int got = Tile::quantize<kvc::SoftwareE4m3>(x, e);
        t(got == (sign > 0 ? 0x7e : 0xfe),
          [&] { return fmt("saturation: x %a, e %d: code 0x%02x", x, e, got); });
      }
    }
    check_one(kInf, e, "+inf");
    check_one(-kInf, e, "-inf");
    CHECK(Tile::quantize(kInf, e) == 0x7e);
    CHECK(Tile::quantize(-kInf, e) == 0xfe);
    // Subnormal results: k * 2^-9 and (k + 1/2) * 2^-9, and around half the smallest.
    for (int k = 0; k <= 8; ++k) {
      for (double s : {k * 0x1p-9, (k + 0.5) * 0x1p-9}) {
        const float x = static_cast<float>(std::ldexp(s, e));
        check_one(x, e, "subnormal");
        check_one(-x, e, "subnormal");
        check_one(std::nextafterf(x, 0.f), e, "subnormal - ulp");
        check_one(std::nextafterf(x, kInf), e, "subnormal + ulp");
      }
    }
    // Half the smallest subnormal is a tie to 0; just above rounds to 0x01.
    const float half_min = static_cast<float>(std::ldexp(0x1p-10, e));
    CHECK(Tile::quantize(half_min, e) == 0x00);
    CHECK(Tile::quantize(std::nextafterf(half_min, kInf), e) == 0x01);
    CHECK(Tile::quantize(-std::nextafterf(half_min, kInf), e) == 0x81);
    // Negative zero keeps its sign; a tiny negative value rounds to -0.
    CHECK(Tile::quantize(-0.0f, e) == 0x80);
    CHECK(Tile::quantize(0.0f, e) == 0x00);
    CHECK(Tile::quantize(-static_cast<float>(std::ldexp(0x1p-12, e)), e) == 0x80);
  }
  // Random x against each random tile's own exponent: every value of the tile.
  std::mt19937_64 rng(0x5eed02);
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  for (int tile = 0; tile < 3000; ++tile) {
    const float range = std::ldexp(1.f, std::uniform_int_distribution<int>(-20, 60)(rng));
    kvc::Array<float, 64> x;
    for (int i = 0; i < 64; ++i) x[i] = unit(rng) * range;
    const int e = Tile::exponent(Tile::abs_max(x), Tile::has_nonfinite(x), false);
    for (int i = 0; i < 64; ++i) check_one(x[i], e, "random tile");
  }
  KVC_TALLY_REPORT(t);
  // Hand-checked: x = 3, e = -7: 3 * 128 = 384 = 1.5 * 2^8 -> code (8+7)<<3 | 4 = 0x7c.
  CHECK(Tile::quantize(3.f, -7) == 0x7c);
  CHECK(Tile::quantize(-3.f, -7) == 0xfc);
  // x = 1, e = 0 -> 0x38; 1.0625 is the tie between 1 (0x38) and 1.125 (0x39) -> 0x38.
  CHECK(Tile::quantize(1.f, 0) == 0x38);
  CHECK(Tile::quantize(1.0625f, 0) == 0x38);
  CHECK(Tile::quantize(1.1875f, 0) == 0x3a);  // tie between 0x39 and 0x3a -> even 0x3a
}

TEST_CASE("Ue8m0TileQuantizer: non-finite tiles get e = 128 (code 255) or, sanitized, 127 (code 254)") {
  for (float amax : {kNaN, kInf, 0.f, 1.f, 1e-30f, kFltMax}) {
    INFO("amax ", amax);
    CHECK(Tile::exponent(amax, true, false) == 128);
    CHECK(Tile::exponent(amax, true, true) == 127);
  }
  CHECK(Tile::scale_code(Tile::exponent(kNaN, true, false)) == 255);
  CHECK(Tile::scale_code(Tile::exponent(kNaN, true, true)) == 254);
  // Values of a bad tile: the spec formula with e = 128 / 127. Moderate finite values go to
  // (signed) 0, an infinity to +-448, a NaN to the e4m3 NaN.
  for (int e : {128, 127}) {
    INFO("e ", e);
    for (float x : {1.f, -1.f, 1000.f, -3e30f, 1e35f, 0.f, -0.f}) {
      const int got = Tile::quantize(x, e);
      INFO("x ", x, " code ", got);
      CHECK(got == spec_tile_code(x, e));
      CHECK((got & 0x7f) == 0);
      CHECK((got & 0x80) == (std::signbit(x) ? 0x80 : 0));
    }
    CHECK(Tile::quantize(kInf, e) == 0x7e);
    CHECK(Tile::quantize(-kInf, e) == 0xfe);
    CHECK(Tile::quantize(kNaN, e) == 0x7f);
    CHECK((Tile::quantize(-kNaN, e) & 0x7f) == 0x7f);
    // The spec formula, for the largest finite floats too (x * 2^-128 can reach 0.5..1).
    for (float x : {kFltMax, -kFltMax, 1e38f, 0x1p118f, 0x1p117f}) {
      const int got = Tile::quantize(x, e);
      INFO("x ", x, " code ", got);
      CHECK(got == spec_tile_code(x, e));
    }
  }
}

TEST_CASE("Ue8m0TileQuantizer::abs_max / has_nonfinite on small fragments") {
  kvc::Array<float, 8> a{{0.5f, -3.f, 2.f, -0.f, 1e-30f, -2.999f, 0.f, 1.f}};
  CHECK(Tile::abs_max(a) == 3.f);
  CHECK_FALSE(Tile::has_nonfinite(a));
  CHECK(Tile::abs_max(a, 2, 2) == 2.f);       // {2, -0}
  CHECK(Tile::abs_max(a, 3, 1) == 0.f);       // {-0}
  CHECK_FALSE(std::signbit(Tile::abs_max(a, 3, 1)));
  CHECK(Tile::abs_max(a, 4, 4) == 2.999f);
  CHECK(Tile::abs_max(a, 0, 0) == 0.f);

  kvc::Array<float, 8> n = a;
  n[5] = kNaN;  // NaN ignored by abs_max, flagged by has_nonfinite
  CHECK(Tile::abs_max(n) == 3.f);
  CHECK(Tile::has_nonfinite(n));
  CHECK(Tile::has_nonfinite(n, 5, 1));
  CHECK_FALSE(Tile::has_nonfinite(n, 0, 5));
  CHECK_FALSE(Tile::has_nonfinite(n, 6, 2));
  CHECK(Tile::abs_max(n, 5, 1) == 0.f);
  n[0] = kNaN;  // NaN first
  CHECK(Tile::abs_max(n) == 3.f);

  kvc::Array<float, 8> inf = a;
  inf[6] = -kInf;
  CHECK(Tile::abs_max(inf) == kInf);
  CHECK(Tile::has_nonfinite(inf));
  CHECK_FALSE(Tile::has_nonfinite(inf, 0, 6));
  CHECK(Tile::abs_max(inf, 0, 6) == 3.f);

  kvc::Array<float, 4> big{{kFltMax, -kFltMax, std::numeric_limits<float>::denorm_min(), 0.f}};
  CHECK_FALSE(Tile::has_nonfinite(big));
  CHECK(Tile::abs_max(big) == kFltMax);

  // The whole tile path on a 64-value tile with a NaN: code 255, finite values -> 0.
  kvc::Array<float, 64> tile;
  for (int i = 0; i < 64; ++i) tile[i] = static_cast<float>(i - 32) * 0.25f;
  tile[17] = kNaN;
  const int e = Tile::exponent(Tile::abs_max(tile), Tile::has_nonfinite(tile), false);
  CHECK(e == 128);
  CHECK(Tile::scale_code(e) == 255);
  for (int i = 0; i < 64; ++i) {
    INFO("i ", i);
    const int q = Tile::quantize(tile[i], e);
    if (i == 17) CHECK(q == 0x7f);
    else CHECK((q & 0x7f) == 0);
  }
}

// ---------------------------------------------------------------------------------------

TEST_CASE("PerTensorE4m3Quantizer: x * fp32(1/scale), then e4m3 RNE satfinite") {
  std::mt19937_64 rng(0x5eed03);
  std::vector<float> scales = {1.f, 0.0371f, 3e-3f, 0.5f, 2.f, 17.25f, 1e-6f};
  for (int i = 0; i < 40; ++i) scales.push_back(random_float(rng, 100, 140));
  Tally t;
  for (float scale : scales) {
    const float inv = kvc::PerTensorE4m3Quantizer::inverse(scale);
    const float want_inv = static_cast<float>(1.0 / static_cast<double>(scale));
    t(inv == want_inv, [&] { return fmt("inverse(%a) = %a, want %a", scale, inv, want_inv); });
    auto check_one = [&](float x, const char* what) {
      const int got = kvc::PerTensorE4m3Quantizer::quantize<kvc::SoftwareE4m3>(x, inv);
      const float v = static_cast<float>(static_cast<double>(x) * static_cast<double>(want_inv));
      double c = static_cast<double>(v);
      if (!std::isnan(c)) c = std::min(448.0, std::max(-448.0, c));
      const int want = kvcref::e4m3_rne_satfinite(c);
      t(got == want, [&] {
        return fmt("%s: x %a, scale %a (inverse %a): code 0x%02x, spec 0x%02x", what, x, scale, inv,
                   got, want);
      });
    };
    std::uniform_real_distribution<float> u(-600.f, 600.f);
    for (int i = 0; i < 2000; ++i) {
      const float x = u(rng) * scale;
      check_one(x, "random");
      // bf16 values, as the fp8 rows layout feeds it
      check_one(static_cast<float>(kvcref::bf16_to_double(kvcref::bf16_round(x))), "bf16");
    }
    for (int i = 0; i < 200; ++i) check_one(u(rng) * scale * 1e-3f, "small");
    // Values whose scaled result is an e4m3 value or a tie between two.
    for (int c = 0; c < 0x7e; ++c) {
      const double mid = 0.5 * (kvcref::e4m3_to_double(static_cast<uint8_t>(c)) +
                                kvcref::e4m3_to_double(static_cast<uint8_t>(c + 1)));
      check_one(static_cast<float>(mid * scale), "near tie");
      check_one(-static_cast<float>(mid * scale), "near tie");
    }
    // Saturation.
    for (double s : {448.0, 449.0, 464.0, 500.0, 1e6}) {
      const double xd = s * scale;
      if (!(xd <= kFltMax)) continue;
      const float x = static_cast<float>(xd) * 1.0001f;
      check_one(x, "saturation");
      check_one(-x, "saturation");
      const int got = kvc::PerTensorE4m3Quantizer::quantize(x, inv);
      t(got == 0x7e, [&] { return fmt("saturation: x %a scale %a -> 0x%02x", x, scale, got); });
    }
    check_one(kInf, "inf");
    check_one(-kInf, "-inf");
    check_one(0.f, "0");
    check_one(-0.f, "-0");
  }
  KVC_TALLY_REPORT(t);
  // Hand-checked: scale 0.5 -> inverse 2; x = 3 -> 6 = 1.5 * 2^2 -> (2+7)<<3 | 4 = 0x4c.
  CHECK(kvc::PerTensorE4m3Quantizer::inverse(0.5f) == 2.f);
  CHECK(kvc::PerTensorE4m3Quantizer::quantize(3.f, 2.f) == 0x4c);
  CHECK(kvc::PerTensorE4m3Quantizer::quantize(-300.f, 2.f) == 0xfe);
  CHECK(kvc::PerTensorE4m3Quantizer::quantize(kNaN, 2.f) == 0x7f);
  // The reciprocal is taken in fp32 and the product rounded to fp32 before e4m3: with
  // scale 3e-3 the library must not divide x / scale.
  CHECK(kvc::PerTensorE4m3Quantizer::inverse(3e-3f) == 1.0f / 3e-3f);
}

// ---------------------------------------------------------------------------------------
// Rotary

namespace {

using GptJ = kvc::Rotary<kvc::RopeStyle::kGptJ, 64>;
using NeoX = kvc::Rotary<kvc::RopeStyle::kNeoX, 64>;

/// Slice dims of pair i: GPT-J (2i, 2i+1), NeoX (i, i+32).
std::pair<int, int> pair_dims(kvc::RopeStyle style, int i) {
  return style == kvc::RopeStyle::kGptJ ? std::make_pair(2 * i, 2 * i + 1)
                                        : std::make_pair(i, i + 32);
}

double float_ulp(double v) {
  const float a = static_cast<float>(std::fabs(v));
  if (a < std::numeric_limits<float>::min()) return std::ldexp(1.0, -149);
  int k = 0;
  std::frexp(static_cast<double>(a), &k);
  return std::ldexp(1.0, k - 24);
}

template <class Rot>
void check_tables() {
  constexpr kvc::RopeStyle style = Rot::kStyle;
  int seen[64] = {};
  for (int i = 0; i < 32; ++i) {
    const auto d = pair_dims(style, i);
    INFO("pair ", i, " dims ", d.first, ", ", d.second);
    ++seen[d.first];
    ++seen[d.second];
    CHECK(Rot::frequency(d.first) == i);
    CHECK(Rot::frequency(d.second) == i);
    CHECK(Rot::is_first(d.first));
    CHECK_FALSE(Rot::is_first(d.second));
    CHECK(Rot::partner(d.first) == d.second);
    CHECK(Rot::partner(d.second) == d.first);
  }
  for (int j = 0; j < 64; ++j) CHECK(seen[j] == 1);
}

/// Random x slice, cos/sin of random angles; output of apply() vs float64.
template <class Rot>
void check_apply_random(uint64_t seed, int trials) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> angle(-100.0, 100.0);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Tally rel, ulp, same;
  for (int trial = 0; trial < trials; ++trial) {
    const float range = std::ldexp(1.f, std::uniform_int_distribution<int>(-30, 30)(rng));
    kvc::Array<float, 64> x;
    for (int j = 0; j < 64; ++j) x[j] = u(rng) * range;
    float cs[32], sn[32];
    for (int i = 0; i < 32; ++i) {
      const double a = angle(rng) * (i + 1);
      cs[i] = static_cast<float>(std::cos(a));
      sn[i] = static_cast<float>(std::sin(a));
    }
    const kvc::Array<float, 64> out = Rot::apply(x, cs, sn);
    for (int i = 0; i < 32; ++i) {
      const auto d = pair_dims(Rot::kStyle, i);
      const double xe = x[d.first], xo = x[d.second], c = cs[i], s = sn[i];
      const double want[2] = {xe * c - xo * s, xo * c + xe * s};
      const double mag[2] = {std::max(std::fabs(xe * c), std::fabs(xo * s)),
                             std::max(std::fabs(xo * c), std::fabs(xe * s))};
      const int dims[2] = {d.first, d.second};
      for (int k = 0; k < 2; ++k) {
        const float got = out[dims[k]];
        const double err = std::fabs(static_cast<double>(got) - want[k]);
        rel(err <= 0x1p-22 * mag[k], [&] {
          return fmt("dim %d: got %a, float64 %a, |err| %g > 2^-22 * %g", dims[k], got, want[k],
                     err, mag[k]);
        });
        if (std::fabs(want[k]) >= 0x1p-8 * mag[k] && std::fabs(want[k]) > 1e-37) {
          const double r = kvcref::bf16_to_double(kvcref::bf16_round(got));
          const double e = std::fabs(r - want[k]);
          ulp(e <= kvcref::bf16_ulp(want[k]), [&] {
            return fmt("dim %d: bf16(got) %a, float64 %a, err %g > bf16 ulp %g", dims[k], r,
                       want[k], e, kvcref::bf16_ulp(want[k]));
          });
        }
        // apply() is rotate() per element.
        const float elem = Rot::rotate(x[dims[k]], x[Rot::partner(dims[k])], cs[i], sn[i],
                                       Rot::is_first(dims[k]));
        same(fbits(elem) == fbits(got),
             [&] { return fmt("dim %d: apply %a, rotate %a", dims[k], got, elem); });
      }
    }
  }
  KVC_TALLY_REPORT(rel);
  KVC_TALLY_REPORT(ulp);
  KVC_TALLY_REPORT(same);
}

template <class Rot>
void check_apply_by_hand() {
  const auto d0 = pair_dims(Rot::kStyle, 0);
  const auto d5 = pair_dims(Rot::kStyle, 5);
  kvc::Array<float, 64> x;
  for (int j = 0; j < 64; ++j) x[j] = static_cast<float>(j + 1);
  x[d0.first] = 1.f;
  x[d0.second] = 2.f;
  x[d5.first] = 2.f;
  x[d5.second] = 4.f;
  float cs[32], sn[32];
  for (int i = 0; i < 32; ++i) cs[i] = 1.f, sn[i] = 0.f;  // identity elsewhere
  cs[0] = 0.f, sn[0] = 1.f;                              // (1, 2) -> (-2, 1)
  cs[5] = 0.5f, sn[5] = 0.75f;                           // (2, 4) -> (1 - 3, 2 + 1.5)
  const kvc::Array<float, 64> out = Rot::apply(x, cs, sn);
  CHECK(out[d0.first] == -2.f);
  CHECK(out[d0.second] == 1.f);
  CHECK(out[d5.first] == -2.f);
  CHECK(out[d5.second] == 3.5f);
  for (int j = 0; j < 64; ++j) {
    if (j == d0.first || j == d0.second || j == d5.first || j == d5.second) continue;
    INFO("dim ", j);
    CHECK(out[j] == x[j]);
  }
}

}  // namespace

TEST_CASE("Rotary<kGptJ,64> / <kNeoX,64>: frequency, is_first, partner tables") {
  // Hand-checked entries.
  CHECK(GptJ::frequency(0) == 0);
  CHECK(GptJ::is_first(0));
  CHECK(GptJ::partner(0) == 1);
  CHECK(GptJ::frequency(63) == 31);
  CHECK_FALSE(GptJ::is_first(63));
  CHECK(GptJ::partner(63) == 62);
  CHECK(NeoX::frequency(0) == 0);
  CHECK(NeoX::is_first(0));
  CHECK(NeoX::partner(0) == 32);
  CHECK(NeoX::frequency(40) == 8);
  CHECK_FALSE(NeoX::is_first(40));
  CHECK(NeoX::partner(40) == 8);
  CHECK(GptJ::kHalf == 32);
  CHECK(NeoX::kRopeDim == 64);
  static_assert(GptJ::partner(5) == 4 && NeoX::partner(31) == 63, "constexpr tables");
  check_tables<GptJ>();
  check_tables<NeoX>();
}

TEST_CASE("Rotary::apply on hand-computed pairs (GPT-J and NeoX)") {
  check_apply_by_hand<GptJ>();
  check_apply_by_hand<NeoX>();
  // rotate() directly: (x, y) = (1, 2), c = 0, s = 1.
  CHECK(GptJ::rotate(1.f, 2.f, 0.f, 1.f, true) == -2.f);
  CHECK(GptJ::rotate(2.f, 1.f, 0.f, 1.f, false) == 1.f);
}

TEST_CASE("Rotary::apply on random slices is within 2^-22 relative and 1 bf16 ulp of float64") {
  check_apply_random<GptJ>(0x5eed04, 1500);
  check_apply_random<NeoX>(0x5eed05, 1500);
}

TEST_CASE("Rotary::rotate: cancelling pairs are accurate to a few fp32 ulps of the exact result") {
  std::mt19937_64 rng(0x5eed06);
  std::uniform_real_distribution<float> u(0.1f, 1.f);
  Tally t;
  int64_t naive_worse = 0;
  for (int i = 0; i < 20000; ++i) {
    const float x = u(rng) * 8.f, c = u(rng), y = u(rng) * 8.f;
    // s close to x*c/y, nudged by a few ulps, so x*c - y*s nearly cancels.
    float s = static_cast<float>(static_cast<double>(x) * c / y);
    const int nudge = std::uniform_int_distribution<int>(-3, 3)(rng);
    for (int k = 0; k < std::abs(nudge); ++k) s = std::nextafterf(s, nudge > 0 ? kInf : 0.f);
    const bool first = (i % 2) == 0;
    float got;
    double want;
    float naive;
    if (first) {  // x' = x*c - y*s
      got = GptJ::rotate(x, y, c, s, true);
      want = static_cast<double>(x) * c - static_cast<double>(y) * s;  // exact (Sterbenz)
      naive = x * c - y * s;
    } else {  // y' = y*c + x*s with y*c close to -(x*s): use -y
      got = GptJ::rotate(-x, y, c, s, false);  // element -x, partner y: -x*c + y*s
      want = -static_cast<double>(x) * c + static_cast<double>(y) * s;
      naive = -x * c + y * s;
    }
    const double err = std::fabs(static_cast<double>(got) - want);
    const double tol = want == 0 ? 0.0 : 2.0 * float_ulp(want);
    t(err <= tol, [&] {
      return fmt("x %a y %a c %a s %a first %d: got %a, exact %a, err %g > %g", x, y, c, s, first,
                 got, want, err, tol);
    });
    if (std::fabs(static_cast<double>(naive) - want) > tol) ++naive_worse;
  }
  KVC_TALLY_REPORT(t);
  // The cases are hard: the plain fp32 formula misses this tolerance in many of them.
  CHECK(naive_worse > 1000);
  // Exact cancellation gives exactly 0.
  CHECK(GptJ::rotate(0.3f, 0.3f, 0.7f, 0.7f, true) == 0.f);
}

TEST_CASE("Rotary::rotate with infinities gives no spurious NaN") {
  CHECK(GptJ::rotate(kInf, 1.f, 1.f, 0.f, true) == kInf);
  CHECK(GptJ::rotate(kInf, 1.f, 1.f, 0.f, false) == kInf);
  CHECK(GptJ::rotate(-kInf, 1.f, 1.f, 0.f, true) == -kInf);
  // Infinite partner product: 1*1 - inf*0.5 = -inf (an fma on the product's error would
  // give inf - inf = NaN).
  CHECK(GptJ::rotate(1.f, kInf, 1.f, 0.5f, true) == -kInf);
  CHECK(GptJ::rotate(1.f, kInf, 1.f, 0.5f, false) == kInf);
  // Overflowing product of finite values.
  CHECK(GptJ::rotate(1.f, 3e38f, 1.f, 2.f, true) == -kInf);
  CHECK(NeoX::rotate(kInf, 2.f, 0.5f, 0.25f, true) == kInf);
}

// ---------------------------------------------------------------------------------------
// Layout byte maps

namespace {

int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

struct Range {
  int64_t begin, end;
  const char* what;
  int64_t row;
};

/// Ranges sorted by begin must not overlap and must lie inside [lo, hi).
void check_disjoint_inside(std::vector<Range> r, int64_t lo, int64_t hi) {
  std::sort(r.begin(), r.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
  Tally t;
  for (size_t i = 0; i < r.size(); ++i) {
    t(r[i].begin >= lo && r[i].end <= hi, [&] {
      return fmt("%s row %lld [%lld, %lld) outside [%lld, %lld)", r[i].what,
                 static_cast<long long>(r[i].row), static_cast<long long>(r[i].begin),
                 static_cast<long long>(r[i].end), static_cast<long long>(lo),
                 static_cast<long long>(hi));
    });
    if (i > 0)
      t(r[i - 1].end <= r[i].begin, [&] {
        return fmt("%s row %lld ends at %lld after %s row %lld begins at %lld", r[i - 1].what,
                   static_cast<long long>(r[i - 1].row), static_cast<long long>(r[i - 1].end),
                   r[i].what, static_cast<long long>(r[i].row), static_cast<long long>(r[i].begin));
      });
  }
  KVC_TALLY_REPORT(t);
}

bool contains(const kvc::Status& s, const std::string& text) {
  return std::string(s.message()).find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("Fp8DsMlaLayout: static sizes and the byte map for block sizes 1, 16, 64") {
  using L = kvc::Fp8DsMlaLayout;
  CHECK(L::kValueBytes == 576);
  CHECK(L::kScaleBytes == 8);
  CHECK(L::kRecordBytes == 584);
  CHECK(L::kTiles == 7);
  CHECK(L::kNopeDim == 448);
  CHECK(L::kHeadDim == 512);
  CHECK(L::kRopeDim == 64);
  CHECK(L::kTile == 64);
  CHECK(std::string(L::kName) == "fp8_ds_mla");

  for (int B : {1, 16, 64}) {
    const int64_t stride = round_up(int64_t{B} * 584, 576);
    INFO("block size ", B, ", page stride ", stride);
    CHECK(stride % 576 == 0);
    CHECK(L::min_page_bytes(B, 0) == int64_t{B} * 584);
    CHECK(L::min_page_bytes(B, 12345) == int64_t{B} * 584);  // row stride ignored
    CHECK(L::min_page_bytes(B, 0) <= stride);
    kvc::CacheParams c;
    c.block_size = B;
    c.page_stride_bytes = stride;
    CHECK(L::check(c).ok());
    for (int64_t page : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{100000}}) {
      INFO("page ", page);
      const int64_t base = page * stride;
      std::vector<Range> ranges;
      int64_t max_value_end = base, min_scale_begin = base + stride;
      for (int64_t r = 0; r < B; ++r) {
        const int64_t v = L::value_offset(c, page, r), s = L::scale_offset(c, page, r);
        // contract §2.3 a: value row r at r*576, scale row r at B*576 + r*8.
        CHECK(v == base + r * 576);
        CHECK(s == base + int64_t{B} * 576 + r * 8);
        ranges.push_back({v, v + L::kValueBytes, "value", r});
        ranges.push_back({s, s + L::kScaleBytes, "scale", r});
        max_value_end = std::max(max_value_end, v + L::kValueBytes);
        min_scale_begin = std::min(min_scale_begin, s);
      }
      CHECK(max_value_end <= min_scale_begin);  // value rows before scale rows
      CHECK(max_value_end == base + int64_t{B} * 576);
      CHECK(L::scale_offset(c, page, B - 1) + 8 == base + L::min_page_bytes(B, 0));
      check_disjoint_inside(ranges, base, base + stride);
    }
  }
  // A page stride that is not a multiple of 16 is rejected with a message naming it.
  kvc::CacheParams c;
  c.block_size = 16;
  for (int64_t bad : {int64_t{9792 + 8}, int64_t{9345}, int64_t{584 * 16 + 4}}) {
    c.page_stride_bytes = bad;
    const kvc::Status s = L::check(c);
    INFO("page stride ", bad, ": ", s.message());
    CHECK_FALSE(s.ok());
    CHECK(s.code() == kvc::StatusCode::kInvalidArgument);
    CHECK(contains(s, std::to_string(bad)));
    CHECK(contains(s, "multiple of 16"));
    CHECK(contains(s, "fp8_ds_mla"));
  }
  c.page_stride_bytes = 9344;  // 16 * 584, a multiple of 16
  CHECK(L::check(c).ok());
}

namespace {

template <class L>
void check_rows_layout(int record_bytes, const char* name, const char* prefix, bool needs_scale) {
  CHECK(L::kRecordBytes == record_bytes);
  CHECK(std::string(L::kName) == name);
  const float scale = 1.f;
  for (int B : {1, 16, 64}) {
    for (int64_t pad : {int64_t{0}, int64_t{16}, int64_t{256}}) {
      const int64_t row_stride = record_bytes + pad;
      const int64_t min_page = (int64_t{B} - 1) * row_stride + record_bytes;
      const int64_t page_stride = round_up(min_page, 512) + 64;
      INFO(name, " B ", B, ", row stride ", row_stride, ", page stride ", page_stride);
      CHECK(L::min_page_bytes(B, row_stride) == min_page);
      kvc::CacheParams c;
      c.block_size = B;
      c.row_stride_bytes = row_stride;
      c.page_stride_bytes = page_stride;
      c.scale = &scale;
      CHECK(L::check(c).ok());
      for (int64_t page : {int64_t{0}, int64_t{3}, int64_t{50000}}) {
        std::vector<Range> ranges;
        for (int64_t r = 0; r < B; ++r) {
          const int64_t o = L::record_offset(c, page, r);
          CHECK(o == page * page_stride + r * row_stride);
          ranges.push_back({o, o + L::kRecordBytes, "record", r});
        }
        CHECK(ranges.back().end == page * page_stride + min_page);
        check_disjoint_inside(ranges, page * page_stride, page * page_stride + page_stride);
      }
    }
  }
  kvc::CacheParams c;
  c.block_size = 16;
  c.scale = &scale;
  // Row stride smaller than a record.
  c.row_stride_bytes = record_bytes - 16;
  c.page_stride_bytes = 16 * record_bytes;
  kvc::Status s = L::check(c);
  {
    INFO(s.message());
    CHECK_FALSE(s.ok());
    CHECK(s.code() == kvc::StatusCode::kInvalidArgument);
    CHECK(contains(s, prefix));
    CHECK(contains(s, std::to_string(record_bytes - 16)));
    CHECK(contains(s, "smaller than a record, " + std::to_string(record_bytes)));
  }
  // Misaligned row stride, misaligned page stride.
  for (auto strides : {std::make_pair(int64_t{record_bytes} + 8, int64_t{1} << 20),
                       std::make_pair(int64_t{record_bytes}, (int64_t{1} << 20) + 4)}) {
    c.row_stride_bytes = strides.first;
    c.page_stride_bytes = strides.second;
    s = L::check(c);
    INFO("row stride ", strides.first, ", page stride ", strides.second, ": ", s.message());
    CHECK_FALSE(s.ok());
    CHECK(contains(s, prefix));
    CHECK(contains(s, std::to_string(strides.first)));
    CHECK(contains(s, std::to_string(strides.second)));
    CHECK(contains(s, "multiples of 16"));
  }
  // Null scale.
  c.row_stride_bytes = record_bytes;
  c.page_stride_bytes = 16 * record_bytes;
  c.scale = nullptr;
  s = L::check(c);
  if (needs_scale) {
    INFO(s.message());
    CHECK_FALSE(s.ok());
    CHECK(contains(s, "scale is null"));
  } else {
    CHECK(s.ok());  // bf16 rows have no scale
  }
}

}  // namespace

TEST_CASE("Bf16RowsLayout<512,64>: record size, offsets with padded strides, min page, check()") {
  check_rows_layout<kvc::Bf16RowsLayout<512, 64>>(1024, "bf16_rows", "bf16_rows: ", false);
  CHECK(kvc::Bf16RowsLayout<512, 64>::kHeadDim == 512);
  CHECK(kvc::Bf16RowsLayout<512, 64>::kRopeDim == 64);
}

TEST_CASE("Fp8RowsLayout<512,64> and <128,64>: record size, offsets, min page, check()") {
  check_rows_layout<kvc::Fp8RowsLayout<512, 64>>(512, "fp8_rows", "fp8_rows: ", true);
  check_rows_layout<kvc::Fp8RowsLayout<128, 64>>(128, "fp8_rows", "fp8_rows: ", true);
  CHECK(kvc::Fp8RowsLayout<128, 64>::kHeadDim == 128);
  CHECK(kvc::Fp8RowsLayout<128, 64>::kRopeDim == 64);
}

TEST_CASE("cache_layout_name names the three layouts") {
  CHECK(std::string(kvc::cache_layout_name(kvc::CacheLayout::kFp8DsMla)) == "fp8_ds_mla");
  CHECK(std::string(kvc::cache_layout_name(kvc::CacheLayout::kBf16Rows)) == "bf16_rows");
  CHECK(std::string(kvc::cache_layout_name(kvc::CacheLayout::kFp8Rows)) == "fp8_rows");
  CHECK(std::string(kvc::cache_layout_name(kvc::CacheLayout::kBf16Rows)) ==
        kvc::Bf16RowsLayout<>::kName);
  CHECK(std::string(kvc::cache_layout_name(kvc::CacheLayout::kFp8Rows)) ==
        kvc::Fp8RowsLayout<>::kName);
}
