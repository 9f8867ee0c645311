// SPDX-License-Identifier: Apache-2.0
// Host tier: the record codecs (functor/record_codec.hpp, kvc::encode_record) against the
// independent float64 reference for every built-in format, whole rows at a time; the
// byte maps of the new formats; the e2m1 encoder's every decision.
#include <doctest/doctest.h>

#include <kvcompress/functor/record_codec.hpp>
#include <kvcompress/functor/rotary.hpp>
#include <kvcompress/launch/insert.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "reference/reference.hpp"

namespace {

kvcref::Layout ref_layout(kvc::CacheLayout l) {
  switch (l) {
    case kvc::CacheLayout::kFp8DsMla: return kvcref::Layout::Fp8DsMla;
    case kvc::CacheLayout::kBf16Rows: return kvcref::Layout::Bf16Rows;
    case kvc::CacheLayout::kFp8Rows: return kvcref::Layout::Fp8Rows;
    case kvc::CacheLayout::kMxfp8: return kvcref::Layout::Mxfp8;
    case kvc::CacheLayout::kNvfp4: return kvcref::Layout::Nvfp4;
    case kvc::CacheLayout::kNvfp4Rows: return kvcref::Layout::Nvfp4Rows;
    case kvc::CacheLayout::kFp8DsMlaV32: return kvcref::Layout::Fp8DsMlaV32;
  }
  return kvcref::Layout::Fp8DsMla;
}

/// Random bf16 rows whose 16-dim tiles span many magnitudes: all-zero tiles, tiles far below
/// NVFP4's smallest scale (2^-9 * 6) and far above its largest (448 * 6), exact
/// power-of-two amax, and (when asked) NaN / +-inf.
std::vector<uint16_t> random_rows(std::mt19937_64& rng, int rows, int D, bool nonfinite) {
  std::vector<uint16_t> out(static_cast<size_t>(rows) * D);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::uniform_int_distribution<int> expo(-30, 16), kind(0, 11);
  for (int t = 0; t < rows; ++t)
    for (int tile = 0; tile < D / 16; ++tile) {
      const int k = kind(rng);
      const double scale = std::ldexp(1.0, expo(rng));
      for (int j = 0; j < 16; ++j) {
        double x = k == 0 ? 0.0 : u(rng) * scale;
        if (k == 1 && j == 3) x = scale;           // amax exactly 2^n
        if (k == 2 && j == 5) x = -6.0 * scale;    // amax 6 * 2^n: an exact NVFP4 scale
        if (k == 3 && j == 7) x = 448.0 * scale;   // amax 448 * 2^n: an exact V3.2 scale
        out[static_cast<size_t>(t) * D + tile * 16 + j] = kvcref::bf16_round(x);
      }
    }
  if (nonfinite) {
    const uint16_t specials[] = {0x7fc0, 0xffc0, 0x7f80, 0xff80};
    for (int t = 0; t < rows; ++t)
      if (t % 3 == 0) out[static_cast<size_t>(t) * D + rng() % D] = specials[rng() % 4];
  }
  return out;
}

std::vector<float> cos_sin_table(int rows) {
  std::vector<float> t(static_cast<size_t>(rows) * 64);
  for (int p = 0; p < rows; ++p)
    for (int i = 0; i < 32; ++i) {
      const double theta = std::pow(10000.0, -2.0 * i / 64.0);
      t[static_cast<size_t>(p) * 64 + i] = static_cast<float>(std::cos(p * theta));
      t[static_cast<size_t>(p) * 64 + 32 + i] = static_cast<float>(std::sin(p * theta));
    }
  return t;
}

struct Geometry {
  int block_size;
  int64_t page_stride, row_stride, pages;
};

template <class Layout>
Geometry geometry(kvc::CacheLayout l, int B, int pages) {
  const kvcref::Layout r = ref_layout(l);
  Geometry g{B, 0, 0, pages};
  if (Layout::ByteMap::kUsesRowStride) {
    g.row_stride = (Layout::kRecordBytes + 15) / 16 * 16 + 16;  // padded rows
    g.page_stride = g.row_stride * B + 32;
  } else {
    g.page_stride = kvcref::vllm_page_stride(r, B, Layout::kHeadDim);  // vLLM's padded pages
  }
  return g;
}

/// One format: T tokens at ratio 1 (each writes a record) into a poisoned cache, the library
/// codec on the host (rotation by kvc::Rotary in fp32, as the kernels do) against the float64
/// reference; RoPE bf16 within one ulp of the exact rotation, every other byte exact (a NaN
/// e4m3 code of either sign matches a NaN).
template <class Layout>
void check_format(kvc::CacheLayout l, kvc::RopeStyle style, bool nonfinite, bool sanitize, uint64_t seed) {
  constexpr int D = Layout::kHeadDim, P = Layout::kRopeDim, N = D - P;
  INFO(Layout::kName, style == kvc::RopeStyle::kGptJ ? " gptj" : " neox", nonfinite ? " nonfinite" : "",
       sanitize ? " sanitize" : "", " seed ", seed);
  std::mt19937_64 rng(seed);
  const int T = 300, B = 16;
  const Geometry g = geometry<Layout>(l, B, T / B + 2);
  std::vector<uint16_t> rows = random_rows(rng, T, D, nonfinite);
  std::vector<int64_t> positions(T), slots(g.pages * B);
  for (int t = 0; t < T; ++t) positions[t] = static_cast<int64_t>(rng() % 1000);
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = static_cast<int64_t>(i);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(T);
  const std::vector<float> table = cos_sin_table(1000);
  std::vector<uint8_t> init(static_cast<size_t>(g.pages * g.page_stride));
  for (auto& b : init) b = static_cast<uint8_t>(rng());
  const float tensor_scale = 0.0371f;

  kvcref::InsertInputs in;
  in.head_dim = D;
  in.rope_dim = P;
  in.ratio = 1;
  in.rope_style = style == kvc::RopeStyle::kGptJ ? kvcref::RopeStyle::GptJ : kvcref::RopeStyle::NeoX;
  in.num_tokens = T;
  in.latent = rows.data();
  in.latent_stride_elems = D;
  in.positions = positions.data();
  in.slot = slots.data();
  in.cos_sin = table.data();
  in.cos_sin_stride_elems = 64;
  in.layout = ref_layout(l);
  in.block_size = B;
  in.page_stride_bytes = g.page_stride;
  in.row_stride_bytes = g.row_stride;
  in.fp8_scale = tensor_scale;
  in.sanitize = sanitize;
  const kvcref::InsertExpected want = kvcref::insert_reference(in, init);

  std::vector<uint8_t> got = init;
  kvc::CacheParams c;
  c.data = got.data();
  c.block_size = B;
  c.page_stride_bytes = g.page_stride;
  c.row_stride_bytes = g.row_stride;
  c.scale = &tensor_scale;
  REQUIRE(Layout::check(c).ok());
  REQUIRE(Layout::min_page_bytes(B, g.row_stride) <= g.page_stride);
  for (int t = 0; t < T; ++t) {
    std::vector<uint16_t> bits(rows.begin() + t * D, rows.begin() + (t + 1) * D);
    std::vector<float> x(D), rot(P);
    for (int d = 0; d < D; ++d) x[d] = kvc::bf16_to_float(bits[d]);
    const float* cs = &table[static_cast<size_t>(positions[t]) * 64];
    for (int j = 0; j < P; ++j) {
      const bool gptj = style == kvc::RopeStyle::kGptJ;
      const int f = gptj ? kvc::Rotary<kvc::RopeStyle::kGptJ, 64>::frequency(j)
                         : kvc::Rotary<kvc::RopeStyle::kNeoX, 64>::frequency(j);
      const int partner = gptj ? kvc::Rotary<kvc::RopeStyle::kGptJ, 64>::partner(j)
                               : kvc::Rotary<kvc::RopeStyle::kNeoX, 64>::partner(j);
      const bool first = gptj ? kvc::Rotary<kvc::RopeStyle::kGptJ, 64>::is_first(j)
                              : kvc::Rotary<kvc::RopeStyle::kNeoX, 64>::is_first(j);
      float y = kvc::Rotary<kvc::RopeStyle::kGptJ, 64>::rotate(x[N + j], x[N + partner], cs[f], cs[32 + f], first);
      if (sanitize && y != y) y = 0.f;
      rot[j] = y;
    }
    for (int j = 0; j < P; ++j) bits[N + j] = kvc::float_to_bf16(rot[j]);
    kvc::encode_record<Layout>(c, slots[t] / B, slots[t] % B, bits.data(), rot.data(), sanitize);
  }

  std::vector<uint8_t> tolerance(got.size(), 0);
  for (const auto& r : want.rope_bf16) {
    const size_t o = static_cast<size_t>(r.byte_offset);
    tolerance[o] = tolerance[o + 1] = 1;
    const double v = kvcref::bf16_to_double(static_cast<uint16_t>(got[o] | (got[o + 1] << 8)));
    const bool ok = std::isnan(r.exact) ? std::isnan(v)
                    : std::isinf(r.exact) ? v == r.exact
                                          : std::fabs(v - r.exact) <= kvcref::bf16_ulp(r.exact);
    if (!ok) FAIL("RoPE bf16 at byte ", o, " is ", v, ", float64 ", r.exact);
  }
  for (const auto& r : want.rope_fp8) {
    const size_t o = static_cast<size_t>(r.byte_offset);
    tolerance[o] = 1;
    if (kvcref::e4m3_code_distance(got[o], r.code) > 1) FAIL("fp8 RoPE at byte ", o);
  }
  const bool e4m3_values = l != kvc::CacheLayout::kNvfp4 && l != kvc::CacheLayout::kNvfp4Rows;
  int64_t changed = 0;
  for (size_t o = 0; o < got.size(); ++o) {
    changed += got[o] != init[o];
    if (tolerance[o] || got[o] == want.cache[o]) continue;
    const bool both_nan = e4m3_values && nonfinite && (got[o] & 0x7f) == 0x7f && (want.cache[o] & 0x7f) == 0x7f;
    if (!both_nan) FAIL("byte ", o, " is ", int(got[o]), ", reference ", int(want.cache[o]));
  }
  CHECK(changed > T * Layout::kRecordBytes / 2);
}

template <class Layout>
void check_all(kvc::CacheLayout l, uint64_t seed) {
  for (auto style : {kvc::RopeStyle::kGptJ, kvc::RopeStyle::kNeoX})
    for (bool nonfinite : {false, true})
      for (bool sanitize : {false, true}) check_format<Layout>(l, style, nonfinite, sanitize, seed++);
}

}  // namespace

TEST_CASE("record codecs on whole rows equal the float64 reference, every built-in format") {
  check_all<kvc::Fp8DsMlaLayout>(kvc::CacheLayout::kFp8DsMla, 100);
  check_all<kvc::Bf16RowsLayout<512, 64>>(kvc::CacheLayout::kBf16Rows, 200);
  check_all<kvc::Fp8RowsLayout<512, 64>>(kvc::CacheLayout::kFp8Rows, 300);
  check_all<kvc::Mxfp8Layout>(kvc::CacheLayout::kMxfp8, 400);
  check_all<kvc::Nvfp4Layout>(kvc::CacheLayout::kNvfp4, 500);
  check_all<kvc::Nvfp4RowsLayout>(kvc::CacheLayout::kNvfp4Rows, 600);
  check_all<kvc::Fp8DsMlaV32Layout>(kvc::CacheLayout::kFp8DsMlaV32, 700);
}

TEST_CASE("e2m1 encoder: every midpoint, its float neighbours, saturation, signs, NaN") {
  const float mags[] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  for (int i = 0; i < 8; ++i) {
    CHECK(kvc::float_to_e2m1(mags[i]) == i);
    CHECK(kvc::float_to_e2m1(-mags[i]) == (0x8 | i));
    CHECK(kvc::e2m1_to_float(static_cast<uint8_t>(i)) == mags[i]);
    CHECK(kvc::e2m1_to_float(static_cast<uint8_t>(0x8 | i)) == -mags[i]);
  }
  for (int i = 0; i < 7; ++i) {
    const float mid = 0.5f * (mags[i] + mags[i + 1]);
    const int even = i % 2 == 0 ? i : i + 1;
    INFO("midpoint ", mid);
    CHECK(kvc::float_to_e2m1(mid) == even);
    CHECK(kvc::float_to_e2m1(-mid) == (0x8 | even));
    CHECK(kvc::float_to_e2m1(std::nextafter(mid, 0.f)) == i);
    CHECK(kvc::float_to_e2m1(std::nextafter(mid, 100.f)) == i + 1);
    // The reference agrees at the midpoint and on both sides.
    for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 100.f), -mid})
      CHECK(kvc::float_to_e2m1(x) == kvcref::e2m1_rne_satfinite(x));
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {6.f, 6.5f, 7.f, 1e30f, inf}) {
    CHECK(kvc::float_to_e2m1(x) == 0x7);
    CHECK(kvc::float_to_e2m1(-x) == 0xf);
  }
  CHECK(kvc::float_to_e2m1(std::numeric_limits<float>::quiet_NaN()) == 0x0);
  CHECK(kvc::float_to_e2m1(-std::numeric_limits<float>::quiet_NaN()) == 0x0);
  CHECK(kvc::float_to_e2m1(-0.f) == 0x8);
  CHECK(kvc::float_to_e2m1(-0.1f) == 0x8);
  CHECK(kvc::float_to_e2m1(std::numeric_limits<float>::denorm_min()) == 0x0);
  CHECK(kvc::float2_to_e2m1x2(1.f, -6.f) == 0xf2);  // low nibble = first
  // A dense sweep against the reference.
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = (static_cast<uint32_t>(rng()) & 0x8fffffffu) | 0x3c000000u;
    float x;
    std::memcpy(&x, &u, 4);
    if (kvc::float_to_e2m1(x) != kvcref::e2m1_rne_satfinite(x)) FAIL("e2m1 of ", x);
  }
}

TEST_CASE("NVFP4 quotient: reciprocal and one fma correction equal IEEE division, every scale") {
  using Codec = kvc::RecordCodec<kvc::Encoding::kE2m1E4m3>;
  const auto bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  // The values e2m1 decides on (codes and midpoints) times every positive finite e4m3 scale,
  // and 400 floats either side of each, both signs: bit-equal to x / S (host IEEE).
  const float marks[] = {0.25f, 0.5f, 0.75f, 1.f, 1.25f, 1.5f, 1.75f, 2.f,
                         2.5f,  3.f,  3.5f,  4.f, 5.f,   6.f,  7.f,   8.f};
  std::mt19937_64 rng(17);
  int64_t checked = 0;
  for (int c = 1; c <= 0x7e; ++c) {
    const float S = kvc::e4m3_to_float(static_cast<uint8_t>(c));
    const Codec::Scale s{S, kvc::div_rn(1.0f, S), true, static_cast<uint8_t>(c)};
    CHECK(s.reciprocal == 1.0f / S);
    for (float m : marks) {
      float x = m * S;  // exact: few significant bits
      for (int k = 0; k < 400; ++k) x = std::nextafter(x, 0.f);
      for (int k = 0; k < 801; ++k, x = std::nextafter(x, 1e30f)) {
        for (float v : {x, -x}) {
          if (bits(Codec::quotient(v, s)) != bits(v / S)) FAIL("quotient of ", v, " by ", S);
          ++checked;
        }
      }
    }
    // Random magnitudes around the scale, 2^-40 .. 2^40 of it (quotients in the normal range).
    std::uniform_real_distribution<float> unit(1.f, 2.f);
    std::uniform_int_distribution<int> exponent(-40, 40);
    for (int i = 0; i < 2000; ++i) {
      const float v = std::ldexp(unit(rng), exponent(rng)) * S * (rng() & 1 ? 1.f : -1.f);
      if (bits(Codec::quotient(v, s)) != bits(v / S)) FAIL("quotient of ", v, " by ", S);
      ++checked;
    }
    // Signed zeros keep their sign.
    CHECK(bits(Codec::quotient(-0.f, s)) == bits(-0.f / S));
    CHECK(bits(Codec::quotient(0.f, s)) == 0u);
  }
  // A tile's values never exceed its amax, whose scale is >= min(amax / 6.4, 448): the
  // largest quotient is the largest float over 448, which does not overflow.
  const Codec::Scale big = Codec::scale<kvc::SoftwareConvert>(bits(std::numeric_limits<float>::max()), false);
  CHECK(big.code == 0x7e);
  CHECK(bits(Codec::quotient(-std::numeric_limits<float>::max(), big)) ==
        bits(-std::numeric_limits<float>::max() / 448.f));
  CHECK(checked > 126 * 16 * 1600);
  // A non-finite tile divides: an infinity over the sanitized scale 448 stays infinite.
  const Codec::Scale sanitized = Codec::scale<kvc::SoftwareConvert>(0x7f800000u, true);
  CHECK(!sanitized.finite);
  CHECK(sanitized.code == 0x7e);
  CHECK(Codec::quotient(-std::numeric_limits<float>::infinity(), sanitized) ==
        -std::numeric_limits<float>::infinity());
  CHECK(Codec::scale<kvc::SoftwareConvert>(bits(3.0f), false).finite);
}

TEST_CASE("new byte maps: offsets, sizes, vLLM's page strides, checks with messages") {
  for (int B : {1, 16, 64}) {
    kvc::CacheParams c;
    c.block_size = B;
    c.page_stride_bytes = (int64_t{B} * 528 + 511) / 512 * 512;  // vLLM: ceil(B*528/512)*512
    CHECK(kvc::Mxfp8Layout::check(c).ok());
    CHECK(kvc::Mxfp8Layout::min_page_bytes(B, 0) == int64_t{B} * 528);
    CHECK(kvc::Mxfp8Layout::value_offset(c, 3, B - 1) == 3 * c.page_stride_bytes + (B - 1) * 512);
    CHECK(kvc::Mxfp8Layout::scale_offset(c, 3, B - 1) == 3 * c.page_stride_bytes + B * 512 + (B - 1) * 16);
    c.page_stride_bytes = (int64_t{B} * 288 + 511) / 512 * 512;  // vLLM: ceil(B*288/512)*512
    CHECK(kvc::Nvfp4Layout::check(c).ok());
    CHECK(kvc::Nvfp4Layout::value_offset(c, 2, 1) == 2 * c.page_stride_bytes + 256);
    CHECK(kvc::Nvfp4Layout::scale_offset(c, 2, 1) == 2 * c.page_stride_bytes + B * 256 + 32);
    CHECK(c.page_stride_bytes == kvcref::vllm_page_stride(kvcref::Layout::Nvfp4, B));
  }
  kvc::CacheParams c;
  c.block_size = 64;
  c.page_stride_bytes = 64 * 288 + 16;  // a multiple of 16, not of 256
  CHECK(std::string(kvc::Nvfp4Layout::check(c).message()) ==
        "nvfp4 page stride 18448 bytes is not a multiple of 256");
  c.row_stride_bytes = 288;
  c.page_stride_bytes = 64 * 288;
  CHECK(kvc::Nvfp4RowsLayout::check(c).ok());
  CHECK(kvc::Nvfp4RowsLayout::record_offset(c, 1, 2) == 64 * 288 + 2 * 288);
  c.row_stride_bytes = 272;
  CHECK(std::string(kvc::Nvfp4RowsLayout::check(c).message()) ==
        "nvfp4_rows: row stride 272 bytes is smaller than a record, 288");
  c.row_stride_bytes = 656;
  c.page_stride_bytes = 64 * 656;
  CHECK(kvc::Fp8DsMlaV32Layout::check(c).ok());
  CHECK(kvc::Fp8DsMlaV32Layout::kHeadDim == 576);
  CHECK(kvc::Fp8DsMlaV32Layout::min_page_bytes(64, 656) == 64 * 656);
  c.row_stride_bytes = 664;
  CHECK(std::string(kvc::Fp8DsMlaV32Layout::check(c).message()) ==
        "fp8_ds_mla_v32: row stride 664 and page stride 41984 bytes must be multiples of 16");
  // Sizes the reference and the library agree on.
  CHECK(kvc::Mxfp8Layout::kRecordBytes == kvcref::record_bytes(kvcref::Layout::Mxfp8, 512));
  CHECK(kvc::Nvfp4Layout::kRecordBytes == kvcref::record_bytes(kvcref::Layout::Nvfp4, 512));
  CHECK(kvc::Nvfp4RowsLayout::kRecordBytes == kvcref::record_bytes(kvcref::Layout::Nvfp4Rows, 512));
  CHECK(kvc::Fp8DsMlaV32Layout::kRecordBytes == kvcref::record_bytes(kvcref::Layout::Fp8DsMlaV32, 576));
  // Every name in the list, in order.
  const char* names[] = {"fp8_ds_mla", "bf16_rows", "fp8_rows", "mxfp8", "nvfp4", "nvfp4_rows", "fp8_ds_mla_v32"};
  int i = 0;
  for (auto l : kvc::kBuiltinLayouts) CHECK(std::string(kvc::cache_layout_name(l)) == names[i++]);
  CHECK(i == 7);
}

TEST_CASE("insert validation of the new formats: head dim and page checks through insert_can_implement") {
  kvc::InsertParams p;
  p.ratio = 2;
  p.head_dim = 512;
  p.num_tokens = 4;
  static uint16_t latent[4 * 512];
  static int64_t idx[4];
  alignas(16) static uint8_t cache[64 * 656];
  static float table[64];
  p.latent = reinterpret_cast<const kvc::bf16_t*>(latent);
  p.latent_stride_elems = 512;
  p.positions = {idx, kvc::IndexType::kInt64};
  p.record.cos_sin = table;
  p.record.cos_sin_stride_elems = 64;
  p.record.cos_sin_rows = 1;
  p.record.cache_slot = {idx, kvc::IndexType::kInt64};
  p.record.cache.data = cache;
  p.record.cache.block_size = 64;
  p.record.cache.page_stride_bytes = 64 * 528;
  p.record.layout = kvc::CacheLayout::kMxfp8;
  CHECK(kvc::insert_can_implement(p).ok());
  p.record.cache.page_stride_bytes = 64 * 528 - 16;
  CHECK(std::string(kvc::insert_can_implement(p).message()) ==
        "mxfp8 page stride 33776 bytes is smaller than the page, 33792 bytes");
  p.record.layout = kvc::CacheLayout::kFp8DsMlaV32;
  CHECK(kvc::insert_can_implement(p).code() == kvc::StatusCode::kNotSupported);
}

TEST_CASE("e4m3 codecs: encode_words stores exactly the bytes of encode") {
  // The kernels store e4m3 runs as little-endian 32-bit words (record_writer.cuh store_run);
  // the bytes must be encode()'s, in order, for every value and scale.
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<float> unit(-1.f, 1.f);
  std::uniform_int_distribution<int> exponent(-30, 30);
  const auto check_codec = [&](auto codec_tag, auto make_scale) {
    using Codec = decltype(codec_tag);
    for (int trial = 0; trial < 4000; ++trial) {
      kvc::Array<float, 8> y;
      for (int i = 0; i < 8; ++i) {
        y[i] = std::ldexp(unit(rng), exponent(rng));
        if (rng() % 97 == 0) y[i] = std::numeric_limits<float>::quiet_NaN();
        if (rng() % 97 == 0) y[i] = -std::numeric_limits<float>::infinity();
      }
      uint32_t amax = 0;
      for (int i = 0; i < 8; ++i) amax = std::max(amax, kvc::magnitude_bits(y[i]));
      const auto s = make_scale(amax, (trial & 1) != 0);
      const auto bytes = Codec::template encode<kvc::SoftwareConvert>(y, s);
      const auto words = Codec::template encode_words<kvc::SoftwareConvert>(y, s);
      static_assert(sizeof bytes == sizeof words, "same size");
      REQUIRE(std::memcmp(&bytes, &words, sizeof bytes) == 0);
    }
  };
  using Ue8m0 = kvc::RecordCodec<kvc::Encoding::kE4m3Ue8m0>;
  using Pow2 = kvc::RecordCodec<kvc::Encoding::kE4m3Pow2F32>;
  check_codec(Ue8m0{}, [](uint32_t m, bool san) { return Ue8m0::scale<kvc::SoftwareConvert>(m, san); });
  check_codec(Pow2{}, [](uint32_t m, bool san) { return Pow2::scale<kvc::SoftwareConvert>(m, san); });
}
