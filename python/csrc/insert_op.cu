// SPDX-License-Identifier: Apache-2.0
// kvcompress torch package — rope_quant_insert (Op B, contract §2): the tensors become
// kvc::InsertParams (common.h), then kvc::insert validates and launches the instance
// <R, 512, Layout> of instance_lists.h (48 kernels) on the current stream; DeepSeek V3.2's 656-byte records
// (head dim 576, ratio 1) through their own instance.
#include "instance_lists.h"  // before any kvcompress header

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <kvcompress/launch/insert.cuh>

#include "common.h"
#include "ops.h"

namespace kvc_torch {

void rope_quant_insert(const at::Tensor& latent, const at::Tensor& positions,
                       const at::Tensor& cos_sin_cache, const at::Tensor& kv_cache,
                       const at::Tensor& slot_mapping, int64_t compress_ratio,
                       const std::optional<at::Tensor>& fp8_scale,
                       std::optional<c10::string_view> cache_layout, bool pdl) {
  constexpr const char* op = "rope_quant_insert";
  const int ratio = ratio_of(compress_ratio, op);
  KVC_TORCH_CHECK_VALUE(latent.defined(), op, ": latent is undefined");
  const at::Device device = latent.device();
  check_device(latent, op, "latent", device);
  check_dtype(latent, op, "latent", at::kBFloat16);
  check_dim(latent, op, "latent", 2, "2-D [num_tokens, head_dim]");
  check_last_dim_contiguous(latent, op, "latent");
  const int64_t T = token_count(slot_mapping, op, "slot_mapping");
  check_rows(latent, op, "latent", T);
  const kvc::CacheLayout layout = cache_layout_of(kv_cache, cache_layout, op);
  const int64_t D = cache_head_dim(kv_cache, layout, op);
  KVC_TORCH_CHECK_VALUE(latent.size(1) == D, op, ": latent has shape ", shape_str(latent),
                        " but kv_cache ", shape_str(kv_cache), " (", kv_cache.scalar_type(),
                        ") holds rows of head dim ", D);

  kvc::InsertParams p;
  p.ratio = ratio;
  p.head_dim = static_cast<int>(D);
  p.num_tokens = T;
  p.latent = static_cast<const kvc::bf16_t*>(latent.data_ptr());
  p.latent_stride_elems = row_stride_elems(latent, D);
  p.positions = index_tensor(positions, op, "positions", T, device);
  p.record = record_args(op, cos_sin_cache, kv_cache, slot_mapping, "slot_mapping", fp8_scale, T,
                         device, layout);
  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (layout == kvc::CacheLayout::kFp8DsMlaV32) {
    // DeepSeek V3.2 keeps one record per token (no pooling): its head dim 576 is outside
    // KVC_HEAD_DIMS, so its one instance is launched directly.
    KVC_TORCH_CHECK_VALUE(ratio == 1, op, ": cache layout fp8_ds_mla_v32 (DeepSeek V3.2, one "
                          "record per token) is compiled in this package for compress_ratio 1, got ",
                          ratio);
    throw_if_error(kvc::launch_insert<1, kvc::Fp8DsMlaV32Layout::kHeadDim, kvc::Fp8DsMlaV32Layout>(
                       p, stream, kvc::LaunchOptions{pdl}),
                   op);
    return;
  }
  throw_if_error(kvc::insert(p, stream, kvc::LaunchOptions{pdl}), op);
}

}  // namespace kvc_torch
