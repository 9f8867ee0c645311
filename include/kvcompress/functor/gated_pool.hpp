// SPDX-License-Identifier: Apache-2.0
// kvcompress — GatedPool: per-channel softmax-gated pooling of a group of rows (contract §1.3).
#pragma once

#include "../config.hpp"

#include <cmath>

#include "../core/array.hpp"

KVC_NAMESPACE_BEGIN

/// Partial result of gated pooling over some members of a group, per channel:
/// `max` of the scores seen, `sum` of exp(score - max), `acc` of kv * exp(score - max).
/// Partials over disjoint members merge exactly like online softmax.
template <int N>
struct PoolState {
  Array<float, N> max;
  Array<float, N> sum;
  Array<float, N> acc;
};

/// Softmax-gated pooling over the `Ratio` members of a group, independently per channel:
///   pooled[d] = sum_q kv_q[d] * exp(s_q[d] - m[d]) / sum_q exp(s_q[d] - m[d]),  m = max_q s_q.
/// Works on a thread's fragment of N channels; channels never mix, so any channel-to-thread
/// mapping works. Members can be pooled all at once (`pool`), or in batches (`partial`)
/// whose states are combined with `merge` (in a fixed order, for deterministic results) and
/// read with `finish` — that is how a kernel splits a large group across warps.
///
///   Array<float, 16> kv[2], score[2];          // the two members of a ratio-2 group
///   Array<float, 16> pooled = GatedPool<2>::pool(kv, score);
///
/// Non-finite scores follow the formula: a -inf score weighs 0, a NaN or +inf score gives NaN.
template <int Ratio>
struct GatedPool {
  static_assert(Ratio >= 1, "compress ratio must be positive");
  static constexpr int kRatio = Ratio;

  /// State of zero members (merging it changes nothing).
  template <int N>
  KVC_HOST_DEVICE static PoolState<N> empty() {
    PoolState<N> s;
    s.max.fill(-INFINITY);
    s.sum.fill(0.f);
    s.acc.fill(0.f);
    return s;
  }

  /// State of `Count` members held in registers: one exp per member and channel.
  template <int Count, int N>
  KVC_HOST_DEVICE static PoolState<N> partial(const Array<float, N> (&kv)[Count],
                                              const Array<float, N> (&score)[Count]) {
    PoolState<N> s;
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      float m = score[0][i];
      KVC_PRAGMA_UNROLL
      for (int q = 1; q < Count; ++q) m = score[q][i] > m ? score[q][i] : m;
      // exp(s - m) with m replaced by 0 when every score is -inf: each -inf score then
      // weighs exactly 0 (exp(-inf) = 0), with one select per channel instead of a test per
      // member; for any other m the weights are the formula's.
      const float shift = m == -INFINITY ? 0.f : m;
      float sum = 0.f, acc = 0.f;
      KVC_PRAGMA_UNROLL
      for (int q = 0; q < Count; ++q) {
        const float w = exp_le0(score[q][i] - shift);
        sum += w;
        acc += kv[q][i] * w;
      }
      s.max[i] = m;
      s.sum[i] = sum;
      s.acc[i] = acc;
    }
    return s;
  }

  /// Combine the states of two disjoint sets of members into `a` (not symmetric in its
  /// bits: merge in a fixed order). One exp per channel: the larger maximum's weight is 1,
  /// the other's exp(smaller - larger) (1 when they are equal).
  template <int N>
  KVC_HOST_DEVICE static void merge(PoolState<N>& a, const PoolState<N>& b) {
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      const bool b_larger = b.max[i] > a.max[i];
      const float m = b_larger ? b.max[i] : a.max[i];
      const float w = rescale(b_larger ? a.max[i] : b.max[i], m);
      const float wa = b_larger ? w : 1.f;
      const float wb = b_larger ? 1.f : w;
      a.sum[i] = a.sum[i] * wa + b.sum[i] * wb;
      a.acc[i] = a.acc[i] * wa + b.acc[i] * wb;
      a.max[i] = m;
    }
  }

  /// The pooled values of a complete group.
  template <int N>
  KVC_HOST_DEVICE static Array<float, N> finish(const PoolState<N>& s) {
    Array<float, N> out;
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = divide(s.acc[i], s.sum[i]);
    return out;
  }

  /// All `Ratio` members at once.
  template <int N>
  KVC_HOST_DEVICE static Array<float, N> pool(const Array<float, N> (&kv)[Ratio],
                                              const Array<float, N> (&score)[Ratio]) {
    return finish(partial<Ratio>(kv, score));
  }

 private:
  // exp(x) for x <= 0, -inf or NaN. On the device the hardware ex2 of x * log2(e) with
  // flush-to-zero (ex2.approx.ftz: 2 instructions; the non-ftz form that __expf gives
  // without -ftz=true adds a range fix-up of 4 more), relative error ~1e-6 for |x| < 100 —
  // far inside contract §1's 1-bf16-ulp tolerance (2^-8). Results below 2^-126 flush to 0:
  // their weight next to the group's maximum, 1, is below fp32 resolution anyway.
  KVC_HOST_DEVICE static float exp_le0(float x) {
#if KVC_DEVICE_PASS
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
#else
    return std::exp(x);
#endif
  }
  // acc / sum with sum in [1, Ratio] (or NaN): acc times the hardware reciprocal of sum
  // (rcp.approx.ftz, 1 ulp; sum is never subnormal, so the flush changes nothing — the
  // non-ftz form adds a subnormal fix-up of 3 instructions).
  KVC_HOST_DEVICE static float divide(float acc, float sum) {
#if KVC_DEVICE_PASS
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(sum));
    return acc * r;
#else
    return acc / sum;
#endif
  }
  // exp(old_max - new_max), 1 when unchanged (so two -inf maxima do not make a NaN).
  KVC_HOST_DEVICE static float rescale(float old_max, float new_max) {
    return old_max == new_max ? 1.f : exp_le0(old_max - new_max);
  }
};

/// Ratio 1: every token is its own group; pooling is the identity and there is no gate.
template <>
struct GatedPool<1> {
  static constexpr int kRatio = 1;
  template <int N>
  KVC_HOST_DEVICE static Array<float, N> pool(const Array<float, N> (&kv)[1]) {
    return kv[0];
  }
};

KVC_NAMESPACE_END
