// kvcompress — Op B and fused-op host API: validate, dispatch, launch.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "../kernel/fused_kernel.cuh"
#include "../kernel/insert_kernel.cuh"
#include "compress.cuh"
#include "insert.hpp"

namespace kvc {

/// Launches the Op B instance <Ratio, HeadDim, Layout>; Layout may be a user-defined layout
/// type (examples/03_custom_layout), `p.record.layout` is then ignored. Validates like
/// kvc::insert.
template <int Ratio, int HeadDim, class Layout>
Status launch_insert(const InsertParams& p, cudaStream_t stream, const LaunchOptions& options = {}) {
  Status s = detail::check_token_count(p.num_tokens);
  if (!s.ok() || p.num_tokens == 0) return s;
  if (p.ratio != Ratio || p.head_dim != HeadDim)
    return Status::invalid("params (ratio " + std::to_string(p.ratio) + ", head dim " +
                           std::to_string(p.head_dim) + ") do not match the kernel instance (ratio " +
                           std::to_string(Ratio) + ", head dim " + std::to_string(HeadDim) + ")");
  s = detail::record_check<Layout>(p.record, p.head_dim);
  if (!s.ok()) return s;
  s = detail::insert_check_params(p);
  if (!s.ok()) return s;
  using Cfg = InsertConfig<Ratio, HeadDim>;
  const int window = Cfg::tokens_per_block(p.num_tokens);
  const int64_t blocks = (p.num_tokens + window - 1) / window;
  return detail::launch_kernel("insert_kernel", insert_kernel<Ratio, HeadDim, Layout>,
                               dim3(static_cast<unsigned>(blocks)), dim3(Cfg::kThreads), stream,
                               options, p, window);
}

/// Runs Op B (SPEC §2, vLLM's rope_quant_insert) on `stream`. Validates first and writes
/// nothing when validation fails. Graph-capturable (no sync, no allocation). `options.pdl`:
/// programmatic dependent launch (LaunchOptions).
///
///   kvc::InsertParams p;  /* latent, positions, record.{cos_sin, cache_slot, cache, layout} */
///   kvc::Status s = kvc::insert(p, stream);
template <class Unused = void>  // a template: only a call compiles the instances
Status insert(const InsertParams& p, cudaStream_t stream, const LaunchOptions& options = {}) {
  Status s = insert_can_implement(p);
  if (!s.ok() || p.num_tokens == 0) return s;
  return dispatch_ratio(p.ratio, [&](auto ratio) {
    return dispatch_head_dim(p.head_dim, [&](auto head_dim) {
      constexpr int R = decltype(ratio)::value, D = decltype(head_dim)::value;
      return dispatch_layout<D>(p.record.layout, [&](auto layout) {
        return launch_insert<R, D, decltype(layout)>(p, stream, options);
      });
    });
  });
}

/// Launches the fused instance <Ratio, HeadDim, In, Layout> (any ratio, head dim, layout).
template <int Ratio, int HeadDim, typename In, class Layout>
Status launch_fused(const FusedParams& p, cudaStream_t stream, const LaunchOptions& options = {}) {
  const CompressParams& c = p.compress;
  Status s = detail::check_token_count(c.num_tokens);
  if (!s.ok() || c.num_tokens == 0) return s;
  s = detail::check_instance<Ratio, HeadDim, In>(c);
  if (!s.ok()) return s;
  s = detail::record_check<Layout>(p.record, c.head_dim);
  if (!s.ok()) return s;
  s = detail::compress_check_params(c, /*latent_optional=*/true);
  if (!s.ok()) return s;
  using Cfg = CompressConfig<Ratio, HeadDim, In>;
  const int window = Cfg::tokens_per_block(c.num_tokens);
  const int64_t blocks = (c.num_tokens + window - 1) / window;
  return detail::launch_kernel("fused compress_kernel",
                               compress_kernel<Ratio, HeadDim, In, RecordEpilogue<Layout>>,
                               dim3(static_cast<unsigned>(blocks)), dim3(Cfg::kThreads), stream,
                               options, c, RecordEpilogue<Layout>{p.record}, window);
}

/// Runs the fused op (SPEC §3) on `stream`: Op A's outputs (latent optional) and Op B's
/// records in one launch, bit-identical to Op A then Op B.
template <class Unused = void>  // a template: only a call compiles the instances
Status fused(const FusedParams& p, cudaStream_t stream, const LaunchOptions& options = {}) {
  Status s = fused_can_implement(p);
  const CompressParams& c = p.compress;
  if (!s.ok() || c.num_tokens == 0) return s;
  return dispatch_ratio(c.ratio, [&](auto ratio) {
    return dispatch_head_dim(c.head_dim, [&](auto head_dim) {
      constexpr int R = decltype(ratio)::value, D = decltype(head_dim)::value;
      return dispatch_dtype(c.dtype, [&](auto element) {
        return dispatch_layout<D>(p.record.layout, [&](auto layout) {
          return launch_fused<R, D, decltype(element), decltype(layout)>(p, stream, options);
        });
      });
    });
  });
}

}  // namespace kvc
