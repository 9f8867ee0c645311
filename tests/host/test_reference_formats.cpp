// SPDX-License-Identifier: Apache-2.0
// Tests of the reference's newer Op B record formats (tests/reference/reference.hpp):
// the e2m1 codec, Mxfp8, Nvfp4 / Nvfp4Rows, Fp8DsMlaV32, the fp32 RoPE element, and the
// record / page sizes. The expected numbers are worked out in the comments.
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
double p2(int e) { return std::ldexp(1.0, e); }

uint32_t rd32(const std::vector<uint8_t>& c, int64_t off) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | c[static_cast<size_t>(off + i)];
  return v;
}
uint16_t rd16(const std::vector<uint8_t>& c, int64_t off) {
  return static_cast<uint16_t>(c[static_cast<size_t>(off)] | (c[static_cast<size_t>(off + 1)] << 8));
}

// One latent row (bf16 bits) and the cos/sin table row it is rotated with (identity
// unless set: c = 1, s = 0).
struct Row {
  std::vector<uint16_t> lat;
  std::vector<float> cs;
  explicit Row(int D) : lat(static_cast<size_t>(D), 0), cs(64, 0.0f) {
    for (int i = 0; i < 32; ++i) cs[static_cast<size_t>(i)] = 1.0f;
  }
  void set(int d, double v) {
    lat[static_cast<size_t>(d)] = bf16_round(v);
    const double back = bf16_to_double(lat[static_cast<size_t>(d)]);
    REQUIRE((back == v || (std::isnan(v) && std::isnan(back))));  // bf16-exact inputs only
  }
};

struct Geometry {
  Layout layout;
  int D;
  int B = 4;
  int64_t page() const { return vllm_page_stride(layout, B, D); }
  int64_t row_stride() const { return record_bytes(layout, D); }
  size_t cache_bytes() const { return static_cast<size_t>(2 * page()); }
};

// Token t = rows[t] at position t (ratio 1), cache slot slots[t].
InsertExpected run(const Geometry& g, const std::vector<Row>& rows, const std::vector<int64_t>& slots,
                   bool sanitize, uint8_t poison, RopeStyle style = RopeStyle::GptJ) {
  REQUIRE(rows.size() == slots.size());
  std::vector<uint16_t> lat;
  std::vector<float> cs;
  std::vector<int64_t> pos, slot(slots.begin(), slots.end());
  for (size_t t = 0; t < rows.size(); ++t) {
    lat.insert(lat.end(), rows[t].lat.begin(), rows[t].lat.end());
    cs.insert(cs.end(), rows[t].cs.begin(), rows[t].cs.end());
    pos.push_back(static_cast<int64_t>(t));
  }
  InsertInputs in;
  in.head_dim = g.D; in.rope_dim = 64; in.ratio = 1; in.rope_style = style;
  in.num_tokens = static_cast<int64_t>(rows.size());
  in.latent = lat.data(); in.latent_stride_elems = g.D;
  in.positions = pos.data(); in.slot = slot.data();
  in.cos_sin = cs.data(); in.cos_sin_stride_elems = 64;
  in.layout = g.layout; in.block_size = g.B;
  in.page_stride_bytes = g.page(); in.row_stride_bytes = g.row_stride();
  in.sanitize = sanitize;
  return insert_reference(in, std::vector<uint8_t>(g.cache_bytes(), poison));
}

// A deterministic pseudo-random row: bf16 values in (-8, 8), a rotation by an angle.
Row random_row(int D, uint32_t seed) {
  Row r(D);
  uint32_t st = seed * 2654435761u + 12345u;
  auto next = [&] { st = st * 1664525u + 1013904223u; return (st >> 8) * (1.0 / 16777216.0); };
  for (int d = 0; d < D; ++d) r.lat[static_cast<size_t>(d)] = bf16_round(16.0 * next() - 8.0);
  for (int i = 0; i < 32; ++i) {
    const double th = 6.283185307179586 * next();
    r.cs[static_cast<size_t>(i)] = static_cast<float>(std::cos(th));
    r.cs[static_cast<size_t>(32 + i)] = static_cast<float>(std::sin(th));
  }
  return r;
}

const Layout kNewLayouts[] = {Layout::Mxfp8, Layout::Nvfp4, Layout::Nvfp4Rows, Layout::Fp8DsMlaV32};
int dim_of(Layout l) { return l == Layout::Fp8DsMlaV32 ? 576 : 512; }

}  // namespace

// ============================================================================
// e2m1
// ============================================================================

TEST_CASE("e2m1_to_double: the 16 codes") {
  const double mags[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    CAPTURE(c);
    CHECK(e2m1_to_double(static_cast<uint8_t>(c)) == mags[c]);
    CHECK(e2m1_to_double(static_cast<uint8_t>(c | 8)) == -mags[c]);
    CHECK(!std::signbit(e2m1_to_double(static_cast<uint8_t>(c))));
    CHECK(std::signbit(e2m1_to_double(static_cast<uint8_t>(c | 8))));
  }
}

TEST_CASE("e2m1_rne_satfinite: exact values, midpoints, neighbours of midpoints") {
  for (int c = 0; c < 8; ++c) {
    CAPTURE(c);
    CHECK(e2m1_rne_satfinite(e2m1_to_double(static_cast<uint8_t>(c))) == c);
    if (c) CHECK(e2m1_rne_satfinite(-e2m1_to_double(static_cast<uint8_t>(c))) == (c | 8));
  }
  // midpoint between code lo and lo+1 -> the even one of the two
  const double mids[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
  const uint8_t even[7] = {0, 2, 2, 4, 4, 6, 6};
  for (int lo = 0; lo < 7; ++lo) {
    CAPTURE(lo);
    const double m = mids[lo];
    CHECK(e2m1_rne_satfinite(m) == even[lo]);
    CHECK(e2m1_rne_satfinite(-m) == (even[lo] | 8));
    CHECK(e2m1_rne_satfinite(std::nextafter(m, 0.0)) == lo);
    CHECK(e2m1_rne_satfinite(std::nextafter(m, 10.0)) == lo + 1);
    CHECK(e2m1_rne_satfinite(-std::nextafter(m, 0.0)) == (lo | 8));
    CHECK(e2m1_rne_satfinite(-std::nextafter(m, 10.0)) == ((lo + 1) | 8));
  }
}

TEST_CASE("e2m1_rne_satfinite: saturation, NaN, signed zero") {
  CHECK(e2m1_rne_satfinite(6.5) == 0x7);
  CHECK(e2m1_rne_satfinite(std::nextafter(6.0, 7.0)) == 0x7);
  CHECK(e2m1_rne_satfinite(1e30) == 0x7);
  CHECK(e2m1_rne_satfinite(kInf) == 0x7);
  CHECK(e2m1_rne_satfinite(-6.5) == 0xF);
  CHECK(e2m1_rne_satfinite(-1e30) == 0xF);
  CHECK(e2m1_rne_satfinite(-kInf) == 0xF);
  CHECK(e2m1_rne_satfinite(kNaN) == 0x0);
  CHECK(e2m1_rne_satfinite(-kNaN) == 0x0);
  CHECK(e2m1_rne_satfinite(0.0) == 0x0);
  CHECK(e2m1_rne_satfinite(-0.0) == 0x8);
  CHECK(e2m1_rne_satfinite(0.1) == 0x0);
  CHECK(e2m1_rne_satfinite(-0.1) == 0x8);
  CHECK(e2m1_rne_satfinite(-1e-300) == 0x8);
}

// ============================================================================
// fp32 RoPE element, sizes
// ============================================================================

TEST_CASE("rope_fp32: the product's residual is kept") {
  // x*c - ov*s with x = 1, c = 1, ov = 1 + 2^-7, s = 1 + 2^-23: exact -(2^-7 + 2^-23 + 2^-30),
  // representable in fp32 (ulp 2^-30 in that binade). Plain fp32 (product rounded first)
  // loses the 2^-30: -(2^-7 + 2^-23).
  const float ov = static_cast<float>(1.0 + p2(-7)), s = static_cast<float>(1.0 + p2(-23));
  const double exact = -(p2(-7) + p2(-23) + p2(-30));
  CHECK(static_cast<double>(rope_fp32(1.0f, ov, 1.0f, s, true)) == exact);
  // second element x*c + ov*s with x = -1: +(2^-7 + 2^-23 + 2^-30)
  CHECK(static_cast<double>(rope_fp32(-1.0f, ov, 1.0f, s, false)) == -exact);
  CHECK(rope_fp32(1.0f, 2.0f, 0.5f, 0.75f, true) == -1.0f);
  CHECK(rope_fp32(2.0f, 1.0f, 0.5f, 0.75f, false) == 1.75f);
  // a non-finite product: residual 0, inf propagates
  CHECK(rope_fp32(1.0f, std::numeric_limits<float>::infinity(), 1.0f, 0.5f, false) ==
        std::numeric_limits<float>::infinity());
  CHECK(std::isnan(rope_fp32(1.0f, std::numeric_limits<float>::infinity(), 1.0f, 0.0f, true)));
}

TEST_CASE("record_bytes and vllm_page_stride") {
  CHECK(record_bytes(Layout::Fp8DsMla, 512) == 584);
  CHECK(record_bytes(Layout::Bf16Rows, 256) == 512);
  CHECK(record_bytes(Layout::Fp8Rows, 256) == 256);
  CHECK(record_bytes(Layout::Mxfp8, 512) == 528);
  CHECK(record_bytes(Layout::Nvfp4, 512) == 288);
  CHECK(record_bytes(Layout::Nvfp4Rows, 512) == 288);
  CHECK(record_bytes(Layout::Fp8DsMlaV32, 576) == 656);
  // B = 64: 37376 -> 65 * 576; 33792 = 66 * 512; 18432 = 36 * 512
  CHECK(vllm_page_stride(Layout::Fp8DsMla, 64) == 37440);
  CHECK(vllm_page_stride(Layout::Mxfp8, 64) == 33792);
  CHECK(vllm_page_stride(Layout::Nvfp4, 64) == 18432);
  CHECK(vllm_page_stride(Layout::Nvfp4Rows, 64) == 18432);
  CHECK(vllm_page_stride(Layout::Fp8DsMlaV32, 64) == 64 * 656);
  CHECK(vllm_page_stride(Layout::Bf16Rows, 64, 256) == 64 * 512);
  CHECK(vllm_page_stride(Layout::Fp8Rows, 64, 512) == 64 * 512);
  // B = 1 and B = 4: rounded up
  CHECK(vllm_page_stride(Layout::Fp8DsMla, 1) == 1152);
  CHECK(vllm_page_stride(Layout::Mxfp8, 1) == 1024);
  CHECK(vllm_page_stride(Layout::Nvfp4, 1) == 512);
  CHECK(vllm_page_stride(Layout::Mxfp8, 4) == 2560);
  CHECK(vllm_page_stride(Layout::Nvfp4, 4) == 1536);
}

TEST_CASE("new layouts require their head / rope dims") {
  for (Layout l : kNewLayouts) {
    CAPTURE(static_cast<int>(l));
    const Geometry good{l, dim_of(l)};
    CHECK_NOTHROW(run(good, {random_row(good.D, 1)}, {1}, false, 0xcc));
    const int bad_d = (l == Layout::Fp8DsMlaV32) ? 512 : 576;
    Row r(bad_d);
    InsertInputs in;
    const int64_t pos = 0, slot = 0;
    in.head_dim = bad_d; in.num_tokens = 1; in.latent = r.lat.data(); in.latent_stride_elems = bad_d;
    in.positions = &pos; in.slot = &slot; in.cos_sin = r.cs.data(); in.cos_sin_stride_elems = 64;
    in.layout = l; in.block_size = 4; in.page_stride_bytes = 4096; in.row_stride_bytes = 1024;
    CHECK_THROWS_AS(insert_reference(in, std::vector<uint8_t>(8192, 0)), std::invalid_argument);
  }
}

// ============================================================================
// Mxfp8
// ============================================================================

TEST_CASE("Op B: Mxfp8 record of a hand-built row") {
  const Geometry g{Layout::Mxfp8, 512};
  Row r(512);
  for (int d = 0; d < 32; ++d) r.set(d, 1.0);  // tile 0: amax 1 -> e = ceil(log2(fp32(1/448))) = -8
  // tile 1: non-finite
  r.set(32, kNaN); r.set(33, -kNaN); r.set(34, kInf); r.set(35, -kInf); r.set(36, p2(120)); r.set(37, 1.0);
  // tile 2: zeros -> amax floored to 1e-4 -> e = -22 (scale 105)
  // tile 3: amax 448 -> v = fp32(448 * fp32(1/448)) = 1 -> e = 0
  r.set(96, 448.0); r.set(97, -1.0); r.set(98, 3.0);
  // RoPE (dims 448..511): pair 0 = (1, 2), c .5, s .75 -> (-1, 1.75) in tile 14;
  // pair 31 = (NaN, 1), c 1, s 0 -> (NaN, NaN) in tile 15 (0 when sanitizing)
  r.set(448, 1.0); r.set(449, 2.0); r.set(510, kNaN); r.set(511, 1.0);
  r.cs[0] = 0.5f; r.cs[32] = 0.75f;
  for (bool sanitize : {false, true}) {
    CAPTURE(sanitize);
    const auto e = run(g, {r}, {5}, sanitize, 0xcc);  // page 1, row 1
    const int64_t vrow = g.page() + 512, srow = g.page() + 4 * 512 + 16;
    auto v = [&](int d) { return e.cache[static_cast<size_t>(vrow + d)]; };
    auto sc = [&](int k) { return e.cache[static_cast<size_t>(srow + k)]; };
    CHECK(sc(0) == 119);  // 127 - 8
    for (int d = 0; d < 32; ++d) CHECK(v(d) == 0x78);  // 1 * 2^8 = 256
    CHECK(sc(1) == (sanitize ? 0xFE : 0xFF));
    CHECK(v(32) == 0x7F);
    CHECK(v(33) == 0xFF);
    CHECK(v(34) == 0x7E);
    CHECK(v(35) == 0xFE);
    CHECK(v(36) == (sanitize ? 0x04 : 0x02));  // 2^120 * 2^-127 / 2^-128
    CHECK(v(37) == 0x00);
    CHECK(sc(2) == 105);
    CHECK(sc(3) == 127);
    CHECK(v(96) == 0x7E);
    CHECK(v(97) == 0xB8);
    CHECK(v(98) == 0x44);
    for (int k = 4; k < 14; ++k) CHECK(sc(k) == 105);
    CHECK(sc(14) == 119);     // amax 1.75: v = fp32(1.75 * fp32(1/448)) = 2^-8 -> e = -8
    CHECK(v(448) == 0xF8);    // -1 * 2^8 = -256
    CHECK(v(449) == 0x7E);    // 1.75 * 2^8 = 448
    CHECK(v(450) == 0x00);
    if (sanitize) {
      CHECK(sc(15) == 105);   // the NaN pair became +0: a zero tile
      CHECK(v(510) == 0x00);
      CHECK(v(511) == 0x00);
    } else {
      CHECK(sc(15) == 0xFF);
      CHECK((v(510) & 0x7F) == 0x7F);
      CHECK((v(511) & 0x7F) == 0x7F);
      CHECK(v(509) == 0x00);  // 0 * 2^-128
    }
    CHECK(e.rope_bf16.empty());
    CHECK(e.rope_fp8.empty());
    CHECK(e.written[0] == 1);
  }
}

// ============================================================================
// Nvfp4 / Nvfp4Rows
// ============================================================================

namespace {

Row nvfp4_row() {
  Row r(512);
  // tile 0: amax 6 -> t = 1 -> scale 0x38, S = 1
  r.set(0, 6.0); r.set(1, 3.0); r.set(2, -0.5); r.set(3, 0.0);
  r.set(4, 1.0); r.set(5, 1.25); r.set(6, 5.0); r.set(7, -5.5);
  // tile 1: amax 2^-8 -> t below 2^-9 -> clamps to 2^-9 (0x01)
  r.set(16, p2(-8)); r.set(17, p2(-12)); r.set(18, -p2(-12));
  // tile 2: amax 6144 -> t = 1024 -> clamps to 448 (0x7E)
  r.set(32, 6144.0); r.set(33, -3072.0); r.set(34, 1344.0); r.set(35, 224.0);
  // tile 3: zeros -> 2^-9 (0x01)
  // tile 4: non-finite
  r.set(64, kNaN); r.set(65, kInf); r.set(66, -kInf); r.set(67, 896.0); r.set(68, 1.0); r.set(69, -1.0);
  // tile 5: amax 7 -> t = fp32(7/6) -> e4m3 1.125 (0x39)
  r.set(80, 7.0); r.set(81, 1.75);
  // RoPE as in the Mxfp8 row: tile 28 holds (-1, 1.75), tile 31 the NaN pair
  r.set(448, 1.0); r.set(449, 2.0); r.set(510, kNaN); r.set(511, 1.0);
  r.cs[0] = 0.5f; r.cs[32] = 0.75f;
  return r;
}

}  // namespace

TEST_CASE("Op B: Nvfp4 record of a hand-built row") {
  const Geometry g{Layout::Nvfp4, 512};
  const Row r = nvfp4_row();
  for (bool sanitize : {false, true}) {
    CAPTURE(sanitize);
    const auto e = run(g, {r}, {5}, sanitize, 0xcc);  // page 1, row 1
    const int64_t vals = g.page() + 256, scales = g.page() + 4 * 256 + 32;
    auto v = [&](int b) { return e.cache[static_cast<size_t>(vals + b)]; };
    auto sc = [&](int k) { return e.cache[static_cast<size_t>(scales + k)]; };
    CHECK(sc(0) == 0x38);
    CHECK(v(0) == 0x57);  // 6 -> 7, 3 -> 5
    CHECK(v(1) == 0x09);  // -0.5 -> 9, 0 -> 0
    CHECK(v(2) == 0x22);  // 1 -> 2, 1.25 (tie 1 / 1.5) -> 2
    CHECK(v(3) == 0xF6);  // 5 (tie 4 / 6) -> 6, -5.5 -> 0xF
    for (int b = 4; b < 8; ++b) CHECK(v(b) == 0x00);
    CHECK(sc(1) == 0x01);
    CHECK(v(8) == 0x04);  // 2^-8 / 2^-9 = 2 -> 4; 2^-12 / 2^-9 = 1/8 -> 0
    CHECK(v(9) == 0x08);  // -1/8 -> -0 (0x8); 0 -> 0
    CHECK(sc(2) == 0x7E);
    CHECK(v(16) == 0xF7);  // 6144/448 -> 7; -3072/448 = -6.86 -> 0xF
    CHECK(v(17) == 0x15);  // 1344/448 = 3 -> 5; 224/448 = 0.5 -> 1
    CHECK(sc(3) == 0x01);
    if (sanitize) {
      CHECK(sc(4) == 0x7E);  // S = 448
      CHECK(v(32) == 0x70);  // NaN -> 0, inf -> 7
      CHECK(v(33) == 0x4F);  // -inf -> 0xF, 896/448 = 2 -> 4
      CHECK(v(34) == 0x80);  // 1/448 -> 0, -1/448 -> 0x8
    } else {
      CHECK(sc(4) == 0x7F);  // S = NaN: every q is NaN -> 0
      for (int b = 32; b < 40; ++b) CHECK(v(b) == 0x00);
    }
    CHECK(sc(5) == 0x39);
    CHECK(v(40) == 0x37);  // 7/1.125 = 6.2 -> 7; 1.75/1.125 = 1.56 -> 3
    // tile 28: (-1, 1.75): t = fp32(1.75/6) = 0.2917 -> e4m3 0.28125 (0x29);
    // -1/0.28125 = -3.56 -> 0xE, 1.75/0.28125 = 6.2 -> 7
    CHECK(sc(28) == 0x29);
    CHECK(v(224) == 0x7E);
    CHECK(sc(31) == (sanitize ? 0x01 : 0x7F));
    CHECK(v(255) == 0x00);
    for (int k : {6, 7, 20, 27, 29, 30}) CHECK(sc(k) == 0x01);
    CHECK(e.rope_bf16.empty());
  }
}

TEST_CASE("Op B: Nvfp4 and Nvfp4Rows hold the same bytes in different places") {
  const Geometry seg{Layout::Nvfp4, 512}, rows{Layout::Nvfp4Rows, 512};
  std::vector<Row> in = {nvfp4_row(), random_row(512, 7), random_row(512, 8)};
  in[2].set(100, kInf);  // a non-finite tile in a random row
  const std::vector<int64_t> slots = {5, 2, 7};
  for (RopeStyle style : {RopeStyle::GptJ, RopeStyle::NeoX})
    for (bool sanitize : {false, true}) {
      CAPTURE(sanitize);
      const auto a = run(seg, in, slots, sanitize, 0xcc, style);
      const auto b = run(rows, in, slots, sanitize, 0xcc, style);
      for (size_t t = 0; t < slots.size(); ++t) {
        CAPTURE(t);
        const int64_t page = slots[t] / 4, row = slots[t] % 4;
        const int64_t vals = page * seg.page() + row * 256;
        const int64_t scales = page * seg.page() + 4 * 256 + row * 32;
        const int64_t rec = page * rows.page() + row * 288;
        int same = 0;
        for (int i = 0; i < 256; ++i)
          same += a.cache[static_cast<size_t>(vals + i)] == b.cache[static_cast<size_t>(rec + i)];
        for (int i = 0; i < 32; ++i)
          same += a.cache[static_cast<size_t>(scales + i)] == b.cache[static_cast<size_t>(rec + 256 + i)];
        CHECK(same == 288);
      }
      CHECK(a.cache != b.cache);  // the places differ
    }
}

// ============================================================================
// Fp8DsMlaV32
// ============================================================================

TEST_CASE("Op B: Fp8DsMlaV32 record of a hand-built row") {
  const Geometry g{Layout::Fp8DsMlaV32, 576};
  Row r(576), r2(576);
  // tile 0: amax 3584 = 448 * 2^3 -> scale 2^3
  r.set(0, 3584.0); r.set(1, 1.0); r.set(2, -448.0);
  // tile 1: amax 14 = 448 * 2^-5 -> scale 2^-5
  r.set(128, 14.0);
  // tile 2: zeros -> v = 1e-4 -> 2^-13 (2^-14 < 1e-4 <= 2^-13)
  // tile 3: non-finite
  r.set(384, kNaN); r.set(385, -kInf); r.set(386, p2(120)); r.set(387, -kNaN);
  // RoPE (dims 512..575): pair 0 = (1, 2), c .5, s .75 -> (-1, 1.75); pair 31 = (NaN, 1)
  r.set(512, 1.0); r.set(513, 2.0); r.set(574, kNaN); r.set(575, 1.0);
  r.cs[0] = 0.5f; r.cs[32] = 0.75f;
  // second row: amax just above 448 -> 2^1; amax 448 * 2^-10 -> 2^-10; amax 448 * 2^-20
  // (below the 1e-4 floor) -> 2^-13; amax 1 -> fp32(1/448) in (2^-9, 2^-8] -> 2^-8
  r2.set(0, 450.0); r2.set(128, 0.4375); r2.set(256, 448.0 * p2(-20)); r2.set(384, 1.0);
  for (bool sanitize : {false, true}) {
    CAPTURE(sanitize);
    const auto e = run(g, {r, r2}, {5, 6}, sanitize, 0xcc);
    const int64_t rec = g.page() + 656, rec2 = g.page() + 2 * 656;
    auto v = [&](int d) { return e.cache[static_cast<size_t>(rec + d)]; };
    CHECK(rd32(e.cache, rec + 512) == 0x41000000u);  // 2^3
    CHECK(v(0) == 0x7E);   // 448
    CHECK(v(1) == 0x20);   // 2^-3
    CHECK(v(2) == 0xE6);   // -56
    CHECK(rd32(e.cache, rec + 516) == 0x3D000000u);  // 2^-5
    CHECK(v(128) == 0x7E);
    CHECK(rd32(e.cache, rec + 520) == 0x39000000u);  // 2^-13
    CHECK(v(256) == 0x00);
    CHECK(rd32(e.cache, rec + 524) == (sanitize ? 0x7F000000u : 0x7FC00000u));
    CHECK(v(384) == 0x7F);
    CHECK(v(385) == 0xFE);
    CHECK(v(386) == (sanitize ? 0x04 : 0x02));
    CHECK(v(387) == 0xFF);
    CHECK(v(388) == 0x00);
    CHECK(rd16(e.cache, rec + 528) == 0xBF80);  // -1
    CHECK(rd16(e.cache, rec + 530) == 0x3FE0);  // 1.75
    CHECK(rd16(e.cache, rec + 532) == 0x0000);
    if (sanitize) {
      CHECK(rd16(e.cache, rec + 528 + 2 * 62) == 0x0000);
      CHECK(rd16(e.cache, rec + 528 + 2 * 63) == 0x0000);
    } else {
      CHECK((rd16(e.cache, rec + 528 + 2 * 62) & 0x7FC0) == 0x7FC0);
      CHECK((rd16(e.cache, rec + 528 + 2 * 63) & 0x7FC0) == 0x7FC0);
    }
    REQUIRE(e.rope_bf16.size() == 128);
    for (int j = 0; j < 64; ++j) CHECK(e.rope_bf16[static_cast<size_t>(j)].byte_offset == rec + 528 + 2 * j);
    CHECK(e.rope_bf16[0].exact == -1.0);
    CHECK(e.rope_bf16[1].exact == 1.75);
    CHECK(std::isnan(e.rope_bf16[62].exact) == !sanitize);
    CHECK(rd32(e.cache, rec2 + 512) == 0x40000000u);  // 2^1
    CHECK(e.cache[static_cast<size_t>(rec2)] == 0x76);  // 450 / 2 = 225 -> 224
    CHECK(rd32(e.cache, rec2 + 516) == 0x3A800000u);  // 2^-10
    CHECK(rd32(e.cache, rec2 + 520) == 0x39000000u);  // 2^-13
    CHECK(rd32(e.cache, rec2 + 524) == 0x3B800000u);  // 2^-8
  }
}

// ============================================================================
// Placement: records of different rows do not overlap, nothing else is touched
// ============================================================================

TEST_CASE("Op B: new layouts write exactly their records, rows of a page apart") {
  for (Layout l : kNewLayouts) {
    CAPTURE(static_cast<int>(l));
    const Geometry g{l, dim_of(l)};
    const std::vector<Row> rows = {random_row(g.D, 1), random_row(g.D, 2), random_row(g.D, 3)};
    const std::vector<int64_t> slots = {1, 2, 7};  // rows 1, 2 of page 0, row 3 of page 1
    // The footprint of each record alone: bytes that differ from the poison under either of
    // two poisons.
    std::vector<std::vector<uint8_t>> mine(rows.size());
    for (size_t t = 0; t < rows.size(); ++t) {
      const auto a = run(g, {rows[t]}, {slots[t]}, false, 0xcc);
      const auto b = run(g, {rows[t]}, {slots[t]}, false, 0x33);
      mine[t].assign(g.cache_bytes(), 0);
      int64_t n = 0;
      for (size_t i = 0; i < g.cache_bytes(); ++i)
        if (a.cache[i] != 0xcc || b.cache[i] != 0x33) { mine[t][i] = 1; ++n; }
      CHECK(n == record_bytes(l, g.D));
      CHECK(a.cache.size() == g.cache_bytes());
    }
    const auto all = run(g, rows, slots, false, 0xcc);
    for (size_t i = 0; i < g.cache_bytes(); ++i) {
      const int owners = mine[0][i] + mine[1][i] + mine[2][i];
      if (owners > 1) { FAIL_CHECK("records overlap at byte " << i); break; }
      if (owners == 0 && all.cache[i] != 0xcc) { FAIL_CHECK("byte " << i << " outside the records written"); break; }
    }
    // the batch writes the same record bytes as each row alone
    for (size_t t = 0; t < rows.size(); ++t) {
      const auto a = run(g, {rows[t]}, {slots[t]}, false, 0xcc);
      int diff = 0;
      for (size_t i = 0; i < g.cache_bytes(); ++i)
        if (mine[t][i] && a.cache[i] != all.cache[i]) ++diff;
      CHECK(diff == 0);
    }
  }
}
