// SPDX-License-Identifier: Apache-2.0
// Compile tier: every Op B kernel instance (ratio x head dim x layout). Never run.
#include <kvcompress/launch/insert.cuh>

kvc::Status kvc_compile_tier_insert(const kvc::InsertParams& p, cudaStream_t stream) {
  return kvc::insert(p, stream);
}

// The launch's window choice (InsertConfig::windows): one token index per lane at
// most, R tokens per block (about one record) for decode-sized calls, doubling up to 32
// while the call still has kMinBlocks blocks; the block is the threads of one record.
namespace {
template <int R, int D, int RowThreads = 0>
constexpr bool insert_window_ok() {
  using Cfg = kvc::InsertConfig<R, D, RowThreads>;
  constexpr int small = Cfg::tokens_per_window(1);
  constexpr int large = Cfg::tokens_per_window(int64_t{1} << 30);
  return small == Cfg::kSmallWindow && large <= Cfg::kLargeWindow && 2 * large > Cfg::kLargeWindow &&
         large % small == 0 && kvc::is_pow2(large / small) &&
         Cfg::windows(1).window == small && Cfg::windows(1).wide == 0 && Cfg::blocks(1, Cfg::windows(1)) == 1 &&
         Cfg::kGroups * Cfg::kRowThreads == Cfg::kThreads &&
         Cfg::Row::kThreads == Cfg::kRowThreads && Cfg::Row::kVecs * Cfg::kVecElems * Cfg::kRowThreads == D;
}
static_assert(insert_window_ok<1, 512>() && insert_window_ok<2, 512>() && insert_window_ok<4, 512>() &&
                  insert_window_ok<128, 512>() && insert_window_ok<2, 128>() && insert_window_ok<3, 256>() &&
                  insert_window_ok<1, 512, 32>() && insert_window_ok<2, 512, 32>() &&
                  insert_window_ok<3, 256, 32>(),
              "InsertConfig window choice");
static_assert(kvc::InsertConfig<2, 512, 32>::tokens_per_window(4096) == 2 &&
                  kvc::InsertConfig<2, 512, 32>::tokens_per_window(32768) == 8 &&
                  kvc::InsertConfig<2, 512, 32>::tokens_per_window(65536) == 16 &&
                  kvc::InsertConfig<2, 512, 32>::windows(65536).wide == 0 &&
                  kvc::InsertConfig<2, 512, 32>::blocks(65536, kvc::InsertConfig<2, 512, 32>::windows(65536)) == 1024,
              "large calls: a warp per record, 4 per block");
static_assert(kvc::InsertConfig<2, 512>::tokens_per_window(128) == 2 &&
                  kvc::InsertConfig<2, 512>::tokens_per_window(4096) == 4 &&
                  kvc::InsertConfig<2, 512>::tokens_per_window(32768) == 32 &&
                  kvc::InsertConfig<1, 512>::tokens_per_window(256) == 1 &&
                  kvc::InsertConfig<2, 512>::kThreads == 128 && kvc::InsertConfig<2, 128>::kThreads == 64,
              "ratio 2: one record per block at decode, 16 per block for a 32k prefill");
// With the GPU's size known (wave_blocks: blocks resident at once), the largest window whose
// blocks fill 7/8 of a wave. 528 = 132 SMs x 4 blocks (fp8_ds_mla warp records on an H100).
static_assert(kvc::InsertConfig<2, 512, 32>::tokens_per_window(4096, 528) == 2 &&   // 512 blocks
                  kvc::InsertConfig<2, 512, 32>::tokens_per_window(4480, 528) == 2 &&   // 280 at 4 tokens: too few
                  kvc::InsertConfig<2, 512, 32>::tokens_per_window(8192, 528) == 4 &&   // 512 blocks
                  kvc::InsertConfig<2, 512, 32>::tokens_per_window(32768, 528) == 16 &&
                  kvc::InsertConfig<2, 512, 32>::tokens_per_window(65536, 528) == 32 &&
                  kvc::InsertConfig<2, 512, 32>::tokens_per_window(1 << 22, 528) == 32 &&
                  kvc::InsertConfig<2, 512, 32>::tokens_per_window(2048, 528) == 2 &&   // less than a wave
                  kvc::InsertConfig<1, 512, 32>::tokens_per_window(4480, 528) == 2 &&
                  kvc::InsertConfig<1, 512, 32>::tokens_per_window(4096, 528) == 2 &&
                  kvc::InsertConfig<1, 512, 32>::tokens_per_window(2048, 528) == 1 &&
                  kvc::InsertConfig<2, 512, 32>::tokens_per_window(32768, 0) ==
                      kvc::InsertConfig<2, 512, 32>::tokens_per_window(32768),
              "Op B windows by waves");
// Where those windows need between one and two waves, the first ones take twice the window
// and the launch is one wave: mixed 2x2048+192x2 (4480 tokens) at ratios 2 and 1, 40000
// tokens; not where the windows fit one wave, are the largest already, or the wave is unknown.
namespace split {
using B2 = kvc::InsertConfig<2, 512, 32>;
using B1 = kvc::InsertConfig<1, 512, 32>;
constexpr kvc::detail::WindowSizes mixed2 = B2::windows(4480, 528), mixed1 = B1::windows(4480, 528),
                                   big = B2::windows(40000, 528);
static_assert(mixed2.window == 2 && mixed2.wide == 128 && B2::blocks(4480, mixed2) == 528 &&
                  mixed2.first_token(128) == 512 && mixed2.size(127) == 4 && mixed2.size(128) == 2 &&
                  mixed2.first_token(mixed2.count(4480) - 1) == 4478 &&
                  mixed1.window == 2 && mixed1.wide == 128 && B1::blocks(4480, mixed1) == 528 &&
                  big.window == 16 && big.wide == 388 && B2::blocks(40000, big) == 528 &&
                  big.first_token(big.count(40000) - 1) + big.size(big.count(40000) - 1) == 40000,
              "Op B: one wave with some windows twice as long");
static_assert(B2::windows(4096, 528).wide == 0 && B2::windows(8192, 528).wide == 0 &&
                  B2::windows(1 << 22, 528).wide == 0 && B2::windows(4480, 0).wide == 0 &&
                  kvc::InsertConfig<2, 512>::windows(4480).wide == 0 &&
                  kvc::InsertConfig<2, 512>::windows(4480, 528).wide == 0 &&
                  kvc::InsertConfig<1, 512>::windows(40000, 528).wide == 0,
              "Op B: no split within one wave, at the largest window, or without the wave");
}  // namespace split
}  // namespace
