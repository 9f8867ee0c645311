// SPDX-License-Identifier: Apache-2.0
// kvcompress — RowFragment: the threads' view of one row, the unit the record writer stores.
#pragma once

#include "../config.hpp"

#include <cstdint>

#include "../arch/convert.cuh"
#include "../arch/memory.cuh"
#include "../arch/reduce.cuh"
#include "../core/array.hpp"
#include "../core/codecs.hpp"
#include "../core/types.hpp"
#include "../functor/rotary.hpp"

KVC_NAMESPACE_BEGIN

/// The threads the kernels spread one row of `head_dim` channels over: the most of 128, 64
/// and 32 that give every thread an even number of channels (128 at head dim 512: 4 each).
KVC_HOST_DEVICE constexpr int default_row_threads(int head_dim) {
  return head_dim % 256 == 0 ? 128 : head_dim % 128 == 0 ? 64 : 32;
}

/// One row of HeadDim values spread over `Threads` threads (one warp, or the whole block
/// of Threads threads): thread l (`lane`, 0 .. Threads-1) holds kVecs runs of E consecutive
/// channels, run v starting at v * Threads * E + l * E — so each run is one coalesced vector
/// access across the threads. `bits` are bf16. This is the `Row` that the record writer
/// (kernel/record_writer.cuh) and user layouts' store() get.
/// Reductions of Width <= 32 stay inside a warp (aligned lane groups); Width == Threads > 32
/// spans the block, and then every thread of the block must take part.
template <int HeadDim, int E, int Threads = 32>
struct RowFragment {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kVecElems = E;
  static constexpr int kThreads = Threads;
  static constexpr int kVecs = HeadDim / (Threads * E);
  static constexpr int kChannels = HeadDim / Threads;
  static_assert(Threads % 32 == 0, "whole warps");
  static_assert(kVecs * Threads * E == HeadDim, "runs must tile the row");
  using Convert = arch::HardwareConvert;

  Array<uint16_t, kChannels> bits;
  // The fp32 rotation of this thread's RoPE channels (after sanitize), set by apply_rope
  // next to their bf16 rounding in `bits`; formats with kFp32Rope encode these.
  Array<float, kChannels> rotated;
  int lane;  // this thread's index among the row's Threads threads
  bool sanitize;

  KVC_HOST_DEVICE static constexpr int run_start(int lane, int v) { return v * Threads * E + lane * E; }
  /// Whether any channel of run v of the warp holding `lane` is at or past `channel`
  /// (warp-uniform: lets a warp skip work that concerns other warps' channels only).
  KVC_HOST_DEVICE static constexpr bool warp_reaches(int lane, int v, int channel) {
    return run_start(lane | 31, v) + E > channel;
  }

  template <int Width>
  KVC_DEVICE float group_max(float x) const { return arch::row_max<check_width<Width>()>(x); }
  template <int Width>
  KVC_DEVICE bool group_any(bool b) const { return arch::row_any<check_width<Width>()>(b); }
  template <int Width>
  KVC_DEVICE uint32_t group_max_bits(uint32_t x) const { return arch::row_max_u32<check_width<Width>()>(x); }
  template <int N, typename T>
  KVC_DEVICE static void store_bytes(T* dst, const Array<T, N>& a) { arch::store<N>(dst, a); }

 private:
  template <int Width>
  KVC_HOST_DEVICE static constexpr int check_width() {
    static_assert((Width <= 32 && (Width & (Width - 1)) == 0) || Width == Threads,
                  "reduce over a power-of-two lane group of a warp, or over the whole row");
    return Width;
  }
};

/// The cos/sin values one thread needs for its RoPE channels of a Row (entries of NoPE
/// channels are unused; GPT-J style reads the even entry of each pair, whose two channels
/// share one frequency, and load_rope_angles sets only that one). Loaded together with the
/// row itself, so both travel in the same memory round trip.
template <class Row>
struct RopeAngles {
  Array<float, Row::kChannels> cos, sin;
};

/// The cos/sin values one thread needs, read through `table(k)`: element k of the
/// position's cos/sin row (cosines at 0 .. RopeDim/2 - 1, sines after them).
template <int RopeDim, class Row, class Table>
KVC_DEVICE RopeAngles<Row> rope_angles(int lane, RopeStyle style, const Table& table) {
  constexpr int E = Row::kVecElems;
  constexpr int kNope = Row::kHeadDim - RopeDim;
  RopeAngles<Row> a;
  KVC_PRAGMA_UNROLL
  for (int v = 0; v < Row::kVecs; ++v) {
    if ((v + 1) * Row::kThreads * E <= kNope) continue;  // no rope channel in this run at all
    const int c0 = Row::run_start(lane, v);
    if (c0 < kNope) continue;
    KVC_PRAGMA_UNROLL
    for (int e = 0; e < E; ++e) {
      const int j = c0 + e - kNope;
      const int f = style == RopeStyle::kGptJ ? Rotary<RopeStyle::kGptJ, RopeDim>::frequency(j)
                                              : Rotary<RopeStyle::kNeoX, RopeDim>::frequency(j);
      a.cos[v * E + e] = table(f);
      a.sin[v * E + e] = table(RopeDim / 2 + f);
    }
  }
  return a;
}

namespace detail {

KVC_DEVICE float table_value(const float* row, int k) { return __ldg(row + k); }
KVC_DEVICE float table_value(const unsigned short* row, int k) {
  return bf16_to_float(__ldg(row + k));
}
/// Element `index` of a table of either type, both loads predicated (no branch).
KVC_DEVICE float table_value(const void* table, DType dtype, int64_t index) {
  return dtype == DType::kFloat32
             ? __ldg(static_cast<const float*>(table) + index)
             : bf16_to_float(__ldg(static_cast<const unsigned short*>(table) + index));
}

/// The angles of a thread's RoPE channels from one cos/sin row of element type T, for one
/// style. A run of E channels starting at an E-aligned rope dim j0 has the frequencies
/// f0 + e / 2 (GPT-J) or f0 + e (NeoX, whose runs stay inside one half), so each run costs
/// one address and loads at constant offsets from it — each GPT-J frequency once.
template <RopeStyle Style, int RopeDim, class Row, typename T>
KVC_DEVICE void load_angles_from(RopeAngles<Row>& a, const T* row, int lane) {
  constexpr int E = Row::kVecElems;
  constexpr int kNope = Row::kHeadDim - RopeDim;
  constexpr int kHalf = RopeDim / 2;
  using Rope = Rotary<Style, RopeDim>;
  static_assert(kNope % E == 0 && E % 2 == 0, "runs must not straddle the rope boundary");
  constexpr bool kAffine = Style == RopeStyle::kGptJ || kHalf % E == 0;
  KVC_PRAGMA_UNROLL
  for (int v = 0; v < Row::kVecs; ++v) {
    if ((v + 1) * Row::kThreads * E <= kNope) continue;  // no rope channel in this run at all
    const int c0 = Row::run_start(lane, v);
    if (c0 < kNope) continue;
    const int j0 = c0 - kNope;
    if constexpr (kAffine) {
      const T* p = row + Rope::frequency(j0);
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; e += Style == RopeStyle::kGptJ ? 2 : 1) {
        const int df = Style == RopeStyle::kGptJ ? e / 2 : e;
        // GPT-J: the pair's even entry only. Copying the value to the odd entry as well
        // made the compiler place register moves right after these loads, so a warp
        // prefetching the next record's angles waited for them at once (bench/NOTES.md 27).
        a.cos[v * E + e] = table_value(p, df);
        a.sin[v * E + e] = table_value(p, kHalf + df);
      }
    } else {
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) {
        a.cos[v * E + e] = table_value(row, Rope::frequency(j0 + e));
        a.sin[v * E + e] = table_value(row, kHalf + Rope::frequency(j0 + e));
      }
    }
  }
}

}  // namespace detail

/// The angles a thread needs from the cos/sin table in global memory, row `position`
/// (what rope_angles reads, with the table's type and the style resolved once: uniform
/// branches, one 64-bit row address, constant offsets).
template <int RopeDim, class Row>
KVC_DEVICE RopeAngles<Row> load_rope_angles(int lane, RopeStyle style, const void* cos_sin,
                                            DType dtype, int64_t cos_sin_stride_elems, int64_t position) {
  RopeAngles<Row> a{};
  const int64_t base = position * cos_sin_stride_elems;
  if (dtype == DType::kFloat32) {
    const float* row = static_cast<const float*>(cos_sin) + base;
    if (style == RopeStyle::kGptJ)
      detail::load_angles_from<RopeStyle::kGptJ, RopeDim, Row>(a, row, lane);
    else
      detail::load_angles_from<RopeStyle::kNeoX, RopeDim, Row>(a, row, lane);
  } else {
    const unsigned short* row = static_cast<const unsigned short*>(cos_sin) + base;
    if (style == RopeStyle::kGptJ)
      detail::load_angles_from<RopeStyle::kGptJ, RopeDim, Row>(a, row, lane);
    else
      detail::load_angles_from<RopeStyle::kNeoX, RopeDim, Row>(a, row, lane);
  }
  return a;
}

/// load_rope_angles without branches: every value's address computed on its own and both
/// table types' loads issued, predicated (rope_angles through table_value). More
/// instructions, but straight-line code the compiler can interleave with other loads: the
/// fused kernels, which load the angles while a group's rows are in flight, are faster
/// with it (bench/NOTES.md 23); Op B, which loads them right after its row, is faster with
/// load_rope_angles.
template <int RopeDim, class Row>
KVC_DEVICE RopeAngles<Row> load_rope_angles_flat(int lane, RopeStyle style, const void* cos_sin,
                                                 DType dtype, int64_t cos_sin_stride_elems,
                                                 int64_t position) {
  const int64_t base = position * cos_sin_stride_elems;
  return rope_angles<RopeDim, Row>(
      lane, style, [&](int k) { return detail::table_value(cos_sin, dtype, base + k); });
}

/// Rotates the last RopeDim channels of a row fragment with preloaded angles, in fp32 from
/// the bf16 bits, and rounds back to bf16 (sanitize: NaN -> +0). Every lane of a warp that
/// holds RoPE channels must call it (NeoX pairs cross lanes through shuffles).
template <RopeStyle Style, int RopeDim, int HeadDim, int E, int Threads>
KVC_DEVICE void apply_rope(RowFragment<HeadDim, E, Threads>& row,
                           const RopeAngles<RowFragment<HeadDim, E, Threads>>& angles) {
  using Rope = Rotary<Style, RopeDim>;
  using Row = RowFragment<HeadDim, E, Threads>;
  constexpr int kNope = HeadDim - RopeDim;
  static_assert(kNope % E == 0 && E % 2 == 0, "runs must not straddle the rope boundary");
  constexpr int kPartnerLanes = (RopeDim / 2) / E;  // NeoX: lane distance between pair halves
  static_assert(Style == RopeStyle::kGptJ ||
                    (kPartnerLanes >= 1 && kPartnerLanes < 32 && (kNope / E) % (2 * kPartnerLanes) == 0),
                "NeoX halves must map to aligned lane groups of a warp");
  KVC_PRAGMA_UNROLL
  for (int v = 0; v < Row::kVecs; ++v) {
    if ((v + 1) * Threads * E <= kNope) continue;           // no rope channel in this run at all
    if (!Row::warp_reaches(row.lane, v, kNope)) continue;  // none in this warp's part of it
    const int c0 = Row::run_start(row.lane, v);
    Array<float, E> x, other;
    KVC_PRAGMA_UNROLL
    for (int e = 0; e < E; ++e) x[e] = bf16_to_float(row.bits[v * E + e]);
    KVC_PRAGMA_UNROLL
    for (int e = 0; e < E; ++e) {
      if constexpr (Style == RopeStyle::kGptJ)
        other[e] = x[e ^ 1];
      else
        other[e] = __shfl_xor_sync(0xffffffffu, x[e], kPartnerLanes);
    }
    if (c0 >= kNope) {
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) {
        const int j = c0 + e - kNope;
        // GPT-J pairs share the even entry's angle (see RopeAngles).
        const int k = Style == RopeStyle::kGptJ ? v * E + (e & ~1) : v * E + e;
        float y = Rope::rotate(x[e], other[e], angles.cos[k], angles.sin[k], Rope::is_first(j));
        if (row.sanitize && y != y) y = 0.f;
        row.rotated[v * E + e] = y;
        row.bits[v * E + e] = arch::float_to_bf16(y);
      }
    }
  }
}

/// apply_rope with the style chosen at run time (a warp-uniform branch; one kernel
/// instance serves both styles).
template <int RopeDim, class Row>
KVC_DEVICE void apply_rope(Row& row, RopeStyle style, const RopeAngles<Row>& angles) {
  if (style == RopeStyle::kGptJ)
    apply_rope<RopeStyle::kGptJ, RopeDim>(row, angles);
  else
    apply_rope<RopeStyle::kNeoX, RopeDim>(row, angles);
}

KVC_NAMESPACE_END
