// Compile tier: every Op A kernel instance of the closed dispatch lists (ratio x head dim x
// dtype), for every architecture in KVC_COMPILE_TIER_ARCHITECTURES. Never run.
#include <kvcompress/launch/compress.cuh>

kvc::Status kvc_compile_tier_compress(const kvc::CompressParams& p, cudaStream_t stream) {
  return kvc::compress(p, stream);
}
