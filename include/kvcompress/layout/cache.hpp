// SPDX-License-Identifier: Apache-2.0
// kvcompress — cache record formats as types: byte maps and segments (contract §2.3).
//
// A record format is one struct built from three parts, all host-compilable:
//   - a byte map: where record `row` of page `page` keeps its value bytes and its scale
//     bytes (SegregatedPage: all value rows of a page, then all scale rows; RowRecords:
//     one record after the other, values and scales inside the record);
//   - segments: the record's channels in runs encoded alike (Segment<Encoding, Begin, End,
//     Tile, ValueOffset, ScaleOffset>), each with its value bytes at ValueOffset of the
//     record's values and, for tiled encodings, one scale per Tile channels at ScaleOffset
//     of its scales;
//   - whether the RoPE channels are encoded from the fp32 rotation (kFp32Rope) or from its
//     bf16 rounding.
// The record codecs (functor/record_codec.hpp) encode a row by these segments, on the host
// for a whole row and in the kernels' one record writer (kernel/record_writer.cuh). A new
// built-in format is one struct here plus one line of KVC_BUILTIN_LAYOUTS below:
//
//   struct Mxfp8Layout : RecordFormat<Mxfp8Layout, 512, 64, SegregatedPage<512, 16>, true,
//                                     Segment<Encoding::kE4m3Ue8m0, 0, 512, 32, 0, 0>> {
//     static constexpr const char* kName = "mxfp8";
//   };
//
// A user format the segments cannot describe brings its own warp writer instead (a static
// `store(c, page, row, frag)`; see examples/03_custom_layout), with kHeadDim, kRopeDim,
// kName, min_page_bytes and check as below.
#pragma once

#include "../config.hpp"

#include <cstdint>
#include <cstdio>
#include <string>

#include "../core/status.hpp"

KVC_NAMESPACE_BEGIN

/// Runtime description of the cache a layout writes into.
struct CacheParams {
  void* data = nullptr;           // base of page 0
  int block_size = 64;            // B: records per page
  int64_t page_stride_bytes = 0;  // bytes between pages
  int64_t row_stride_bytes = 0;   // bytes between records of a page (RowRecords formats)
  int64_t num_pages = -1;         // when >= 0, slots >= num_pages * block_size are skipped
  const float* scale = nullptr;   // [1] fp32 per-tensor scale (Encoding::kE4m3Tensor), device memory
};

// ---------------------------------------------------------------------------------------
// Encodings of a segment's channels (the codecs are in functor/record_codec.hpp).

enum class Encoding {
  kBf16,          // the bf16 bits as they are, 2 bytes a channel, no scale
  kE4m3Ue8m0,     // e4m3, one UE8M0 byte per tile: 2^e, e = ceil(log2(max(amax, 1e-4) * (1/448)))
  kE4m3Pow2F32,   // e4m3, one fp32 power of two per tile: 2^ceil(log2(max(amax / 448, 1e-4)))
  kE2m1E4m3,      // e2m1 pairs (low nibble first), one e4m3 byte per tile: e4m3(clamp(amax / 6))
  kE4m3Tensor,    // e4m3 times 1 / CacheParams::scale, no stored scale
};

/// Bytes a channel's value takes, times two (e2m1 packs two channels in a byte).
KVC_HOST_DEVICE constexpr int value_half_bytes(Encoding e) {
  return e == Encoding::kBf16 ? 4 : e == Encoding::kE2m1E4m3 ? 1 : 2;
}
/// Bytes of one tile's stored scale (0: the encoding stores none).
KVC_HOST_DEVICE constexpr int scale_bytes(Encoding e) {
  return e == Encoding::kE4m3Ue8m0 || e == Encoding::kE2m1E4m3 ? 1
         : e == Encoding::kE4m3Pow2F32                          ? 4
                                                                : 0;
}

/// Channels [Begin, End) of a record encoded as Enc: channel k's value at byte
/// ValueOffset + (k - Begin) * value bytes of the record's values; tile t (Tile channels
/// from Begin + t * Tile) has its scale at ScaleOffset + t * scale bytes of its scales.
template <Encoding Enc, int Begin, int End, int Tile = End - Begin, int ValueOffset = 0,
          int ScaleOffset = 0>
struct Segment {
  static constexpr Encoding kEncoding = Enc;
  static constexpr int kBegin = Begin, kEnd = End, kTile = Tile;
  static constexpr int kValueOffset = ValueOffset, kScaleOffset = ScaleOffset;
  static constexpr int kTiles = (End - Begin) / Tile;
  static constexpr int kValueBytes = (End - Begin) * value_half_bytes(Enc) / 2;
  static constexpr int kScaleBytes = kTiles * scale_bytes(Enc);
  static_assert(0 <= Begin && Begin < End, "a segment holds channels");
  static_assert(Tile > 0 && (End - Begin) % Tile == 0, "tiles must cover the segment");
  static_assert(Enc != Encoding::kE2m1E4m3 || (Begin % 2 == 0 && Tile % 2 == 0),
                "e2m1 pairs start on even channels");
};

template <class... S>
struct SegmentList {};

// ---------------------------------------------------------------------------------------
// Byte maps.

namespace detail {
inline Status layout_invalid(const char* name, const std::string& what) {
  return Status::invalid(std::string(name) + what);
}
}  // namespace detail

/// All value rows of a page, then all scale rows (FlashMLA / vLLM's paged formats):
///   [B * ValueBytes values: record r at r * ValueBytes][B * ScaleBytes scales: r at
///   B * ValueBytes + r * ScaleBytes]; page stride >= B * (ValueBytes + ScaleBytes), a
///   multiple of PageAlign. The row stride is not used.
template <int ValueBytes, int ScaleBytes, int PageAlign = 16>
struct SegregatedPage {
  static constexpr int kValueBytes = ValueBytes, kScaleBytes = ScaleBytes;
  static constexpr int kRecordBytes = ValueBytes + ScaleBytes;
  static constexpr int kPageAlign = PageAlign;
  static constexpr bool kUsesRowStride = false;
  static constexpr int kValueRoom = ValueBytes, kScaleRoom = ScaleBytes;  // segment offsets' range
  static_assert(ValueBytes % 16 == 0 && PageAlign % 16 == 0, "16-byte aligned value rows");

  KVC_HOST_DEVICE static int64_t value_offset(const CacheParams& c, int64_t page, int64_t row) {
    return page * c.page_stride_bytes + row * ValueBytes;
  }
  KVC_HOST_DEVICE static int64_t scale_offset(const CacheParams& c, int64_t page, int64_t row) {
    return page * c.page_stride_bytes + int64_t{c.block_size} * ValueBytes + row * ScaleBytes;
  }
  static int64_t min_page_bytes(int block_size, int64_t /*row_stride_bytes*/) {
    return int64_t{block_size} * kRecordBytes;
  }
  static Status check(const CacheParams& c, const char* name) {
    if (c.page_stride_bytes % PageAlign != 0)
      return detail::layout_invalid(name, " page stride " + std::to_string(c.page_stride_bytes) +
                                              " bytes is not a multiple of " +
                                              std::to_string(PageAlign));
    return Status::success();
  }
};

/// One record after the other: record r of a page at page * page stride + r * row stride,
/// its values at byte 0 of the record and its scales at byte 0 as well (segments place
/// them apart by their offsets). Row and page strides multiples of 16, row stride >= the
/// record.
template <int RecordBytes>
struct RowRecords {
  static constexpr int kRecordBytes = RecordBytes;
  static constexpr int kScaleBytes = 0;  // no scale row of its own
  static constexpr bool kUsesRowStride = true;
  static constexpr int kValueRoom = RecordBytes, kScaleRoom = RecordBytes;  // both inside the record

  KVC_HOST_DEVICE static int64_t value_offset(const CacheParams& c, int64_t page, int64_t row) {
    return page * c.page_stride_bytes + row * c.row_stride_bytes;
  }
  KVC_HOST_DEVICE static int64_t scale_offset(const CacheParams& c, int64_t page, int64_t row) {
    return value_offset(c, page, row);
  }
  static int64_t min_page_bytes(int block_size, int64_t row_stride_bytes) {
    return (int64_t{block_size} - 1) * row_stride_bytes + RecordBytes;
  }
  static Status check(const CacheParams& c, const char* name) {
    if (c.row_stride_bytes < RecordBytes)
      return detail::layout_invalid(name, ": row stride " + std::to_string(c.row_stride_bytes) +
                                              " bytes is smaller than a record, " +
                                              std::to_string(RecordBytes));
    if (c.row_stride_bytes % 16 != 0 || c.page_stride_bytes % 16 != 0)
      return detail::layout_invalid(name, ": row stride " + std::to_string(c.row_stride_bytes) +
                                              " and page stride " +
                                              std::to_string(c.page_stride_bytes) +
                                              " bytes must be multiples of 16");
    return Status::success();
  }
};

// ---------------------------------------------------------------------------------------
// RecordFormat: a byte map and segments make a layout (the members the launch layer and
// the record writer use). Derived supplies kName.

namespace detail {
template <int Next, class... S>
struct SegmentsTile;
template <int Next>
struct SegmentsTile<Next> {
  static constexpr int kEnd = Next;
};
template <int Next, class S, class... Rest>
struct SegmentsTile<Next, S, Rest...> {
  static_assert(S::kBegin == Next, "segments must cover the row in order, without gaps");
  static constexpr int kEnd = SegmentsTile<S::kEnd, Rest...>::kEnd;
};
template <class S, class Map>
constexpr bool segment_fits() {
  constexpr int value_room = Map::kValueRoom, scale_room = Map::kScaleRoom;
  return S::kValueOffset + S::kValueBytes <= value_room &&
         (S::kScaleBytes == 0 || S::kScaleOffset + S::kScaleBytes <= scale_room);
}
}  // namespace detail

template <class Derived, int HeadDim, int RopeDim, class Map, bool Fp32Rope, class... Segs>
struct RecordFormat {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kRopeDim = RopeDim;
  static constexpr int kNopeDim = HeadDim - RopeDim;
  static constexpr int kRecordBytes = Map::kRecordBytes;
  /// RoPE channels encoded from the fp32 rotation (else from its bf16 rounding).
  static constexpr bool kFp32Rope = Fp32Rope;
  /// Scale-row bytes after the last segment's scales, written as zeros (SegregatedPage).
  static constexpr int kScaleUsed = [] {
    int used = 0;
    ((used = Segs::kScaleBytes && Segs::kScaleOffset + Segs::kScaleBytes > used
                 ? Segs::kScaleOffset + Segs::kScaleBytes
                 : used),
     ...);
    return used;
  }();
  static constexpr bool kNeedsTensorScale = ((Segs::kEncoding == Encoding::kE4m3Tensor) || ...);
  using ByteMap = Map;
  using Segments = SegmentList<Segs...>;
  static_assert(detail::SegmentsTile<0, Segs...>::kEnd == HeadDim, "segments must cover the row");
  static_assert((detail::segment_fits<Segs, Map>() && ...), "a segment's bytes lie outside the record");
  static_assert(Map::kUsesRowStride || kScaleUsed <= Map::kScaleBytes, "scales outside the scale row");

  static int64_t min_page_bytes(int block_size, int64_t row_stride_bytes) {
    return Map::min_page_bytes(block_size, row_stride_bytes);
  }
  static Status check(const CacheParams& c) {
    if constexpr (kNeedsTensorScale) {
      if (c.scale == nullptr) return detail::layout_invalid(Derived::kName, ": scale is null");
      if (reinterpret_cast<std::uintptr_t>(c.scale) % alignof(float) != 0) {
        char address[32];
        std::snprintf(address, sizeof address, "%p", static_cast<const void*>(c.scale));
        return detail::layout_invalid(Derived::kName, std::string(": scale address ") + address +
                                                          " is not aligned to " +
                                                          std::to_string(alignof(float)) + " bytes");
      }
    }
    return Map::check(c, Derived::kName);
  }
  KVC_HOST_DEVICE static int64_t value_offset(const CacheParams& c, int64_t page, int64_t row) {
    return Map::value_offset(c, page, row);
  }
  KVC_HOST_DEVICE static int64_t scale_offset(const CacheParams& c, int64_t page, int64_t row) {
    return Map::scale_offset(c, page, row);
  }
  /// Byte offset of a record (RowRecords: values and scales inside it).
  KVC_HOST_DEVICE static int64_t record_offset(const CacheParams& c, int64_t page, int64_t row) {
    return Map::value_offset(c, page, row);
  }
};

// ---------------------------------------------------------------------------------------
// The built-in formats.

/// DeepSeek V4 "fp8_ds_mla": 584 bytes per token, head dim 512, rope dim 64.
///   [0, B*576)            value rows; record r at r*576:
///                           [0, 448)   e4m3 NoPE values, dims 0..447
///                           [448, 576) 64 bf16 RoPE values (little-endian), dims 448..511
///   [B*576, B*576 + B*8)  scale rows; record r at B*576 + r*8:
///                           [0, 7)     UE8M0 scale codes of NoPE tiles 0..6 (64 dims each)
///                           [7]        0
/// vLLM pads the page stride to a multiple of 576.
struct Fp8DsMlaLayout
    : RecordFormat<Fp8DsMlaLayout, 512, 64, SegregatedPage<576, 8>, false,
                   Segment<Encoding::kE4m3Ue8m0, 0, 448, 64, 0, 0>,
                   Segment<Encoding::kBf16, 448, 512, 64, 448>> {
  static constexpr const char* kName = "fp8_ds_mla";
  static constexpr int kTile = 64;
  static constexpr int kTiles = kNopeDim / kTile;
  static constexpr int kValueBytes = 576;
  static constexpr int kScaleBytes = 8;
};
static_assert(Fp8DsMlaLayout::kRecordBytes == 584 && Fp8DsMlaLayout::kTiles == 7, "fp8_ds_mla byte map");

/// Plain bf16 rows: record = HeadDim bf16 values [NoPE | RoPE], NoPE the latent's bits,
/// RoPE rotated.
template <int HeadDim = 512, int RopeDim = 64>
struct Bf16RowsLayout : RecordFormat<Bf16RowsLayout<HeadDim, RopeDim>, HeadDim, RopeDim,
                                     RowRecords<2 * HeadDim>, false,
                                     Segment<Encoding::kBf16, 0, HeadDim>> {
  static constexpr const char* kName = "bf16_rows";
};

/// Plain e4m3 rows with one fp32 scale for the tensor: record = HeadDim e4m3 bytes,
/// value = e4m3_satfinite(float(bf16 row) * (1/scale)).
template <int HeadDim = 512, int RopeDim = 64>
struct Fp8RowsLayout : RecordFormat<Fp8RowsLayout<HeadDim, RopeDim>, HeadDim, RopeDim,
                                    RowRecords<HeadDim>, false,
                                    Segment<Encoding::kE4m3Tensor, 0, HeadDim>> {
  static constexpr const char* kName = "fp8_rows";
};

/// MXFP8, 528 bytes per token (DeepSeek V4.1's sliding window and fp8 compressed cache):
///   [0, B*512)             value rows; record r at r*512: 512 e4m3 values, every dim
///                          (RoPE dims from the fp32 rotation)
///   [B*512, B*512 + B*16)  scale rows; record r at B*512 + r*16: UE8M0 codes of the 16
///                          tiles of 32 dims
/// vLLM pads the page stride to a multiple of 512.
struct Mxfp8Layout : RecordFormat<Mxfp8Layout, 512, 64, SegregatedPage<512, 16>, true,
                                  Segment<Encoding::kE4m3Ue8m0, 0, 512, 32, 0, 0>> {
  static constexpr const char* kName = "mxfp8";
};
static_assert(Mxfp8Layout::kRecordBytes == 528, "mxfp8 byte map");

/// NVFP4, 288 bytes per token, page-segregated (upstream vLLM and FlashMLA):
///   [0, B*256)             value rows; record r at r*256: byte j = e2m1(dim 2j) |
///                          e2m1(dim 2j+1) << 4, every dim (RoPE from the fp32 rotation)
///   [B*256, B*256 + B*32)  scale rows; record r at B*256 + r*32: e4m3 scales of the 32
///                          tiles of 16 dims
/// Page stride a multiple of 256 (vLLM: ceil(B*288/512)*512).
struct Nvfp4Layout : RecordFormat<Nvfp4Layout, 512, 64, SegregatedPage<256, 32, 256>, true,
                                  Segment<Encoding::kE2m1E4m3, 0, 512, 16, 0, 0>> {
  static constexpr const char* kName = "nvfp4";
};
static_assert(Nvfp4Layout::kRecordBytes == 288, "nvfp4 byte map");

/// NVFP4, 288-byte rows: record = [256 packed e2m1 bytes][32 e4m3 tile scales], the same
/// bytes as Nvfp4Layout in one row (row stride >= 288).
struct Nvfp4RowsLayout : RecordFormat<Nvfp4RowsLayout, 512, 64, RowRecords<288>, true,
                                      Segment<Encoding::kE2m1E4m3, 0, 512, 16, 0, 256>> {
  static constexpr const char* kName = "nvfp4_rows";
};

/// DeepSeek V3.2 "fp8_ds_mla", 656 bytes per token, head dim 576 (512 NoPE + 64 RoPE),
/// one record per row (row stride >= 656):
///   [0, 512)    e4m3 NoPE values, 4 tiles of 128
///   [512, 528)  4 fp32 tile scales (powers of two), little-endian
///   [528, 656)  64 bf16 RoPE values
struct Fp8DsMlaV32Layout
    : RecordFormat<Fp8DsMlaV32Layout, 576, 64, RowRecords<656>, false,
                   Segment<Encoding::kE4m3Pow2F32, 0, 512, 128, 0, 512>,
                   Segment<Encoding::kBf16, 512, 576, 64, 528>> {
  static constexpr const char* kName = "fp8_ds_mla_v32";
};

// ---------------------------------------------------------------------------------------
// The one list of built-in layouts: X(enumerator, layout type at head dim D). It makes the
// runtime enum, the names, the dispatch (launch/dispatch.hpp) and kBuiltinLayouts, which the
// tests, the bench and the torch package iterate. The type may use D (it may hold commas:
// X takes it as __VA_ARGS__). A format with a fixed head dim dispatches
// only at that head dim.
#define KVC_BUILTIN_LAYOUTS(X)                 \
  X(kFp8DsMla, ::kvc::Fp8DsMlaLayout)          \
  X(kBf16Rows, ::kvc::Bf16RowsLayout<D, 64>)   \
  X(kFp8Rows, ::kvc::Fp8RowsLayout<D, 64>)     \
  X(kMxfp8, ::kvc::Mxfp8Layout)                \
  X(kNvfp4, ::kvc::Nvfp4Layout)                \
  X(kNvfp4Rows, ::kvc::Nvfp4RowsLayout)        \
  X(kFp8DsMlaV32, ::kvc::Fp8DsMlaV32Layout)

/// Runtime names of the built-in layouts.
enum class CacheLayout {
#define KVC_LAYOUT_ENUM(name, ...) name,
  KVC_BUILTIN_LAYOUTS(KVC_LAYOUT_ENUM)
#undef KVC_LAYOUT_ENUM
};

/// The built-in layout type of `Layout` at head dim D (for formats whose head dim is a
/// parameter; fixed formats ignore D).
template <CacheLayout Layout, int D>
struct BuiltinLayout;
#define KVC_LAYOUT_TYPE(name, ...)              \
  template <int D>                              \
  struct BuiltinLayout<CacheLayout::name, D> {  \
    using type = __VA_ARGS__;                   \
  };
KVC_BUILTIN_LAYOUTS(KVC_LAYOUT_TYPE)
#undef KVC_LAYOUT_TYPE

/// Every built-in layout, in list order (CacheLayout values).
inline constexpr CacheLayout kBuiltinLayouts[] = {
#define KVC_LAYOUT_VALUE(name, ...) CacheLayout::name,
    KVC_BUILTIN_LAYOUTS(KVC_LAYOUT_VALUE)
#undef KVC_LAYOUT_VALUE
};

inline const char* cache_layout_name(CacheLayout l) {
  switch (l) {
#define KVC_LAYOUT_NAME(name, ...) \
  case CacheLayout::name: return BuiltinLayout<CacheLayout::name, 512>::type::kName;
    KVC_BUILTIN_LAYOUTS(KVC_LAYOUT_NAME)
#undef KVC_LAYOUT_NAME
  }
  return "unknown";
}

/// Whether the built-in layout holds rows of head dim `head_dim` (formats with a fixed head
/// dim hold only theirs).
template <CacheLayout Layout, int D>
inline constexpr bool kLayoutHoldsHeadDim = BuiltinLayout<Layout, D>::type::kHeadDim == D;

KVC_NAMESPACE_END
