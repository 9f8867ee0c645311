// SPDX-License-Identifier: Apache-2.0
// Host tier: the launch's windows (kernel/wave_rule.hpp), on every call size up to a few
// waves and on random ones: the windows cover the call's tokens once, in order, none past
// the largest window or starting past the last token; a launch is one wave exactly whenever
// some windows are twice as long, and that happens only where the uniform windows would
// have needed between one and two waves.
#include <doctest/doctest.h>

#include <kvcompress/kernel/wave_rule.hpp>

#include <cstdint>
#include <random>

namespace {

using kvc::detail::WindowSizes;

struct Launch {
  int64_t tokens;
  int smallest, largest, per_block;
  int64_t wave_blocks;
};

void check_windows(const Launch& l) {
  INFO("T=", l.tokens, " windows ", l.smallest, "..", l.largest, " x", l.per_block, " wave ", l.wave_blocks);
  const WindowSizes w =
      kvc::detail::window_sizes(l.tokens, l.smallest, l.largest, l.per_block, l.wave_blocks, 1024);
  const int uniform = kvc::detail::widest_window_with_blocks(
      l.tokens, l.smallest, l.largest, l.per_block,
      l.wave_blocks > 0 ? kvc::detail::wave_fill_blocks(l.wave_blocks) : 1024);
  REQUIRE(w.window == uniform);
  REQUIRE(w.wide >= 0);
  const int64_t count = w.count(l.tokens);
  REQUIRE(count >= 1);
  REQUIRE(w.wide <= count);
  // Contiguous cover of [0, T): each window starts where the last ended, before T, and the
  // last reaches T.
  int64_t next = 0;
  bool cover = true;  // one REQUIRE after the loop: the loop runs for every token count
  for (int64_t i = 0; i < count; ++i) {
    cover = cover && w.first_token(i) == next && next < l.tokens && w.size(i) <= l.largest &&
            w.size(i) == (i < w.wide ? 2 * w.window : w.window);
    next += w.size(i);
  }
  REQUIRE(cover);
  REQUIRE(next >= l.tokens);
  REQUIRE(next - w.size(count - 1) < l.tokens);
  const int64_t blocks = (count + l.per_block - 1) / l.per_block;
  const int64_t uniform_windows = (l.tokens + w.window - 1) / w.window;
  const int64_t wave_windows = l.wave_blocks * l.per_block;
  if (w.wide > 0) {
    // Only with a known wave, and exactly one wave.
    REQUIRE(l.wave_blocks > 0);
    REQUIRE(blocks == l.wave_blocks);
    REQUIRE(count == wave_windows);
    REQUIRE(uniform_windows > wave_windows);
    REQUIRE(uniform_windows < 2 * wave_windows);
  } else if (l.wave_blocks > 0 && 2 * w.window <= l.largest) {
    // No split: the uniform windows fit one wave.
    REQUIRE(uniform_windows <= wave_windows);
  }
}

}  // namespace

TEST_CASE("launch windows: every call size up to three waves, Op B's and Op A's shapes") {
  // Op B warp records (1 or R tokens to 32, 4 windows a block), Op A wide windows (R to 16
  // or 24), on small waves so every size up to three of them runs.
  for (int64_t wave : {int64_t{0}, int64_t{3}, int64_t{7}, int64_t{16}})
    for (const Launch shape : {Launch{0, 1, 32, 4, 0}, Launch{0, 2, 32, 4, 0}, Launch{0, 2, 16, 4, 0},
                               Launch{0, 3, 24, 4, 0}, Launch{0, 4, 16, 4, 0}, Launch{0, 2, 2, 4, 0}})
      for (int64_t t = 1; t <= 3 * 32 * 4 * (wave > 0 ? wave : 8); ++t) {
        Launch l = shape;
        l.tokens = t;
        l.wave_blocks = wave;
        check_windows(l);
      }
}

TEST_CASE("launch windows: random large calls on GPU-sized waves") {
  std::mt19937_64 rng(41);
  for (int i = 0; i < 4000; ++i) {
    Launch l;
    l.smallest = 1 << (rng() % 3);
    l.largest = l.smallest << (rng() % 6);
    l.per_block = 1 << (rng() % 3);
    l.wave_blocks = rng() % 5 == 0 ? 0 : static_cast<int64_t>(100 + rng() % 2000);
    l.tokens = 1 + static_cast<int64_t>(rng() % (int64_t{1} << (10 + rng() % 12)));
    check_windows(l);
  }
  // The peer's mixed shape on an H100 (528-block waves): 128 of 2112 windows take 4 tokens.
  const WindowSizes mixed = kvc::detail::window_sizes(4480, 2, 32, 4, 528, 1024);
  CHECK(mixed.window == 2);
  CHECK(mixed.wide == 128);
}

TEST_CASE("launch windows: the one-wave split of fixed windows (Op A's warp rows)") {
  // CompressConfig::windows: Ratio-token windows, split only where they need between one and
  // two waves; then the launch is one wave exactly and covers the tokens once, in order.
  std::mt19937_64 rng(43);
  int splits = 0;
  for (int i = 0; i < 4000; ++i) {
    const int window = 2 + static_cast<int>(rng() % 14);
    const int largest = rng() % 4 == 0 ? window : 2 * window + static_cast<int>(rng() % 8);
    const int per_block = 1 << (rng() % 3);
    const int64_t wave_blocks = rng() % 5 == 0 ? 0 : static_cast<int64_t>(100 + rng() % 2000);
    const int64_t tokens = 1 + static_cast<int64_t>(rng() % (int64_t{1} << (10 + rng() % 12)));
    INFO("T=", tokens, " window ", window, " largest ", largest, " x", per_block, " wave ", wave_blocks);
    const WindowSizes w = kvc::detail::one_wave_split(WindowSizes{window, 0}, tokens, largest, per_block, wave_blocks);
    REQUIRE(w.window == window);
    const int64_t uniform = (tokens + window - 1) / window, wave = wave_blocks * per_block;
    const bool split = wave_blocks > 0 && 2 * window <= largest && uniform > wave && uniform < 2 * wave;
    REQUIRE(w.wide == (split ? uniform - wave : 0));
    const int64_t count = w.count(tokens);
    int64_t next = 0;
    bool cover = true;
    for (int64_t k = 0; k < count; ++k) {
      cover = cover && w.first_token(k) == next && next < tokens;
      next += w.size(k);
    }
    REQUIRE(cover);
    REQUIRE(next >= tokens);
    if (split) {
      REQUIRE(count == wave);
      ++splits;
    }
  }
  CHECK(splits > 100);  // the random calls reach the split often
}

TEST_CASE("split-group windows: the largest cluster that fits one wave, then the shortest window") {
  // detail::split_group_window against a direct reading of its rule, on every call size up
  // to a few waves, every largest window of the compiled split-group instances and every
  // cluster cap (CompressConfig::cluster_blocks).
  for (int largest : {1, 2, 4, 8, 16, 32})
    for (int cap : {1, 2, 4, 8})
      for (int64_t wave : {0, 1, 2, 66, 132, 264, 1056})
        for (int64_t tokens = 1; tokens <= 4096; tokens += tokens < 300 ? 1 : 37) {
          INFO("T=", tokens, " largest ", largest, " cap ", cap, " wave ", wave);
          const int w = kvc::detail::split_group_window(tokens, largest, cap, wave);
          REQUIRE(w >= 1);
          REQUIRE(w <= largest);
          REQUIRE((w & (w - 1)) == 0);
          const auto fits = [&](int64_t window, int64_t cluster) {
            return cluster * ((tokens + window - 1) / window) <= wave;
          };
          if (wave <= 0 || !fits(largest, 1)) {
            REQUIRE(w == largest);  // nothing fits one wave: the longest window, no cluster
            continue;
          }
          // The cluster the rule assumed: the largest power of two up to the cap that fits
          // with some window; w is the shortest window that fits with it.
          int c = cap;
          while (!fits(largest, c)) c /= 2;
          REQUIRE(fits(w, c));
          if (w > 1) REQUIRE_FALSE(fits(w / 2, c));
          // The launch's cluster for these windows (launch_cluster_blocks' rule) is c again.
          int launch = cap;
          while (launch > 1 && !fits(w, launch)) launch /= 2;
          REQUIRE(launch == c);
        }
  // H100 (132 one-block-an-SM split-group blocks a wave), ratio 128 (16-token windows,
  // clusters of at most 4): the fastest (window, cluster) measured of 20 on each shape
  // (bench/NOTES.md 46): decode 64x2 (4, 4), 256x2 (16, 4), 128x6 (16, 2), 1024x4 (16, 1).
  CHECK(kvc::detail::split_group_window(128, 16, 4, 132) == 4);
  CHECK(kvc::detail::split_group_window(512, 16, 4, 132) == 16);
  CHECK(kvc::detail::split_group_window(768, 16, 4, 132) == 16);
  CHECK(kvc::detail::split_group_window(4096, 16, 4, 132) == 16);
  // Without clusters (before sm_90): the shortest window within one wave of blocks.
  CHECK(kvc::detail::split_group_window(128, 16, 1, 132) == 1);
  CHECK(kvc::detail::split_group_window(512, 16, 1, 132) == 4);
}
