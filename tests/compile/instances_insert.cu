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

// The kernel's launch argument (insert_launch_args): the window choice, the cache bound
// (num_pages * block_size, or none), the error counters as given.
constexpr kvc::InsertParams insert_params_with(int64_t tokens, int64_t pages, int block_size,
                                               kvc::ErrorCounters* errors) {
  kvc::InsertParams p;
  p.num_tokens = tokens;
  p.record.cache.num_pages = pages;
  p.record.cache.block_size = block_size;
  p.errors = errors;
  return p;
}
constexpr kvc::InsertLaunch bounded = kvc::insert_launch_args<2, 512>(insert_params_with(4096, 100, 64, nullptr));
constexpr kvc::InsertLaunch unbounded = kvc::insert_launch_args<2, 512, 32>(insert_params_with(32768, -1, 64, nullptr));
static_assert(bounded.tokens_per_block == 4 && bounded.cache_slot_end == 6400 && bounded.errors == nullptr,
              "insert_launch_args: window and cache bound");
static_assert(unbounded.tokens_per_block == 32 && unbounded.cache_slot_end == INT64_MAX,
              "insert_launch_args: no num_pages, no bound");
}  // namespace
