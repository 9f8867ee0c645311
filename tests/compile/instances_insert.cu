// Compile tier: every Op B kernel instance (ratio x head dim x layout). Never run.
#include <kvcompress/launch/insert.cuh>

kvc::Status kvc_compile_tier_insert(const kvc::InsertParams& p, cudaStream_t stream) {
  return kvc::insert(p, stream);
}

// The launch's window choice (InsertConfig::tokens_per_block): one token index per lane at
// most, R tokens per block (about one record) for decode-sized calls, doubling up to 32
// while the call still has kMinBlocks blocks; the block is the threads of one record.
namespace {
template <int R, int D>
constexpr bool insert_window_ok() {
  using Cfg = kvc::InsertConfig<R, D>;
  constexpr int small = Cfg::tokens_per_block(1);
  constexpr int large = Cfg::tokens_per_block(int64_t{1} << 30);
  return small == Cfg::kSmallWindow && large <= Cfg::kLargeWindow && 2 * large > Cfg::kLargeWindow &&
         large % small == 0 && kvc::is_pow2(large / small) && Cfg::kThreads == Cfg::kRowThreads &&
         Cfg::Row::kThreads == Cfg::kThreads && Cfg::Row::kVecs * Cfg::kVecElems * Cfg::kThreads == D;
}
static_assert(insert_window_ok<1, 512>() && insert_window_ok<2, 512>() && insert_window_ok<4, 512>() &&
                  insert_window_ok<128, 512>() && insert_window_ok<2, 128>() && insert_window_ok<3, 256>(),
              "InsertConfig window choice");
static_assert(kvc::InsertConfig<2, 512>::tokens_per_block(128) == 2 &&
                  kvc::InsertConfig<2, 512>::tokens_per_block(4096) == 4 &&
                  kvc::InsertConfig<2, 512>::tokens_per_block(32768) == 32 &&
                  kvc::InsertConfig<1, 512>::tokens_per_block(256) == 1 &&
                  kvc::InsertConfig<2, 512>::kThreads == 128 && kvc::InsertConfig<2, 128>::kThreads == 64,
              "ratio 2: one record per block at decode, 16 per block for a 32k prefill");
}  // namespace
