// Compile tier: every Op B kernel instance (ratio x head dim x layout). Never run.
#include <kvcompress/launch/insert.cuh>

kvc::Status kvc_compile_tier_insert(const kvc::InsertParams& p, cudaStream_t stream) {
  return kvc::insert(p, stream);
}
