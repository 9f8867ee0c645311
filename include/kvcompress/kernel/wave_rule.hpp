// SPDX-License-Identifier: Apache-2.0
// kvcompress — how wide a warp's window of tokens is, given the GPU's wave: the one rule
// behind Op B's warp records (InsertConfig::tokens_per_window) and Op A's wide windows
// (CompressConfig::tokens_per_block). Host-compilable; the compile tier checks its choices
// (tests/compile/instances_insert.cu, instances_compress.cu).
#pragma once

#include <cstdint>

#include "../config.hpp"

KVC_NAMESPACE_BEGIN
namespace detail {

/// Blocks a launch needs to fill 7/8 of a wave of `wave_blocks` blocks (SMs x resident
/// blocks per SM). One wave of longer warps beats two waves of short ones, but a wave
/// filled much less than that loses to a second, nearly empty one (bench/NOTES.md 35).
KVC_HOST_DEVICE constexpr int64_t wave_fill_blocks(int64_t wave_blocks) {
  return (7 * wave_blocks + 7) / 8;
}

/// The widest window, `smallest` x 2^k tokens up to `largest`, whose launch of `num_tokens`
/// tokens in blocks of `windows_per_block` windows still has `min_blocks` blocks.
KVC_HOST_DEVICE constexpr int widest_window_with_blocks(int64_t num_tokens, int smallest, int largest,
                                                        int windows_per_block, int64_t min_blocks) {
  int w = smallest;
  while (2 * w <= largest) {
    const int64_t block_tokens = int64_t{2 * w} * windows_per_block;
    if ((num_tokens + block_tokens - 1) / block_tokens < min_blocks) break;
    w *= 2;
  }
  return w;
}

}  // namespace detail
KVC_NAMESPACE_END
