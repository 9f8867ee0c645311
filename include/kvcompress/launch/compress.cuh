// kvcompress — Op A host API: validate, dispatch, launch.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "../kernel/compress_kernel.cuh"
#include "compress.hpp"
#include "launch.cuh"
#include "options.hpp"

namespace kvc {

namespace detail {

/// The params must describe the instance being launched.
template <int Ratio, int HeadDim, typename In>
Status check_instance(const CompressParams& p) {
  const DType dtype = std::is_same<In, float>::value ? DType::kFloat32 : DType::kBFloat16;
  if (p.ratio != Ratio || p.head_dim != HeadDim || p.dtype != dtype)
    return Status::invalid("params (ratio " + std::to_string(p.ratio) + ", head dim " +
                           std::to_string(p.head_dim) + ", " + dtype_name(p.dtype) +
                           ") do not match the kernel instance (ratio " + std::to_string(Ratio) +
                           ", head dim " + std::to_string(HeadDim) + ", " + dtype_name(dtype) + ")");
  return Status::success();
}

}  // namespace detail

/// Launches the Op A instance <Ratio, HeadDim, In> — any ratio and head dim, not only the
/// compiled lists (examples/02_custom_ratio). Validates like kvc::compress.
///
///   kvc::Status s = kvc::launch_compress<3, 384, float>(params, stream);
template <int Ratio, int HeadDim, typename In, class Epilogue = LatentEpilogue>
Status launch_compress(const CompressParams& p, cudaStream_t stream,
                       const LaunchOptions& options = {}, const Epilogue& epilogue = {}) {
  Status s = detail::check_token_count(p.num_tokens);
  if (!s.ok() || p.num_tokens == 0) return s;
  s = detail::check_instance<Ratio, HeadDim, In>(p);
  if (!s.ok()) return s;
  s = detail::compress_check_params(p);
  if (!s.ok()) return s;
  using Cfg = CompressConfig<Ratio, HeadDim, In>;
  const int window = Cfg::tokens_per_block(p.num_tokens);
  const int64_t blocks = (p.num_tokens + window - 1) / window;
  return detail::launch_kernel("compress_kernel", compress_kernel<Ratio, HeadDim, In, Epilogue>,
                               dim3(static_cast<unsigned>(blocks)), dim3(Cfg::kThreads), stream,
                               options, p, epilogue, window);
}

/// Runs Op A (SPEC §1) on `stream`. Validates first and writes nothing when validation
/// fails; returns the CUDA launch error otherwise. No host synchronisation and no
/// allocation, so it can be captured in a CUDA graph. `options.pdl`: programmatic
/// dependent launch (LaunchOptions).
///
///   kvc::CompressParams p;  /* fill in */
///   kvc::Status s = kvc::compress(p, stream);
///   if (!s.ok()) throw std::runtime_error(s.message());
template <class Unused = void>  // a template: only a call compiles the instances
Status compress(const CompressParams& p, cudaStream_t stream, const LaunchOptions& options = {}) {
  Status s = compress_can_implement(p);
  if (!s.ok() || p.num_tokens == 0) return s;
  return dispatch_ratio(p.ratio, [&](auto ratio) {
    return dispatch_head_dim(p.head_dim, [&](auto head_dim) {
      return dispatch_dtype(p.dtype, [&](auto element) {
        return launch_compress<decltype(ratio)::value, decltype(head_dim)::value,
                               decltype(element)>(p, stream, options);
      });
    });
  });
}

}  // namespace kvc
