// kvcompress — Op B and fused-op host API: validate, dispatch, launch.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "../kernel/fused_kernel.cuh"
#include "../kernel/insert_kernel.cuh"
#include "insert.hpp"

namespace kvc {

namespace detail {
inline Status launch_status(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return Status::cuda(err, std::string(kernel) + " launch failed: " + cudaGetErrorString(err));
  return Status::success();
}
}  // namespace detail

/// Runs Op B (SPEC §2, vLLM's rope_quant_insert) on `stream`. Validates first and writes
/// nothing when validation fails. Graph-capturable (no sync, no allocation).
///
///   kvc::InsertParams p;  /* latent, positions, record.{cos_sin, cache_slot, cache, layout} */
///   kvc::Status s = kvc::insert(p, stream);
inline Status insert(const InsertParams& p, cudaStream_t stream) {
  Status s = insert_can_implement(p);
  if (!s.ok() || p.num_tokens == 0) return s;
  return dispatch_ratio(p.ratio, [&](auto ratio) {
    return dispatch_head_dim(p.head_dim, [&](auto head_dim) {
      constexpr int R = decltype(ratio)::value, D = decltype(head_dim)::value;
      return dispatch_layout<D>(p.record.layout, [&](auto layout) {
        using Cfg = InsertConfig<R, D>;
        const int64_t blocks = (p.num_tokens + Cfg::kTokensPerBlock - 1) / Cfg::kTokensPerBlock;
        insert_kernel<R, D, decltype(layout)>
            <<<static_cast<unsigned>(blocks), Cfg::kThreads, 0, stream>>>(p);
        return detail::launch_status("insert_kernel");
      });
    });
  });
}

/// Runs the fused op (SPEC §3) on `stream`: Op A's outputs (latent optional) and Op B's
/// records in one launch, bit-identical to Op A then Op B.
inline Status fused(const FusedParams& p, cudaStream_t stream) {
  Status s = fused_can_implement(p);
  const CompressParams& c = p.compress;
  if (!s.ok() || c.num_tokens == 0) return s;
  return dispatch_ratio(c.ratio, [&](auto ratio) {
    return dispatch_head_dim(c.head_dim, [&](auto head_dim) {
      constexpr int R = decltype(ratio)::value, D = decltype(head_dim)::value;
      return dispatch_dtype(c.dtype, [&](auto element) {
        using In = decltype(element);
        return dispatch_layout<D>(p.record.layout, [&](auto layout) {
          using Cfg = CompressConfig<R, D, In>;
          const int64_t blocks = (c.num_tokens + Cfg::kTokensPerBlock - 1) / Cfg::kTokensPerBlock;
          compress_kernel<R, D, In, RecordEpilogue<decltype(layout)>>
              <<<static_cast<unsigned>(blocks), Cfg::kThreads, 0, stream>>>(
                  c, RecordEpilogue<decltype(layout)>{p.record});
          return detail::launch_status("fused compress_kernel");
        });
      });
    });
  });
}

}  // namespace kvc
