// SPDX-License-Identifier: Apache-2.0
// kvcompress — Op B host-side validation and the record checks it shares with the fused op
// (launch/fused.hpp); host-compilable.
#pragma once

#include "../config.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include "../core/status.hpp"
#include "../kernel/insert_params.hpp"
#include "compress.hpp"
#include "dispatch.hpp"
#include "validate.hpp"

KVC_NAMESPACE_BEGIN

namespace detail {

/// Checks the record arguments for a layout type (built-in or user-defined). Strides and
/// sizes are bounded (kMaxBufferBytes) before they are multiplied, also before the layout's
/// min_page_bytes multiplies block size and row stride.
template <class Layout>
Status record_check(const RecordArgs& r, int head_dim) {
  Validator v;
  const CacheParams& c = r.cache;
  v.require(head_dim == Layout::kHeadDim, "cache layout ", Layout::kName, " holds head dim ",
            Layout::kHeadDim, ", not ", head_dim)
      .require(r.rope_dim == Layout::kRopeDim, "rope dim ", r.rope_dim,
               " does not match the layout's ", Layout::kRopeDim)
      .require(r.rope_style == RopeStyle::kGptJ || r.rope_style == RopeStyle::kNeoX,
               "unknown rope style")
      .not_null(c.data, "cache")
      .aligned(c.data, 16, "cache")
      .require(c.block_size >= 1, "cache block size ", c.block_size, " must be >= 1")
      .require(c.num_pages >= -1, "num_pages ", c.num_pages, " must be -1 (not given) or >= 0")
      .within_bound(c.page_stride_bytes, 1, "cache page stride", "bytes")
      .within_bound(c.row_stride_bytes, 1, "cache row stride", "bytes");
  // Layouts without rows of their own (fp8_ds_mla) may leave row_stride_bytes 0.
  if (c.row_stride_bytes > 0)
    v.product_within_bound(c.block_size, c.row_stride_bytes, 1, "cache block size * row stride",
                           "bytes");
  if (!v.ok()) return std::move(v).status();
  Status layout_status = Layout::check(c);
  if (!layout_status.ok()) return layout_status;
  const int64_t min_page = Layout::min_page_bytes(c.block_size, c.row_stride_bytes);
  const int table_elem = r.cos_sin_dtype == DType::kFloat32 ? 4 : 2;
  v.require(c.page_stride_bytes >= min_page, Layout::kName, " page stride ", c.page_stride_bytes,
            " bytes is smaller than the page, ", min_page, " bytes");
  if (c.num_pages >= 0)
    v.product_within_bound(c.num_pages, c.block_size, 1, "cache num_pages * block size",
                           "records")
        .product_within_bound(c.num_pages, c.page_stride_bytes, 1, "cache num_pages * page stride",
                              "bytes");
  v.not_null(r.cos_sin, "cos_sin")
      .aligned(r.cos_sin, table_elem, "cos_sin")
      .require(r.cos_sin_dtype == DType::kFloat32 || r.cos_sin_dtype == DType::kBFloat16,
               "cos_sin dtype must be float32 or bfloat16")
      .require(r.cos_sin_stride_elems >= r.rope_dim, "cos_sin row stride ", r.cos_sin_stride_elems,
               " is smaller than the rope dim ", r.rope_dim)
      .within_bound(r.cos_sin_stride_elems, table_elem, "cos_sin row stride", "elements")
      .require(r.cos_sin_rows >= 1, "cos_sin_rows ", r.cos_sin_rows, " must be >= 1")
      .product_within_bound(r.cos_sin_rows, r.cos_sin_stride_elems, table_elem,
                            "cos_sin_rows * cos_sin row stride", "elements")
      .not_null(r.cache_slot.data, "cache slot")
      .index_type(r.cache_slot.type, "cache slot")
      .aligned(r.cache_slot.data, index_size(r.cache_slot.type), "cache slot");
  return std::move(v).status();
}

/// The record checks of record_can_implement in its order (rope dim, compiled head dims,
/// compiled layouts, record_check<Layout>); then returns `f(Int<D>{}, Layout{})`.
template <class F>
Status validate_dispatch_record(const RecordArgs& r, int head_dim, F&& f) {
  if (r.rope_dim != 64)
    return Status::not_supported(
        message("rope dim ", r.rope_dim, " is not compiled; the host API supports 64"));
  return dispatch_head_dim(head_dim, [&](auto d) {
    return dispatch_layout<decltype(d)::value>(r.layout, [&](auto layout) {
      Status s = record_check<decltype(layout)>(r, head_dim);
      if (!s.ok()) return s;
      return f(d, layout);
    });
  });
}

}  // namespace detail

/// Checks the record arguments shared by Op B and the fused op, for the runtime layout.
inline Status record_can_implement(const RecordArgs& r, int head_dim) {
  return detail::validate_dispatch_record(r, head_dim,
                                          [](auto, auto) { return Status::success(); });
}

/// Elements per vector access of the insert kernel (bf16 latent; InsertConfig::kVecElems).
inline int insert_vector_elems(int head_dim) { return largest_pow2_divisor(head_dim / 32, 8); }

namespace detail {

/// Op B conditions on the latent, positions and errors (any compiled instance).
inline Status insert_check_params(const InsertParams& p) {
  if (p.ratio < 1) return invalid("compress ratio ", p.ratio, " must be >= 1");
  Validator v;
  const int vec = insert_vector_elems(p.head_dim);
  v.not_null(p.latent, "latent")
      .aligned(p.latent, 2 * vec, "latent")
      .stride(p.latent_stride_elems, p.head_dim, vec, "latent row stride", "head_dim =")
      .within_bound(p.latent_stride_elems, 2, "latent row stride", "elements")
      .product_within_bound(p.num_tokens, p.latent_stride_elems, 2, "num_tokens * latent row stride",
                            "elements")
      .not_null(p.positions.data, "positions")
      .index_type(p.positions.type, "positions")
      .aligned(p.positions.data, index_size(p.positions.type), "positions")
      .aligned(p.errors, static_cast<int>(alignof(ErrorCounters)), "errors");  // 4-byte atomics
  return std::move(v).status();
}

/// What kvc::insert does before its launch, validating once: the checks of
/// insert_can_implement in its order, then the dispatch. For valid params with
/// num_tokens > 0 it returns `instance(Int<R>{}, Int<D>{}, Layout{})`; otherwise the failed
/// check's Status, or success for num_tokens == 0 (see validate_dispatch_compress).
template <class Instance>
Status validate_dispatch_insert(const InsertParams& p, Instance&& instance) {
  Status s = check_token_count(p.num_tokens);
  if (!s.ok() || p.num_tokens == 0) return s;
  return dispatch_ratio(p.ratio, [&](auto ratio) {
    return validate_dispatch_record(p.record, p.head_dim, [&](auto head_dim, auto layout) {
      Status c = insert_check_params(p);
      if (!c.ok()) return c;
      return instance(ratio, head_dim, layout);
    });
  });
}

}  // namespace detail

/// Checks every condition of contract §4 for Op B; success for num_tokens == 0.
inline Status insert_can_implement(const InsertParams& p) {
  return detail::validate_dispatch_insert(p, [](auto, auto, auto) { return Status::success(); });
}

KVC_NAMESPACE_END
