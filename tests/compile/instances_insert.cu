// Compile tier: every Op B kernel instance (ratio x head dim x layout). Never run.
#include <kvcompress/launch/insert.cuh>

kvc::Status kvc_compile_tier_insert(const kvc::InsertParams& p, cudaStream_t stream) {
  return kvc::insert(p, stream);
}

// The launch's window choice (InsertConfig::tokens_per_block): at most one token per thread,
// the small window (about one writer per warp) for decode-sized calls, doubling up to the
// large window (about kMaxRecords writers) while the call still has kMinBlocks blocks.
namespace {
template <int R, int D>
constexpr bool insert_window_ok() {
  using Cfg = kvc::InsertConfig<R, D>;
  constexpr int small = Cfg::tokens_per_block(1);
  constexpr int large = Cfg::tokens_per_block(int64_t{1} << 30);
  return small == Cfg::kSmallWindow && large == Cfg::kLargeWindow && large <= Cfg::kThreads &&
         large <= Cfg::kMaxTokensPerBlock && large % small == 0 && kvc::is_pow2(large / small);
}
static_assert(insert_window_ok<1, 512>() && insert_window_ok<2, 512>() && insert_window_ok<4, 512>() &&
                  insert_window_ok<128, 512>() && insert_window_ok<2, 128>() && insert_window_ok<3, 256>(),
              "InsertConfig window choice");
static_assert(kvc::InsertConfig<2, 512>::tokens_per_block(128) == 8 &&
                  kvc::InsertConfig<2, 512>::tokens_per_block(32768) == 64 &&
                  kvc::InsertConfig<2, 512>::tokens_per_block(512 * 16) == 16,
              "ratio 2: one record per warp at decode, 32 per block for a 32k prefill");
}  // namespace
