// SPDX-License-Identifier: Apache-2.0
// kvcompress — compressed KV cache layouts: byte maps as types (contract §2.3).
//
// A layout is one struct. The insert kernels give it a row fragment (the warp's view of
// one record: bf16 bits of the row to store, RoPE already rotated) and a cache address;
// it writes the record. To add a layout, write a struct with the same members
// (see examples/03_custom_layout):
//
//   struct MyLayout {
//     static constexpr int kHeadDim = 512, kRopeDim = 64;
//     static constexpr const char* kName = "my_layout";
//     // Smallest page stride in bytes for `block_size` records of `row_stride_bytes` bytes.
//     static int64_t min_page_bytes(int block_size, int64_t row_stride_bytes);
//     // Layout-specific checks of the cache parameters (alignment, strides).
//     static Status check(const CacheParams& cache);
//     // Writes the record of `row` in `page`. Row is the kernel's fragment type (below).
//     template <class Row> KVC_DEVICE static void store(const CacheParams&, int64_t page,
//                                                       int64_t row, const Row& frag);
//   };
//
// The Row fragment a layout receives (kernel/row_fragment.cuh): `bits` holds kChannels
// bf16 values of this lane, in kVecs runs of kVecElems consecutive channels; run v starts
// at channel `Row::run_start(lane, v)`; `frag.lane`; `frag.sanitize`; warp helpers
// `frag.template group_max<Width>(x)` / `group_any<Width>(b)` / `group_max_bits<Width>(u)`
// (unsigned max) over aligned lane groups; `Row::Convert::convert(float) -> e4m3` and
// `convert2(a, b)` -> two e4m3 bytes, low = a (hardware on the device).
#pragma once

#include "../config.hpp"

#include <cstdint>
#include <cstdio>
#include <string>

#include "../core/codecs.hpp"
#include "../core/status.hpp"
#include "../functor/quantize.hpp"

KVC_NAMESPACE_BEGIN

/// Runtime description of the cache a layout writes into.
struct CacheParams {
  void* data = nullptr;       // base of page 0
  int block_size = 64;        // B: records per page
  int64_t page_stride_bytes = 0;  // bytes between pages
  int64_t row_stride_bytes = 0;   // bytes between records of a page (row layouts)
  int64_t num_pages = -1;     // when >= 0, slots >= num_pages * block_size are skipped
  const float* scale = nullptr;  // [1] fp32 per-tensor scale (Fp8RowsLayout), device memory
};

/// DeepSeek V4 "fp8_ds_mla": 584 bytes per token, head dim 512, rope dim 64.
///
/// Page byte map (B = block_size records, page stride >= B * 584, vLLM pads it to a
/// multiple of 576):
///   [0, B*576)            value rows; record r at r*576:
///                           [0, 448)   e4m3 NoPE values, dims 0..447
///                           [448, 576) 64 bf16 RoPE values (little-endian), dims 448..511
///   [B*576, B*576 + B*8)  scale rows; record r at B*576 + r*8:
///                           [0, 7)     UE8M0 scale codes of NoPE tiles 0..6 (64 dims each)
///                           [7]        0
struct Fp8DsMlaLayout {
  static constexpr int kHeadDim = 512;
  static constexpr int kRopeDim = 64;
  static constexpr int kNopeDim = kHeadDim - kRopeDim;
  static constexpr int kTile = 64;
  static constexpr int kTiles = kNopeDim / kTile;
  static constexpr int kValueBytes = kNopeDim + 2 * kRopeDim;  // 576
  static constexpr int kScaleBytes = 8;
  static constexpr int kRecordBytes = kValueBytes + kScaleBytes;
  static_assert(kValueBytes == 576 && kTiles == 7 && kRecordBytes == 584, "fp8_ds_mla byte map");
  static constexpr const char* kName = "fp8_ds_mla";
  using Quantizer = Ue8m0TileQuantizer<kTile>;

  KVC_HOST_DEVICE static int64_t value_offset(const CacheParams& c, int64_t page, int64_t row) {
    return page * c.page_stride_bytes + row * kValueBytes;
  }
  KVC_HOST_DEVICE static int64_t scale_offset(const CacheParams& c, int64_t page, int64_t row) {
    return page * c.page_stride_bytes + int64_t{c.block_size} * kValueBytes + row * kScaleBytes;
  }
  static int64_t min_page_bytes(int block_size, int64_t /*row_stride_bytes*/) {
    return int64_t{block_size} * kRecordBytes;
  }
  static Status check(const CacheParams& c) {
    if (c.page_stride_bytes % 16 != 0)
      return Status::invalid("fp8_ds_mla page stride " + std::to_string(c.page_stride_bytes) +
                             " bytes is not a multiple of 16");
    return Status::success();
  }

  template <class Row>
  KVC_DEVICE static void store(const CacheParams& c, int64_t page, int64_t row, const Row& frag) {
    static_assert(Row::kHeadDim == kHeadDim, "fp8_ds_mla holds 512-dim rows");
    constexpr int E = Row::kVecElems;
    constexpr int kTileLanes = kTile / E;  // lanes sharing one tile within a run
    static_assert(kTile % E == 0 && kTileLanes <= 32, "a tile spans whole lanes");
    uint8_t* values = static_cast<uint8_t*>(c.data) + value_offset(c, page, row);
    uint8_t* scales = static_cast<uint8_t*>(c.data) + scale_offset(c, page, row);
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Row::kVecs; ++v) {
      const int c0 = Row::run_start(frag.lane, v);
      // The tile's amax and non-finite flag in one integer reduction: bf16 magnitudes order
      // like their bit patterns, infinity and NaN above every finite value. Tile reductions
      // shuffle across the warp, so every lane takes part (a run may mix NoPE and RoPE
      // lanes); RoPE lanes ignore the result. Runs never straddle the NoPE/RoPE boundary
      // (448 is a multiple of every run width).
      uint32_t magnitude = 0;
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) {
        const uint32_t m = uint32_t{frag.bits[v * E + e]} & 0x7fffu;
        magnitude = m > magnitude ? m : magnitude;
      }
      magnitude = frag.template group_max_bits<kTileLanes>(magnitude);
      if (c0 < kNopeDim) {
        const bool bad = magnitude >= 0x7f80u;
        const float amax = bf16_to_float(static_cast<uint16_t>(magnitude));
        const int exponent = Quantizer::exponent(amax, bad, frag.sanitize);
        const float scale = exp2i(-exponent);
        Array<uint8_t, E> q;
        static_assert(E % 2 == 0, "e4m3 pairs");
        KVC_PRAGMA_UNROLL
        for (int e = 0; e < E; e += 2) {
          const uint16_t pair = Row::Convert::convert2(bf16_to_float(frag.bits[v * E + e]) * scale,
                                                       bf16_to_float(frag.bits[v * E + e + 1]) * scale);
          q[e] = static_cast<uint8_t>(pair & 0xffu);
          q[e + 1] = static_cast<uint8_t>(pair >> 8);
        }
        Row::store_bytes(values + c0, q);
        if (c0 % kTile == 0) {
          scales[c0 / kTile] = Quantizer::scale_code(exponent);
          if (c0 / kTile == kTiles - 1) scales[kTiles] = 0;
        }
      } else {
        Array<uint16_t, E> r;
        KVC_PRAGMA_UNROLL
        for (int e = 0; e < E; ++e) r[e] = frag.bits[v * E + e];
        Row::store_bytes(reinterpret_cast<uint16_t*>(values + kNopeDim) + (c0 - kNopeDim), r);
      }
    }
  }
};

/// Plain bf16 rows: record = HeadDim bf16 values [NoPE | RoPE] at
/// page * page_stride_bytes + row * row_stride_bytes bytes. NoPE are the latent's bits; RoPE rotated.
template <int HeadDim = 512, int RopeDim = 64>
struct Bf16RowsLayout {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kRopeDim = RopeDim;
  static constexpr int kRecordBytes = 2 * HeadDim;
  static constexpr const char* kName = "bf16_rows";

  KVC_HOST_DEVICE static int64_t record_offset(const CacheParams& c, int64_t page, int64_t row) {
    return page * c.page_stride_bytes + row * c.row_stride_bytes;
  }
  static int64_t min_page_bytes(int block_size, int64_t row_stride_bytes) {
    return (int64_t{block_size} - 1) * row_stride_bytes + kRecordBytes;
  }
  static Status check(const CacheParams& c) {
    if (c.row_stride_bytes < kRecordBytes)
      return Status::invalid("bf16 rows: row stride " + std::to_string(c.row_stride_bytes) +
                             " bytes is smaller than a record, " + std::to_string(kRecordBytes));
    if (c.row_stride_bytes % 16 != 0 || c.page_stride_bytes % 16 != 0)
      return Status::invalid("bf16 rows: row stride " + std::to_string(c.row_stride_bytes) +
                             " and page stride " + std::to_string(c.page_stride_bytes) +
                             " bytes must be multiples of 16");
    return Status::success();
  }

  template <class Row>
  KVC_DEVICE static void store(const CacheParams& c, int64_t page, int64_t row, const Row& frag) {
    static_assert(Row::kHeadDim == kHeadDim, "row width must match the layout");
    constexpr int E = Row::kVecElems;
    uint16_t* dst = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(c.data) +
                                                record_offset(c, page, row));
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Row::kVecs; ++v) {
      Array<uint16_t, E> r;
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) r[e] = frag.bits[v * E + e];
      Row::store_bytes(dst + Row::run_start(frag.lane, v), r);
    }
  }
};

/// Plain e4m3 rows with one fp32 scale for the tensor: record = HeadDim e4m3 bytes at
/// page * page_stride_bytes + row * row_stride_bytes; value = e4m3_satfinite(float(bf16 row) * (1/scale)).
template <int HeadDim = 512, int RopeDim = 64>
struct Fp8RowsLayout {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kRopeDim = RopeDim;
  static constexpr int kRecordBytes = HeadDim;
  static constexpr const char* kName = "fp8_rows";

  KVC_HOST_DEVICE static int64_t record_offset(const CacheParams& c, int64_t page, int64_t row) {
    return page * c.page_stride_bytes + row * c.row_stride_bytes;
  }
  static int64_t min_page_bytes(int block_size, int64_t row_stride_bytes) {
    return (int64_t{block_size} - 1) * row_stride_bytes + kRecordBytes;
  }
  static Status check(const CacheParams& c) {
    if (c.scale == nullptr) return Status::invalid("fp8 rows: scale is null");
    if (reinterpret_cast<std::uintptr_t>(c.scale) % alignof(float) != 0) {
      char address[32];
      std::snprintf(address, sizeof address, "%p", static_cast<const void*>(c.scale));
      return Status::invalid(std::string("fp8 rows: scale address ") + address +
                             " is not aligned to " + std::to_string(alignof(float)) + " bytes");
    }
    if (c.row_stride_bytes < kRecordBytes)
      return Status::invalid("fp8 rows: row stride " + std::to_string(c.row_stride_bytes) +
                             " bytes is smaller than a record, " + std::to_string(kRecordBytes));
    if (c.row_stride_bytes % 16 != 0 || c.page_stride_bytes % 16 != 0)
      return Status::invalid("fp8 rows: row stride " + std::to_string(c.row_stride_bytes) +
                             " and page stride " + std::to_string(c.page_stride_bytes) +
                             " bytes must be multiples of 16");
    return Status::success();
  }

  template <class Row>
  KVC_DEVICE static void store(const CacheParams& c, int64_t page, int64_t row, const Row& frag) {
    static_assert(Row::kHeadDim == kHeadDim, "row width must match the layout");
    constexpr int E = Row::kVecElems;
    const float inverse = PerTensorE4m3Quantizer::inverse(*c.scale);
    uint8_t* dst = static_cast<uint8_t*>(c.data) + record_offset(c, page, row);
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Row::kVecs; ++v) {
      Array<uint8_t, E> q;
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e)
        q[e] = PerTensorE4m3Quantizer::quantize<typename Row::Convert>(
            bf16_to_float(frag.bits[v * E + e]), inverse);
      Row::store_bytes(dst + Row::run_start(frag.lane, v), q);
    }
  }
};

/// Runtime names of the layouts the host API dispatches to.
enum class CacheLayout { kFp8DsMla, kBf16Rows, kFp8Rows };

inline const char* cache_layout_name(CacheLayout l) {
  switch (l) {
    case CacheLayout::kFp8DsMla: return Fp8DsMlaLayout::kName;
    case CacheLayout::kBf16Rows: return "bf16_rows";
    case CacheLayout::kFp8Rows: return "fp8_rows";
  }
  return "unknown";
}

KVC_NAMESPACE_END
