// kvcompress — Op B and fused-op host-side validation (host-compilable).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "../core/status.hpp"
#include "../kernel/insert_params.hpp"
#include "compress.hpp"
#include "dispatch.hpp"
#include "validate.hpp"

namespace kvc {

namespace detail {

/// Checks the record arguments for a layout type (built-in or user-defined).
template <class Layout>
Status record_check(const RecordArgs& r, int head_dim) {
  Validator v;
  v.require(head_dim == Layout::kHeadDim, std::string("cache layout ") + Layout::kName +
                                              " holds head dim " + std::to_string(Layout::kHeadDim) +
                                              ", not " + std::to_string(head_dim))
      .require(r.rope_dim == Layout::kRopeDim, "rope dim " + std::to_string(r.rope_dim) +
                                                   " does not match the layout's " +
                                                   std::to_string(Layout::kRopeDim))
      .require(r.rope_style == RopeStyle::kGptJ || r.rope_style == RopeStyle::kNeoX,
               "unknown rope style")
      .not_null(r.cache.data, "cache")
      .aligned(r.cache.data, 16, "cache")
      .require(r.cache.block_size >= 1,
               "cache block size " + std::to_string(r.cache.block_size) + " must be >= 1")
      .require(r.cache.num_pages >= -1,
               "num_pages " + std::to_string(r.cache.num_pages) + " must be -1 (not given) or >= 0");
  if (!v.ok()) return v.status();
  const Status layout_status = Layout::check(r.cache);
  if (!layout_status.ok()) return layout_status;
  const int64_t min_page = Layout::min_page_bytes(r.cache.block_size, r.cache.row_stride);
  const int table_elem = r.cos_sin_dtype == DType::kFloat32 ? 4 : 2;
  v.require(r.cache.page_stride >= min_page,
            std::string(Layout::kName) + " page stride " + std::to_string(r.cache.page_stride) +
                " bytes is smaller than the page, " + std::to_string(min_page) + " bytes")
      .not_null(r.cos_sin, "cos_sin")
      .aligned(r.cos_sin, table_elem, "cos_sin")
      .require(r.cos_sin_dtype == DType::kFloat32 || r.cos_sin_dtype == DType::kBFloat16,
               "cos_sin dtype must be float32 or bfloat16")
      .require(r.cos_sin_stride >= r.rope_dim, "cos_sin row stride " +
                                                   std::to_string(r.cos_sin_stride) +
                                                   " is smaller than the rope dim " +
                                                   std::to_string(r.rope_dim))
      .require(r.cos_sin_rows >= 1,
               "cos_sin_rows " + std::to_string(r.cos_sin_rows) + " must be >= 1")
      .not_null(r.cache_slot.data, "cache slot")
      .aligned(r.cache_slot.data, index_size(r.cache_slot.type), "cache slot");
  return v.status();
}

}  // namespace detail

/// Checks the record arguments shared by Op B and the fused op, for the runtime layout.
inline Status record_can_implement(const RecordArgs& r, int head_dim) {
  if (r.rope_dim != 64)
    return Status::not_supported("rope dim " + std::to_string(r.rope_dim) +
                                 " is not compiled; the host API supports 64");
  return dispatch_head_dim(head_dim, [&](auto d) {
    return dispatch_layout<decltype(d)::value>(r.layout, [&](auto layout) {
      return detail::record_check<decltype(layout)>(r, head_dim);
    });
  });
}

/// Elements per vector access of the insert kernel (bf16 latent; InsertConfig::kVecElems).
inline int insert_vector_elems(int head_dim) { return largest_pow2_divisor(head_dim / 32, 8); }

namespace detail {

/// Op B conditions on the latent and positions (any compiled instance).
inline Status insert_check_params(const InsertParams& p) {
  Validator v;
  v.require(p.ratio >= 1, "compress ratio " + std::to_string(p.ratio) + " must be >= 1");
  if (!v.ok()) return v.status();
  const int vec = insert_vector_elems(p.head_dim);
  v.not_null(p.latent, "latent")
      .aligned(p.latent, 2 * vec, "latent")
      .stride(p.latent_stride, p.head_dim, vec, "latent row stride", "head_dim =")
      .not_null(p.positions.data, "positions")
      .aligned(p.positions.data, index_size(p.positions.type), "positions");
  return v.status();
}

}  // namespace detail

/// Checks every condition of SPEC §4 for Op B; success for num_tokens == 0.
inline Status insert_can_implement(const InsertParams& p) {
  Status s = detail::check_token_count(p.num_tokens);
  if (!s.ok() || p.num_tokens == 0) return s;
  s = dispatch_ratio(p.ratio, [](auto) { return Status::success(); });
  if (!s.ok()) return s;
  s = record_can_implement(p.record, p.head_dim);
  if (!s.ok()) return s;
  return detail::insert_check_params(p);
}

/// Checks the fused op: Op A's conditions (latent may be null) and the record arguments.
inline Status fused_can_implement(const FusedParams& p) {
  const CompressParams& c = p.compress;
  Status s = detail::check_token_count(c.num_tokens);
  if (!s.ok() || c.num_tokens == 0) return s;
  s = dispatch_ratio(c.ratio, [](auto) { return Status::success(); });
  if (!s.ok()) return s;
  s = record_can_implement(p.record, c.head_dim);
  if (!s.ok()) return s;
  return detail::compress_check_params(c, /*latent_optional=*/true);
}

}  // namespace kvc
