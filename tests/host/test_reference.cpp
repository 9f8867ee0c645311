// Tests of the float64 host reference (tests/reference/reference.hpp) against
// hand-computed cases. The expected numbers below are worked out in comments.
#include <doctest/doctest.h>

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
    in.kv_score = kvs.data(); in.kv_score_stride = kstride();
    in.positions = pos.data(); in.slot = slot.data();
    in.qsl = qsl.data(); in.num_reqs = static_cast<int>(qsl.size()) - 1; in.req = req.data();
    in.ring = ring.data(); in.ring_capacity = C;
    in.ring_page_stride = page_stride; in.ring_row_stride = row_stride;
    in.ring_elems = static_cast<int64_t>(ring.size());
    in.weight = w.data(); in.eps = eps;
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
    in.latent = lat.data(); in.latent_stride = 9;
    in.positions = pos.data(); in.slot = slot.data();
    in.cos_sin = cs.data(); in.cos_sin_stride = 4;
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
    in.num_tokens = 1; in.latent = lat.data(); in.latent_stride = 512;
    in.positions = pos.data(); in.slot = slot.data();
    in.cos_sin = cs.data(); in.cos_sin_stride = 64;
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
  a.head_dim = D; a.ratio = R; a.num_tokens = T; a.kv_score = kvs.data(); a.kv_score_stride = 2 * D;
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
  b.num_tokens = T; b.latent = lat.data(); b.latent_stride = D; b.positions = pos.data(); b.slot = cslot.data();
  b.cos_sin = cs.data(); b.cos_sin_stride = 64; b.block_size = 64; b.page_stride_bytes = 64 * 584;
  const auto eb = insert_reference(b, std::vector<uint8_t>(static_cast<size_t>((T / 128 + 1) * 64 * 584), 0));
  int64_t n = 0;
  for (auto x : eb.written) n += x;
  CHECK(n == T / 2);
}
