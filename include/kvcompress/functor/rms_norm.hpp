// SPDX-License-Identifier: Apache-2.0
// kvcompress — RmsNorm: RMS normalisation with a bf16 weight (contract §1.4).
#pragma once

#include "../config.hpp"

#include <cmath>
#include <cstdint>

#include "../core/array.hpp"
#include "../core/codecs.hpp"

KVC_NAMESPACE_BEGIN

/// out[d] = x[d] * rsqrt(sum_d x[d]^2 / HeadDim + eps) * float(weight[d]), in fp32.
///
/// Split in two so the caller chooses the cross-thread reduction: each thread computes the
/// `sum_squares` of its fragment, the kernel adds them up (warp shuffle, cub::BlockReduce,
/// or nothing when one thread owns the row), then every thread calls `apply`.
///
///   float partial = RmsNorm<512>::sum_squares(frag);
///   float total = cub::WarpReduce<float>(tmp).Sum(partial);   // then broadcast
///   frag = RmsNorm<512>::apply(frag, RmsNorm<512>::inv_rms(total, eps), weight_frag);
template <int HeadDim>
struct RmsNorm {
  static_assert(HeadDim > 0, "head dim must be positive");
  static constexpr int kHeadDim = HeadDim;

  template <int N>
  KVC_HOST_DEVICE static float sum_squares(const Array<float, N>& x) {
    float s = 0.f;
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) s += x[i] * x[i];
    return s;
  }

  /// 1 / sqrt(mean square + eps) from the row's total sum of squares.
  KVC_HOST_DEVICE static float inv_rms(float total_sum_squares, float eps) {
    const float mean = total_sum_squares / static_cast<float>(HeadDim) + eps;
#if KVC_DEVICE_PASS
    return rsqrtf(mean);
#else
    return 1.f / std::sqrt(mean);
#endif
  }

  /// Normalise and weight a fragment; `weight` holds the bf16 bits of the same channels.
  template <int N>
  KVC_HOST_DEVICE static Array<float, N> apply(const Array<float, N>& x, float inv_rms,
                                               const Array<uint16_t, N>& weight) {
    Array<float, N> out;
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = x[i] * inv_rms * bf16_to_float(weight[i]);
    return out;
  }
};

KVC_NAMESPACE_END
