// SPDX-License-Identifier: Apache-2.0
// kvcompress torch package — fused_save_compress_norm (Op A, contract §1): the tensors become
// kvc::CompressParams (common.h), then kvc::compress validates and launches the instance
// <R, 512, In> of instance_lists.h (16 kernels) on the current stream.
#include "instance_lists.h"  // before any kvcompress header

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
  KVC_TORCH_CHECK_VALUE(latent_out.dim() == 2, op,
                        ": latent_out must be 2-D [num_tokens, head_dim], got shape ",
                        shape_str(latent_out));
  const kvc::CompressParams p = compress_params(
      op, kv_score, positions, state_cache, slot_mapping, query_start_loc, token_to_req_indices,
      rms_norm_weight, rms_norm_eps, ratio, /*head_dim=*/latent_out.size(1), &latent_out);
  const c10::cuda::CUDAGuard guard(kv_score.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  throw_if_error(kvc::compress(p, stream, kvc::LaunchOptions{pdl}), op);
}

}  // namespace kvc_torch
