// SPDX-License-Identifier: Apache-2.0
// 05_torch_op — fused_save_compress_norm (Op A, contract §1): validated by
// kvc::compress_can_implement, then dispatched at run time over the compiled ratios and
// {fp32, bf16} to kvc::launch_compress<R, 512, In> (16 kernels; head dim 512 only).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <kvcompress/launch/compress.cuh>

#include "common.h"
#include "ops.h"

namespace kvc_torch {

void fused_save_compress_norm(const at::Tensor& kv_score, const at::Tensor& positions,
                              const std::optional<at::Tensor>& state_cache,
                              const at::Tensor& slot_mapping,
                              const std::optional<at::Tensor>& query_start_loc,
                              const std::optional<at::Tensor>& token_to_req_indices,
                              const at::Tensor& rms_norm_weight, double rms_norm_eps,
                              int64_t compress_ratio, const at::Tensor& latent_out, bool pdl) {
  constexpr const char* op = "fused_save_compress_norm";
  const int ratio = ratio_of(compress_ratio, op);
  KVC_TORCH_CHECK_VALUE(latent_out.defined(), op, ": latent_out is undefined");
  KVC_TORCH_CHECK_VALUE(latent_out.dim() == 2, op, ": latent_out must be 2-D [num_tokens, head_dim], got shape ",
                    shape_str(latent_out));
  const kvc::CompressParams p = compress_params(
      op, kv_score, positions, state_cache, slot_mapping, query_start_loc, token_to_req_indices,
      rms_norm_weight, rms_norm_eps, ratio, /*head_dim=*/latent_out.size(1), &latent_out);
  const c10::cuda::CUDAGuard guard(kv_score.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  kvc::Status s = kvc::compress_can_implement(p);
  if (s.ok())  // every compiled ratio and dtype, head dim 512 only (common.h)
    s = kvc::dispatch_ratio(p.ratio, [&](auto r) {
      return kvc::dispatch_dtype(p.dtype, [&](auto element) {
        return kvc::launch_compress<decltype(r)::value, kHeadDim, decltype(element)>(
            p, stream, kvc::LaunchOptions{pdl});
      });
    });
  throw_if_error(s, op);
}

}  // namespace kvc_torch
