// SPDX-License-Identifier: Apache-2.0
// kvcompress — the record writer: the threads of a row store its cache record (contract §2.3).
//
// Every insert path (Op B, the fused op's epilogue) ends here. For a layout made of
// segments (layout/cache.hpp RecordFormat) each thread encodes its runs of E consecutive
// channels with the segment's record codec (functor/record_codec.hpp) and stores them with
// one vector store; a tile's scale comes from an integer max over the lanes holding the
// tile (or over the whole row when a tile spans whole runs), and the thread holding the
// tile's first channel stores it. A layout with a static store() of its own (a user format,
// examples/03_custom_layout) gets the fragment instead.
#pragma once

#include "../config.hpp"

#include <cstdint>
#include <type_traits>
#include <utility>

#include "../core/array.hpp"
#include "../core/codecs.hpp"
#include "../functor/record_codec.hpp"
#include "../layout/cache.hpp"

KVC_NAMESPACE_BEGIN

namespace detail {

template <class Layout, class Row, class = void>
struct HasCustomStore : std::false_type {};
template <class Layout, class Row>
struct HasCustomStore<Layout, Row,
                      std::void_t<decltype(Layout::store(std::declval<const CacheParams&>(), int64_t{},
                                                         int64_t{}, std::declval<const Row&>()))>>
    : std::true_type {};

/// The fp32 values of run v of a thread (record_value: bf16, or the fp32 rotation).
template <class Layout, class Row>
KVC_DEVICE Array<float, Row::kVecElems> run_values(const Row& frag, int v) {
  constexpr int E = Row::kVecElems;
  const int c0 = Row::run_start(frag.lane, v);
  Array<float, E> y;
  KVC_PRAGMA_UNROLL
  for (int e = 0; e < E; ++e)
    y[e] = record_value<Layout>(c0 + e, frag.bits[v * E + e], frag.rotated[v * E + e]);
  return y;
}

template <int N>
KVC_DEVICE uint32_t max_magnitude(const Array<float, N>& y) {
  uint32_t m = 0;
  KVC_PRAGMA_UNROLL
  for (int e = 0; e < N; ++e) m = m > magnitude_bits(y[e]) ? m : magnitude_bits(y[e]);
  return m;
}

/// Encodes and stores run v of this thread in segment Seg with tile scale s.
template <class Seg, class Row, class Scale>
KVC_DEVICE void store_run(uint8_t* values, const Array<float, Row::kVecElems>& y, int c0, const Scale& s) {
  constexpr Encoding kEnc = Seg::kEncoding;
  uint8_t* dst = values + Seg::kValueOffset + (c0 - Seg::kBegin) * value_half_bytes(kEnc) / 2;
  if constexpr ((kEnc == Encoding::kE4m3Ue8m0 || kEnc == Encoding::kE4m3Pow2F32) &&
                Row::kVecElems % 4 == 0) {
    // Whole words (4-byte aligned: records are 16-aligned, runs start at multiples of E).
    const auto w = RecordCodec<kEnc>::template encode_words<typename Row::Convert>(y, s);
    Row::store_bytes(reinterpret_cast<uint32_t*>(dst), w);
  } else {
    const auto q = RecordCodec<kEnc>::template encode<typename Row::Convert>(y, s);
    Row::store_bytes(dst, q);
  }
}

template <class Layout, class Seg, class Row>
KVC_DEVICE void store_segment(const CacheParams& c, uint8_t* values, uint8_t* scales, const Row& frag) {
  constexpr Encoding kEnc = Seg::kEncoding;
  constexpr int E = Row::kVecElems;
  constexpr int kRun = Row::kThreads * E;  // channels of one run over all threads
  static_assert(Seg::kBegin % E == 0 && Seg::kEnd % E == 0,
                "a segment boundary splits a thread's run of channels");
  static_assert(Seg::kValueOffset % 16 == 0, "segment values must start 16-byte aligned");
  const int lane = frag.lane;

  if constexpr (kEnc == Encoding::kBf16 || kEnc == Encoding::kE4m3Tensor) {
    [[maybe_unused]] float inverse = 0.f;
    if constexpr (kEnc == Encoding::kE4m3Tensor) inverse = PerTensorE4m3Quantizer::inverse(*c.scale);
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Row::kVecs; ++v) {
      if (v * kRun >= Seg::kEnd || (v + 1) * kRun <= Seg::kBegin) continue;  // compile time
      const int c0 = Row::run_start(lane, v);
      if (c0 < Seg::kBegin || c0 >= Seg::kEnd) continue;
      if constexpr (kEnc == Encoding::kBf16) {
        Array<uint16_t, E> r;
        KVC_PRAGMA_UNROLL
        for (int e = 0; e < E; ++e) r[e] = frag.bits[v * E + e];
        Row::store_bytes(reinterpret_cast<uint16_t*>(values + Seg::kValueOffset) + (c0 - Seg::kBegin), r);
      } else {
        store_run<Seg, Row>(values, run_values<Layout>(frag, v), c0, inverse);
      }
    }
  } else if constexpr (Seg::kTile % kRun == 0) {
    // A tile spans whole runs: their maxima combine in the thread, then over the row.
    static_assert(Seg::kBegin % kRun == 0, "a run-spanning tile starts a run");
    using Codec = RecordCodec<kEnc>;
    constexpr int kRunsPerTile = Seg::kTile / kRun;
    KVC_PRAGMA_UNROLL
    for (int t = 0; t < Seg::kTiles; ++t) {
      const int v0 = (Seg::kBegin + t * Seg::kTile) / kRun;
      Array<Array<float, E>, kRunsPerTile> y;
      uint32_t m = 0;
      KVC_PRAGMA_UNROLL
      for (int i = 0; i < kRunsPerTile; ++i) {
        y[i] = run_values<Layout>(frag, v0 + i);
        const uint32_t mi = max_magnitude(y[i]);
        m = m > mi ? m : mi;
      }
      m = frag.template group_max_bits<Row::kThreads>(m);
      const auto s = Codec::template scale<typename Row::Convert>(m, frag.sanitize);
      if (lane == 0) Codec::put_scale(scales + Seg::kScaleOffset + t * scale_bytes(kEnc), s);
      KVC_PRAGMA_UNROLL
      for (int i = 0; i < kRunsPerTile; ++i) store_run<Seg, Row>(values, y[i], Row::run_start(lane, v0 + i), s);
    }
  } else {
    // A tile spans an aligned group of lanes inside one run.
    static_assert(kRun % Seg::kTile == 0 && Seg::kTile % E == 0 && Seg::kBegin % Seg::kTile == 0,
                  "a tile must span an aligned group of whole threads of one run");
    constexpr int kTileLanes = Seg::kTile / E;
    static_assert(kTileLanes <= 32, "a tile within a run spans at most a warp");
    using Codec = RecordCodec<kEnc>;
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Row::kVecs; ++v) {
      if (v * kRun >= Seg::kEnd || (v + 1) * kRun <= Seg::kBegin) continue;  // compile time
      // Warp-uniform: skip runs where no lane of this warp holds channels of the segment.
      if (Row::run_start(lane & ~31, v) >= Seg::kEnd || Row::run_start(lane | 31, v) + E <= Seg::kBegin) continue;
      const int c0 = Row::run_start(lane, v);
      const bool in = c0 >= Seg::kBegin && c0 < Seg::kEnd;  // the same over a tile's lanes
      const Array<float, E> y = run_values<Layout>(frag, v);
      const uint32_t m = frag.template group_max_bits<kTileLanes>(in ? max_magnitude(y) : 0u);
      if (in) {
        const auto s = Codec::template scale<typename Row::Convert>(m, frag.sanitize);
        if ((c0 - Seg::kBegin) % Seg::kTile == 0)
          Codec::put_scale(scales + Seg::kScaleOffset + (c0 - Seg::kBegin) / Seg::kTile * scale_bytes(kEnc), s);
        store_run<Seg, Row>(values, y, c0, s);
      }
    }
  }
}

}  // namespace detail

/// The segments store_record writes: all of them, or the two halves of a store split around
/// the rotation — the segments of NoPE channels only (written from the row before its RoPE
/// channels are rotated, so they need not wait for the angles), then the others.
enum class RecordPart { kAll, kNopeSegments, kOtherSegments };

namespace detail {

template <class Layout, class Seg>
KVC_HOST_DEVICE constexpr bool in_part(RecordPart part) {
  return part == RecordPart::kAll || ((Seg::kEnd <= Layout::kNopeDim) == (part == RecordPart::kNopeSegments));
}

template <class Layout, RecordPart Part, class Row, class... Segs>
KVC_DEVICE void store_segments(SegmentList<Segs...>, const CacheParams& c, uint8_t* values,
                               uint8_t* scales, const Row& frag) {
  if constexpr (Part == RecordPart::kAll)
    (store_segment<Layout, Segs>(c, values, scales, frag), ...);
  else
    (store_segments<Layout, RecordPart::kAll>(
         std::conditional_t<in_part<Layout, Segs>(Part), SegmentList<Segs>, SegmentList<>>{}, c,
         values, scales, frag),
     ...);
}

}  // namespace detail

/// Stores the record of (page, row) from the row's threads (every one of them calls it: the
/// tile reductions shuffle, and with more than a warp per row synchronize the block). Part:
/// which segments (RecordPart); a layout with its own store() writes everything with the
/// part that is not kNopeSegments.
template <class Layout, RecordPart Part = RecordPart::kAll, class Row>
KVC_DEVICE void store_record(const CacheParams& c, int64_t page, int64_t row, const Row& frag) {
  if constexpr (detail::HasCustomStore<Layout, Row>::value) {
    if constexpr (Part != RecordPart::kNopeSegments) Layout::store(c, page, row, frag);
  } else {
    static_assert(Row::kHeadDim == Layout::kHeadDim, "row width must match the layout");
    uint8_t* base = static_cast<uint8_t*>(c.data);
    uint8_t* values = base + Layout::value_offset(c, page, row);
    uint8_t* scales = base + Layout::scale_offset(c, page, row);
    detail::store_segments<Layout, Part>(typename Layout::Segments{}, c, values, scales, frag);
    if constexpr (Part != RecordPart::kNopeSegments && !Layout::ByteMap::kUsesRowStride &&
                  Layout::kScaleUsed < Layout::ByteMap::kScaleBytes) {
      if (frag.lane == 0) {
        KVC_PRAGMA_UNROLL
        for (int i = Layout::kScaleUsed; i < Layout::ByteMap::kScaleBytes; ++i) scales[i] = 0;
      }
    }
  }
}

KVC_NAMESPACE_END
