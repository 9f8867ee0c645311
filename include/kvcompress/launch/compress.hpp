// SPDX-License-Identifier: Apache-2.0
// kvcompress — Op A host-side validation (host-compilable; the launch is in compress.cuh).
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "../core/bit.hpp"
#include "../core/status.hpp"
#include "../kernel/compress_params.hpp"
#include "dispatch.hpp"
#include "validate.hpp"

KVC_NAMESPACE_BEGIN

/// Elements per vector access the Op A kernel uses for this head dim and dtype; strides and
/// addresses must be multiples of it (CompressConfig::kVecElems).
inline int compress_vector_elems(int head_dim, DType dtype) {
  return largest_pow2_divisor(head_dim / 32, 16 / dtype_size(dtype));
}

namespace detail {

inline Status check_token_count(int64_t num_tokens) {
  if (num_tokens < 0) return invalid("num_tokens ", num_tokens, " is negative");
  if (num_tokens > std::numeric_limits<int32_t>::max())
    return invalid("num_tokens ", num_tokens, " exceeds the int32 range of qsl");
  return Status::success();
}

/// Op A conditions that hold for any compiled (ratio, head dim): pointers, alignment,
/// strides, ring geometry, bounds, eps. `p.ratio` / `p.head_dim` are taken as given.
/// `latent_optional`: the fused op may leave `latent` null (no latent written).
/// Every stride and size is bounded (kMaxBufferBytes) before it is multiplied.
inline Status compress_check_params(const CompressParams& p, bool latent_optional = false) {
  detail::Validator v;
  v.require(p.ratio >= 1, "compress ratio ", p.ratio, " must be >= 1")
      .require(p.head_dim >= 64 && p.head_dim % 64 == 0, "head dim ", p.head_dim,
               " must be a multiple of 64")
      .require(p.dtype == DType::kFloat32 || p.dtype == DType::kBFloat16,
               "kv_score dtype must be float32 or bfloat16");
  if (!v.ok()) return std::move(v).status();
  const int elem = dtype_size(p.dtype);
  const int vec = compress_vector_elems(p.head_dim, p.dtype);
  const int vec_bytes = vec * elem;
  const int64_t row_width = p.ratio > 1 ? 2 * int64_t{p.head_dim} : p.head_dim;
  const int bf16_vec_bytes = vec * 2;

  v.not_null(p.kv_score, "kv_score")
      .aligned(p.kv_score, vec_bytes, "kv_score")
      .stride(p.kv_score_stride_elems, row_width, vec, "kv_score row stride",
              p.ratio > 1 ? "the row width 2 * head_dim =" : "the row width head_dim =")
      .within_bound(p.kv_score_stride_elems, elem, "kv_score row stride", "elements")
      .product_within_bound(p.num_tokens, p.kv_score_stride_elems, elem,
                            "num_tokens * kv_score row stride", "elements")
      .not_null(p.positions.data, "positions")
      .index_type(p.positions.type, "positions")
      .aligned(p.positions.data, index_size(p.positions.type), "positions")
      .not_null(p.slot.data, "slot")
      .index_type(p.slot.type, "slot")
      .aligned(p.slot.data, index_size(p.slot.type), "slot")
      .not_null(p.weight, "weight")
      .aligned(p.weight, bf16_vec_bytes, "weight")
      // eps = 0 would turn an all-zero row into 0 * inf = NaN (contract §1.7).
      .require(std::isfinite(p.eps) && p.eps > 0.f, "eps ", p.eps, " must be finite and > 0");
  if (!(latent_optional && p.latent == nullptr))
    v.not_null(p.latent, "latent")
        .aligned(p.latent, bf16_vec_bytes, "latent")
        .stride(p.latent_stride_elems, p.head_dim, vec, "latent row stride", "head_dim =")
        .within_bound(p.latent_stride_elems, 2, "latent row stride", "elements")
        .product_within_bound(p.num_tokens, p.latent_stride_elems, 2, "num_tokens * latent row stride",
                              "elements");
  // The kernels add to the counters with 4-byte atomics.
  v.aligned(p.errors, static_cast<int>(alignof(ErrorCounters)), "errors");
  if (p.ratio > 1) {
    const RingLayout& r = p.ring_layout;
    v.not_null(p.qsl, "qsl")
        .aligned(p.qsl, alignof(int32_t), "qsl")
        .require(p.qsl_size >= 2, "qsl_size ", p.qsl_size,
                 " must be num_reqs + 1 >= 2 when compress ratio > 1")
        .within_bound(p.qsl_size, static_cast<int>(sizeof(int32_t)), "qsl_size", "elements")
        .not_null(p.req, "req")
        .aligned(p.req, alignof(int32_t), "req")
        .not_null(p.ring, "ring")
        .aligned(p.ring, vec_bytes, "ring")
        .require(r.capacity >= p.ratio, "ring capacity ", r.capacity,
                 " is smaller than the compress ratio ", p.ratio)
        .stride(r.row_stride_elems, row_width, vec, "ring row stride", "the row width 2 * head_dim =")
        .within_bound(r.row_stride_elems, elem, "ring row stride", "elements")
        .product_within_bound(r.capacity, r.row_stride_elems, elem, "ring capacity * row stride",
                              "elements")
        .within_bound(r.page_stride_elems, elem, "ring page stride", "elements");
    // Bounded just above (when those checks failed, later ones report nothing).
    const int64_t page_rows = v.ok() ? int64_t{r.capacity} * r.row_stride_elems : 0;
    v.require(r.page_stride_elems >= page_rows, "ring page stride ", r.page_stride_elems,
              " overlaps the next page: it must be >= capacity * row stride = ", page_rows)
        .require(r.page_stride_elems % vec == 0, "ring page stride ", r.page_stride_elems,
                 " is not a multiple of ", vec, " elements")
        .require(r.num_blocks >= -1, "ring num_blocks ", r.num_blocks,
                 " must be -1 (not given) or >= 0");
    if (r.num_blocks > 0) {
      // The whole ring: (num_blocks - 1) pages and the last page's rows.
      v.product_within_bound(r.num_blocks, r.capacity, 1, "ring num_blocks * capacity", "rows")
          .require(mul_fits(r.num_blocks - 1, r.page_stride_elems, buffer_bound(elem) - page_rows),
                   "ring extent (num_blocks - 1) * page stride + capacity * row stride = ",
                   r.num_blocks - 1, " * ", r.page_stride_elems, " + ", page_rows, " elements",
                   BoundNote{elem, "elements"});
    }
  }
  return std::move(v).status();
}

/// What kvc::compress does before its launch, validating once: the checks of
/// compress_can_implement in its order, then the runtime -> compile-time dispatch. For valid
/// params with num_tokens > 0 it returns `instance(Int<R>{}, Int<D>{}, In{})` (In = float or
/// bf16_t); otherwise the failed check's Status, or success for num_tokens == 0.
/// kvc::compress passes the launch of the instance, compress_can_implement nothing, and
/// bench/kvc_host_cost.cpp a no-op to time the host work of a call.
template <class Instance>
Status validate_dispatch_compress(const CompressParams& p, Instance&& instance) {
  Status s = check_token_count(p.num_tokens);
  if (!s.ok() || p.num_tokens == 0) return s;
  return dispatch_ratio(p.ratio, [&](auto ratio) {
    return dispatch_head_dim(p.head_dim, [&](auto head_dim) {
      Status c = compress_check_params(p);
      if (!c.ok()) return c;
      return dispatch_dtype(p.dtype,
                            [&](auto element) { return instance(ratio, head_dim, element); });
    });
  });
}

}  // namespace detail

/// Checks every condition of contract §4 for Op A that can be checked without reading device
/// memory, including that (ratio, head dim) is in the compiled lists of kvc::compress.
/// Returns success for num_tokens == 0 (a no-op) without looking at the pointers.
/// Builds a message only when a check fails; valid params cost no allocation.
inline Status compress_can_implement(const CompressParams& p) {
  return detail::validate_dispatch_compress(p, [](auto, auto, auto) { return Status::success(); });
}

KVC_NAMESPACE_END
