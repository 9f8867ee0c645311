// SPDX-License-Identifier: Apache-2.0
// Compile tier: DeepSeek V3.2's head dim 576 with its 656-byte records (Fp8DsMlaV32Layout),
// outside the default head-dim list, through the instance templates: Op A, Op B (both row
// mappings) and the fused op at ratios 1 and 2, fp32 and bf16 input. Never run.
#include <kvcompress/launch/compress.cuh>
#include <kvcompress/launch/fused.cuh>
#include <kvcompress/launch/insert.cuh>

template <int R>
kvc::Status kvc_compile_tier_v32(const kvc::CompressParams& a, const kvc::InsertParams& b,
                                 const kvc::FusedParams& f, cudaStream_t stream) {
  kvc::Status s = kvc::launch_compress<R, 576, float>(a, stream);
  if (s.ok()) s = kvc::launch_compress<R, 576, kvc::bf16_t>(a, stream);
  if (s.ok()) s = kvc::launch_insert<R, 576, kvc::Fp8DsMlaV32Layout>(b, stream);
  if (s.ok()) s = kvc::launch_fused<R, 576, float, kvc::Fp8DsMlaV32Layout>(f, stream);
  if (s.ok()) s = kvc::launch_fused<R, 576, kvc::bf16_t, kvc::Fp8DsMlaV32Layout>(f, stream);
  return s;
}
template kvc::Status kvc_compile_tier_v32<1>(const kvc::CompressParams&, const kvc::InsertParams&,
                                             const kvc::FusedParams&, cudaStream_t);
template kvc::Status kvc_compile_tier_v32<2>(const kvc::CompressParams&, const kvc::InsertParams&,
                                             const kvc::FusedParams&, cudaStream_t);
