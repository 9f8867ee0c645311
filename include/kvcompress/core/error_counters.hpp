// SPDX-License-Identifier: Apache-2.0
// kvcompress — ErrorCounters: what a launch skipped, counted on the device (contract §4.3).
#pragma once

#include "../config.hpp"

KVC_NAMESPACE_BEGIN

/// Optional device-side counts of the inputs a launch skipped. Give a zeroed ErrorCounters
/// in device memory as `errors` of CompressParams (Op A, the fused op) or InsertParams
/// (Op B); the kernels add to it with atomics, without a host synchronisation, and only when
/// something is skipped (a valid batch never touches it). Read it when convenient (e.g.
/// after the step, with the step's other outputs); reset it yourself. Null (the default):
/// nothing is counted.
///
/// A skipped token is treated as padding: nothing is read for it and nothing is written.
struct ErrorCounters {
  /// Op A, fused: tokens whose ring slot is at or past `ring_layout.num_blocks * capacity`
  /// (when num_blocks is given).
  unsigned int ring_slot_out_of_range = 0;
  /// Op B, fused: closing tokens whose cache slot is at or past `num_pages * block_size`
  /// (when num_pages is given): no record.
  unsigned int cache_slot_out_of_range = 0;
  /// Tokens with a slot and a negative position (Op A, fused: padding; Op B: no record), and
  /// closing tokens whose group position is at or past `cos_sin_rows` (Op B, fused: no
  /// record; Op A still writes the latent).
  unsigned int position_out_of_range = 0;
  /// Op A, fused: latent rows whose RMSNorm sum of squares is not finite: a NaN or infinity
  /// in the group's inputs reached the pooled row (the latent is then NaN), or its values
  /// are so large that their squares overflow (the latent is then zero). Contract §1.7.
  unsigned int non_finite_rows = 0;
};

namespace detail {
/// Adds one to `*counter` when `errors` was given (device code).
#if defined(__CUDACC__)
__device__ __forceinline__ void count_error(ErrorCounters* errors, unsigned int ErrorCounters::*field) {
  if (errors != nullptr) atomicAdd(&(errors->*field), 1u);
}
#endif
}  // namespace detail

KVC_NAMESPACE_END
