// SPDX-License-Identifier: Apache-2.0
// kvcompress — fused-op host API: validate, dispatch, launch (Op A's kernel with the record
// epilogue, kernel/fused_kernel.cuh).
#pragma once

#include "../config.hpp"

#include <cuda_runtime.h>

#include "../kernel/fused_kernel.cuh"
#include "compress.cuh"
#include "fused.hpp"
#include "options.hpp"

KVC_NAMESPACE_BEGIN

/// Launches the fused instance <Ratio, HeadDim, In, Layout> (any ratio, head dim, layout).
template <int Ratio, int HeadDim, typename In, class Layout>
Status launch_fused(const FusedParams& p, cudaStream_t stream, const LaunchOptions& options = {}) {
  const CompressParams& c = p.compress;
  Status s = detail::check_token_count(c.num_tokens);
  if (!s.ok() || c.num_tokens == 0) return s;
  if (c.ratio < 1) return detail::invalid("compress ratio ", c.ratio, " must be >= 1");
  s = detail::check_instance<Ratio, HeadDim, In>(c);
  if (!s.ok()) return s;
  s = detail::record_check<Layout>(p.record, c.head_dim);
  if (!s.ok()) return s;
  s = detail::compress_check_params(c, /*latent_optional=*/true);
  if (!s.ok()) return s;
  return detail::launch_compress_unchecked<Ratio, HeadDim, In>(
      "fused compress_kernel", c, stream, options, RecordEpilogue<Layout>{p.record});
}

/// Runs the fused op (contract §3) on `stream`: Op A's outputs (latent optional) and Op B's
/// records in one launch, bit-identical to Op A then Op B. Validates once (the checks of
/// fused_can_implement).
template <class Unused = void>  // a template: only a call compiles the instances
Status fused(const FusedParams& p, cudaStream_t stream, const LaunchOptions& options = {}) {
  return detail::validate_dispatch_fused(
      p, [&](auto ratio, auto head_dim, auto element, auto layout) {
        return detail::launch_compress_unchecked<decltype(ratio)::value,
                                                 decltype(head_dim)::value, decltype(element)>(
            "fused compress_kernel", p.compress, stream, options,
            RecordEpilogue<decltype(layout)>{p.record});
      });
}

KVC_NAMESPACE_END
