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

/// Checks the record arguments shared by Op B and the fused op for head dim `head_dim`.
inline Status record_can_implement(const RecordArgs& r, int head_dim) {
  if (r.rope_dim != 64)
    return Status::not_supported("rope dim " + std::to_string(r.rope_dim) +
                                 " is not compiled; the host API supports 64");
  if (r.rope_style != RopeStyle::kGptJ && r.rope_style != RopeStyle::kNeoX)
    return Status::invalid("unknown rope style");
  Status s = dispatch_head_dim(head_dim, [&](auto d) {
    return dispatch_layout<decltype(d)::value>(r.layout, [&](auto layout) {
      using Layout = decltype(layout);
      detail::Validator v;
      v.not_null(r.cache.data, "cache")
          .aligned(r.cache.data, 16, "cache")
          .require(r.cache.block_size >= 1, "cache block size " +
                                                std::to_string(r.cache.block_size) +
                                                " must be >= 1")
          .require(r.cache.num_pages >= -1, "num_pages " + std::to_string(r.cache.num_pages) +
                                                " must be -1 (not given) or >= 0");
      if (!v.ok()) return v.status();
      const Status layout_status = Layout::check(r.cache);
      if (!layout_status.ok()) return layout_status;
      const int64_t min_page = Layout::min_page_bytes(r.cache.block_size, r.cache.row_stride);
      v.require(r.cache.page_stride >= min_page,
                std::string(Layout::kName) + " page stride " + std::to_string(r.cache.page_stride) +
                    " bytes is smaller than the page, " + std::to_string(min_page) + " bytes");
      return v.status();
    });
  });
  if (!s.ok()) return s;
  detail::Validator v;
  const int table_elem = r.cos_sin_dtype == DType::kFloat32 ? 4 : 2;
  v.not_null(r.cos_sin, "cos_sin")
      .aligned(r.cos_sin, table_elem, "cos_sin")
      .require(r.cos_sin_dtype == DType::kFloat32 || r.cos_sin_dtype == DType::kBFloat16,
               "cos_sin dtype must be float32 or bfloat16")
      .require(r.cos_sin_stride >= r.rope_dim, "cos_sin row stride " +
                                                   std::to_string(r.cos_sin_stride) +
                                                   " is smaller than the rope dim " +
                                                   std::to_string(r.rope_dim))
      .require(r.cos_sin_rows >= 1, "cos_sin_rows " + std::to_string(r.cos_sin_rows) +
                                        " must be >= 1")
      .not_null(r.cache_slot.data, "cache slot")
      .aligned(r.cache_slot.data, index_size(r.cache_slot.type), "cache slot");
  return v.status();
}

/// Elements per vector access of the insert kernel (bf16 latent).
inline int insert_vector_elems(int head_dim) { return std::min(8, head_dim / 32); }

/// Checks every condition of SPEC §4 for Op B; success for num_tokens == 0.
inline Status insert_can_implement(const InsertParams& p) {
  detail::Validator v;
  v.require(p.num_tokens >= 0, "num_tokens " + std::to_string(p.num_tokens) + " is negative");
  v.require(p.num_tokens <= std::numeric_limits<int32_t>::max(),
            "num_tokens " + std::to_string(p.num_tokens) + " exceeds the int32 range");
  if (!v.ok()) return v.status();
  if (p.num_tokens == 0) return Status::success();
  Status s = dispatch_ratio(p.ratio, [](auto) { return Status::success(); });
  if (!s.ok()) return s;
  s = record_can_implement(p.record, p.head_dim);
  if (!s.ok()) return s;
  const int vec = insert_vector_elems(p.head_dim);
  v.not_null(p.latent, "latent")
      .aligned(p.latent, 2 * vec, "latent")
      .stride(p.latent_stride, p.head_dim, vec, "latent row stride", "head_dim =")
      .not_null(p.positions.data, "positions")
      .aligned(p.positions.data, index_size(p.positions.type), "positions");
  return v.status();
}

/// Checks the fused op: Op A's conditions (latent may be null) and the record arguments.
inline Status fused_can_implement(const FusedParams& p) {
  CompressParams c = p.compress;
  alignas(16) static uint16_t placeholder[8];
  if (c.latent == nullptr) {  // optional in the fused op: validate the rest as Op A would
    c.latent = reinterpret_cast<bf16_t*>(placeholder);
    c.latent_stride = c.head_dim;
  }
  Status s = compress_can_implement(c);
  if (!s.ok() || c.num_tokens == 0) return s;
  return record_can_implement(p.record, c.head_dim);
}

}  // namespace kvc
