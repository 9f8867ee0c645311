// SPDX-License-Identifier: Apache-2.0
// Compile tier: the KVC_DEBUG build (kernel/contract_check.cuh hooked in before every op)
// for one configuration, ratio 2, head dim 512, fp32 input, fp8_ds_mla records: Op A, Op B
// and the fused op through the instance templates. Never run. KVC_DEBUG is defined here,
// for this translation unit only, as a user would on the command line.
#ifndef KVC_DEBUG
#define KVC_DEBUG 1
#endif
#include <kvcompress/launch/insert.cuh>
#include <kvcompress/launch/fused.cuh>

kvc::Status kvc_compile_tier_debug_compress(const kvc::CompressParams& p, cudaStream_t stream) {
  return kvc::launch_compress<2, 512, float>(p, stream);
}

kvc::Status kvc_compile_tier_debug_insert(const kvc::InsertParams& p, cudaStream_t stream) {
  return kvc::launch_insert<2, 512, kvc::Fp8DsMlaLayout>(p, stream);
}

kvc::Status kvc_compile_tier_debug_fused(const kvc::FusedParams& p, cudaStream_t stream) {
  return kvc::launch_fused<2, 512, float, kvc::Fp8DsMlaLayout>(p, stream);
}
