// SPDX-License-Identifier: Apache-2.0
// kvcompress torch package — fused_compress_insert (contract §3): Op A and Op B in one launch,
// the record written from registers, the latent optional. The tensors become kvc::FusedParams
// (common.h), then kvc::fused validates and launches the instance <R, 512, In, Layout> of
// instance_lists.h (96 kernels, the largest of the three files) on the current stream.
#include "instance_lists.h"  // before any kvcompress header

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
                           const std::optional<at::Tensor>& fp8_scale,
                           std::optional<c10::string_view> cache_layout, bool pdl) {
  constexpr const char* op = "fused_compress_insert";
  const int ratio = ratio_of(compress_ratio, op);
  const kvc::CacheLayout layout = cache_layout_of(kv_cache, cache_layout, op);
  KVC_TORCH_CHECK_VALUE(layout != kvc::CacheLayout::kFp8DsMlaV32, op,
                        ": cache layout fp8_ds_mla_v32 (DeepSeek V3.2, head dim 576) is written "
                        "by rope_quant_insert only; this package compresses head dim ", kHeadDim);
  const int64_t D = cache_head_dim(kv_cache, layout, op);
  const at::Tensor* latent =
      latent_out.has_value() && latent_out->defined() ? &*latent_out : nullptr;
  kvc::FusedParams p;
  p.compress = compress_params(op, kv_score, positions, state_cache, slot_mapping,
                               query_start_loc, token_to_req_indices, rms_norm_weight,
                               rms_norm_eps, ratio, D, latent);
  p.record = record_args(op, cos_sin_cache, kv_cache, kv_slot_mapping, "kv_slot_mapping",
                         fp8_scale, p.compress.num_tokens, kv_score.device(), layout);
  const c10::cuda::CUDAGuard guard(kv_score.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  throw_if_error(kvc::fused(p, stream, kvc::LaunchOptions{pdl}), op);
}

}  // namespace kvc_torch
