// SPDX-License-Identifier: Apache-2.0
// kvcompress — fused-op host-side validation (host-compilable; the launch is in fused.cuh).
#pragma once

#include "../config.hpp"

#include "../core/status.hpp"
#include "../kernel/fused_params.hpp"
#include "compress.hpp"
#include "dispatch.hpp"
#include "insert.hpp"

KVC_NAMESPACE_BEGIN

namespace detail {

/// What kvc::fused does before its launch, validating once: the checks of
/// fused_can_implement in its order, then the dispatch. For valid params with
/// num_tokens > 0 it returns `instance(Int<R>{}, Int<D>{}, In{}, Layout{})`.
template <class Instance>
Status validate_dispatch_fused(const FusedParams& p, Instance&& instance) {
  const CompressParams& c = p.compress;
  Status s = check_token_count(c.num_tokens);
  if (!s.ok() || c.num_tokens == 0) return s;
  return dispatch_ratio(c.ratio, [&](auto ratio) {
    return validate_dispatch_record(p.record, c.head_dim, [&](auto head_dim, auto layout) {
      Status a = compress_check_params(c, /*latent_optional=*/true);
      if (!a.ok()) return a;
      return dispatch_dtype(c.dtype, [&](auto element) {
        return instance(ratio, head_dim, element, layout);
      });
    });
  });
}

}  // namespace detail

/// Checks the fused op: Op A's conditions (latent may be null) and the record arguments.
inline Status fused_can_implement(const FusedParams& p) {
  return detail::validate_dispatch_fused(
      p, [](auto, auto, auto, auto) { return Status::success(); });
}

KVC_NAMESPACE_END
