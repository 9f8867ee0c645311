// SPDX-License-Identifier: Apache-2.0
// Compile tier: every Op B kernel instance (ratio x head dim x layout). Never run.
#include <kvcompress/launch/insert.cuh>

kvc::Status kvc_compile_tier_insert(const kvc::InsertParams& p, cudaStream_t stream) {
  return kvc::insert(p, stream);
}

// The launch's window choice (InsertConfig::tokens_per_block): one token index per lane at
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
         Cfg::tokens_per_block(1) == Cfg::kGroups * small && Cfg::kGroups * Cfg::kRowThreads == Cfg::kThreads &&
         Cfg::Row::kThreads == Cfg::kRowThreads && Cfg::Row::kVecs * Cfg::kVecElems * Cfg::kRowThreads == D;
}
static_assert(insert_window_ok<1, 512>() && insert_window_ok<2, 512>() && insert_window_ok<4, 512>() &&
                  insert_window_ok<128, 512>() && insert_window_ok<2, 128>() && insert_window_ok<3, 256>() &&
                  insert_window_ok<1, 512, 32>() && insert_window_ok<2, 512, 32>() &&
                  insert_window_ok<3, 256, 32>(),
              "InsertConfig window choice");
static_assert(kvc::InsertConfig<2, 512, 32>::tokens_per_block(4096) == 8 &&
                  kvc::InsertConfig<2, 512, 32>::tokens_per_block(32768) == 32 &&
                  kvc::InsertConfig<2, 512, 32>::tokens_per_block(65536) == 64,
              "large calls: a warp per record, 4 per block");
static_assert(kvc::InsertConfig<2, 512>::tokens_per_block(128) == 2 &&
                  kvc::InsertConfig<2, 512>::tokens_per_block(4096) == 4 &&
                  kvc::InsertConfig<2, 512>::tokens_per_block(32768) == 32 &&
                  kvc::InsertConfig<1, 512>::tokens_per_block(256) == 1 &&
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
}  // namespace
