// SPDX-License-Identifier: Apache-2.0
// kvcompress torch package — tensor checks and the translation of tensors into kvcompress
// params.
//
// Included by the three .cu files (one op each, so that the build compiles their kernel
// instances in parallel). Only host-compilable kvcompress headers here; each .cu includes
// the launch header it needs.
//
// Sizes follow vLLM: num_tokens T = slot_mapping.numel(); kv_score, positions, latent and
// token_to_req_indices may hold more rows than T (a padded batch), which the ops neither
// read as tokens nor write.
//
// Errors: a wrong dtype raises TypeError (TORCH_CHECK_TYPE), a wrong shape, stride, device
// or value raises ValueError (TORCH_CHECK_VALUE), and a kvc::Status that is not ok raises
// ValueError (invalid argument, not supported) or RuntimeError (CUDA error) with the
// library's message. Every message starts with the op's name.
#pragma once

#include "instance_lists.h"  // before any kvcompress header

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <kvcompress/core/status.hpp>
#include <kvcompress/core/types.hpp>
#include <kvcompress/kernel/compress_params.hpp>
#include <kvcompress/kernel/insert_params.hpp>
#include <kvcompress/layout/cache.hpp>
#include <kvcompress/layout/ring.hpp>
#include <kvcompress/launch/dispatch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

namespace kvc_torch {

// Messages are built here with std::to_string and passed to TORCH_CHECK_* as one C string.
// Streaming numbers through c10::str's std::ostream crashed (SIGSEGV in
// basic_ostream::_M_insert<long>) in this extension on the lent H200's image, with the
// example's JIT build and torch 2.11; building the string first avoids the stream.
inline std::string piece(const char* s) { return s; }
inline std::string piece(const std::string& s) { return s; }
inline std::string piece(int v) { return std::to_string(v); }
inline std::string piece(long v) { return std::to_string(v); }
inline std::string piece(long long v) { return std::to_string(v); }
inline std::string piece(double v) { return std::to_string(v); }
inline std::string piece(at::ScalarType t) { return c10::toString(t); }
inline std::string piece(const c10::Device& d) { return d.str(); }
inline std::string piece(c10::IntArrayRef a) {
  std::string s = "[";
  for (size_t i = 0; i < a.size(); ++i) s += (i ? ", " : "") + std::to_string(a[i]);
  return s + "]";
}
template <class... Parts>
std::string cat(const Parts&... parts) {
  std::string s;
  ((s += piece(parts)), ...);
  return s;
}
}  // namespace kvc_torch

#define KVC_TORCH_CHECK_VALUE(cond, ...) TORCH_CHECK_VALUE(cond, ::kvc_torch::cat(__VA_ARGS__).c_str())
#define KVC_TORCH_CHECK_TYPE(cond, ...) TORCH_CHECK_TYPE(cond, ::kvc_torch::cat(__VA_ARGS__).c_str())
#define KVC_TORCH_CHECK(cond, ...) TORCH_CHECK(cond, ::kvc_torch::cat(__VA_ARGS__).c_str())

namespace kvc_torch {

inline constexpr int kRopeDim = 64;  // DeepSeek V4 / V4.1 rope dim (the host API's only one)
// The only head dim this package compiles (KVC_HEAD_DIMS in instance_lists.h): the V4.1
// latent. Checked here so that a wrong shape gets a message about the tensor, not the list.
inline constexpr int kHeadDim = 512;

/// "[a, b, c]" for messages.
inline std::string shape_str(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

/// Raises on a kvcompress Status that is not ok, carrying its message.
inline void throw_if_error(const kvc::Status& s, const char* op) {
  if (s.ok()) return;
  if (s.code() == kvc::StatusCode::kCudaError) KVC_TORCH_CHECK(false, op, ": kvcompress: ", s.message());
  KVC_TORCH_CHECK_VALUE(false, op, ": kvcompress: ", s.message());
}

/// `t` is a defined CUDA tensor on `device` (the device of the op's first tensor).
inline void check_device(const at::Tensor& t, const char* op, const char* name,
                         const at::Device& device) {
  KVC_TORCH_CHECK_VALUE(t.defined(), op, ": ", name, " is undefined");
  KVC_TORCH_CHECK_VALUE(t.is_cuda(), op, ": ", name, " must be a CUDA tensor, got one on ",
                    t.device());
  KVC_TORCH_CHECK_VALUE(t.device() == device, op, ": ", name, " is on ", t.device(),
                    ", the other tensors on ", device);
}

inline void check_dim(const at::Tensor& t, const char* op, const char* name, int64_t dim,
                      const char* expected) {
  KVC_TORCH_CHECK_VALUE(t.dim() == dim, op, ": ", name, " must be ", expected, ", got shape ",
                    shape_str(t));
}

/// The last dim is contiguous (stride 1), as the kernels read rows with vector loads.
inline void check_last_dim_contiguous(const at::Tensor& t, const char* op, const char* name) {
  KVC_TORCH_CHECK_VALUE(t.dim() == 0 || t.size(-1) <= 1 || t.stride(-1) == 1, op, ": ", name,
                    " must be contiguous in its last dim, got strides ", t.strides());
}

inline void check_dtype(const at::Tensor& t, const char* op, const char* name,
                        at::ScalarType want) {
  KVC_TORCH_CHECK_TYPE(t.scalar_type() == want, op, ": ", name, " must be ", want, ", got ",
                   t.scalar_type());
}

/// A 1-D index tensor of at least `n` int32/int64 elements (the first n are read), contiguous.
inline kvc::IndexPtr index_tensor(const at::Tensor& t, const char* op, const char* name,
                                  int64_t n, const at::Device& device) {
  check_device(t, op, name, device);
  KVC_TORCH_CHECK_TYPE(t.scalar_type() == at::kLong || t.scalar_type() == at::kInt, op, ": ", name,
                   " must be int64 or int32, got ", t.scalar_type());
  check_dim(t, op, name, 1, "1-D");
  KVC_TORCH_CHECK_VALUE(t.size(0) >= n, op, ": ", name, " has ", t.size(0),
                    " elements, fewer than num_tokens = slot_mapping.numel() = ", n);
  check_last_dim_contiguous(t, op, name);
  return kvc::IndexPtr{t.data_ptr(),
                       t.scalar_type() == at::kLong ? kvc::IndexType::kInt64 : kvc::IndexType::kInt32};
}

/// num_tokens of a call: the number of elements of its 1-D slot_mapping (vLLM's contract).
inline int64_t token_count(const at::Tensor& slot_mapping, const char* op, const char* name) {
  KVC_TORCH_CHECK_VALUE(slot_mapping.defined(), op, ": ", name, " is undefined");
  check_dim(slot_mapping, op, name, 1, "1-D [num_tokens]");
  return slot_mapping.numel();
}

/// A 2-D token tensor (kv_score, latent) holds at least `T` rows.
inline void check_rows(const at::Tensor& t, const char* op, const char* name, int64_t T) {
  KVC_TORCH_CHECK_VALUE(t.size(0) >= T, op, ": ", name, " has shape ", shape_str(t),
                    ", fewer rows than num_tokens = slot_mapping.numel() = ", T);
}

/// Row stride in elements of a 2-D tensor of rows `width` wide (a 1-row tensor may have any).
inline int64_t row_stride_elems(const at::Tensor& t, int64_t width) {
  return t.size(0) <= 1 ? width : t.stride(0);
}

/// An int32 1-D contiguous tensor (query_start_loc, token_to_req_indices).
inline const int32_t* int32_tensor(const at::Tensor& t, const char* op, const char* name,
                                   const at::Device& device) {
  check_device(t, op, name, device);
  check_dtype(t, op, name, at::kInt);
  check_dim(t, op, name, 1, "1-D");
  check_last_dim_contiguous(t, op, name);
  return static_cast<const int32_t*>(t.data_ptr());
}

inline int ratio_of(int64_t compress_ratio, const char* op) {
  KVC_TORCH_CHECK_VALUE(compress_ratio >= 1 && compress_ratio <= (1 << 20), op, ": compress_ratio ",
                    compress_ratio, " must be >= 1");
  return static_cast<int>(compress_ratio);
}

/// Op A's params. `head_dim` D comes from latent_out (Op A) or the cache (fused op);
/// `latent` may be null for the fused op (no latent written).
inline kvc::CompressParams compress_params(
    const char* op, const at::Tensor& kv_score, const at::Tensor& positions,
    const std::optional<at::Tensor>& state_cache, const at::Tensor& slot_mapping,
    const std::optional<at::Tensor>& query_start_loc,
    const std::optional<at::Tensor>& token_to_req_indices, const at::Tensor& rms_norm_weight,
    double rms_norm_eps, int ratio, int64_t head_dim, const at::Tensor* latent) {
  KVC_TORCH_CHECK_VALUE(kv_score.defined(), op, ": kv_score is undefined");
  const at::Device device = kv_score.device();
  check_device(kv_score, op, "kv_score", device);
  KVC_TORCH_CHECK_TYPE(kv_score.scalar_type() == at::kFloat || kv_score.scalar_type() == at::kBFloat16,
                   op, ": kv_score must be float32 or bfloat16, got ", kv_score.scalar_type());
  check_dim(kv_score, op, "kv_score", 2, "2-D [num_tokens, 2 * head_dim] (or [num_tokens, head_dim] at compress_ratio 1)");
  check_last_dim_contiguous(kv_score, op, "kv_score");
  // The index tensor that sets num_tokens is checked first, so that the row checks name it.
  const int64_t T = token_count(slot_mapping, op, "slot_mapping");
  check_rows(kv_score, op, "kv_score", T);
  const int64_t D = head_dim;
  const std::string what_d =
      latent != nullptr ? "latent_out has shape " + shape_str(*latent) : "head dim " + std::to_string(D);
  KVC_TORCH_CHECK_VALUE(D == kHeadDim, op, ": ", what_d, "; this extension is built for head dim ",
                    kHeadDim, " (the V4.1 latent)");
  const int64_t width = ratio > 1 ? 2 * D : D;
  KVC_TORCH_CHECK_VALUE(kv_score.size(1) == width, op, ": kv_score has shape ", shape_str(kv_score),
                    "; compress_ratio ", ratio, " with head dim ", D, " needs [num_tokens, ", width,
                    "]", std::string(ratio > 1 ? " (kv then score)" : " (kv only)"));
  const bool fp32 = kv_score.scalar_type() == at::kFloat;

  kvc::CompressParams p;
  p.ratio = ratio;
  p.head_dim = static_cast<int>(D);
  p.dtype = fp32 ? kvc::DType::kFloat32 : kvc::DType::kBFloat16;
  p.num_tokens = T;
  p.kv_score = kv_score.data_ptr();
  p.kv_score_stride_elems = row_stride_elems(kv_score, width);
  p.positions = index_tensor(positions, op, "positions", T, device);
  p.slot = index_tensor(slot_mapping, op, "slot_mapping", T, device);

  check_device(rms_norm_weight, op, "rms_norm_weight", device);
  check_dtype(rms_norm_weight, op, "rms_norm_weight", at::kBFloat16);
  check_dim(rms_norm_weight, op, "rms_norm_weight", 1, "1-D [head_dim]");
  KVC_TORCH_CHECK_VALUE(rms_norm_weight.size(0) == D, op, ": rms_norm_weight has ",
                    rms_norm_weight.size(0), " elements, expected head dim ", D);
  check_last_dim_contiguous(rms_norm_weight, op, "rms_norm_weight");
  p.weight = static_cast<const kvc::bf16_t*>(rms_norm_weight.data_ptr());
  // eps = 0 would make an all-zero row NaN (contract §1.7); the library rejects it too.
  KVC_TORCH_CHECK_VALUE(std::isfinite(rms_norm_eps) && rms_norm_eps > 0.0 &&
                        rms_norm_eps <= std::numeric_limits<float>::max(),
                    op, ": rms_norm_eps ", rms_norm_eps, " must be finite and > 0");
  p.eps = static_cast<float>(rms_norm_eps);

  if (latent != nullptr) {
    check_device(*latent, op, "latent_out", device);
    check_dtype(*latent, op, "latent_out", at::kBFloat16);
    check_dim(*latent, op, "latent_out", 2, "2-D [num_tokens, head_dim]");
    KVC_TORCH_CHECK_VALUE(latent->size(1) == D, op, ": latent_out has shape ", shape_str(*latent),
                      ", expected [num_tokens, ", D, "]");
    check_rows(*latent, op, "latent_out", T);
    check_last_dim_contiguous(*latent, op, "latent_out");
    p.latent = static_cast<kvc::bf16_t*>(latent->data_ptr());
    p.latent_stride_elems = row_stride_elems(*latent, D);
  }

  if (ratio > 1) {
    KVC_TORCH_CHECK_VALUE(state_cache.has_value() && state_cache->defined(), op,
                      ": state_cache is required when compress_ratio > 1");
    KVC_TORCH_CHECK_VALUE(query_start_loc.has_value() && query_start_loc->defined(), op,
                      ": query_start_loc is required when compress_ratio > 1");
    KVC_TORCH_CHECK_VALUE(token_to_req_indices.has_value() && token_to_req_indices->defined(), op,
                      ": token_to_req_indices is required when compress_ratio > 1");
    const at::Tensor& ring = *state_cache;
    check_device(ring, op, "state_cache", device);
    KVC_TORCH_CHECK_TYPE(ring.scalar_type() == kv_score.scalar_type(), op, ": state_cache must have ",
                     "kv_score's dtype ", kv_score.scalar_type(), ", got ", ring.scalar_type());
    check_dim(ring, op, "state_cache", 3, "3-D [num_blocks, capacity, 2 * head_dim]");
    KVC_TORCH_CHECK_VALUE(ring.size(2) == 2 * D, op, ": state_cache has shape ", shape_str(ring),
                      ", its rows must hold 2 * head_dim = ", 2 * D, " values");
    KVC_TORCH_CHECK_VALUE(ring.size(0) >= 1 && ring.size(1) >= 1, op, ": state_cache has shape ",
                      shape_str(ring), ": it needs at least one block of at least one row");
    check_last_dim_contiguous(ring, op, "state_cache");
    const int64_t capacity = ring.size(1);
    KVC_TORCH_CHECK_VALUE(capacity <= std::numeric_limits<int>::max(), op,
                      ": state_cache capacity ", capacity, " is too large");
    const int64_t row_stride = capacity == 1 ? 2 * D : ring.stride(1);
    const int64_t page_stride = ring.size(0) == 1 ? capacity * row_stride : ring.stride(0);
    p.ring = ring.data_ptr();
    // num_blocks from the tensor: a slot past the ring is padding, never a write past it.
    p.ring_layout = kvc::RingLayout{static_cast<int>(capacity), page_stride, row_stride,
                                    /*num_blocks=*/ring.size(0)};

    p.qsl = int32_tensor(*query_start_loc, op, "query_start_loc", device);
    p.qsl_size = query_start_loc->size(0);
    KVC_TORCH_CHECK_VALUE(p.qsl_size >= 2, op, ": query_start_loc has ", p.qsl_size,
                      " elements, expected num_reqs + 1 >= 2");
    p.req = int32_tensor(*token_to_req_indices, op, "token_to_req_indices", device);
    KVC_TORCH_CHECK_VALUE(token_to_req_indices->size(0) >= T, op, ": token_to_req_indices has ",
                      token_to_req_indices->size(0),
                      " elements, fewer than num_tokens = slot_mapping.numel() = ", T);
  }
  return p;
}

/// The cache layout of a call: `requested` (the keyword cache_layout, a kvc layout name), or
/// else the one the tensor selects as vLLM does: uint8 with last dim 584 fp8_ds_mla, 528
/// mxfp8, 288 nvfp4 (page-segregated), 656 fp8_ds_mla_v32 (DeepSeek V3.2, head dim 576);
/// bfloat16 rows; float8_e4m3fn rows.
inline kvc::CacheLayout cache_layout_of(const at::Tensor& kv_cache,
                                        const std::optional<c10::string_view>& requested,
                                        const char* op) {
  KVC_TORCH_CHECK_VALUE(kv_cache.defined(), op, ": kv_cache is undefined");
  check_dim(kv_cache, op, "kv_cache", 3,
            "3-D: uint8 [pages, block_size, 584 | 528 | 288 | 656], bfloat16 or float8_e4m3fn "
            "[pages, block_size, 512]");
  if (requested.has_value()) {
    const std::string name(requested->data(), requested->size());
    for (kvc::CacheLayout l : kvc::kBuiltinLayouts)
      if (name == kvc::cache_layout_name(l)) return l;
    std::string names;
    for (kvc::CacheLayout l : kvc::kBuiltinLayouts)
      names += std::string(names.empty() ? "" : ", ") + kvc::cache_layout_name(l);
    KVC_TORCH_CHECK_VALUE(false, op, ": unknown cache_layout '", name, "'; the layouts are ", names);
  }
  switch (kv_cache.scalar_type()) {
    case at::kByte:
      if (kv_cache.size(2) == kvc::Fp8DsMlaLayout::kRecordBytes) return kvc::CacheLayout::kFp8DsMla;
      if (kv_cache.size(2) == kvc::Mxfp8Layout::kRecordBytes) return kvc::CacheLayout::kMxfp8;
      if (kv_cache.size(2) == kvc::Nvfp4Layout::kRecordBytes) return kvc::CacheLayout::kNvfp4;
      if (kv_cache.size(2) == kvc::Fp8DsMlaV32Layout::kRecordBytes)
        return kvc::CacheLayout::kFp8DsMlaV32;
      KVC_TORCH_CHECK_VALUE(false, op, ": a uint8 kv_cache is [pages, block_size, 584] (fp8_ds_mla), "
                            "528 (mxfp8), 288 (nvfp4) or 656 (fp8_ds_mla_v32), got shape ",
                            shape_str(kv_cache), "; cache_layout= names the others");
      break;
    case at::kBFloat16: return kvc::CacheLayout::kBf16Rows;
    case at::kFloat8_e4m3fn: return kvc::CacheLayout::kFp8Rows;
    default:
      KVC_TORCH_CHECK_TYPE(false, op, ": kv_cache dtype ", kv_cache.scalar_type(),
                       " is not supported: uint8 [pages, block_size, 584 | 528 | 288 | 656] "
                       "(fp8_ds_mla, mxfp8, nvfp4, fp8_ds_mla_v32), bfloat16 "
                       "[pages, block_size, 512] (bf16 rows) or "
                       "float8_e4m3fn [pages, block_size, 512] (fp8 rows with fp8_scale)");
  }
  return kvc::CacheLayout::kFp8DsMla;
}

/// Head dim the cache holds in `layout`, after checking its dtype and last dim against it.
inline int64_t cache_head_dim(const at::Tensor& kv_cache, kvc::CacheLayout layout, const char* op) {
  int64_t head_dim = 0, last_dim = 0;
  bool rows = false;
  at::ScalarType dtype = at::kByte;
  // V3.2's records hold head dim 576, outside the package's head-dim list (instance_lists.h):
  // rope_quant_insert launches its instance directly (insert_op.cu).
  if (layout == kvc::CacheLayout::kFp8DsMlaV32) {
    head_dim = kvc::Fp8DsMlaV32Layout::kHeadDim;
    rows = kvc::Fp8DsMlaV32Layout::ByteMap::kUsesRowStride;
    last_dim = kvc::Fp8DsMlaV32Layout::kRecordBytes;
  } else {
    throw_if_error(kvc::dispatch_layout<kHeadDim>(layout, [&](auto l) {
      using L = decltype(l);
      head_dim = L::kHeadDim;
      rows = L::ByteMap::kUsesRowStride;
      if constexpr (std::is_same_v<L, kvc::Bf16RowsLayout<kHeadDim, kRopeDim>>) {
        dtype = at::kBFloat16;
        last_dim = kHeadDim;
      } else if constexpr (std::is_same_v<L, kvc::Fp8RowsLayout<kHeadDim, kRopeDim>>) {
        dtype = at::kFloat8_e4m3fn;
        last_dim = kHeadDim;
      } else {
        last_dim = L::kRecordBytes;
      }
      return kvc::Status::success();
    }), op);
  }
  KVC_TORCH_CHECK_TYPE(kv_cache.scalar_type() == dtype, op, ": cache layout ",
                       kvc::cache_layout_name(layout), " needs a ", dtype, " kv_cache, got ",
                       kv_cache.scalar_type());
  // Row formats may pad their rows (the last dim then larger than the record).
  KVC_TORCH_CHECK_VALUE(rows && dtype == at::kByte ? kv_cache.size(2) >= last_dim
                                                   : kv_cache.size(2) == last_dim,
                        op, ": cache layout ", kvc::cache_layout_name(layout), " keeps ",
                        last_dim, dtype == at::kByte ? " bytes" : " values",
                        " per record in the last dim; kv_cache has shape ", shape_str(kv_cache));
  return head_dim;
}

/// Op B's record arguments (rotary table, cache slots, cache) for `T` tokens.
inline kvc::RecordArgs record_args(const char* op, const at::Tensor& cos_sin_cache,
                                   const at::Tensor& kv_cache, const at::Tensor& slot_mapping,
                                   const char* slot_name,
                                   const std::optional<at::Tensor>& fp8_scale, int64_t T,
                                   const at::Device& device, kvc::CacheLayout layout) {
  kvc::RecordArgs r;
  r.rope_dim = kRopeDim;
  r.rope_style = kvc::RopeStyle::kGptJ;

  check_device(cos_sin_cache, op, "cos_sin_cache", device);
  KVC_TORCH_CHECK_TYPE(cos_sin_cache.scalar_type() == at::kFloat ||
                       cos_sin_cache.scalar_type() == at::kBFloat16,
                   op, ": cos_sin_cache must be float32 or bfloat16, got ",
                   cos_sin_cache.scalar_type());
  check_dim(cos_sin_cache, op, "cos_sin_cache", 2, "2-D [max_position, 64]");
  KVC_TORCH_CHECK_VALUE(cos_sin_cache.size(1) == kRopeDim, op, ": cos_sin_cache has shape ",
                    shape_str(cos_sin_cache), ", expected [max_position, ", kRopeDim,
                    "] (32 cos then 32 sin)");
  check_last_dim_contiguous(cos_sin_cache, op, "cos_sin_cache");
  r.cos_sin = cos_sin_cache.data_ptr();
  r.cos_sin_dtype = cos_sin_cache.scalar_type() == at::kFloat ? kvc::DType::kFloat32
                                                              : kvc::DType::kBFloat16;
  r.cos_sin_stride_elems = cos_sin_cache.size(0) <= 1 ? kRopeDim : cos_sin_cache.stride(0);
  r.cos_sin_rows = cos_sin_cache.size(0);

  r.cache_slot = index_tensor(slot_mapping, op, slot_name, T, device);

  check_device(kv_cache, op, "kv_cache", device);
  cache_head_dim(kv_cache, layout, op);  // dtype / shape checks
  check_last_dim_contiguous(kv_cache, op, "kv_cache");
  const int64_t pages = kv_cache.size(0), block = kv_cache.size(1);
  KVC_TORCH_CHECK_VALUE(block >= 1 && block <= std::numeric_limits<int>::max(), op,
                    ": kv_cache has shape ", shape_str(kv_cache), ": block_size must be >= 1");
  const int64_t elem = kv_cache.element_size();
  const int64_t row_stride = (block == 1 ? kv_cache.size(2) : kv_cache.stride(1)) * elem;
  const int64_t page_stride = (pages <= 1 ? block * (row_stride / elem) : kv_cache.stride(0)) * elem;
  r.cache.data = kv_cache.data_ptr();
  r.cache.block_size = static_cast<int>(block);
  r.cache.page_stride_bytes = page_stride;
  r.cache.row_stride_bytes = row_stride;
  r.cache.num_pages = pages;  // slots past the cache are skipped, never written

  r.layout = layout;
  const bool segregated = kv_cache.scalar_type() == at::kByte &&
                          layout != kvc::CacheLayout::kNvfp4Rows && layout != kvc::CacheLayout::kFp8DsMlaV32;
  if (segregated) {
    // The [pages, B, record] view covers the page's B value rows and B scale rows
    // (page-segregated byte map, contract §2.3); records must be packed inside the page.
    KVC_TORCH_CHECK_VALUE(block == 1 || kv_cache.stride(1) == kv_cache.size(2), op,
                          ": a page-segregated (", kvc::cache_layout_name(layout),
                          ") kv_cache must be packed within a page (stride(1) == ",
                          kv_cache.size(2), "), got strides ", kv_cache.strides());
  }
  if (layout == kvc::CacheLayout::kFp8Rows)
    KVC_TORCH_CHECK_VALUE(fp8_scale.has_value() && fp8_scale->defined(), op,
                          ": fp8_scale (a 1-element float32 CUDA tensor) is required for a "
                          "float8_e4m3fn kv_cache");
  if (r.layout == kvc::CacheLayout::kFp8Rows) {
    const at::Tensor& scale = *fp8_scale;
    check_device(scale, op, "fp8_scale", device);
    check_dtype(scale, op, "fp8_scale", at::kFloat);
    KVC_TORCH_CHECK_VALUE(scale.numel() == 1, op, ": fp8_scale must have one element, got shape ",
                      shape_str(scale));
    r.cache.scale = static_cast<const float*>(scale.data_ptr());
  }
  return r;
}

}  // namespace kvc_torch
