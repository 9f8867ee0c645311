// kvcompress — warp-level all-reductions.
#pragma once

#include <cstdint>

#include "../config.hpp"

namespace kvc {
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

}  // namespace arch
}  // namespace kvc
