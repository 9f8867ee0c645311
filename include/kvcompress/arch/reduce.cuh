// SPDX-License-Identifier: Apache-2.0
// kvcompress — all-reductions over lane groups of a warp or over a whole block.
#pragma once

#include <cstdint>

#include "../config.hpp"

KVC_NAMESPACE_BEGIN
namespace arch {

// Hand-written because every lane needs the result with identical bits (an xor butterfly
// gives that); cub::WarpReduce leaves the total in lane 0 only.

/// Sum over aligned groups of `Width` lanes (a power of two <= 32); every lane of a group
/// gets the same bits.
template <int Width = 32>
KVC_DEVICE float group_sum(float v) {
  KVC_PRAGMA_UNROLL
  for (int offset = Width / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// Max over aligned groups of `Width` lanes. Uses fmaxf (NaN-ignoring): callers that must
/// see NaN check for it separately.
template <int Width = 32>
KVC_DEVICE float group_max(float v) {
  KVC_PRAGMA_UNROLL
  for (int offset = Width / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Unsigned max over aligned groups of `Width` lanes.
template <int Width = 32>
KVC_DEVICE uint32_t group_max_u32(uint32_t v) {
  KVC_PRAGMA_UNROLL
  for (int offset = Width / 2; offset > 0; offset /= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

/// Logical or over aligned groups of `Width` lanes.
template <int Width = 32>
KVC_DEVICE bool group_any(bool v) {
  unsigned u = v ? 1u : 0u;
  KVC_PRAGMA_UNROLL
  for (int offset = Width / 2; offset > 0; offset /= 2) u |= __shfl_xor_sync(0xffffffffu, u, offset);
  return u != 0;
}

/// All-reductions over the `Threads` threads of a block (Threads == blockDim.x, a multiple
/// of 32): the warps reduce by shuffles, then every thread combines the warps' partials from
/// shared memory in warp order, so every thread gets the same bits. Every thread of the
/// block must call it (two __syncthreads: the partials are free again on return).
/// Hand-written: cub::BlockReduce leaves the total in thread 0, and broadcasting it would
/// cost a third barrier.
template <int Threads, class Combine, typename T>
KVC_DEVICE T block_all_reduce(T v, Combine combine) {
  static_assert(Threads % 32 == 0 && Threads <= 1024, "whole warps of one block");
  KVC_PRAGMA_UNROLL
  for (int offset = 16; offset > 0; offset /= 2) v = combine(v, __shfl_xor_sync(0xffffffffu, v, offset));
  if constexpr (Threads == 32) {
    return v;
  } else {
    __shared__ T partial[Threads / 32];
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
    __syncthreads();
    T total = partial[0];
    KVC_PRAGMA_UNROLL
    for (int w = 1; w < Threads / 32; ++w) total = combine(total, partial[w]);
    __syncthreads();
    return total;
  }
}

struct SumOp {
  KVC_DEVICE float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  KVC_DEVICE float operator()(float a, float b) const { return fmaxf(a, b); }
  KVC_DEVICE uint32_t operator()(uint32_t a, uint32_t b) const { return max(a, b); }
};
struct OrOp {
  KVC_DEVICE uint32_t operator()(uint32_t a, uint32_t b) const { return a | b; }
};

/// group_sum / group_max / group_max_u32 / group_any over `Width` threads: aligned lane
/// groups within a warp (Width <= 32), or a whole block of Width threads (Width > 32, see
/// block_all_reduce: every thread of the block must call it).
template <int Width>
KVC_DEVICE float row_sum(float v) {
  if constexpr (Width <= 32) return group_sum<Width>(v);
  else return block_all_reduce<Width>(v, SumOp{});
}
template <int Width>
KVC_DEVICE float row_max(float v) {
  if constexpr (Width <= 32) return group_max<Width>(v);
  else return block_all_reduce<Width>(v, MaxOp{});
}
template <int Width>
KVC_DEVICE uint32_t row_max_u32(uint32_t v) {
  if constexpr (Width <= 32) return group_max_u32<Width>(v);
  else return block_all_reduce<Width>(v, MaxOp{});
}
template <int Width>
KVC_DEVICE bool row_any(bool v) {
  if constexpr (Width <= 32) return group_any<Width>(v);
  else return block_all_reduce<Width>(v ? 1u : 0u, OrOp{}) != 0u;
}

}  // namespace arch
KVC_NAMESPACE_END
