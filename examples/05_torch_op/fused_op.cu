// SPDX-License-Identifier: Apache-2.0
// 05_torch_op — fused_compress_insert (contract §3): Op A and Op B in one launch, the record
// written from registers, the latent optional. Validated by kvc::fused_can_implement, then
// dispatched at run time over ratios x {fp32, bf16} x cache layouts to
// kvc::launch_fused<R, 512, In, Layout> (48 kernels, the largest of the three files).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <kvcompress/launch/fused.cuh>

#include "common.h"
#include "ops.h"

namespace kvc_torch {

void fused_compress_insert(const at::Tensor& kv_score, const at::Tensor& positions,
                           const std::optional<at::Tensor>& state_cache,
                           const at::Tensor& slot_mapping,
                           const std::optional<at::Tensor>& query_start_loc,
                           const std::optional<at::Tensor>& token_to_req_indices,
                           const at::Tensor& rms_norm_weight, double rms_norm_eps,
                           int64_t compress_ratio, const at::Tensor& cos_sin_cache,
                           const at::Tensor& kv_cache, const at::Tensor& kv_slot_mapping,
                           const std::optional<at::Tensor>& latent_out,
                           const std::optional<at::Tensor>& fp8_scale, bool pdl) {
  constexpr const char* op = "fused_compress_insert";
  const int ratio = ratio_of(compress_ratio, op);
  const int64_t D = cache_head_dim(kv_cache, op);
  const at::Tensor* latent =
      latent_out.has_value() && latent_out->defined() ? &*latent_out : nullptr;
  kvc::FusedParams p;
  p.compress = compress_params(op, kv_score, positions, state_cache, slot_mapping,
                               query_start_loc, token_to_req_indices, rms_norm_weight,
                               rms_norm_eps, ratio, D, latent);
  p.record = record_args(op, cos_sin_cache, kv_cache, kv_slot_mapping, "kv_slot_mapping",
                         fp8_scale, kv_score.size(0), kv_score.device());
  const c10::cuda::CUDAGuard guard(kv_score.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  kvc::Status s = kvc::fused_can_implement(p);
  if (s.ok())  // every compiled ratio, dtype and cache layout, head dim 512 only (common.h)
    s = kvc::dispatch_ratio(p.compress.ratio, [&](auto r) {
      return kvc::dispatch_dtype(p.compress.dtype, [&](auto element) {
        return kvc::dispatch_layout<kHeadDim>(p.record.layout, [&](auto layout) {
          return kvc::launch_fused<decltype(r)::value, kHeadDim, decltype(element),
                                   decltype(layout)>(p, stream, kvc::LaunchOptions{pdl});
        });
      });
    });
  throw_if_error(s, op);
}

}  // namespace kvc_torch
