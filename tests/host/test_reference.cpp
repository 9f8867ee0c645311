// SPDX-License-Identifier: Apache-2.0
// Tests of the float64 host reference (tests/reference/reference.hpp) against
// hand-computed cases. The expected numbers below are worked out in comments.
#include <doctest/doctest.h>

#include "common/batch.hpp"
#include "reference/reference.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

using namespace kvcref;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
double p2(int e) { return std::ldexp(1.0, e); }

uint16_t rd16(const std::vector<uint8_t>& c, int64_t off) {
  return static_cast<uint16_t>(c[static_cast<size_t>(off)] | (c[static_cast<size_t>(off + 1)] << 8));
}

// A second, bit-level float -> bf16 RNE written for the cross-check only.
uint16_t bf16_bits_rne(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
}

}  // namespace

// ============================================================================
// bf16
// ============================================================================

TEST_CASE("bf16_to_double: format definition spot checks") {
  CHECK(bf16_to_double(0x3f80) == 1.0);
  CHECK(bf16_to_double(0xbf80) == -1.0);
  CHECK(bf16_to_double(0x4000) == 2.0);
  CHECK(bf16_to_double(0x3fc0) == 1.5);
  CHECK(bf16_to_double(0x3f81) == 1.0 + p2(-7));
  CHECK(bf16_to_double(0x0000) == 0.0);
  CHECK(std::signbit(bf16_to_double(0x8000)));
  CHECK(bf16_to_double(0x0001) == p2(-133));       // smallest subnormal
  CHECK(bf16_to_double(0x007f) == 127 * p2(-133));  // largest subnormal
  CHECK(bf16_to_double(0x0080) == p2(-126));       // smallest normal
  CHECK(bf16_to_double(0x7f7f) == (2.0 - p2(-7)) * p2(127));  // max
  CHECK(bf16_to_double(0x7f80) == kInf);
  CHECK(bf16_to_double(0xff80) == -kInf);
  CHECK(std::isnan(bf16_to_double(0x7fc0)));
  CHECK(std::isnan(bf16_to_double(0x7f81)));
  CHECK(std::signbit(bf16_to_double(0xffc0)));
}

TEST_CASE("bf16_round: ties, overflow, subnormals, specials") {
  CHECK(bf16_round(1.0) == 0x3f80);
  CHECK(bf16_round(1.0 + p2(-8)) == 0x3f80);                 // tie between m=0 and m=1 -> even m=0
  CHECK(bf16_round(1.0 + p2(-8) + p2(-40)) == 0x3f81);       // just above the tie
  CHECK(bf16_round(1.0 + 3 * p2(-8)) == 0x3f82);             // tie between m=1 and m=2 -> m=2 = 1+2^-6
  CHECK(bf16_to_double(0x3f82) == 1.0 + p2(-6));
  CHECK(bf16_round(-(1.0 + 3 * p2(-8))) == 0xbf82);
  CHECK(bf16_round(2.0 - p2(-9)) == 0x4000);                 // rounds up into the next binade
  CHECK(bf16_round(2.0 - p2(-8)) == 0x4000);                 // tie 2-2^-7 (m=127) / 2.0 -> even = 2.0
  CHECK(bf16_round(2.0 - p2(-7)) == 0x3fff);                 // largest of the binade (m=127)
  CHECK(bf16_round(2.0 - p2(-8) - p2(-30)) == 0x3fff);
  const double maxb = (2.0 - p2(-7)) * p2(127);
  CHECK(bf16_round(maxb) == 0x7f7f);
  CHECK(bf16_round(maxb + p2(127 - 8) - p2(80)) == 0x7f7f);  // just below max + half ulp
  CHECK(bf16_round(maxb + p2(127 - 8)) == 0x7f80);           // tie at max+half ulp -> even -> inf
  CHECK(bf16_round(p2(128)) == 0x7f80);
  CHECK(bf16_round(-1e300) == 0xff80);
  CHECK(bf16_round(kInf) == 0x7f80);
  CHECK(bf16_round(-kInf) == 0xff80);
  CHECK(bf16_round(kNaN) == 0x7fc0);
  CHECK(bf16_round(-kNaN) == 0xffc0);
  CHECK(bf16_round(0.0) == 0x0000);
  CHECK(bf16_round(-0.0) == 0x8000);
  CHECK(bf16_round(p2(-134)) == 0x0000);                     // tie 0 / 2^-133 -> 0
  CHECK(bf16_round(-p2(-134)) == 0x8000);
  CHECK(bf16_round(p2(-134) + p2(-180)) == 0x0001);
  CHECK(bf16_round(3 * p2(-134)) == 0x0002);                 // tie 1 / 2 -> 2
  CHECK(bf16_round(p2(-126) - p2(-134)) == 0x0080);          // largest subnormal + half -> tie 127/128 -> 128
  CHECK(bf16_round(1e-300) == 0x0000);
}

TEST_CASE("bf16_round: every bf16 value round-trips") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const double v = bf16_to_double(static_cast<uint16_t>(b));
    if (std::isnan(v)) {
      CHECK(bf16_round(v) == ((b & 0x8000u) | 0x7fc0u));
    } else {
      REQUIRE(bf16_round(v) == b);
    }
  }
}

TEST_CASE("bf16_from_float agrees with an independent bit-level RNE") {
  CHECK(bf16_from_float(bits_float(0x3f808000u)) == 0x3f80);  // 1 + 2^-8 tie -> even
  CHECK(bf16_from_float(bits_float(0x3f808001u)) == 0x3f81);
  CHECK(bf16_from_float(bits_float(0x3f818000u)) == 0x3f82);  // tie -> even
  CHECK(bf16_from_float(bits_float(0x7f7fffffu)) == 0x7f80);  // FLT_MAX -> inf
  CHECK(bf16_from_float(bits_float(0x00000001u)) == 0x0000);  // smallest float subnormal
  uint64_t checked = 0;
  for (uint64_t u = 0; u < (1ull << 32); u += 997) {
    const float f = bits_float(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    const uint16_t a = bf16_from_float(f), b = bf16_bits_rne(f);
    if (a != b) { FAIL_CHECK("mismatch at float bits " << u); break; }
    ++checked;
  }
  CHECK(checked > 4000000);
}

TEST_CASE("bf16_ulp") {
  CHECK(bf16_ulp(1.0) == p2(-7));
  CHECK(bf16_ulp(1.99) == p2(-7));
  CHECK(bf16_ulp(2.0) == p2(-6));
  CHECK(bf16_ulp(-3.0) == p2(-6));
  CHECK(bf16_ulp(0.75) == p2(-8));
  CHECK(bf16_ulp(p2(-126)) == p2(-133));
  CHECK(bf16_ulp(p2(-130)) == p2(-133));
  CHECK(bf16_ulp(0.0) == p2(-133));
  CHECK(bf16_ulp(448.0) == p2(1));
}

// ============================================================================
// e4m3
// ============================================================================

TEST_CASE("e4m3_to_double: documented values") {
  CHECK(e4m3_to_double(0x00) == 0.0);
  CHECK(std::signbit(e4m3_to_double(0x80)));
  CHECK(e4m3_to_double(0x80) == 0.0);
  CHECK(e4m3_to_double(0x01) == p2(-9));
  CHECK(e4m3_to_double(0x07) == 7 * p2(-9));
  CHECK(e4m3_to_double(0x08) == p2(-6));
  CHECK(e4m3_to_double(0x38) == 1.0);
  CHECK(e4m3_to_double(0x39) == 1.125);
  CHECK(e4m3_to_double(0x3c) == 1.5);
  CHECK(e4m3_to_double(0x40) == 2.0);
  CHECK(e4m3_to_double(0x78) == 256.0);
  CHECK(e4m3_to_double(0x7e) == 448.0);
  CHECK(e4m3_to_double(0xfe) == -448.0);
  CHECK(e4m3_to_double(0xb8) == -1.0);
  CHECK(std::isnan(e4m3_to_double(0x7f)));
  CHECK(std::isnan(e4m3_to_double(0xff)));
  // All 256 codes: NaN exactly at 0x7f/0xff; non-negative codes strictly
  // increasing in value; negative codes mirror them.
  int nans = 0;
  for (int c = 0; c < 256; ++c) if (std::isnan(e4m3_to_double(static_cast<uint8_t>(c)))) ++nans;
  CHECK(nans == 2);
  for (int c = 0; c < 0x7e; ++c)
    CHECK(e4m3_to_double(static_cast<uint8_t>(c)) < e4m3_to_double(static_cast<uint8_t>(c + 1)));
  for (int c = 0; c < 0x7f; ++c)
    CHECK(e4m3_to_double(static_cast<uint8_t>(c | 0x80)) == -e4m3_to_double(static_cast<uint8_t>(c)));
  // Each binade (exp field 1..15) spans [2^(e-7), 2^(e-6)) in steps of 2^(e-10).
  for (int e = 1; e <= 15; ++e)
    for (int m = 0; m < 8; ++m) {
      if (e == 15 && m == 7) continue;
      CHECK(e4m3_to_double(static_cast<uint8_t>(e * 8 + m)) == p2(e - 7) + m * p2(e - 10));
    }
}

TEST_CASE("e4m3_rne_satfinite: rounding, ties, saturation, specials") {
  CHECK(e4m3_rne_satfinite(1.0) == 0x38);
  CHECK(e4m3_rne_satfinite(1.0625) == 0x38);           // tie 1.0 (m=0) / 1.125 (m=1) -> 1.0
  CHECK(e4m3_rne_satfinite(1.0625 + 1e-12) == 0x39);
  CHECK(e4m3_rne_satfinite(1.0625 - 1e-12) == 0x38);
  CHECK(e4m3_rne_satfinite(1.1875) == 0x3a);           // tie 1.125 (m=1) / 1.25 (m=2) -> 1.25
  CHECK(e4m3_rne_satfinite(-1.1875) == 0xba);
  CHECK(e4m3_rne_satfinite(116.0) == 0x6e);            // tie 112 (m=6) / 120 (m=7) -> 112
  CHECK(e4m3_rne_satfinite(225.0) == 0x76);            // nearest 224
  CHECK(e4m3_rne_satfinite(p2(-10)) == 0x00);          // tie 0 / 2^-9 -> 0
  CHECK(e4m3_rne_satfinite(-p2(-10)) == 0x80);         // negative rounds to -0
  CHECK(e4m3_rne_satfinite(p2(-10) + p2(-40)) == 0x01);
  CHECK(e4m3_rne_satfinite(3 * p2(-10)) == 0x02);      // tie 2^-9 / 2^-8 -> code 2
  CHECK(e4m3_rne_satfinite(0.75 * p2(-9)) == 0x01);
  CHECK(e4m3_rne_satfinite(7.5 * p2(-9)) == 0x08);     // tie subnormal 0x07 / normal 0x08 -> 0x08
  CHECK(e4m3_rne_satfinite(448.0) == 0x7e);
  CHECK(e4m3_rne_satfinite(440.0) == 0x7e);            // nearest 448 (416, 448)
  CHECK(e4m3_rne_satfinite(432.0) == 0x7e);            // tie 416 (m=5) / 448 (m=6) -> 448
  CHECK(e4m3_rne_satfinite(431.0) == 0x7d);
  CHECK(e4m3_rne_satfinite(464.0) == 0x7e);            // would be the 448/480 tie: saturates
  CHECK(e4m3_rne_satfinite(1e9) == 0x7e);
  CHECK(e4m3_rne_satfinite(-1e9) == 0xfe);
  CHECK(e4m3_rne_satfinite(kInf) == 0x7e);
  CHECK(e4m3_rne_satfinite(-kInf) == 0xfe);
  CHECK(e4m3_rne_satfinite(kNaN) == 0x7f);
  CHECK(e4m3_rne_satfinite(-kNaN) == 0xff);
  CHECK(e4m3_rne_satfinite(0.0) == 0x00);
  CHECK(e4m3_rne_satfinite(-0.0) == 0x80);
  CHECK(e4m3_rne_satfinite(-1e-10) == 0x80);
  // Every finite code round-trips; every midpoint goes to the even code, and
  // values just off the midpoint go to the nearer neighbour.
  for (int c = 0; c < 256; ++c) {
    const double v = e4m3_to_double(static_cast<uint8_t>(c));
    if (!std::isnan(v)) CHECK(e4m3_rne_satfinite(v) == c);
  }
  for (int c = 0; c < 0x7e; ++c) {
    const double lo = e4m3_to_double(static_cast<uint8_t>(c));
    const double hi = e4m3_to_double(static_cast<uint8_t>(c + 1));
    const double mid = 0.5 * (lo + hi), tiny = (hi - lo) * 1e-6;
    CHECK(e4m3_rne_satfinite(mid) == ((c % 2 == 0) ? c : c + 1));
    CHECK(e4m3_rne_satfinite(mid - tiny) == c);
    CHECK(e4m3_rne_satfinite(mid + tiny) == c + 1);
    CHECK(e4m3_rne_satfinite(-mid) == (((c % 2 == 0) ? c : c + 1) | 0x80));
  }
}

TEST_CASE("e4m3_code_distance") {
  CHECK(e4m3_code_distance(0x38, 0x39) == 1);
  CHECK(e4m3_code_distance(0x39, 0x38) == 1);
  CHECK(e4m3_code_distance(0x00, 0x80) == 0);
  CHECK(e4m3_code_distance(0x01, 0x81) == 2);
  CHECK(e4m3_code_distance(0x80, 0x01) == 1);
  CHECK(e4m3_code_distance(0x07, 0x08) == 1);
  CHECK(e4m3_code_distance(0x7e, 0xfe) == 252);
  CHECK(e4m3_code_distance(0x7f, 0xff) == 0);   // both NaN
  CHECK(e4m3_code_distance(0x7f, 0x7e) >= 2);   // NaN vs finite: never within tolerance
}

TEST_CASE("ceil_log2_exact") {
  CHECK(ceil_log2_exact(1.0) == 0);
  CHECK(ceil_log2_exact(std::nextafter(1.0, 2.0)) == 1);
  CHECK(ceil_log2_exact(std::nextafter(1.0, 0.0)) == 0);
  CHECK(ceil_log2_exact(2.0) == 1);
  CHECK(ceil_log2_exact(3.0) == 2);
  CHECK(ceil_log2_exact(0.75) == 0);
  CHECK(ceil_log2_exact(0.5) == -1);
  for (int e = -140; e <= 130; ++e) {
    CHECK(ceil_log2_exact(p2(e)) == e);
    CHECK(ceil_log2_exact(std::nextafter(p2(e), kInf)) == e + 1);
    CHECK(ceil_log2_exact(std::nextafter(p2(e), 0.0)) == e);
  }
  CHECK(ceil_log2_exact(std::ldexp(1.0, -1074)) == -1074);       // smallest double subnormal
  CHECK(ceil_log2_exact(3 * std::ldexp(1.0, -1074)) == -1072);
  CHECK(ceil_log2_exact(p2(1023)) == 1023);
  CHECK(ceil_log2_exact(std::numeric_limits<double>::max()) == 1024);
  // The fp32 values that occur in the fp8_ds_mla scale computation:
  CHECK(ceil_log2_exact(static_cast<double>(1.0f / 448.0f)) == -8);   // 2^-9 < 1/448 < 2^-8
  CHECK(ceil_log2_exact(static_cast<double>(1e-4f * (1.0f / 448.0f))) == -22);
  CHECK_THROWS(ceil_log2_exact(0.0));
  CHECK_THROWS(ceil_log2_exact(-1.0));
}

// ============================================================================
// Op A
// ============================================================================

namespace {

// Small Op A fixture: D columns of kv + D of score per row, ring of `blocks`
// pages with padding (page stride and row stride larger than needed).
struct OpA {
  int D, R, C;
  int64_t row_stride, page_stride;
  std::vector<float> kvs;        // [T, 2D + 1] (one pad column)
  std::vector<int64_t> pos, slot;
  std::vector<int32_t> qsl, req;
  std::vector<float> ring;
  std::vector<uint16_t> w;
  float eps = 0.0f;
  int64_t num_blocks = -1;       // ring bound (CompressInputs::ring_num_blocks)
  OpA(int D_, int R_, int C_, int blocks)
      : D(D_), R(R_), C(C_), row_stride(2 * D_ + 3), page_stride(C_ * (2 * D_ + 3) + 5),
        ring(static_cast<size_t>(blocks * (C_ * (2 * D_ + 3) + 5)), -777.0f),
        w(static_cast<size_t>(D_), 0x3f80) {}
  int64_t kstride() const { return (R == 1) ? D + 1 : 2 * D + 1; }
  int add(int64_t p, int64_t s, int32_t r, std::vector<float> kv, std::vector<float> sc = {}) {
    const int64_t t = static_cast<int64_t>(pos.size());
    pos.push_back(p); slot.push_back(s); req.push_back(r);
    kvs.resize(static_cast<size_t>((t + 1) * kstride()), -555.0f);
    for (int d = 0; d < D; ++d) kvs[static_cast<size_t>(t * kstride() + d)] = kv[d];
    if (R > 1) for (int d = 0; d < D; ++d) kvs[static_cast<size_t>(t * kstride() + D + d)] = sc.empty() ? 0.0f : sc[d];
    return static_cast<int>(t);
  }
  float* ring_row(int64_t block, int64_t row) { return ring.data() + block * page_stride + row * row_stride; }
  CompressExpected run() const {
    CompressInputs in;
    in.head_dim = D; in.ratio = R; in.num_tokens = static_cast<int64_t>(pos.size());
    in.kv_score = kvs.data(); in.kv_score_stride_elems = kstride();
    in.positions = pos.data(); in.slot = slot.data();
    in.qsl = qsl.data(); in.num_reqs = static_cast<int>(qsl.size()) - 1; in.req = req.data();
    in.ring = ring.data(); in.ring_capacity = C;
    in.ring_page_stride = page_stride; in.ring_row_stride = row_stride;
    in.ring_elems = static_cast<int64_t>(ring.size());
    in.weight = w.data(); in.eps = eps;
    in.ring_num_blocks = num_blocks;
    return compress_reference(in);
  }
};

// Hand RMSNorm of a pooled vector (eps = 0 unless given), times weight 1.
std::vector<double> rms(std::vector<double> p, double eps = 0.0) {
  double ss = 0; for (double v : p) ss += v * v;
  const double den = std::sqrt(ss / static_cast<double>(p.size()) + eps);
  for (double& v : p) v /= den;
  return p;
}

void check_row(const CompressExpected& e, int t, const std::vector<double>& want, double tol = 1e-12) {
  const size_t D = want.size();
  for (size_t d = 0; d < D; ++d) {
    INFO("t=" << t << " d=" << d);
    CHECK(e.latent[t * D + d] == doctest::Approx(want[d]).epsilon(tol));
  }
}

}  // namespace

TEST_CASE("Op A: R=2 pooling with known scores, one chunk from position 0") {
  OpA a(4, 2, 8, 1);
  a.qsl = {0, 2};
  // channel 0: equal scores -> mean; channel 1: scores 0, ln 3 -> weights 1/4, 3/4;
  // channel 2: -1000 vs 0 -> second row only; channel 3: equal huge scores (needs max subtraction).
  a.add(0, 0, 0, {1, 2, 3, 4}, {0, 0, -1000, 1000});
  a.add(1, 1, 0, {3, 6, 5, 8}, {0, std::log(3.0f), 0, 1000});
  a.w = {0x3f80, 0x3f80, 0x3f80, 0x4000};  // weights 1, 1, 1, 2
  const auto e = a.run();
  CHECK(e.closes == std::vector<uint8_t>{0, 1});
  CHECK(std::isnan(e.latent[0]));  // token 0 closes nothing
  // pooled = [2, 0.25*2 + 0.75*6 = 5, 5, 6] (channel 1 up to the float rounding of ln 3)
  auto want = rms({2, 5, 5, 6});
  want[3] *= 2;
  check_row(e, 1, want, 1e-6);
  // Ring after: both tokens stored into block 0 rows 0 and 1, bit-exact, whole rows.
  CHECK(std::memcmp(e.ring_after.data(), a.kvs.data(), 8 * sizeof(float)) == 0);
  CHECK(std::memcmp(e.ring_after.data() + a.row_stride, a.kvs.data() + a.kstride(), 8 * sizeof(float)) == 0);
  CHECK(e.ring_after[8] == -777.0f);  // the row padding is untouched
  for (size_t i = static_cast<size_t>(2 * a.row_stride); i < e.ring_after.size(); ++i) REQUIRE(e.ring_after[i] == -777.0f);
}

TEST_CASE("Op A: RMSNorm of simple vectors (R=1)") {
  OpA a(4, 1, 0, 0);
  a.qsl = {0, 3};
  a.add(0, 0, 0, {3, 3, 3, 3});
  a.add(1, 1, 0, {2, -2, 2, -2});
  a.add(2, -1, 0, {1, 1, 1, 1});  // padding
  a.w = {0x3f80, 0x4000, 0xbf80, 0x3f00};  // 1, 2, -1, 0.5
  a.eps = 1e-6f;
  const auto e = a.run();
  CHECK(e.closes == std::vector<uint8_t>{1, 1, 0});
  CHECK(e.ring_after.empty());
  const double eps = static_cast<double>(1e-6f);
  const double c = 3.0 / std::sqrt(9.0 + eps);  // constant vector -> ~1
  check_row(e, 0, {c, 2 * c, -c, 0.5 * c}, 1e-14);
  const double k = 2.0 / std::sqrt(4.0 + eps);
  check_row(e, 1, {k, -2 * k, -k, -0.5 * k}, 1e-14);
  CHECK(std::isnan(e.latent[8]));
}

TEST_CASE("Op A: group member from the ring (chunk starts mid-group)") {
  OpA a(4, 2, 8, 2);
  a.qsl = {0, 3};
  // block 1, positions 5, 6, 7 -> slots 13, 14, 15
  float* old4 = a.ring_row(1, 4);  // position 4 stored by an earlier step
  const float r4[8] = {2, 0, 4, 0, 0, 0, 0, 0};
  std::memcpy(old4, r4, sizeof r4);
  a.add(5, 13, 0, {0, 2, 0, 4});
  a.add(6, 14, 0, {9, 9, 9, 9}, {1, 2, 3, 4});
  a.add(7, 15, 0, {1, 1, 1, 1}, {1, 2, 3, 4});
  const auto e = a.run();
  CHECK(e.closes == std::vector<uint8_t>{1, 0, 1});
  check_row(e, 0, rms({1, 1, 2, 2}));  // mean of ring row and token 0
  check_row(e, 2, rms({5, 5, 5, 5}));  // equal scores per channel -> mean
  // All three chunk tokens (n = 3 <= C) are stored in block 1 rows 5, 6, 7.
  for (int t = 0; t < 3; ++t)
    CHECK(std::memcmp(e.ring_after.data() + a.page_stride + (5 + t) * a.row_stride,
                      a.kvs.data() + t * a.kstride(), 8 * sizeof(float)) == 0);
  CHECK(std::memcmp(e.ring_after.data() + a.page_stride + 4 * a.row_stride, r4, sizeof r4) == 0);
  for (int64_t i = 0; i < a.page_stride; ++i) REQUIRE(e.ring_after[i] == -777.0f);  // block 0
}

TEST_CASE("Op A: chunk longer than the ring reads the OLD ring row") {
  OpA a(4, 2, 2, 1);
  a.qsl = {0, 6};
  const float oldrow[8] = {4, 4, 0, 0, 0, 0, 0, 0};  // position 2, in ring row 0
  std::memcpy(a.ring_row(0, 0), oldrow, sizeof oldrow);
  a.add(3, 1, 0, {0, 0, 4, 4});          // t0 closes {2, 3}; 2 is before the chunk -> ring row 0
  a.add(4, 0, 0, {1, 2, 3, 4});
  a.add(5, 1, 0, {3, 2, 1, 0});          // t2 closes {4, 5}
  a.add(6, 0, 0, {5, 5, 5, 5});
  a.add(7, 1, 0, {7, 7, 7, 7});          // t4 closes {6, 7}; stored to row 1
  a.add(8, 0, 0, {-8, 8, -8, 8});        // t5 stored to row 0, overwriting position 2
  const auto e = a.run();
  CHECK(e.closes == std::vector<uint8_t>{1, 0, 1, 0, 1, 0});
  check_row(e, 0, rms({2, 2, 2, 2}));    // with the new row 0 it would be (-4, 4, -2, 6)
  check_row(e, 2, rms({2, 2, 2, 2}));
  check_row(e, 4, rms({6, 6, 6, 6}));
  // Only the last min(6, 2) = 2 tokens are stored.
  CHECK(std::memcmp(e.ring_after.data(), a.kvs.data() + 5 * a.kstride(), 8 * sizeof(float)) == 0);
  CHECK(std::memcmp(e.ring_after.data() + a.row_stride, a.kvs.data() + 4 * a.kstride(), 8 * sizeof(float)) == 0);
}

TEST_CASE("Op A: padding, empty request, trailing tokens, bit-exact ring copies") {
  OpA a(4, 2, 8, 2);
  a.qsl = {0, 0, 2, 4};                          // request 0 empty
  a.add(0, 0, 1, {1, 1, 1, 1});                  // req 1, block 0
  a.add(1, 1, 1, {3, 3, 3, 3});                  // closes
  const float nan_payload = bits_float(0x7fa12345u), neg_zero = -0.0f;
  a.add(0, 8, 2, {nan_payload, neg_zero, 1e-45f, -3.0f}, {neg_zero, 0, 0, 0});  // req 2, block 1
  a.add(1, -1, 2, {9, 9, 9, 9});                 // padding at a closing position
  a.add(7, -1, 2, {9, 9, 9, 9});                 // trailing padding
  a.add(1, 9, 2, {5, 5, 5, 5});                  // trailing token with a slot: closes, never stored
  const auto e = a.run();
  CHECK(e.closes == std::vector<uint8_t>{0, 1, 0, 0, 0, 1});
  check_row(e, 1, rms({2, 2, 2, 2}));
  // token 5: group {0, 1}, chunk start of request 2 is position 0, so member 0 is row 5 - 1 = 4
  check_row(e, 5, rms({7, 7, 7, 7}));
  CHECK(std::memcmp(e.ring_after.data(), a.kvs.data(), 8 * sizeof(float)) == 0);
  CHECK(std::memcmp(e.ring_after.data() + a.row_stride, a.kvs.data() + a.kstride(), 8 * sizeof(float)) == 0);
  // token 2 stored bit-exactly (NaN payload, -0, subnormal) at block 1 row 0
  CHECK(std::memcmp(e.ring_after.data() + a.page_stride, a.kvs.data() + 2 * a.kstride(), 8 * sizeof(float)) == 0);
  // nothing else in block 1 changed (token 3 padding, token 5 trailing)
  for (int64_t i = a.page_stride + a.row_stride; i < 2 * a.page_stride; ++i) REQUIRE(e.ring_after[i] == -777.0f);
}

TEST_CASE("Op A: non-finite values propagate (no special handling)") {
  OpA a(4, 1, 0, 0);
  a.qsl = {0, 1};
  a.add(0, 0, 0, {1, std::numeric_limits<float>::quiet_NaN(), 1, 1});
  const auto e = a.run();
  for (int d = 0; d < 4; ++d) CHECK(std::isnan(e.latent[d]));
}

// ============================================================================
// Op B
// ============================================================================

namespace {

struct SmallRows {
  // D = 8, P = 4 (N = 4), B = 4 records per page
  std::vector<uint16_t> lat;
  std::vector<int64_t> pos, slot;
  std::vector<float> cs;  // [6, 4]
  SmallRows() : cs(24, 9.0f) {
    // row 4: c0 = 0.5, c1 = 1, s0 = 0.75, s1 = 0
    cs[16] = 0.5f; cs[17] = 1.0f; cs[18] = 0.75f; cs[19] = 0.0f;
  }
  InsertInputs inputs(Layout layout, RopeStyle style) const {
    InsertInputs in;
    in.head_dim = 8; in.rope_dim = 4; in.ratio = 2; in.rope_style = style;
    in.num_tokens = static_cast<int64_t>(pos.size());
    in.latent = lat.data(); in.latent_stride_elems = 9;
    in.positions = pos.data(); in.slot = slot.data();
    in.cos_sin = cs.data(); in.cos_sin_stride_elems = 4;
    in.layout = layout; in.block_size = 4;
    return in;
  }
};

}  // namespace

TEST_CASE("Op B: Bf16Rows GPT-J and NeoX rotation of a hand case") {
  SmallRows s;
  // NoPE 1.5, -2, bf16(0.1), 3; RoPE 1, 2, 3, -1; one pad element
  s.lat = {0x3fc0, 0xc000, 0x3dcd, 0x4040, 0x3f80, 0x4000, 0x4040, 0xbf80, 0x1234};
  s.pos = {5};   // R = 2 -> g = 4 (row 5 of cos_sin holds 9s and must not be used)
  s.slot = {6};  // page 1, row 2
  const std::vector<uint8_t> init(216, 0xab);
  for (auto style : {RopeStyle::GptJ, RopeStyle::NeoX}) {
    auto in = s.inputs(Layout::Bf16Rows, style);
    in.page_stride_bytes = 72; in.row_stride_bytes = 18;
    const auto e = insert_reference(in, init);
    CHECK(e.written == std::vector<uint8_t>{1});
    const int64_t rec = 72 + 2 * 18;
    for (int d = 0; d < 4; ++d) CHECK(rd16(e.cache, rec + 2 * d) == s.lat[d]);  // NoPE bits unchanged
    // GPT-J: (x4, x5) = (1, 2) with c .5, s .75 -> (.5 - 1.5, 1 + .75) = (-1, 1.75);
    //        (x6, x7) = (3, -1) with c 1, s 0 -> (3, -1).
    // NeoX:  (x4, x6) = (1, 3) with c .5, s .75 -> (.5 - 2.25, 1.5 + .75) = (-1.75, 2.25);
    //        (x5, x7) = (2, -1) with c 1, s 0 -> (2, -1).
    const std::vector<double> want = (style == RopeStyle::GptJ)
        ? std::vector<double>{-1, 1.75, 3, -1} : std::vector<double>{-1.75, 2, 2.25, -1};
    REQUIRE(e.rope_bf16.size() == 4);
    for (int j = 0; j < 4; ++j) {
      CHECK(e.rope_bf16[j].byte_offset == rec + 8 + 2 * j);
      CHECK(e.rope_bf16[j].exact == want[j]);
      CHECK(bf16_to_double(rd16(e.cache, rec + 8 + 2 * j)) == want[j]);
    }
    CHECK(e.rope_fp8.empty());
    for (int64_t i = 0; i < 216; ++i)
      if (i < rec || i >= rec + 16) REQUIRE(e.cache[i] == 0xab);
  }
}

TEST_CASE("Op B: RoPE value that is not a bf16 keeps the exact value in the tolerance list") {
  SmallRows s;
  s.lat = {0, 0, 0, 0, 0x3f80, 0, 0x3f80, 0, 0};
  s.pos = {1};     // g = 0
  s.slot = {0};
  s.cs[0] = 0.1f; s.cs[1] = 0.1f; s.cs[2] = 0.0f; s.cs[3] = 0.0f;
  auto in = s.inputs(Layout::Bf16Rows, RopeStyle::GptJ);
  in.page_stride_bytes = 64; in.row_stride_bytes = 16;
  const auto e = insert_reference(in, std::vector<uint8_t>(64, 0));
  CHECK(e.rope_bf16[0].exact == static_cast<double>(0.1f));
  CHECK(rd16(e.cache, 8) == bf16_round(static_cast<double>(0.1f)));
  CHECK(rd16(e.cache, 8) == 0x3dcd);
}

TEST_CASE("Op B: skip rules (padding, non-closing, num_pages)") {
  SmallRows s;
  s.lat.assign(9 * 4, 0x3f80);
  s.pos = {1, 2, 3, 5};
  s.slot = {-1, 0, 8, 7};  // padding; p=2 does not close (R = 2); slot 8 >= 2 pages * 4; ok
  s.cs.assign(24, 0.0f);
  auto in = s.inputs(Layout::Bf16Rows, RopeStyle::GptJ);
  in.page_stride_bytes = 64; in.row_stride_bytes = 16; in.num_pages = 2;
  const std::vector<uint8_t> init(3 * 64, 0x5a);
  const auto e = insert_reference(in, init);
  CHECK(e.written == std::vector<uint8_t>{0, 0, 0, 1});
  for (int64_t i = 0; i < 3 * 64; ++i)
    if (i < 64 + 3 * 16 || i >= 64 + 4 * 16) REQUIRE(e.cache[i] == 0x5a);
  CHECK(rd16(e.cache, 64 + 48) == 0x3f80);
  in.num_pages = -1;  // without num_pages slot 8 (page 2, row 0) is written
  const auto e2 = insert_reference(in, init);
  CHECK(e2.written == std::vector<uint8_t>{0, 0, 1, 1});
}

namespace {

struct DsMla {
  std::vector<uint16_t> lat = std::vector<uint16_t>(512, 0x0000);
  std::vector<float> cs = std::vector<float>(4 * 64, 0.0f);
  std::vector<int64_t> pos{3}, slot{3};  // g = 2; page 1, row 1 (B = 2)
  static constexpr int64_t kPage = 2 * 584 + 16;
  DsMla() {
    auto set = [&](int d, double v) { lat[d] = bf16_round(v); };
    // tile 0: amax 1 -> v = fp32(1/448) in (2^-9, 2^-8) -> e = -8, scale 119
    set(0, 1.0); set(1, -0.5); set(2, 0.375);
    // tile 1: all zero (one -0) -> a = 1e-4 -> v ~ 2.23e-7 in (2^-23, 2^-22) -> e = -22, scale 105
    lat[64 + 5] = 0x8000;
    // tile 2: amax 448 -> v = fp32(448 * fp32(1/448)) = 1 exactly -> e = 0, scale 127
    set(128, 448.0); set(129, -1.0); set(130, 3.0);
    // tile 3: amax 450 -> v just above 1 -> e = 1, scale 128
    set(192, 450.0); set(193, 232.0); set(194, p2(-8)); set(195, p2(-9)); set(196, 3 * p2(-10));
    // tile 4: amax 2^-17 < 1e-4 -> floored -> e = -22, scale 105
    set(256, p2(-17));
    // tile 5: amax 0.5 -> v = fp32(1/448) / 2 -> e = -9, scale 118
    set(320, 0.5);
    // tile 6: non-finite
    set(384, kNaN); set(385, 1.0); set(386, -kInf); set(387, kInf); set(388, -kNaN); set(389, p2(120));
    // RoPE: pair 0 = (1, 2) with c .5, s .75; pair 31 = (NaN, 1) with c 1, s 0; other c = 1
    set(448, 1.0); set(449, 2.0); set(510, kNaN); set(511, 1.0);
    for (int i = 0; i < 32; ++i) cs[2 * 64 + i] = 1.0f;
    cs[2 * 64 + 0] = 0.5f; cs[2 * 64 + 32] = 0.75f;
  }
  InsertExpected run(bool sanitize, const std::vector<uint8_t>& init) const {
    InsertInputs in;
    in.num_tokens = 1; in.latent = lat.data(); in.latent_stride_elems = 512;
    in.positions = pos.data(); in.slot = slot.data();
    in.cos_sin = cs.data(); in.cos_sin_stride_elems = 64;
    in.layout = Layout::Fp8DsMla; in.block_size = 2; in.page_stride_bytes = kPage;
    in.sanitize = sanitize;
    return insert_reference(in, init);
  }
};

}  // namespace

TEST_CASE("Op B: full Fp8DsMla record of a hand-built latent") {
  const DsMla m;
  const std::vector<uint8_t> init(static_cast<size_t>(2 * DsMla::kPage), 0xcc);
  for (bool sanitize : {false, true}) {
    CAPTURE(sanitize);
    const auto e = m.run(sanitize, init);
    const int64_t vrow = DsMla::kPage + 576, srow = DsMla::kPage + 2 * 576 + 8;
    const uint8_t scales[8] = {119, 105, 127, 128, 105, 118, static_cast<uint8_t>(sanitize ? 0xfe : 0xff), 0};
    for (int k = 0; k < 8; ++k) { CAPTURE(k); CHECK(e.cache[srow + k] == scales[k]); }
    auto v = [&](int d) { return e.cache[static_cast<size_t>(vrow + d)]; };
    CHECK(v(0) == 0x78);    // 1 * 2^8 = 256
    CHECK(v(1) == 0xf0);    // -128
    CHECK(v(2) == 0x6c);    // 96
    CHECK(v(3) == 0x00);
    CHECK(v(64 + 5) == 0x80);
    CHECK(v(64) == 0x00);
    CHECK(v(128) == 0x7e);  // 448
    CHECK(v(129) == 0xb8);  // -1
    CHECK(v(130) == 0x44);  // 3
    CHECK(v(192) == 0x76);  // 225 -> 224
    CHECK(v(193) == 0x6e);  // 116: tie 112 / 120 -> 112
    CHECK(v(194) == 0x01);  // 2^-9
    CHECK(v(195) == 0x00);  // 2^-10: tie 0 / 2^-9 -> 0
    CHECK(v(196) == 0x01);  // 0.75 * 2^-9
    CHECK(v(256) == 0x60);  // 2^-17 * 2^22 = 32
    CHECK(v(320) == 0x78);  // 0.5 * 2^9 = 256
    CHECK(v(384) == 0x7f);  // NaN
    CHECK(v(385) == 0x00);  // 1 * 2^-128 (2^-127 when sanitizing) -> 0
    CHECK(v(386) == 0xfe);  // -inf -> -448
    CHECK(v(387) == 0x7e);  // +inf -> 448
    CHECK(v(388) == 0xff);  // -NaN
    CHECK(v(389) == (sanitize ? 0x04 : 0x02));  // 2^120 * 2^-128 = 2^-8; sanitize: 2^-127 -> 2^-7
    for (int d = 0; d < 448; ++d) {
      if (d == 0 || d == 1 || d == 2 || d == 64 + 5 || (d >= 128 && d <= 130) || (d >= 192 && d <= 196) ||
          d == 256 || d == 320 || (d >= 384 && d <= 389)) continue;
      CAPTURE(d);
      REQUIRE(v(d) == 0x00);
    }
    // RoPE: (1, 2) -> (-1, 1.75), little-endian bf16 0xbf80, 0x3fe0
    CHECK(v(448) == 0x80); CHECK(v(449) == 0xbf); CHECK(v(450) == 0xe0); CHECK(v(451) == 0x3f);
    REQUIRE(e.rope_bf16.size() == 64);
    CHECK(e.rope_bf16[0].byte_offset == vrow + 448);
    CHECK(e.rope_bf16[0].exact == -1.0);
    CHECK(e.rope_bf16[1].exact == 1.75);
    CHECK(e.rope_bf16[2].exact == 0.0);
    // pair 31 = (NaN, 1): NaN*1 - 1*0 = NaN, 1*1 + NaN*0 = NaN
    if (sanitize) {
      CHECK(rd16(e.cache, vrow + 448 + 124) == 0x0000);
      CHECK(rd16(e.cache, vrow + 448 + 126) == 0x0000);
      CHECK(e.rope_bf16[62].exact == 0.0);
    } else {
      CHECK(std::isnan(bf16_to_double(rd16(e.cache, vrow + 448 + 124))));
      CHECK(std::isnan(bf16_to_double(rd16(e.cache, vrow + 448 + 126))));
      CHECK(std::isnan(e.rope_bf16[62].exact));
      CHECK(std::isnan(e.rope_bf16[63].exact));
    }
    // Everything outside the value row and the scale row is untouched.
    for (int64_t i = 0; i < static_cast<int64_t>(init.size()); ++i)
      if ((i < vrow || i >= vrow + 576) && (i < srow || i >= srow + 8)) REQUIRE(e.cache[i] == 0xcc);
  }
}

TEST_CASE("Op B: Fp8Rows with a per-tensor scale") {
  SmallRows s;
  // NoPE 1, 1000 (bf16 1000 exactly), NaN, -inf; RoPE 1, 2, 3, 4 (identity rotation)
  s.lat = {0x3f80, bf16_round(1000.0), 0x7fc0, 0xff80, 0x3f80, 0x4000, 0x4040, 0x4080, 0};
  s.pos = {0}; s.slot = {1};
  s.cs.assign(24, 0.0f); s.cs[0] = 1.0f; s.cs[1] = 1.0f;
  auto in = s.inputs(Layout::Fp8Rows, RopeStyle::GptJ);
  in.ratio = 1; in.page_stride_bytes = 40; in.row_stride_bytes = 10; in.fp8_scale = 2.0f;
  const std::vector<uint8_t> init(40, 0x11);
  const auto e = insert_reference(in, init);
  // inv = 0.5: 1 -> 0.5 (0x30), 1000 -> 500 -> 448 (0x7e), NaN -> 0x7f, -inf -> -448 (0xfe)
  const uint8_t want[8] = {0x30, 0x7e, 0x7f, 0xfe, 0x30, 0x38, 0x3c, 0x40};
  for (int d = 0; d < 8; ++d) { CAPTURE(d); CHECK(e.cache[10 + d] == want[d]); }
  REQUIRE(e.rope_fp8.size() == 4);
  for (int j = 0; j < 4; ++j) {
    CHECK(e.rope_fp8[j].byte_offset == 10 + 4 + j);
    CHECK(e.rope_fp8[j].code == want[4 + j]);
  }
  CHECK(e.rope_bf16.empty());
  for (int i = 0; i < 40; ++i) if (i < 10 || i >= 18) CHECK(e.cache[i] == 0x11);
}

TEST_CASE("Op B: sanitize turns NaN RoPE into +0 in Fp8Rows too") {
  SmallRows s;
  s.lat = {0, 0, 0, 0, 0x7fc0, 0x3f80, 0xffc0, 0x3f80, 0};
  s.pos = {0}; s.slot = {0};
  s.cs.assign(24, 0.0f); s.cs[0] = 1.0f; s.cs[1] = 1.0f;
  auto in = s.inputs(Layout::Fp8Rows, RopeStyle::GptJ);
  in.ratio = 1; in.page_stride_bytes = 8; in.row_stride_bytes = 8;
  auto e = insert_reference(in, std::vector<uint8_t>(8, 0x11));
  // pair (NaN, 1) with c 1, s 0 -> (NaN*1 - 1*0, 1*1 + NaN*0) = (NaN, NaN); same for (-NaN, 1).
  // The sign of a NaN produced by arithmetic is not portable: only "is a NaN code" is checked.
  for (int d = 4; d < 8; ++d) CHECK((e.cache[d] & 0x7f) == 0x7f);
  in.sanitize = true;
  e = insert_reference(in, std::vector<uint8_t>(8, 0x11));
  for (int d = 4; d < 8; ++d) CHECK(e.cache[d] == 0x00);  // NaN RoPE -> +0.0 -> code 0x00
  REQUIRE(e.rope_fp8.size() == 4);
  CHECK(e.rope_fp8[0].code == 0x00);
}

TEST_CASE("Op A + Op B: model-sized call runs quickly") {
  const int D = 512, R = 2, C = 8;
  const int64_t T = 4096;
  std::vector<float> kvs(static_cast<size_t>(T * 2 * D));
  for (size_t i = 0; i < kvs.size(); ++i) kvs[i] = static_cast<float>(std::sin(0.001 * static_cast<double>(i)));
  std::vector<int64_t> pos(T), slot(T);
  std::vector<int32_t> req(T, 0), qsl{0, static_cast<int32_t>(T)};
  for (int64_t t = 0; t < T; ++t) { pos[t] = t + 3; slot[t] = (t + 3) % C; }
  std::vector<float> ring(static_cast<size_t>(C * 2 * D), 0.5f);
  std::vector<uint16_t> w(D, 0x3f80);
  CompressInputs a;
  a.head_dim = D; a.ratio = R; a.num_tokens = T; a.kv_score = kvs.data(); a.kv_score_stride_elems = 2 * D;
  a.positions = pos.data(); a.slot = slot.data(); a.qsl = qsl.data(); a.num_reqs = 1; a.req = req.data();
  a.ring = ring.data(); a.ring_capacity = C; a.ring_page_stride = C * 2 * D; a.ring_row_stride = 2 * D;
  a.ring_elems = static_cast<int64_t>(ring.size()); a.weight = w.data();
  const auto ea = compress_reference(a);
  std::vector<uint16_t> lat(static_cast<size_t>(T * D), 0);
  for (int64_t t = 0; t < T; ++t)
    if (ea.closes[t]) for (int d = 0; d < D; ++d) lat[t * D + d] = bf16_round(ea.latent[t * D + d]);
  std::vector<float> cs(static_cast<size_t>((T + 8) * 64), 0.5f);
  std::vector<int64_t> cslot(T);
  for (int64_t t = 0; t < T; ++t) cslot[t] = t / 2;
  InsertInputs b;
  b.num_tokens = T; b.latent = lat.data(); b.latent_stride_elems = D; b.positions = pos.data(); b.slot = cslot.data();
  b.cos_sin = cs.data(); b.cos_sin_stride_elems = 64; b.block_size = 64; b.page_stride_bytes = 64 * 584;
  const auto eb = insert_reference(b, std::vector<uint8_t>(static_cast<size_t>((T / 128 + 1) * 64 * 584), 0));
  int64_t n = 0;
  for (auto x : eb.written) n += x;
  CHECK(n == T / 2);
}

// ============================================================================
// Skipped tokens and their counts (issue 13): ring bound, negative positions, cache and
// table bounds, non-finite rows
// ============================================================================

namespace {

const int64_t kInt64Max = std::numeric_limits<int64_t>::max();
const int64_t k2Pow61 = int64_t{1} << 61;

// Two Op A results are the same outputs: the same tokens close, the same latents (NaN where
// either is NaN), bit-identical rings, the same slots used.
void check_same_outputs(const CompressExpected& x, const CompressExpected& y) {
  CHECK(x.closes == y.closes);
  CHECK(x.used_slot == y.used_slot);
  REQUIRE(x.latent.size() == y.latent.size());
  for (size_t i = 0; i < x.latent.size(); ++i) {
    CAPTURE(i);
    const bool same = (std::isnan(x.latent[i]) && std::isnan(y.latent[i])) || x.latent[i] == y.latent[i];
    REQUIRE(same);
  }
  REQUIRE(x.ring_after.size() == y.ring_after.size());
  CHECK(std::memcmp(x.ring_after.data(), y.ring_after.data(), x.ring_after.size() * sizeof(float)) == 0);
}

ErrorCounts counts(uint64_t ring, uint64_t cache, uint64_t position, uint64_t non_finite) {
  ErrorCounts c;
  c.ring_slot_out_of_range = ring;
  c.cache_slot_out_of_range = cache;
  c.position_out_of_range = position;
  c.non_finite_rows = non_finite;
  return c;
}

std::string str(const ErrorCounts& c) {
  return "ring " + std::to_string(c.ring_slot_out_of_range) + ", cache " +
         std::to_string(c.cache_slot_out_of_range) + ", position " + std::to_string(c.position_out_of_range) +
         ", non-finite " + std::to_string(c.non_finite_rows);
}

}  // namespace

TEST_CASE("Op A: a ring slot at or past num_blocks * C is padding, exactly as slot -1, and is counted") {
  // C = 4, three blocks in memory, num_blocks = 2: block 2 lies past the bound.
  OpA a(4, 2, 4, 3);
  a.num_blocks = 2;
  a.qsl = {0, 4, 8};
  a.add(3, 3, 0, {1, 1, 1, 1});     // t0 closes {2, 3}: position 2 from ring block 0 row 2
  a.add(4, 0, 0, {2, 4, 6, 8});     // t1: slot replaced below (one past the end)
  a.add(5, 1, 0, {4, 2, 0, -2});    // t2 closes {4, 5}: t1's row is still a member
  a.add(6, 2, 0, {5, 5, 5, 5});     // t3: slot replaced below (INT64_MAX)
  a.add(0, 4, 1, {1, 2, 3, 4});     // request 1, block 1
  a.add(1, 5, 1, {1, 2, 3, 4});     // t5 closes {0, 1}: slot replaced below (2^61)
  a.add(2, 6, 1, {7, 7, 7, 7});
  a.add(3, 7, 1, {3, 3, 3, 3});     // t7: slot 7 = num_blocks * C - 1, the last slot inside
  const float r2[8] = {3, 3, 3, 3, 0, 0, 0, 0};
  std::memcpy(a.ring_row(0, 2), r2, sizeof r2);
  OpA padded = a;                   // the same batch with the skipped slots as -1
  a.slot[1] = 2 * 4 + 0;            // block 2, row 0: inside the buffer, past the bound
  a.slot[3] = kInt64Max;
  a.slot[5] = k2Pow61;
  padded.slot[1] = padded.slot[3] = padded.slot[5] = -1;
  const auto e = a.run();
  const auto p = padded.run();
  check_same_outputs(e, p);
  CHECK(e.closes == std::vector<uint8_t>{1, 0, 1, 0, 0, 0, 0, 1});
  check_row(e, 0, rms({2, 2, 2, 2}));
  check_row(e, 2, rms({3, 3, 3, 3}));  // t1 and t2 with equal scores: the mean
  check_row(e, 7, rms({5, 5, 5, 5}));
  CHECK(e.errors == counts(3, 0, 0, 0));
  CHECK(p.errors == counts(0, 0, 0, 0));
  CHECK(e.used_slot == std::vector<int64_t>{3, -1, 1, -1, 4, -1, 6, 7});
  // Block 2 (past the bound) is untouched, t7 is stored at the last slot inside.
  for (int64_t i = 2 * a.page_stride; i < 3 * a.page_stride; ++i) REQUIRE(e.ring_after[i] == -777.0f);
  CHECK(std::memcmp(e.ring_after.data() + a.page_stride + 3 * a.row_stride, a.kvs.data() + 7 * a.kstride(),
                    8 * sizeof(float)) == 0);

  // Without the bound the same in-buffer slot is stored like any other (the bound is what
  // skips it); the slots that lie outside the buffer stay -1 here.
  OpA unbounded = a;
  unbounded.num_blocks = -1;
  unbounded.slot[3] = unbounded.slot[5] = -1;
  const auto u = unbounded.run();
  CHECK(u.errors == counts(0, 0, 0, 0));
  CHECK(std::memcmp(u.ring_after.data() + 2 * a.page_stride, a.kvs.data() + a.kstride(), 8 * sizeof(float)) == 0);

  // num_blocks = 0: every slot is past the bound, every token is padding.
  OpA none = a;
  none.num_blocks = 0;
  none.slot = {3, 0, 1, 2, 4, 5, 6, 7};
  const auto n = none.run();
  CHECK(n.closes == std::vector<uint8_t>(8, 0));
  CHECK(n.errors == counts(8, 0, 0, 0));
  CHECK(std::memcmp(n.ring_after.data(), a.ring.data(), a.ring.size() * sizeof(float)) == 0);
}

TEST_CASE("Op A: a token with a slot and a negative position is padding, counted once (ring bound first)") {
  OpA a(4, 2, 4, 3);
  a.num_blocks = 3;
  a.qsl = {0, 1, 2, 4};
  a.add(-1, 3, 0, {9, 9, 9, 9});         // t0: one-token chunk at -1 ((p + 1) % R == 0): padding
  a.add(-2, kInt64Max, 1, {9, 9, 9, 9});  // t1: past the ring bound and negative: counted as ring
  a.add(4, 8, 2, {1, 1, 1, 1});          // request 2, block 2
  a.add(5, 9, 2, {3, 3, 3, 3});          // t3 closes {4, 5}
  a.add(-3, 5, 2, {9, 9, 9, 9});         // t4: trailing token with a slot, negative: padding
  a.add(-1, -1, 2, {9, 9, 9, 9});        // t5: trailing padding at a negative position: not counted
  OpA padded = a;
  padded.slot[0] = padded.slot[1] = padded.slot[4] = -1;
  const auto e = a.run();
  check_same_outputs(e, padded.run());
  CHECK(e.closes == std::vector<uint8_t>{0, 0, 0, 1, 0, 0});
  check_row(e, 3, rms({2, 2, 2, 2}));
  CHECK(e.errors == counts(1, 0, 2, 0));
  // t0 is not stored to block 0 row 3, the only row it could have gone to.
  for (int64_t i = 0; i < a.page_stride; ++i) REQUIRE(e.ring_after[i] == -777.0f);

  // Ratio 1 has no ring: num_blocks is ignored, only negative positions are skipped.
  OpA b(4, 1, 0, 0);
  b.num_blocks = 0;
  b.qsl = {0, 3};
  b.add(-1, 0, 0, {1, 1, 1, 1});           // padding, counted
  b.add(0, kInt64Max, 0, {2, 2, 2, 2});    // closes: no ring, no bound
  b.add(-5, -1, 0, {3, 3, 3, 3});          // padding anyway: not counted
  const auto r1 = b.run();
  CHECK(r1.closes == std::vector<uint8_t>{0, 1, 0});
  check_row(r1, 1, rms({2, 2, 2, 2}));
  CHECK(std::isnan(r1.latent[0]));
  CHECK(r1.errors == counts(0, 0, 1, 0));
}

TEST_CASE("Op A: non_finite_rows counts closing rows with a non-finite pooled row or overflowing squares") {
  OpA a(4, 2, 8, 1);
  a.num_blocks = 1;
  a.qsl = {0, 20};
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  auto group = [&](std::vector<float> kv0, std::vector<float> s0, std::vector<float> kv1, std::vector<float> s1) {
    const int64_t p = static_cast<int64_t>(a.pos.size());
    a.add(p, p % 8, 0, kv0, s0);
    a.add(p + 1, (p + 1) % 8, 0, kv1, s1);
  };
  const std::vector<float> zero{0, 0, 0, 0};
  group({1, 2, 3, 4}, zero, {1, 2, 3, 4}, zero);                  // t1: finite: not counted
  group({1, nan, 3, 4}, zero, {1, 2, 3, 4}, zero);                // t3: NaN kv: counted, all NaN
  group({1, 2, 3, 4}, {0, inf, 0, 0}, {1, 2, 3, 4}, zero);        // t5: +inf score (inf - inf): counted
  group({1, 2, 3, 4}, {-inf, 0, 0, 0}, {5, 2, 3, 4}, zero);       // t7: -inf score weighs 0: not counted
  group({1, 2, 3, 4}, {-inf, 0, 0, 0}, {5, 2, 3, 4}, {-inf, 0, 0, 0});  // t9: 0/0: counted
  group({1e25f, 1e25f, -1e25f, 1e25f}, zero, {1e25f, 1e25f, -1e25f, 1e25f}, zero);  // t11: squares overflow: counted, latent 0
  group(zero, zero, zero, zero);                                  // t13: zero row, eps 0: NaN, sum 0: not counted
  group({inf, 2, 3, 4}, zero, {1, 2, 3, 4}, zero);                // t15: +inf kv: counted
  group({1, 2, 3, 4}, zero, {nan, 2, 3, 4}, zero);                // t17: NaN, but t17's slot is past the bound
  group({1, 2, 3, 4}, zero, {1, 2, 3, 4}, zero);                  // t19: finite
  a.slot[17] = 8;
  const auto e = a.run();
  CHECK(e.errors == counts(1, 0, 0, 5));
  check_row(e, 1, rms({1, 2, 3, 4}));
  for (int d = 0; d < 4; ++d) {
    CAPTURE(d);
    CHECK(std::isnan(e.latent[3 * 4 + d]));
    CHECK(std::isnan(e.latent[5 * 4 + d]));
    CHECK(std::isnan(e.latent[9 * 4 + d]));
    CHECK(e.latent[11 * 4 + d] == 0.0);
    CHECK(e.magnitude[11 * 4 + d] == 0.0);
    CHECK(std::isnan(e.latent[13 * 4 + d]));
    // pooled (inf, 2, 3, 4): sum of squares inf, so inf / inf = NaN and finite / inf = 0
    if (d == 0) CHECK(std::isnan(e.latent[15 * 4 + d])); else CHECK(e.latent[15 * 4 + d] == 0.0);
  }
  check_row(e, 7, rms({5, 2, 3, 4}));
  CHECK(e.closes[17] == 0);

  OpA b(4, 1, 0, 0);
  b.qsl = {0, 3};
  b.add(0, 0, 0, {1, inf, 1, 1});
  b.add(1, 1, 0, {1, 1, 1, 1});
  b.add(2, -1, 0, {nan, 1, 1, 1});  // padding: no row, not counted
  CHECK(b.run().errors == counts(0, 0, 0, 1));
}

TEST_CASE("Op B: no record for negative positions, slots past num_pages * B, group positions past the table") {
  SmallRows s;
  s.lat.assign(9 * 9, 0x3f80);
  for (int t = 0; t < 9; ++t) s.lat[static_cast<size_t>(9 * t)] = bf16_round(t + 1.0);  // tell records apart
  s.cs.assign(24, 0.5f);
  // R = 2, B = 4, num_pages = 2 (slots 0..7), cos_sin_rows = 6 (group positions 0..5 exist).
  s.pos =  {-1, -2, -1, 2, 3, 7, 7,         5, 9};
  s.slot = {0,  1,  -1, 9, 8, 2, kInt64Max, 3, k2Pow61};
  //  t0: negative, would close           -> position
  //  t1: negative, does not close        -> position
  //  t2: no slot                         -> nothing
  //  t3: slot past the end, no close     -> nothing
  //  t4: closes, slot 8 = num_pages * B  -> cache
  //  t5: closes, g = 6 = cos_sin_rows    -> position
  //  t6: both out of range               -> cache (the slot bound first)
  //  t7: closes, g = 4                   -> record
  //  t8: closes, slot 2^61               -> cache
  auto in = s.inputs(Layout::Bf16Rows, RopeStyle::GptJ);
  in.page_stride_bytes = 64; in.row_stride_bytes = 16; in.num_pages = 2; in.cos_sin_rows = 6;
  const std::vector<uint8_t> init(3 * 64, 0x5a);
  const auto e = insert_reference(in, init);
  CHECK(e.written == std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 1, 0});
  CHECK(e.errors == counts(0, 3, 3, 0));
  // Bytes: exactly the record of t7 alone (all other slots -1).
  SmallRows only = s;
  only.slot = {-1, -1, -1, -1, -1, -1, -1, 3, -1};
  auto in_only = only.inputs(Layout::Bf16Rows, RopeStyle::GptJ);
  in_only.page_stride_bytes = 64; in_only.row_stride_bytes = 16;
  const auto o = insert_reference(in_only, init);
  CHECK(o.errors == counts(0, 0, 0, 0));
  CHECK(e.cache == o.cache);
  CHECK(rd16(e.cache, 3 * 16) == bf16_round(8.0));

  // Without the table bound t5 reads row 6 (here it exists: a longer table) and writes.
  s.cs.assign(40, 0.5f);
  in = s.inputs(Layout::Bf16Rows, RopeStyle::GptJ);
  in.page_stride_bytes = 64; in.row_stride_bytes = 16; in.num_pages = 2;
  const auto u = insert_reference(in, init);
  CHECK(u.written == std::vector<uint8_t>{0, 0, 0, 0, 0, 1, 0, 1, 0});
  CHECK(u.errors == counts(0, 3, 2, 0));
}

TEST_CASE("fused reference: Op A's skips first, then the record rules on closing tokens, counted once") {
  // D = 8, P = 4, R = 2, C = 4, two blocks; bf16 rows, B = 4, num_pages = 3, cos_sin_rows = 6.
  OpA a(8, 2, 4, 2);
  a.num_blocks = 2;
  a.qsl = {0, 10, 11};
  for (int p = 0; p < 10; ++p)
    a.add(p, p % 4, 0, std::vector<float>(8, static_cast<float>(p + 1)), std::vector<float>(8, 0.f));
  a.add(-1, 7, 1, std::vector<float>(8, 9.f), std::vector<float>(8, 0.f));  // t10: negative position
  a.slot[7] = kInt64Max;   // t7 (p7, closes) past the ring bound
  a.slot[9] = -1;          // t9 (p9, closes) ring padding
  CompressInputs ca;
  ca.head_dim = 8; ca.ratio = 2; ca.num_tokens = static_cast<int64_t>(a.pos.size());
  ca.kv_score = a.kvs.data(); ca.kv_score_stride_elems = a.kstride();
  ca.positions = a.pos.data(); ca.slot = a.slot.data();
  ca.qsl = a.qsl.data(); ca.num_reqs = 2; ca.req = a.req.data();
  ca.ring = a.ring.data(); ca.ring_capacity = 4; ca.ring_page_stride = a.page_stride;
  ca.ring_row_stride = a.row_stride; ca.ring_elems = static_cast<int64_t>(a.ring.size());
  ca.weight = a.w.data(); ca.eps = 1e-6f; ca.ring_num_blocks = 2;
  //                       t0  t1  t2  t3  t4  t5  t6  t7  t8  t9  t10
  std::vector<int64_t> cs = {0,  1,  2,  12, 3,  4,  5,  6,  7,  8,  9};
  // t1 (g 0): record; t3 (g 2): slot 12 = num_pages * B: cache; t5 (g 4): record at 4;
  // t7: Op A skips it (ring): no record, not counted again; t9: ring padding: nothing;
  // t10: negative position, Op A counts it once; non-closing tokens: no record whatever
  // their slot. Then the table bound: none here (g 8 of t9 would be past it, but t9 does not close).
  std::vector<float> table(10 * 4, 0.25f);
  InsertInputs b;
  b.rope_dim = 4; b.slot = cs.data(); b.cos_sin = table.data(); b.cos_sin_stride_elems = 4;
  b.layout = Layout::Bf16Rows; b.block_size = 4; b.page_stride_bytes = 4 * 16; b.row_stride_bytes = 16;
  b.num_pages = 3; b.cos_sin_rows = 6;
  const std::vector<uint8_t> init(4 * 64, 0x33);
  const auto f = fused_reference(ca, b, init);
  CHECK(f.compress.closes == std::vector<uint8_t>{0, 1, 0, 1, 0, 1, 0, 0, 0, 0, 0});
  CHECK(f.insert.written == std::vector<uint8_t>{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0});
  CHECK_MESSAGE(f.errors == counts(1, 1, 1, 0), str(f.errors));
  // A table bound that cuts t5's group (g 4 >= 4): counted as position, no record.
  b.cos_sin_rows = 4;
  const auto g = fused_reference(ca, b, init);
  CHECK(g.insert.written == std::vector<uint8_t>{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0});
  CHECK_MESSAGE(g.errors == counts(1, 1, 2, 0), str(g.errors));
  // Records are the float64 latent rounded to bf16 (NoPE bits of t1's row, all equal here).
  CHECK(rd16(f.insert.cache, 1 * 16) == bf16_round(f.compress.latent[1 * 8]));
  // Op B alone on the same slots would count t10 (cache slot 9 >= 0, negative position)
  // and write the records of t7 and t9 (skipped or padding in Op A) from whatever latent
  // rows it is given.
  std::vector<uint16_t> lat(static_cast<size_t>(11 * 8), 0x3f80);
  InsertInputs alone = b;
  alone.ratio = 2; alone.head_dim = 8; alone.num_tokens = 11; alone.positions = a.pos.data();
  alone.latent = lat.data(); alone.latent_stride_elems = 8; alone.cos_sin_rows = 10;
  const auto ob = insert_reference(alone, init);
  CHECK(ob.written == std::vector<uint8_t>{0, 1, 0, 0, 0, 1, 0, 1, 0, 1, 0});
  CHECK_MESSAGE(ob.errors == counts(0, 1, 1, 0), str(ob.errors));
}

TEST_CASE("Op A on random batches: slots one past the ring bound are padding; ignoring the bound shows") {
  // What the device test relies on to fail for a kernel that ignores num_blocks: a slot one
  // past the bound lands in a guard block that exists in memory, so such a kernel stores
  // rows there (the ring comparison sees it) and writes latents of groups that must not
  // close (the poisoned latent rows see it).
  std::mt19937_64 rng(1313);
  for (int ratio : {2, 4, 16, 128}) {
    CAPTURE(ratio);
    kvctest::BatchShape shape;
    shape.ratio = ratio;
    shape.head_dim = 64;
    shape.capacity = kvctest::default_capacity(ratio);
    const int C = shape.capacity;
    shape.requests = {{3 * C + 5, 2 * ratio + 1}, {2, 7}, {2, 3 * int64_t{ratio} - 2}, {1, 5 * int64_t{ratio} - 1}};
    shape.guard_ring_blocks = 1;
    shape.padding_tokens = 2;
    kvctest::Batch b = kvctest::make_batch(rng, shape);
    REQUIRE(b.ring_num_blocks == b.ring_blocks);
    REQUIRE(static_cast<int64_t>(b.ring.size()) == (b.ring_blocks + 1) * b.ring_page_stride);
    kvctest::Batch padded = b;
    for (int r = 0; r < b.num_reqs(); ++r) {
      const size_t last = static_cast<size_t>(b.qsl[r + 1] - 1);  // stored, and closes in requests 1..3
      b.slot[last] = b.ring_num_blocks * C + b.positions[last] % C;
      padded.slot[last] = -1;
    }
    const auto want = compress_reference(kvctest::reference_inputs(b));
    check_same_outputs(want, compress_reference(kvctest::reference_inputs(padded)));
    CHECK_MESSAGE(want.errors == counts(4, 0, 0, 0), str(want.errors));
    const int64_t guard = b.ring_blocks * b.ring_page_stride;
    for (size_t i = static_cast<size_t>(guard); i < want.ring_after.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &want.ring_after[i], 4);
      REQUIRE(bits == kvctest::kPadNaNBits);
    }
    kvctest::Batch ignored = b;
    ignored.ring_num_blocks = -1;
    const auto wrong = compress_reference(kvctest::reference_inputs(ignored));
    CHECK(wrong.errors.ring_slot_out_of_range == 0);  // (its head groups read the guard's NaN rows)
    CHECK(std::memcmp(wrong.ring_after.data() + guard, want.ring_after.data() + guard,
                      (want.ring_after.size() - static_cast<size_t>(guard)) * sizeof(float)) != 0);
    CHECK(wrong.closes != want.closes);
  }
}
