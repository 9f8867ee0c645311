// SPDX-License-Identifier: Apache-2.0
// kvcompress — how wide a warp's window of tokens is, given the GPU's wave: the rules
// behind Op B's warp records (InsertConfig::windows: window_sizes) and Op A's warp rows
// (CompressConfig::windows: one_wave_split of Ratio-token windows). Host-compilable; the
// host tier tests them (tests/host/test_wave_rule.cpp) and the compile tier checks their
// choices (tests/compile/instances_insert.cu, instances_compress.cu).
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

/// The windows of a launch, in launch order (block x windows per block + the row group in
/// the block): each owns `window` consecutive tokens, except the first `wide` ones, which own
/// 2 x window. The kernels' launch argument (Op B's warp records, Op A's wide windows).
struct WindowSizes {
  int window = 1;
  int wide = 0;
  /// The first token of window w.
  KVC_HOST_DEVICE constexpr int64_t first_token(int64_t w) const {
    return int64_t{window} * (w + (w < wide ? w : int64_t{wide}));
  }
  /// The tokens of window w.
  KVC_HOST_DEVICE constexpr int size(int64_t w) const { return w < wide ? 2 * window : window; }
  /// Windows a launch of `num_tokens` tokens needs (each starts before num_tokens).
  KVC_HOST_DEVICE constexpr int64_t count(int64_t num_tokens) const {
    return (num_tokens + window - 1) / window - wide;
  }
};

/// `w` (uniform windows, w.wide == 0) with the one-wave split: where its windows need more
/// than one wave of `wave_blocks` blocks (`windows_per_block` windows each) but fewer than
/// two, the first ones take twice the window so that the launch is one wave exactly: a few
/// warps with two windows' work end sooner than a second wave of blocks that starts only as
/// the first retires (bench/NOTES.md 41). Unchanged where 2 x w.window > `largest` or the
/// wave is not known (wave_blocks <= 0).
KVC_HOST_DEVICE constexpr WindowSizes one_wave_split(WindowSizes w, int64_t num_tokens, int largest,
                                                     int windows_per_block, int64_t wave_blocks) {
  if (wave_blocks > 0 && 2 * w.window <= largest) {
    const int64_t windows = (num_tokens + w.window - 1) / w.window;
    const int64_t wave = wave_blocks * windows_per_block;
    if (windows > wave && windows < 2 * wave) w.wide = static_cast<int>(windows - wave);
  }
  return w;
}

/// The windows of a launch of `num_tokens` tokens: the widest window of widest_window_with_blocks
/// whose blocks fill 7/8 of a wave of `wave_blocks` blocks (`min_blocks_unknown` blocks when
/// the wave is not known: wave_blocks <= 0). Where those windows need more than one wave but
/// fewer than two, the first ones take twice the window so that the launch is one wave
/// exactly: a few warps with two windows' work end sooner than a second wave of blocks that
/// starts only as the first retires (bench/NOTES.md 41). Never wider than `largest`.
KVC_HOST_DEVICE constexpr WindowSizes window_sizes(int64_t num_tokens, int smallest, int largest,
                                                   int windows_per_block, int64_t wave_blocks,
                                                   int64_t min_blocks_unknown) {
  WindowSizes s;
  s.window = widest_window_with_blocks(num_tokens, smallest, largest, windows_per_block,
                                       wave_blocks > 0 ? wave_fill_blocks(wave_blocks) : min_blocks_unknown);
  return one_wave_split(s, num_tokens, largest, windows_per_block, wave_blocks);
}

/// Tokens of a split-group window (Op A at ratios >= 16, a block or a cluster of blocks per
/// window), chosen with the cluster: the largest cluster, `largest_cluster` blocks halved
/// until some window of at most `largest` tokens (a power of two) lets the whole launch
/// (clusters x windows) run in one wave of `wave_blocks` blocks, and the shortest such
/// window; `largest` when none does or the wave is not known (wave_blocks <= 0). A window
/// pools the groups closing in it one after the other and a cluster splits each group's
/// members over its blocks, so at decode, where several requests of a window may close a
/// group, shorter windows put the groups side by side and larger clusters shorten each
/// one. On an H100 at ratio 128 (bench/NOTES.md 46) this picks the fastest measured
/// (window, cluster) of 20 on each of decode 64x2 (4, 4), 256x2 (16, 4), 128x6 (16, 2) and
/// 1024x4 (16, 1). The cluster the launch then gets for these windows
/// (CompressConfig::launch_cluster_blocks) is the one this rule assumed.
KVC_HOST_DEVICE constexpr int split_group_window(int64_t num_tokens, int largest, int largest_cluster,
                                                 int64_t wave_blocks) {
  if (wave_blocks <= 0) return largest;
  for (int c = largest_cluster; c >= 1; c /= 2)
    for (int w = 1; w <= largest; w *= 2)
      if (c * ((num_tokens + w - 1) / w) <= wave_blocks) return w;
  return largest;
}

}  // namespace detail
KVC_NAMESPACE_END
