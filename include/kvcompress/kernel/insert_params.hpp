// SPDX-License-Identifier: Apache-2.0
// kvcompress — parameters of Op B, rope–quantize–insert (contract §2); RecordArgs is shared
// with the fused op (kernel/fused_params.hpp).
#pragma once

#include "../config.hpp"

#include <cstdint>

#include "../core/codecs.hpp"
#include "../core/error_counters.hpp"
#include "../core/types.hpp"
#include "../functor/rotary.hpp"
#include "../layout/cache.hpp"

KVC_NAMESPACE_BEGIN

/// How a latent row becomes a cache record: rotary table, cache slots, layout.
struct RecordArgs {
  int rope_dim = 64;                       // P: rotated trailing dims
  RopeStyle rope_style = RopeStyle::kGptJ;
  CacheLayout layout = CacheLayout::kFp8DsMla;
  const void* cos_sin = nullptr;           // [cos_sin_rows, P] (P/2 cos then P/2 sin), row stride cos_sin_stride_elems elements
  DType cos_sin_dtype = DType::kFloat32;
  int64_t cos_sin_stride_elems = 0;
  int64_t cos_sin_rows = 0;                // max_pos; a group position >= this is never read (no record)
  IndexPtr cache_slot;                     // [T] record slot = page * block_size + row; < 0 skipped
  CacheParams cache;                       // where records go (layout-specific strides, scale)
  bool sanitize = false;                   // cap the non-finite scale code at 254, zero NaN RoPE values
};

/// Op B: one launch writes the cache record of every closing token with a valid slot.
struct InsertParams {
  int ratio = 2;                           // R: only tokens with (pos + 1) % R == 0 write
  int head_dim = 512;                      // D
  int64_t num_tokens = 0;                  // T; 0 is a no-op
  const bf16_t* latent = nullptr;          // [T, D] row stride latent_stride_elems elements (Op A's output)
  int64_t latent_stride_elems = 0;
  IndexPtr positions;                      // [T]
  RecordArgs record;
  ErrorCounters* errors = nullptr;         // optional, device memory: counts of skipped tokens (core/error_counters.hpp)
};

/// Whether the pointers of an Op B launch's first round trip are set: the latent, the
/// positions, the cache slots and the cos/sin table, and the two index arrays' types valid
/// (the host validation requires all of them, and the cache itself). The kernel tests it
/// before its PDL wait, which reads the parameters that trip needs early (arch/pdl.cuh): the
/// index types too, which the first loads branch on (read after the wait, they missed the
/// constant cache in front of those loads, bench/NOTES.md 30). `record.cache` lies in a line
/// of its own, read after the wait (reading it before measured slower without PDL).
KVC_HOST_DEVICE bool required_pointers_set(const InsertParams& p) {
  return (p.latent != nullptr) & p.positions.usable() & (p.record.cos_sin != nullptr) &
         p.record.cache_slot.usable();
}

KVC_NAMESPACE_END
