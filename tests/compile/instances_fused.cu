// SPDX-License-Identifier: Apache-2.0
// Compile tier: every fused kernel instance (ratio x head dim x dtype x layout). Never run.
#include <kvcompress/launch/fused.cuh>

kvc::Status kvc_compile_tier_fused(const kvc::FusedParams& p, cudaStream_t stream) {
  return kvc::fused(p, stream);
}
