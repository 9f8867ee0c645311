// SPDX-License-Identifier: Apache-2.0
// 05_torch_op — rope_quant_insert (Op B, contract §2): validated by kvc::insert_can_implement,
// then dispatched at run time over the compiled ratios and the three cache layouts to
// kvc::launch_insert<R, 512, Layout> (24 kernels; head dim 512 only).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <kvcompress/launch/insert.cuh>

#include "common.h"
#include "ops.h"

namespace kvc_torch {

void rope_quant_insert(const at::Tensor& latent, const at::Tensor& positions,
                       const at::Tensor& cos_sin_cache, const at::Tensor& kv_cache,
                       const at::Tensor& slot_mapping, int64_t compress_ratio,
                       const std::optional<at::Tensor>& fp8_scale, bool pdl) {
  constexpr const char* op = "rope_quant_insert";
  const int ratio = ratio_of(compress_ratio, op);
  KVC_TORCH_CHECK_VALUE(latent.defined(), op, ": latent is undefined");
  const at::Device device = latent.device();
  check_device(latent, op, "latent", device);
  check_dtype(latent, op, "latent", at::kBFloat16);
  check_dim(latent, op, "latent", 2, "2-D [num_tokens, head_dim]");
  check_last_dim_contiguous(latent, op, "latent");
  const int64_t T = latent.size(0);
  const int64_t D = cache_head_dim(kv_cache, op);
  KVC_TORCH_CHECK_VALUE(latent.size(1) == D, op, ": latent has shape ", shape_str(latent),
                    " but kv_cache ", shape_str(kv_cache), " (", kv_cache.scalar_type(),
                    ") holds rows of head dim ", D);

  kvc::InsertParams p;
  p.ratio = ratio;
  p.head_dim = static_cast<int>(D);
  p.num_tokens = T;
  p.latent = static_cast<const kvc::bf16_t*>(latent.data_ptr());
  p.latent_stride_elems = T <= 1 ? D : latent.stride(0);
  p.positions = index_tensor(positions, op, "positions", T, device);
  p.record = record_args(op, cos_sin_cache, kv_cache, slot_mapping, "slot_mapping", fp8_scale, T,
                         device);
  const c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  kvc::Status s = kvc::insert_can_implement(p);
  if (s.ok())  // every compiled ratio and cache layout, head dim 512 only (common.h)
    s = kvc::dispatch_ratio(p.ratio, [&](auto r) {
      return kvc::dispatch_layout<kHeadDim>(p.record.layout, [&](auto layout) {
        return kvc::launch_insert<decltype(r)::value, kHeadDim, decltype(layout)>(
            p, stream, kvc::LaunchOptions{pdl});
      });
    });
  throw_if_error(s, op);
}

}  // namespace kvc_torch
