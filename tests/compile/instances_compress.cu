// SPDX-License-Identifier: Apache-2.0
// Compile tier: every Op A kernel instance of the closed dispatch lists (ratio x head dim x
// dtype), for every architecture in KVC_COMPILE_TIER_ARCHITECTURES. Never run.
#include <kvcompress/launch/compress.cuh>

kvc::Status kvc_compile_tier_compress(const kvc::CompressParams& p, cudaStream_t stream) {
  return kvc::compress(p, stream);
}

// The block's tokens (CompressConfig::kTokensPerBlock): small ratios: one R-token window per
// row group (the block's threads, or each of 4 warps with RowThreads = 32); split groups: 2
// tokens per warp (the longest window the kernel runs and the launch picks).
namespace {
template <int R, int D = 512, int RowThreads = 0>
constexpr bool window_ok() {
  using Cfg = kvc::CompressConfig<R, D, float, RowThreads>;
  return Cfg::kTokensPerBlock == (Cfg::kSplitGroup ? 2 * Cfg::kWarps : R * Cfg::kWindowsPerBlock) &&
         (Cfg::kSplitGroup ? Cfg::kRowThreads == 32
                           : Cfg::kThreads == Cfg::kRowThreads || (Cfg::kRowThreads == 32 && Cfg::kWarps == 4)) &&
         Cfg::kVecs * Cfg::kVecElems * Cfg::kRowThreads == D;
}
static_assert(window_ok<1>() && window_ok<2>() && window_ok<4>() && window_ok<8>() &&
                  window_ok<16>() && window_ok<32>() && window_ok<64>() && window_ok<128>() &&
                  window_ok<3>() && window_ok<48>() && window_ok<2, 384>() && window_ok<4, 128>() &&
                  window_ok<2, 64>() && window_ok<1, 512, 32>() && window_ok<2, 512, 32>() &&
                  window_ok<4, 512, 32>() && window_ok<2, 384, 32>(),
              "CompressConfig window choice");
static_assert(kvc::CompressConfig<2, 512, float>::kRowThreads == 128 &&
                  kvc::CompressConfig<2, 384, float>::kRowThreads == 64 &&
                  kvc::CompressConfig<2, 64, float>::kRowThreads == 32 &&
                  kvc::CompressConfig<128, 512, float>::kRowThreads == 32,
              "small ratios: 4 channels per thread at head dim 512; split groups: a warp per row");
static_assert(kvc::CompressConfig<2, 512, float, 32>::kRowThreads == 32 &&
                  kvc::CompressConfig<2, 512, float, 32>::kTokensPerBlock == 8 &&
                  kvc::CompressConfig<2, 512, float, 32>::kChannels == 16,
              "large calls at small ratios: a warp per row, 4 windows per block");
// Wide windows (warp rows at ratios 2 .. 15): R x 2^k tokens a warp, the window's lanes plus
// the R - 1 before it within 32; the launch takes the widest window whose blocks fill 7/8 of
// a wave (528 blocks: an H100's 132 SMs x 4), R when the wave is unknown.
using W2 = kvc::CompressConfig<2, 512, float, 32>;
static_assert(W2::kWideWindows && W2::kMaxWindow == 16 && kvc::CompressConfig<4, 512, float, 32>::kMaxWindow == 16 &&
                  kvc::CompressConfig<3, 512, float, 32>::kMaxWindow == 24 &&
                  kvc::CompressConfig<8, 512, float, 32>::kMaxWindow == 16 &&
                  kvc::CompressConfig<15, 512, float, 32>::kMaxWindow == 15 &&
                  kvc::CompressConfig<2, 64, float>::kWideWindows,
              "wide windows: the widest that fits a warp's lanes");
static_assert(!kvc::CompressConfig<1, 512, float, 32>::kWideWindows && !kvc::CompressConfig<2, 512, float>::kWideWindows &&
                  !kvc::CompressConfig<16, 512, float>::kWideWindows &&
                  kvc::CompressConfig<2, 512, float>::windows(8192, 528).window == 2 &&
                  kvc::CompressConfig<2, 512, float>::windows(8192, 528).wide == 0 &&
                  kvc::CompressConfig<128, 512, float>::windows(1 << 20, 528).window ==
                      kvc::CompressConfig<128, 512, float>::kTokensPerBlock,
              "ratio 1, block rows and split groups keep their window");
// Split groups: windows of up to 16 tokens at ratio 128 (128-token windows measured slower
// at prefill, bench/NOTES.md 49).
using S128 = kvc::CompressConfig<128, 512, float>;
static_assert(S128::kTokensPerBlock == 16 && S128::windows(32768, 132, 9).window == 16 &&
                  S128::windows(8192, 132, 9).window == 16 && S128::windows(128, 132, 9).window == 4,
              "ratio 128: the launch's windows");
constexpr bool same(kvc::detail::WindowSizes a, int window, int wide) { return a.window == window && a.wide == wide; }
// Op A's warp rows keep Ratio-token windows where a second wave would be more than 1/8
// full or there is none (prefill 1x8192 and 1x32768 on an H100's 528-block wave: 1.94 and
// 7.8 waves; wider windows measured slower, bench/NOTES.md 43), and when the wave is unknown.
static_assert(same(W2::windows(8192, 528), 2, 0) && same(W2::windows(32768, 528), 2, 0) &&
                  same(W2::windows(1 << 20, 528), 2, 0) && same(W2::windows(4480, 0), 2, 0) &&
                  same(W2::windows(4000, 396), 2, 0) &&
                  same(kvc::CompressConfig<4, 512, float, 32>::windows(32768, 264), 4, 0),
              "wide windows: Ratio tokens a warp");
// Mixed 2x2048+192x2 (4480 tokens): 2240 two-token windows against 2112 warps a wave; the
// first 128 take four tokens and the launch is one wave. At most 1/8 of a wave's warps take
// two windows (264 of 2112: 4752 tokens); ratio 15 never (30 tokens do not fit a warp).
static_assert(same(W2::windows(4480, 528), 2, 128) && W2::blocks(4480, W2::windows(4480, 528)) == 528 &&
                  same(W2::windows(4752, 528), 2, 264) && same(W2::windows(4754, 528), 2, 0) &&
                  same(kvc::CompressConfig<15, 512, float, 32>::windows(15 * 140, 132), 15, 0),
              "wide windows: one wave with some windows twice as long");
// Only windows other than Ratio tokens run the instance that reads them at run time
// (compress_kernel without RatioWindowsOnly: more registers); block rows never do.
static_assert(!W2::reads_windows(W2::windows(8192, 528)) && W2::reads_windows(W2::windows(4480, 528)) &&
                  W2::reads_windows(kvc::detail::WindowSizes{4, 0}) &&
                  !kvc::CompressConfig<2, 512, float>::reads_windows(kvc::CompressConfig<2, 512, float>::windows(64, 528)) &&
                  !kvc::CompressConfig<1, 512, float, 32>::reads_windows(kvc::detail::WindowSizes{1, 0}),
              "which windows need the run-time-window instance");
// Split groups in clusters (sm_90): as many blocks as leave each warp one batch of members,
// at most 4 (rank 0 holds a slot per peer; ratio 128: 8 warps x 4 members x 4 blocks, at
// head dim 128 8 members a batch, 2 blocks; ratio 64: 4 blocks; ratio 16: none); none
// before sm_90 and for every small ratio.
static_assert(kvc::CompressConfig<128, 512, float>::cluster_blocks(9) == 4 &&
                  kvc::CompressConfig<128, 512, kvc::bf16_t>::cluster_blocks(10) == 4 &&
                  kvc::CompressConfig<128, 128, float>::cluster_blocks(9) == 2 &&
                  kvc::CompressConfig<64, 512, float>::cluster_blocks(9) == 4 &&
                  kvc::CompressConfig<32, 512, float>::cluster_blocks(9) == 2 &&
                  kvc::CompressConfig<16, 512, float>::cluster_blocks(9) == 1 &&
                  kvc::CompressConfig<128, 512, float>::cluster_blocks(8) == 1 &&
                  kvc::CompressConfig<4, 512, float>::cluster_blocks(9) == 1 &&
                  kvc::CompressConfig<2, 512, float, 32>::cluster_blocks(9) == 1,
              "split groups: cluster sizes");
// ... and at a launch, the largest up to that (cluster_blocks) that keeps the clusters in
// one wave (132 SMs, one block an SM): 8 windows 4, 32 windows 4, 48 windows 2, 256 windows
// (1024x4 in 16-token windows) and every prefill none; none when the wave is unknown or
// before sm_90.
using C128 = kvc::CompressConfig<128, 512, float>;
static_assert(C128::launch_cluster_blocks(9, 8, 132) == 4 && C128::launch_cluster_blocks(9, 32, 132) == 4 &&
                  C128::launch_cluster_blocks(9, 48, 132) == 2 && C128::launch_cluster_blocks(9, 66, 132) == 2 &&
                  C128::launch_cluster_blocks(9, 67, 132) == 1 && C128::launch_cluster_blocks(9, 256, 132) == 1 &&
                  C128::launch_cluster_blocks(9, 8, 0) == 1 && C128::launch_cluster_blocks(8, 8, 132) == 1 &&
                  kvc::CompressConfig<32, 512, float>::launch_cluster_blocks(9, 8, 132) == 2,
              "split groups: one wave of clusters");
// The split-group window and cluster (sm_90, a 132-block wave): the largest cluster up to 4
// that fits one wave with some window, then the shortest window: 64x2 (128 tokens) 4-token
// windows in clusters of 4; 256x2 16 and 4; 128x6 16 and 2; 1024x4 and prefill 16 and 1;
// without clusters (cc 8) or an unknown wave, no cluster.
static_assert(C128::cluster_blocks(9) == 4 && C128::cluster_blocks(8) == 1 &&
                  C128::windows(128, 132, 9).window == 4 && C128::windows(512, 132, 9).window == 16 &&
                  C128::windows(768, 132, 9).window == 16 && C128::windows(4096, 132, 9).window == 16 &&
                  C128::windows(1 << 20, 132, 9).window == 16 && C128::windows(128, 0, 9).window == 16 &&
                  C128::windows(128, 132).window == 1 && C128::windows(128, 132, 9).wide == 0 &&
                  C128::launch_cluster_blocks(9, C128::blocks(128, C128::windows(128, 132, 9)), 132) == 4 &&
                  C128::launch_cluster_blocks(9, C128::blocks(512, C128::windows(512, 132, 9)), 132) == 4 &&
                  C128::launch_cluster_blocks(9, C128::blocks(768, C128::windows(768, 132, 9)), 132) == 2 &&
                  C128::launch_cluster_blocks(9, C128::blocks(4096, C128::windows(4096, 132, 9)), 132) == 1,
              "split groups: windows and clusters by waves");
// Split groups load a warp's members in batches of kWideBatch where its share allows (ratio
// 128, head dim 512: 4 rows, one batch a warp in clusters of up to 4), else kBatch (the unit
// a cluster of kMaxClusterBlocks splits by).
static_assert(C128::kBatch == 2 && C128::kWideBatch == 4 && kvc::CompressConfig<32, 512, float>::kWideBatch == 4 &&
                  kvc::CompressConfig<16, 512, float>::kWideBatch == 2 &&
                  kvc::CompressConfig<128, 128, float>::kWideBatch == 16 &&
                  kvc::CompressConfig<2, 512, float, 32>::kWideBatch == kvc::CompressConfig<2, 512, float, 32>::kBatch,
              "split groups: the wide batch");
// The windows compress_kernel runs (it writes nothing for others): split groups 1 ..
// kTokensPerBlock tokens, wide windows multiples of Ratio up to kMaxWindow.
static_assert(C128::usable_windows({1, 0}) && C128::usable_windows({16, 0}) && !C128::usable_windows({0, 0}) &&
                  !C128::usable_windows({17, 0}) && !C128::usable_windows({128, 0}) && !C128::usable_windows({32, 0}) &&
                  !C128::usable_windows({8, 1}) && !C128::usable_windows({-4, 0}) &&
                  W2::usable_windows({2, 0}) && W2::usable_windows({16, 0}) && W2::usable_windows({8, 5}) &&
                  W2::usable_windows({6, 0}) && !W2::usable_windows({3, 0}) && !W2::usable_windows({0, 0}) &&
                  !W2::usable_windows({18, 0}) && !W2::usable_windows({16, 1}) && !W2::usable_windows({2, -1}),
              "usable windows");
template <class Cfg>
constexpr bool launch_windows_usable(int cc_major) {
  for (int64_t wave : {0, 132, 528})
    for (int64_t tokens = 1; tokens <= 6000; tokens += tokens < 600 ? 1 : 53)
      if (!Cfg::usable_windows(Cfg::windows(tokens, wave, cc_major))) return false;
  return true;
}
static_assert(launch_windows_usable<C128>(9) && launch_windows_usable<C128>(8) && launch_windows_usable<W2>(9) &&
                  launch_windows_usable<kvc::CompressConfig<4, 512, float, 32>>(9) &&
                  launch_windows_usable<kvc::CompressConfig<32, 512, float>>(9),
              "every launch's windows are usable");
}  // namespace
