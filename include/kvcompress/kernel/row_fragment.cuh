// kvcompress — RowFragment: a warp's view of one row, the unit cache layouts store.
#pragma once

#include <cstdint>

#include "../arch/convert.cuh"
#include "../arch/memory.cuh"
#include "../arch/reduce.cuh"
#include "../core/array.hpp"
#include "../core/codecs.hpp"
#include "../core/types.hpp"
#include "../functor/rotary.hpp"

namespace kvc {

/// One row of HeadDim values spread over a warp: lane l holds kVecs runs of E consecutive
/// channels, run v starting at v * 32 * E + l * E — so each run is one coalesced vector
/// access across the warp. `bits` are bf16. This is the `Row` that layouts' store() gets.
template <int HeadDim, int E>
struct RowFragment {
  static constexpr int kHeadDim = HeadDim;
  static constexpr int kVecElems = E;
  static constexpr int kVecs = HeadDim / (32 * E);
  static constexpr int kChannels = HeadDim / 32;
  static_assert(kVecs * 32 * E == HeadDim, "runs must tile the row");
  using Convert = arch::HardwareE4m3;

  Array<uint16_t, kChannels> bits;
  int lane;
  bool sanitize;

  KVC_HOST_DEVICE static constexpr int run_start(int lane, int v) { return v * 32 * E + lane * E; }

  template <int Width>
  KVC_DEVICE float group_max(float x) const { return arch::group_max<Width>(x); }
  template <int Width>
  KVC_DEVICE bool group_any(bool b) const { return arch::group_any<Width>(b); }
  template <int Width>
  KVC_DEVICE uint32_t group_max_bits(uint32_t x) const { return arch::group_max_u32<Width>(x); }
  template <int N, typename T>
  KVC_DEVICE static void store_bytes(T* dst, const Array<T, N>& a) { arch::store<N>(dst, a); }
};

namespace detail {

KVC_DEVICE float load_table(const void* table, DType dtype, int64_t index) {
  return dtype == DType::kFloat32
             ? __ldg(static_cast<const float*>(table) + index)
             : bf16_to_float(__ldg(static_cast<const unsigned short*>(table) + index));
}

}  // namespace detail

/// The cos/sin values one lane needs for its RoPE channels (entries of NoPE channels are
/// unused). Loaded before the row itself, so both travel in the same memory round trip.
template <int HeadDim>
struct RopeAngles {
  Array<float, HeadDim / 32> cos, sin;
};

/// The cos/sin values one lane needs, read through `table(k)`: element k of the position's
/// cos/sin row (cosines at 0 .. RopeDim/2 - 1, sines after them).
template <int RopeDim, int HeadDim, int E, class Table>
KVC_DEVICE RopeAngles<HeadDim> rope_angles(int lane, RopeStyle style, const Table& table) {
  using Row = RowFragment<HeadDim, E>;
  constexpr int kNope = HeadDim - RopeDim;
  RopeAngles<HeadDim> a;
  KVC_PRAGMA_UNROLL
  for (int v = 0; v < Row::kVecs; ++v) {
    if ((v + 1) * 32 * E <= kNope) continue;  // no rope channel in this run for any lane
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

/// rope_angles from the cos/sin table in global memory, row `position`.
template <int RopeDim, int HeadDim, int E>
KVC_DEVICE RopeAngles<HeadDim> load_rope_angles(int lane, RopeStyle style, const void* cos_sin,
                                                DType dtype, int64_t cos_sin_stride,
                                                int64_t position) {
  const int64_t base = position * cos_sin_stride;
  return rope_angles<RopeDim, HeadDim, E>(
      lane, style, [&](int k) { return detail::load_table(cos_sin, dtype, base + k); });
}

/// Rotates the last RopeDim channels of a row fragment with preloaded angles, in fp32 from
/// the bf16 bits, and rounds back to bf16 (sanitize: NaN -> +0). Every lane of the warp
/// must call it (NeoX pairs cross lanes through shuffles).
template <RopeStyle Style, int RopeDim, int HeadDim, int E>
KVC_DEVICE void apply_rope(RowFragment<HeadDim, E>& row, const RopeAngles<HeadDim>& angles) {
  using Rope = Rotary<Style, RopeDim>;
  using Row = RowFragment<HeadDim, E>;
  constexpr int kNope = HeadDim - RopeDim;
  static_assert(kNope % E == 0 && E % 2 == 0, "runs must not straddle the rope boundary");
  constexpr int kPartnerLanes = (RopeDim / 2) / E;  // NeoX: lane distance between pair halves
  static_assert(Style == RopeStyle::kGptJ ||
                    (kPartnerLanes >= 1 && (kNope / E) % (2 * kPartnerLanes) == 0),
                "NeoX halves must map to aligned lane groups");
  KVC_PRAGMA_UNROLL
  for (int v = 0; v < Row::kVecs; ++v) {
    if ((v + 1) * 32 * E <= kNope) continue;  // no rope channel in this run for any lane
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
        float y = Rope::rotate(x[e], other[e], angles.cos[v * E + e], angles.sin[v * E + e],
                               Rope::is_first(j));
        if (row.sanitize && y != y) y = 0.f;
        row.bits[v * E + e] = arch::float_to_bf16(y);
      }
    }
  }
}

/// apply_rope with the style chosen at run time (a warp-uniform branch; one kernel
/// instance serves both styles).
template <int RopeDim, int HeadDim, int E>
KVC_DEVICE void apply_rope(RowFragment<HeadDim, E>& row, RopeStyle style,
                           const RopeAngles<HeadDim>& angles) {
  if (style == RopeStyle::kGptJ)
    apply_rope<RopeStyle::kGptJ, RopeDim>(row, angles);
  else
    apply_rope<RopeStyle::kNeoX, RopeDim>(row, angles);
}

}  // namespace kvc
