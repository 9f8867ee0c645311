// SPDX-License-Identifier: Apache-2.0
// kvcompress — parameters of Op A, save–compress–norm (contract §1).
#pragma once

#include "../config.hpp"

#include <cstdint>

#include "../core/codecs.hpp"
#include "../core/error_counters.hpp"
#include "../core/types.hpp"
#include "../layout/ring.hpp"

KVC_NAMESPACE_BEGIN

/// Everything one launch of Op A reads and writes. A plain aggregate: fill the fields,
/// call `kvc::compress(params, stream)` (launch/compress.cuh). Element strides, never bytes.
struct CompressParams {
  int ratio = 2;                    // R: tokens pooled into one latent (1 = no gate, no ring)
  int head_dim = 512;               // D
  DType dtype = DType::kFloat32;    // element type of kv_score and of the ring
  int64_t num_tokens = 0;           // T; 0 is a no-op

  const void* kv_score = nullptr;   // [T, 2*D] (R > 1: kv in 0..D-1, score in D..2D-1) or [T, D] (R == 1), row stride kv_score_stride_elems
  int64_t kv_score_stride_elems = 0;
  IndexPtr positions;               // [T] int32/int64 absolute position of each token
  IndexPtr slot;                    // [T] int32/int64 ring slot = block * C + row; < 0 marks padding
  const int32_t* qsl = nullptr;     // [qsl_size] query start locations: request r owns tokens qsl[r] .. qsl[r+1]-1 (R > 1)
  int64_t qsl_size = 0;             // num_reqs + 1 (R > 1)
  const int32_t* req = nullptr;     // [T] request of each token (R > 1)

  void* ring = nullptr;             // [blocks, C, 2*D] of dtype, strides in ring_layout (R > 1); read and written
  RingLayout ring_layout;

  const bf16_t* weight = nullptr;   // [D] RMSNorm weight
  float eps = 1e-6f;                // RMSNorm epsilon

  bf16_t* latent = nullptr;         // [T, D] output, row stride latent_stride_elems; only closing, non-padding rows are written
  int64_t latent_stride_elems = 0;

  ErrorCounters* errors = nullptr;  // optional, device memory: counts of skipped tokens (core/error_counters.hpp)
};

/// Small ratios: calls of at least this many R-token windows hold one row per warp (they
/// fill the GPU with warps, and a row per block costs them the replicated index work and a
/// block per window); smaller calls (decode steps) spread a row over a block's threads.
/// Measured on the H200 (bench/NOTES.md 15): at 2048 windows (decode 1024x4) the block rows
/// are faster, at 4096 (prefill 1x8192, R = 2) the warp rows.
constexpr int64_t kWarpRowMinWindows = 4096;
/// ... and, at ratios up to kWarpRowPrefillMaxRatio, from this many windows when the
/// call's requests average at least kWarpRowMinTokensPerRequest tokens (chunked prefill,
/// mixed batches): their windows lie inside long chunks, streaming without ring reads or
/// ring tails, where the warp rows' smaller total instruction stream wins. Measured on an
/// H100 (bench/NOTES.md 34): ratio 2, mixed 2x2048 + 192x2 (2240 windows, 23 tokens a
/// request) Op A -6 to -8 % and the fused op -8 % with warp rows; decode 1024x4 (2048
/// windows, 4 tokens a request) +1 to +5 %; ratio 4, prefill 1x8192 (2048 windows of 4
/// rows) +7 to +8 %.
constexpr int64_t kWarpRowPrefillMinWindows = 2048;
constexpr int64_t kWarpRowMinTokensPerRequest = 16;
constexpr int kWarpRowPrefillMaxRatio = 2;

/// Whether a small-ratio Op A / fused call holds a row per warp (else a row per block):
/// `num_reqs` is qsl_size - 1 where qsl is given (ratios > 1), else 0 (unknown).
KVC_HOST_DEVICE constexpr bool use_warp_rows(int ratio, int64_t windows, int64_t num_tokens,
                                             int64_t num_reqs) {
  return windows >= kWarpRowMinWindows ||
         (ratio <= kWarpRowPrefillMaxRatio && windows >= kWarpRowPrefillMinWindows &&
          num_reqs > 0 && num_tokens >= kWarpRowMinTokensPerRequest * num_reqs);
}

/// Whether the pointers every Op A launch at `Ratio` reads are set and the index arrays'
/// types valid (the host validation requires them; `latent` may be null in the fused op,
/// `errors` always). The kernel tests it before its PDL wait, which also reads a field of
/// each 64-byte line of these parameters early, and the index types the first loads branch
/// on (arch/pdl.cuh; the first round trip needs all of them); a launch made without
/// validation then does nothing instead of faulting.
template <int Ratio>
KVC_HOST_DEVICE bool required_pointers_set(const CompressParams& p) {
  // `&`, not `&&`: every field is read at once, no branch between the reads.
  const bool gate = Ratio == 1 || ((p.qsl != nullptr) & (p.req != nullptr) & (p.ring != nullptr));
  return (p.kv_score != nullptr) & p.positions.usable() & p.slot.usable() &
         (p.weight != nullptr) & gate;
}

KVC_NAMESPACE_END
