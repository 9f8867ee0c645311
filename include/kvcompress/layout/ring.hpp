// SPDX-License-Identifier: Apache-2.0
// kvcompress — the per-request ring buffer ("state cache") of Op A.
#pragma once

#include "../config.hpp"

#include <cstdint>

#include "../core/bit.hpp"

KVC_NAMESPACE_BEGIN

/// Where the ring keeps the open group's rows between calls (contract §1, `ring`).
///
/// Byte map, in elements of the ring's type (the kv_score dtype): the ring is
/// `[blocks, capacity, 2 * head_dim]` with padding allowed between rows and pages; row `r`
/// of block `b` starts at `b * page_stride_elems + r * row_stride_elems`. A token stored at cache slot
/// `s` lives in block `s / capacity`, row `s % capacity`; a token at position `p` of the
/// same request lives in row `p % capacity`.
///
///   kvc::RingLayout ring{/*capacity=*/8, /*page_stride_elems=*/8208, /*row_stride_elems=*/1024,
///                        /*num_blocks=*/max_requests};
///   float* row = ring_base + ring.slot_offset(slot);
struct RingLayout {
  int capacity = 0;         // C, rows per block
  int64_t page_stride_elems = 0;  // elements between blocks (>= capacity * row_stride_elems)
  int64_t row_stride_elems = 0;   // elements between rows (>= 2 * head_dim)
  // Blocks the ring holds, when >= 0: a slot at or past num_blocks * capacity is treated as
  // padding (nothing read or written for its token; counted in ErrorCounters). -1: not
  // given, and an out-of-range slot writes out of bounds. Give it (contract §4.3).
  int64_t num_blocks = -1;

  /// One past the last slot of the ring: num_blocks * capacity, or INT64_MAX when num_blocks
  /// is not given (the host checks bound the product, contract §4.3).
  KVC_HOST_DEVICE int64_t slot_end() const {
    return num_blocks < 0 ? INT64_MAX : num_blocks * capacity;
  }
  /// Whether `slot` (>= 0) lies inside the ring (always true when num_blocks is not given).
  KVC_HOST_DEVICE bool holds_slot(int64_t slot) const { return slot < slot_end(); }

  // Block and row of a slot or position x >= 0. ring_capacity() gives powers of two: a
  // shift and a mask then, instead of a 64-bit division (~25 instructions, more above 2^32).
  KVC_HOST_DEVICE int64_t block_of(int64_t x) const {
    return is_pow2(capacity) ? x >> lowest_bit(static_cast<uint32_t>(capacity)) : x / capacity;
  }
  KVC_HOST_DEVICE int64_t row_of(int64_t x) const {
    if (is_pow2(capacity)) return x & (capacity - 1);
    const int64_t r = x % capacity;  // in 0 .. C-1 also for a negative x (a broken contract)
    return r < 0 ? r + capacity : r;
  }
  KVC_HOST_DEVICE int64_t row_offset(int64_t block, int64_t row) const {
    return block * page_stride_elems + row * row_stride_elems;
  }
  /// Offset of the row a token with cache slot `slot` (>= 0) is stored to.
  KVC_HOST_DEVICE int64_t slot_offset(int64_t slot) const {
    return row_offset(block_of(slot), row_of(slot));
  }
  /// Offset of the row holding position `position` (>= 0) of the request whose block is `block`.
  KVC_HOST_DEVICE int64_t position_offset(int64_t block, int64_t position) const {
    return row_offset(block, row_of(position));
  }
  /// slot_offset(slot) and position_offset(block_of(slot), position) at once: the capacity
  /// test (on the 32-bit capacity), the block and its page offset computed once — a third of
  /// the instructions of the two calls, which the compiler does not merge (Op A's decode
  /// path, bench/NOTES.md 25).
  KVC_HOST_DEVICE void slot_and_position_offsets(int64_t slot, int64_t position, int64_t& at_slot,
                                                 int64_t& at_position) const {
    if (capacity > 0 && (capacity & (capacity - 1)) == 0) {
      const int shift = lowest_bit(static_cast<uint32_t>(capacity));
      const int64_t mask = capacity - 1;
      const int64_t page = (slot >> shift) * page_stride_elems;
      at_slot = page + (slot & mask) * row_stride_elems;
      at_position = page + (position & mask) * row_stride_elems;
    } else {
      const int64_t page = block_of(slot) * page_stride_elems;
      at_slot = page + row_of(slot) * row_stride_elems;
      at_position = page + row_of(position) * row_stride_elems;
    }
  }
};

/// Ring rows a request needs: the open group (R - 1 rows) plus everything one speculative
/// step may roll back, rounded up to a power of two and at least 8 (contract §1.6; equals vLLM's
/// max(8, next_pow2(num_spec + 2)) at ratio 2).
KVC_HOST_DEVICE constexpr int ring_capacity(int ratio, int num_speculative_tokens) {
  const uint64_t need = bit_ceil(static_cast<uint64_t>(num_speculative_tokens + ratio));
  return need < 8 ? 8 : static_cast<int>(need);
}

/// Whether a ring of `capacity` rows is enough for `ratio` with steps of up to
/// `tokens_per_step` tokens (contract §1.6: C >= R - 1 + tokens_per_step).
KVC_HOST_DEVICE constexpr bool ring_capacity_sufficient(int capacity, int ratio,
                                                        int tokens_per_step) {
  return capacity >= ratio - 1 + tokens_per_step;
}

KVC_NAMESPACE_END
