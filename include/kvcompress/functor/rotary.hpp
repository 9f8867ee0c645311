// SPDX-License-Identifier: Apache-2.0
// kvcompress — Rotary: rotary position embedding on the last RopeDim dims of a row (contract §2.2).
#pragma once

#include "../config.hpp"

#include <cmath>

#include "../core/array.hpp"

KVC_NAMESPACE_BEGIN

/// How the rope dims pair up. GPT-J (DeepSeek's default): interleaved pairs (2i, 2i+1).
/// NeoX: halves (i, i + RopeDim/2). Pair i always uses cos[i] and sin[i].
enum class RopeStyle { kGptJ, kNeoX };

/// Rotation of the rope slice (dims HeadDim-RopeDim .. HeadDim-1) by the angles of one
/// position, from a `cos_sin` row holding RopeDim/2 cosines then RopeDim/2 sines.
/// For a pair (x, y) with c, s: x' = x*c - y*s, y' = y*c + x*s, evaluated with the product's
/// rounding error carried exactly (fma), so a result near zero (x*c close to y*s) stays
/// accurate to about one fp32 ulp of itself, and host and device give the same bits.
///
/// Per element (a thread that holds dim j of the slice and its partner's value):
///   float c = cos_sin[Rotary<RopeStyle::kGptJ>::frequency(j)], s = cos_sin[32 + ...];
///   x_j = Rotary<RopeStyle::kGptJ>::rotate(x_j, x_partner, c, s, Rotary<...>::is_first(j));
/// Whole slice in one thread: Rotary<RopeStyle::kNeoX>::apply(slice, cos_row, sin_row).
template <RopeStyle Style, int RopeDim = 64>
struct Rotary {
  static_assert(RopeDim > 0 && RopeDim % 2 == 0, "rope dim must be even");
  static constexpr RopeStyle kStyle = Style;
  static constexpr int kRopeDim = RopeDim;
  static constexpr int kHalf = RopeDim / 2;

  /// cos/sin index of slice dim j.
  KVC_HOST_DEVICE static constexpr int frequency(int j) {
    return Style == RopeStyle::kGptJ ? j / 2 : j % kHalf;
  }
  /// Whether slice dim j is the first element (x) of its pair.
  KVC_HOST_DEVICE static constexpr bool is_first(int j) {
    return Style == RopeStyle::kGptJ ? (j % 2 == 0) : (j < kHalf);
  }
  /// Slice dim paired with j.
  KVC_HOST_DEVICE static constexpr int partner(int j) {
    return Style == RopeStyle::kGptJ ? (j ^ 1) : (j < kHalf ? j + kHalf : j - kHalf);
  }

  /// Rotated value of one element given its partner's value.
  KVC_HOST_DEVICE static float rotate(float x, float other, float c, float s, bool first) {
    const float p = other * s;
    // p + p_error == other * s exactly; an infinite product has no rounding error to carry
    // (and fmaf would turn inf - inf into NaN).
    const float p_error = fabsf(p) <= 3.402823466e38f ? fmaf(other, s, -p) : 0.f;
    return first ? fmaf(x, c, -p) - p_error : fmaf(x, c, p) + p_error;
  }

  /// Rotates a whole slice held by one thread; `cos` and `sin` hold kHalf values each.
  KVC_HOST_DEVICE static Array<float, RopeDim> apply(const Array<float, RopeDim>& x,
                                                     const float* cos, const float* sin) {
    Array<float, RopeDim> out;
    for (int j = 0; j < RopeDim; ++j) {
      const int f = frequency(j);
      out[j] = rotate(x[j], x[partner(j)], cos[f], sin[f], is_first(j));
    }
    return out;
  }
};

KVC_NAMESPACE_END
