// SPDX-License-Identifier: Apache-2.0
// Device tier: random Op B problems and the byte-for-byte comparison of a cache image
// against the float64 reference.
#pragma once

#include <kvcompress/kvcompress.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "device_util.cuh"
#include "reference/reference.hpp"

namespace kvctest {

inline kvcref::Layout ref_layout(kvc::CacheLayout l) {
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

/// Cache geometry of a layout as vLLM pads it (padded): fp8_ds_mla pages rounded up to 576
/// bytes, mxfp8 and nvfp4 pages to 512; row layouts with a padded row stride. Unpadded: the
/// smallest page the layout accepts.
struct CacheShape {
  int block_size = 64;
  int64_t page_stride = 0, row_stride = 0;
  int64_t pages = 0;
};

inline CacheShape cache_shape(kvc::CacheLayout layout, int head_dim, int block_size, int64_t pages,
                              bool padded) {
  CacheShape s;
  s.block_size = block_size;
  s.pages = pages;
  const auto round_up = [](int64_t v, int64_t m) { return (v + m - 1) / m * m; };
  if (layout == kvc::CacheLayout::kFp8DsMla) {
    const int64_t page = int64_t{block_size} * kvc::Fp8DsMlaLayout::kRecordBytes;
    s.page_stride = padded ? round_up(page, 576) : round_up(page, 16);
  } else if (layout == kvc::CacheLayout::kMxfp8) {
    const int64_t page = int64_t{block_size} * kvc::Mxfp8Layout::kRecordBytes;
    s.page_stride = padded ? round_up(page, 512) : round_up(page, 16);
  } else if (layout == kvc::CacheLayout::kNvfp4) {
    const int64_t page = int64_t{block_size} * kvc::Nvfp4Layout::kRecordBytes;
    s.page_stride = padded ? round_up(page, 512) : round_up(page, 256);
  } else {
    const int64_t record = layout == kvc::CacheLayout::kBf16Rows     ? 2 * head_dim
                           : layout == kvc::CacheLayout::kNvfp4Rows   ? kvc::Nvfp4RowsLayout::kRecordBytes
                           : layout == kvc::CacheLayout::kFp8DsMlaV32 ? kvc::Fp8DsMlaV32Layout::kRecordBytes
                                                                      : head_dim;
    s.row_stride = record + (padded ? 32 : 0);
    s.page_stride = s.row_stride * block_size + (padded ? 48 : 0);
  }
  return s;
}

/// Random bf16 latent rows whose 64-dim tiles span many magnitudes (many scale codes),
/// with some tiles at exact power-of-two amax, some all-zero, some tiny.
inline std::vector<uint16_t> random_latent(std::mt19937_64& rng, int64_t rows, int head_dim,
                                           int64_t stride, double nonfinite_rate) {
  std::vector<uint16_t> out(static_cast<size_t>(rows * stride));
  for (auto& b : out) b = static_cast<uint16_t>(rng());  // poison padding with garbage
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::uniform_int_distribution<int> scale_exp(-28, 14), kind(0, 15);
  for (int64_t t = 0; t < rows; ++t) {
    uint16_t* row = &out[static_cast<size_t>(t * stride)];
    for (int tile = 0; tile < head_dim / 64; ++tile) {
      const int k = kind(rng);
      const double scale = std::ldexp(1.0, scale_exp(rng));
      for (int j = 0; j < 64; ++j) {
        double x = u(rng) * scale;
        if (k == 0) x = 0.0;
        row[tile * 64 + j] = kvcref::bf16_round(x);
      }
      if (k == 1) row[tile * 64 + (rng() % 64)] = kvcref::bf16_round(448.0 * scale);  // exact 2^n amax
      if (k == 2) row[tile * 64 + (rng() % 64)] = kvcref::bf16_round(-448.0 * scale);
    }
    if (nonfinite_rate > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < nonfinite_rate) {
      const uint16_t specials[] = {0x7fc0, 0xffc0, 0x7f80, 0xff80};
      row[rng() % head_dim] = specials[rng() % 4];
    }
  }
  return out;
}

/// cos/sin table [rows, 64] for angles position * theta_i, as fp32 values (and the bf16
/// bits when the table is bf16; the reference then gets the bf16 values).
struct RopeTable {
  std::vector<float> values;     // what the reference sees
  std::vector<uint16_t> bf16;    // device table when bf16
  int64_t rows = 0, stride = 64;
};

inline RopeTable rope_table(int64_t rows, bool bf16) {
  RopeTable t;
  t.rows = rows;
  t.values.resize(static_cast<size_t>(rows * 64));
  for (int64_t p = 0; p < rows; ++p)
    for (int i = 0; i < 32; ++i) {
      const double theta = std::pow(10000.0, -2.0 * i / 64.0);
      t.values[p * 64 + i] = static_cast<float>(std::cos(p * theta));
      t.values[p * 64 + 32 + i] = static_cast<float>(std::sin(p * theta));
    }
  if (bf16) {
    t.bf16.resize(t.values.size());
    for (size_t i = 0; i < t.values.size(); ++i) {
      t.bf16[i] = kvcref::bf16_from_float(t.values[i]);
      t.values[i] = static_cast<float>(kvcref::bf16_to_double(t.bf16[i]));
    }
  }
  return t;
}

/// Consecutive positions for `requests` chunks of random length starting at random
/// (odd and even) positions; returns positions of T tokens.
inline std::vector<int64_t> random_positions(std::mt19937_64& rng, int64_t tokens, int64_t max_start,
                                             int max_chunk = 300) {
  std::vector<int64_t> pos(static_cast<size_t>(tokens));
  int64_t t = 0;
  while (t < tokens) {
    const int64_t len =
        std::min<int64_t>(tokens - t, 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(max_chunk)));
    const int64_t start = static_cast<int64_t>(rng() % static_cast<uint64_t>(max_start));
    for (int64_t i = 0; i < len; ++i) pos[static_cast<size_t>(t + i)] = start + i;
    t += len;
  }
  return pos;
}

/// Compares a downloaded cache image with the reference: RoPE bf16 within 1 ulp of the
/// float64 value, plain-fp8 RoPE within 1 code, every other byte bit-exact (a NaN e4m3
/// code matches either sign when `nan_any_sign`). Reports the first mismatch only.
inline void check_cache(const std::vector<uint8_t>& got, const kvcref::InsertExpected& want,
                        bool nan_any_sign, const char* what) {
  REQUIRE(got.size() == want.cache.size());
  std::vector<uint8_t> tolerance(got.size(), 0);
  for (const auto& r : want.rope_bf16) {
    const size_t o = static_cast<size_t>(r.byte_offset);
    tolerance[o] = tolerance[o + 1] = 1;
    const uint16_t bits = static_cast<uint16_t>(got[o] | (got[o + 1] << 8));
    const double value = kvcref::bf16_to_double(bits);
    const bool ok = std::isnan(r.exact)   ? std::isnan(value)
                    : std::isinf(r.exact) ? value == r.exact
                                          : std::fabs(value - r.exact) <= kvcref::bf16_ulp(r.exact);
    if (!ok) FAIL(what, ": RoPE bf16 at byte ", o, " is ", value, " (", hex(bits), "), float64 ", r.exact);
  }
  for (const auto& r : want.rope_fp8) {
    const size_t o = static_cast<size_t>(r.byte_offset);
    tolerance[o] = 2;
    if (kvcref::e4m3_code_distance(got[o], r.code) > 1)
      FAIL(what, ": fp8 RoPE at byte ", o, " is ", hex(got[o]), ", reference ", hex(r.code));
  }
  for (size_t o = 0; o < got.size(); ++o) {
    if (tolerance[o] || got[o] == want.cache[o]) continue;
    const bool both_nan = nan_any_sign && (got[o] & 0x7f) == 0x7f && (want.cache[o] & 0x7f) == 0x7f;
    if (!both_nan) FAIL(what, ": byte ", o, " is ", hex(got[o]), ", expected ", hex(want.cache[o]));
  }
}

/// The head dim a layout is tested at: its own when fixed (V3.2: 576), else `head_dim`.
inline int layout_head_dim(kvc::CacheLayout layout, int head_dim) {
  return layout == kvc::CacheLayout::kFp8DsMlaV32 ? 576 : head_dim;
}

/// Op B through kvc::insert, or for head dim 576 (not in the default head-dim list) through
/// the instance template of V3.2's layout at ratios 1, 2 and 4. A template, so that a test
/// file that does not call it does not compile kvc::insert's instances (test_instances.hpp).
template <class Unused = void>
kvc::Status insert_any(const kvc::InsertParams& p, cudaStream_t stream) {
  if (p.head_dim != 576) return kvc::insert(p, stream);
  switch (p.ratio) {
    case 1: return kvc::launch_insert<1, 576, kvc::Fp8DsMlaV32Layout>(p, stream);
    case 2: return kvc::launch_insert<2, 576, kvc::Fp8DsMlaV32Layout>(p, stream);
    case 4: return kvc::launch_insert<4, 576, kvc::Fp8DsMlaV32Layout>(p, stream);
  }
  return kvc::Status::not_supported("test: head dim 576 at ratios 1, 2, 4 only");
}

}  // namespace kvctest
