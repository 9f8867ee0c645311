// Compile tier: every Op A kernel instance of the closed dispatch lists (ratio x head dim x
// dtype), for every architecture in KVC_COMPILE_TIER_ARCHITECTURES. Never run.
#include <kvcompress/launch/compress.cuh>

kvc::Status kvc_compile_tier_compress(const kvc::CompressParams& p, cudaStream_t stream) {
  return kvc::compress(p, stream);
}

// The launch's window choice (CompressConfig::tokens_per_block): within the shared-memory
// plan arrays, the warp path's Ratio * kWarps, 2 tokens per warp for split groups.
namespace {
template <int R>
constexpr bool window_ok() {
  using Cfg = kvc::CompressConfig<R, 512, float>;
  constexpr int small = Cfg::tokens_per_block(1), large = Cfg::tokens_per_block(int64_t{1} << 30);
  return small <= Cfg::kMaxTokensPerBlock && large <= Cfg::kMaxTokensPerBlock &&
         small == (Cfg::kSplitGroup ? 2 * Cfg::kWarps : R * Cfg::kWarps);
}
static_assert(window_ok<1>() && window_ok<2>() && window_ok<4>() && window_ok<8>() &&
                  window_ok<16>() && window_ok<32>() && window_ok<64>() && window_ok<128>() &&
                  window_ok<3>() && window_ok<48>(),
              "CompressConfig window choice");
}  // namespace
