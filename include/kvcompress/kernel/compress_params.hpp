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

/// Compact-index instances (CompressConfig::kCompactIndex: the block rows that run decode
/// steps) hold token indices and the element offsets of kv_score and latent rows in 32 bits
/// (bench/NOTES.md 54). A call fits them when it has at most kCompactMaxTokens tokens (a
/// window's lanes reach 32 tokens past the last) and every row it addresses ends at or below
/// element offset 2^31 - 1 (compact_index_fits). kvc::compress gives any other call warp rows, which index in
/// 64 bits; a compact instance launched directly for one writes nothing.
constexpr int64_t kCompactMaxTokens = int64_t{1} << 30;
constexpr int64_t kCompactMaxOffset = 2147483647;  // INT32_MAX

/// Whether an Op A / fused call at `Ratio`, head dim `HeadDim` fits a compact-index instance:
/// 1 .. kCompactMaxTokens tokens, and every kv_score row and (when written) latent row ends
/// at or below element offset kCompactMaxOffset. One bound for both arrays, the larger
/// stride with the kv_score row's width (a latent row is no wider; the answer differs only
/// for a latent within HeadDim elements of the limit). No branch and no 64-bit product: the
/// kernels test it before their PDL wait (about 15 instructions), on unvalidated values too;
/// every operand is bounded (as unsigned, so negatives fail) before the 32 x 32-bit product.
template <int Ratio, int HeadDim>
KVC_HOST_DEVICE constexpr bool compact_index_fits(const CompressParams& p) {
  constexpr uint32_t row_width = Ratio > 1 ? 2 * HeadDim : HeadDim;
  static_assert(HeadDim > 0 && HeadDim <= 32768, "head dim out of range for compact offsets");
  constexpr uint64_t kMax = static_cast<uint64_t>(kCompactMaxOffset);
  const uint64_t last = static_cast<uint64_t>(p.num_tokens) - 1u;  // T <= 0 wraps and fails
  const uint64_t kv = static_cast<uint64_t>(p.kv_score_stride_elems);
  const uint64_t latent = p.latent == nullptr ? 0u : static_cast<uint64_t>(p.latent_stride_elems);
  const uint32_t stride = static_cast<uint32_t>(kv) > static_cast<uint32_t>(latent) ? static_cast<uint32_t>(kv)
                                                                                 : static_cast<uint32_t>(latent);
  const uint64_t end = uint64_t{static_cast<uint32_t>(last)} * stride + row_width;
  return (last < static_cast<uint64_t>(kCompactMaxTokens)) & (kv <= kMax) & (latent <= kMax) & (end <= kMax);
}

/// Whether kvc::compress / kvc::fused run a small-ratio call (Ratio < 16) in block rows: a
/// call use_warp_rows leaves to them and that fits their 32-bit indices (compact_index_fits);
/// every other call holds a row per warp.
template <int Ratio, int HeadDim>
KVC_HOST_DEVICE constexpr bool use_block_rows(const CompressParams& p) {
  return !use_warp_rows(Ratio, p.num_tokens / Ratio, p.num_tokens, Ratio > 1 ? p.qsl_size - 1 : 0) &&
         compact_index_fits<Ratio, HeadDim>(p);
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
