// SPDX-License-Identifier: Apache-2.0
// kvcompress — Op B host API: validate, dispatch, launch (the fused op: fused.cuh).
#pragma once

#include "../config.hpp"

#include <cuda_runtime.h>

#include <string>

#include "../kernel/insert_kernel.cuh"
#include "compress.cuh"
#include "insert.hpp"

KVC_NAMESPACE_BEGIN

namespace detail {

/// The launch of an Op B instance for params that were validated already (see
/// launch_compress_unchecked).
template <int Ratio, int HeadDim, class Layout, int RowThreads>
Status launch_insert_rows(const InsertParams& p, cudaStream_t stream, const LaunchOptions& options) {
  using Cfg = InsertConfig<Ratio, HeadDim, RowThreads>;
  constexpr auto kernel = insert_kernel<Ratio, HeadDim, Layout, RowThreads>;
  // Warp records size their windows to the GPU (InsertConfig::windows); block records
  // (decode steps: fewer tokens than a wave holds) keep one record's window.
  const detail::WindowSizes windows =
      Cfg::windows(p.num_tokens, Cfg::kRowThreads == 32 ? wave_blocks<kernel>(Cfg::kThreads) : 0);
  return launch_kernel("insert_kernel", kernel,
                       dim3(static_cast<unsigned>(Cfg::blocks(p.num_tokens, windows))), dim3(Cfg::kThreads),
                       stream, options, p, windows);
}

/// ... with the record mapping for the call's size: a warp per record from
/// kWarpRecordMinTokens tokens, the default (a block per record) below.
template <int Ratio, int HeadDim, class Layout>
Status launch_insert_unchecked(const InsertParams& p, cudaStream_t stream,
                               const LaunchOptions& options) {
#if defined(KVC_DEBUG)
  // The caller's data contract, checked on the device first (kernel/contract_check.cuh).
  if (Status s = launch_status("KVC_DEBUG contract check", launch_contract_check(p, stream));
      !s.ok())
    return s;
#endif
  if constexpr (InsertConfig<Ratio, HeadDim>::kRowThreads > 32) {
    if (p.num_tokens >= kWarpRecordMinTokens)
      return launch_insert_rows<Ratio, HeadDim, Layout, 32>(p, stream, options);
  }
  return launch_insert_rows<Ratio, HeadDim, Layout, 0>(p, stream, options);
}

}  // namespace detail

/// Launches the Op B instance <Ratio, HeadDim, Layout>; Layout may be a user-defined layout
/// type (examples/03_custom_layout), `p.record.layout` is then ignored. Validates like
/// kvc::insert.
template <int Ratio, int HeadDim, class Layout>
Status launch_insert(const InsertParams& p, cudaStream_t stream, const LaunchOptions& options = {}) {
  Status s = detail::check_token_count(p.num_tokens);
  if (!s.ok() || p.num_tokens == 0) return s;
  if (p.ratio < 1) return detail::invalid("compress ratio ", p.ratio, " must be >= 1");
  if (p.ratio != Ratio || p.head_dim != HeadDim)
    return detail::invalid("params (ratio ", p.ratio, ", head dim ", p.head_dim,
                           ") do not match the kernel instance (ratio ", Ratio, ", head dim ",
                           HeadDim, ")");
  s = detail::record_check<Layout>(p.record, p.head_dim);
  if (!s.ok()) return s;
  s = detail::insert_check_params(p);
  if (!s.ok()) return s;
  return detail::launch_insert_unchecked<Ratio, HeadDim, Layout>(p, stream, options);
}

/// Runs Op B (contract §2, vLLM's rope_quant_insert) on `stream`. Validates first (once; the
/// checks of insert_can_implement) and writes nothing when validation fails.
/// Graph-capturable (no sync, no allocation). `options.pdl`: programmatic dependent launch
/// (LaunchOptions).
///
///   kvc::InsertParams p;  /* latent, positions, record.{cos_sin, cache_slot, cache, layout} */
///   kvc::Status s = kvc::insert(p, stream);
template <class Unused = void>  // a template: only a call compiles the instances
Status insert(const InsertParams& p, cudaStream_t stream, const LaunchOptions& options = {}) {
  return detail::validate_dispatch_insert(p, [&](auto ratio, auto head_dim, auto layout) {
    return detail::launch_insert_unchecked<decltype(ratio)::value, decltype(head_dim)::value,
                                           decltype(layout)>(p, stream, options);
  });
}

KVC_NAMESPACE_END
