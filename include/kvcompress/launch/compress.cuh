// kvcompress — Op A host API: validate, dispatch, launch.
#pragma once

#include <cuda_runtime.h>

#include "../kernel/compress_kernel.cuh"
#include "compress.hpp"

namespace kvc {

/// Runs Op A (SPEC §1) on `stream`. Validates first and writes nothing when validation
/// fails; returns the CUDA launch error otherwise. No host synchronisation and no
/// allocation, so it can be captured in a CUDA graph.
///
///   kvc::CompressParams p;  /* fill in */
///   kvc::Status s = kvc::compress(p, stream);
///   if (!s.ok()) throw std::runtime_error(s.message());
inline Status compress(const CompressParams& p, cudaStream_t stream) {
  Status s = compress_can_implement(p);
  if (!s.ok() || p.num_tokens == 0) return s;
  return dispatch_ratio(p.ratio, [&](auto ratio) {
    return dispatch_head_dim(p.head_dim, [&](auto head_dim) {
      return dispatch_dtype(p.dtype, [&](auto element) {
        using In = decltype(element);
        using Cfg = CompressConfig<decltype(ratio)::value, decltype(head_dim)::value, In>;
        const int64_t blocks = (p.num_tokens + Cfg::kTokensPerBlock - 1) / Cfg::kTokensPerBlock;
        compress_kernel<decltype(ratio)::value, decltype(head_dim)::value, In>
            <<<static_cast<unsigned>(blocks), Cfg::kThreads, 0, stream>>>(p, LatentEpilogue{});
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess)
          return Status::cuda(err, std::string("compress_kernel launch failed: ") +
                                       cudaGetErrorString(err));
        return Status::success();
      });
    });
  });
}

}  // namespace kvc
