// SPDX-License-Identifier: Apache-2.0
// Host tier: RingLayout address functions and the ring capacity rule (layout/ring.hpp, contract §1).
#include <doctest/doctest.h>

#include <kvcompress/layout/ring.hpp>

#include <cstdint>
#include <initializer_list>

namespace {

// vLLM's rule, written independently: max(8, next power of two >= num_spec + 2).
int vllm_ring_capacity(int num_spec) {
  int p = 1;
  while (p < num_spec + 2) p *= 2;
  return p < 8 ? 8 : p;
}

}  // namespace

TEST_CASE("RingLayout with vLLM's padded pages: capacity 8, row stride 1024, page stride 8208") {
  const kvc::RingLayout ring{8, 8208, 1024};
  CHECK(ring.slot_offset(0) == 0);
  CHECK(ring.slot_offset(7) == 7 * 1024);
  CHECK(ring.slot_offset(8) == 8208);
  CHECK(ring.slot_offset(43) == 5 * 8208 + 3 * 1024);
  CHECK(ring.block_of(43) == 5);
  CHECK(ring.block_of(7) == 0);
  CHECK(ring.block_of(8) == 1);
  CHECK(ring.position_offset(5, 43) == 5 * 8208 + 3 * 1024);
  CHECK(ring.position_offset(5, 8) == 5 * 8208);
  CHECK(ring.row_offset(2, 6) == 2 * 8208 + 6 * 1024);
  int mismatches = 0;
  for (int64_t block = 0; block < 64; ++block)
    for (int64_t pos = 0; pos < 200; ++pos) {
      const int64_t slot = block * 8 + pos % 8;
      const int64_t want = block * 8208 + (pos % 8) * 1024;
      mismatches += ring.slot_offset(slot) != want;
      mismatches += ring.position_offset(block, pos) != want;
      mismatches += ring.block_of(slot) != block;
    }
  CHECK(mismatches == 0);
  // 64-bit offsets: a block index whose offset does not fit in 32 bits.
  const int64_t big_slot = int64_t{3000000000} + 5;  // block 375000000, row 5
  CHECK(ring.block_of(big_slot) == 375000000);
  CHECK(ring.slot_offset(big_slot) == int64_t{375000000} * 8208 + 5 * 1024);
  CHECK(ring.position_offset(375000000, int64_t{1} << 40) == int64_t{375000000} * 8208);
}

TEST_CASE("RingLayout with other capacities and padded rows") {
  for (int capacity : {2, 8, 16, 128, 256})
    for (int64_t row_stride : {int64_t{256}, int64_t{260}, int64_t{1024}, int64_t{1040}}) {
      const int64_t page_stride = capacity * row_stride + 16 * (capacity % 3);
      const kvc::RingLayout ring{capacity, page_stride, row_stride};
      int mismatches = 0;
      for (int64_t slot = 0; slot < 4 * capacity + 3; ++slot) {
        const int64_t block = slot / capacity, row = slot % capacity;
        mismatches += ring.slot_offset(slot) != block * page_stride + row * row_stride;
        mismatches += ring.block_of(slot) != block;
        // A token at position p lands in row p % C whatever the block.
        mismatches += ring.position_offset(block, slot + 7 * capacity) !=
                      block * page_stride + row * row_stride;
      }
      CHECK_MESSAGE(mismatches == 0, "capacity ", capacity, " row stride ", row_stride);
    }
}

TEST_CASE("RingLayout::slot_and_position_offsets equals slot_offset and position_offset") {
  // Powers of two (shift and mask) and other capacities (division); positions from -1 (the
  // row before a chunk that starts at position 0) to far past the slot.
  for (int capacity : {1, 3, 8, 12, 16, 100, 128})
    for (int64_t row_stride : {int64_t{1024}, int64_t{1040}}) {
      const int64_t page_stride = capacity * row_stride + 48;
      const kvc::RingLayout ring{capacity, page_stride, row_stride};
      int mismatches = 0;
      for (int64_t slot : {int64_t{0}, int64_t{1}, int64_t{capacity - 1}, int64_t{capacity}, int64_t{5 * capacity + 2},
                           (int64_t{1} << 33) + 5})
        for (int64_t pos : {int64_t{-1}, int64_t{0}, int64_t{7}, int64_t{capacity + 3}, (int64_t{1} << 40) + 9}) {
          int64_t at_slot = -7, at_pos = -7;
          ring.slot_and_position_offsets(slot, pos, at_slot, at_pos);
          mismatches += at_slot != ring.slot_offset(slot);
          mismatches += at_pos != ring.position_offset(ring.block_of(slot), pos);
        }
      CHECK_MESSAGE(mismatches == 0, "capacity ", capacity, " row stride ", row_stride);
    }
}

TEST_CASE("ring_capacity(R, k) = max(8, bit_ceil(k + R)), vLLM's rule at R = 2, always sufficient") {
  for (int ratio : {1, 2, 4, 8, 16, 32, 64, 128}) {
    for (int k = 0; k <= 16; ++k) {
      int want = 1;
      while (want < k + ratio) want *= 2;
      if (want < 8) want = 8;
      const int got = kvc::ring_capacity(ratio, k);
      CHECK_MESSAGE(got == want, "R = ", ratio, ", k = ", k);
      if (ratio == 2) CHECK_MESSAGE(got == vllm_ring_capacity(k), "k = ", k);
      // Holds the open group plus a step of k + 1 tokens (contract §1.6).
      CHECK_MESSAGE(kvc::ring_capacity_sufficient(got, ratio, k + 1), "R = ", ratio, ", k = ", k);
      CHECK(got >= ratio);
      CHECK(kvc::is_pow2(got));
      // The sufficiency rule itself: C >= R - 1 + tokens_per_step, tight.
      CHECK(kvc::ring_capacity_sufficient(ratio + k, ratio, k + 1));
      CHECK_FALSE(kvc::ring_capacity_sufficient(ratio + k - 1, ratio, k + 1));
    }
  }
  CHECK(kvc::ring_capacity(2, 0) == 8);
  CHECK(kvc::ring_capacity(2, 6) == 8);
  CHECK(kvc::ring_capacity(2, 7) == 16);
  CHECK(kvc::ring_capacity(128, 0) == 128);
  CHECK(kvc::ring_capacity(128, 1) == 256);
}

// constexpr: usable in constant expressions (e.g. static buffer sizes).
static_assert(kvc::ring_capacity(2, 1) == 8, "");
static_assert(kvc::ring_capacity(4, 5) == 16, "");
static_assert(kvc::ring_capacity(16, 16) == 32, "");
static_assert(kvc::ring_capacity_sufficient(kvc::ring_capacity(64, 3), 64, 4), "");
