// SPDX-License-Identifier: Apache-2.0
// kvcompress torch package — the three ops' CUDA implementations (registered in ops.cpp).
//
// Argument names, orders and types are those of the schemas in ops.cpp, which follow vLLM's
// DeepSeek V4.1 compressor (fused_save_compress_norm, rope_quant_insert). Every op writes in
// place, validates before touching the GPU and raises a Python exception on a bad argument.
// num_tokens = slot_mapping.numel(); the token tensors may have more rows (a padded batch):
// those rows are neither read as tokens nor written.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/string_view.h>

#include <cstdint>
#include <optional>

namespace kvc_torch {

// Op A (contract §1). kv_score [>= T, 2*D] (ratio > 1: kv then score) or [>= T, D] (ratio 1),
// fp32 or bf16; positions [>= T] int64/int32; state_cache [blocks, C, 2*D] of kv_score's dtype
// (ratio > 1; ignored at ratio 1); slot_mapping [T] ring slots (-1 = padding);
// query_start_loc [num_reqs + 1] int32; token_to_req_indices [>= T] int32; rms_norm_weight [D]
// bf16; latent_out [>= T, D] bf16 (only closing, non-padding rows are written).
void fused_save_compress_norm(const at::Tensor& kv_score, const at::Tensor& positions,
                              const std::optional<at::Tensor>& state_cache,
                              const at::Tensor& slot_mapping,
                              const std::optional<at::Tensor>& query_start_loc,
                              const std::optional<at::Tensor>& token_to_req_indices,
                              const at::Tensor& rms_norm_weight, double rms_norm_eps,
                              int64_t compress_ratio, const at::Tensor& latent_out, bool pdl);

// Op B (contract §2). latent [>= T, D] bf16; positions [>= T]; cos_sin_cache [max_pos, 64]
// fp32/bf16; kv_cache: uint8 [pages, B, 584] (fp8_ds_mla), bf16 [pages, B, D] or
// float8_e4m3fn [pages, B, D] (then fp8_scale, a 1-element fp32 tensor, is required);
// slot_mapping [T] cache slots.
void rope_quant_insert(const at::Tensor& latent, const at::Tensor& positions,
                       const at::Tensor& cos_sin_cache, const at::Tensor& kv_cache,
                       const at::Tensor& slot_mapping, int64_t compress_ratio,
                       const std::optional<at::Tensor>& fp8_scale,
                       std::optional<c10::string_view> cache_layout, bool pdl);

// Fused op (contract §3): Op A's arguments, then Op B's record arguments; latent_out optional.
// slot_mapping addresses the ring (and sets T), kv_slot_mapping [>= T] the compressed cache.
void fused_compress_insert(const at::Tensor& kv_score, const at::Tensor& positions,
                           const std::optional<at::Tensor>& state_cache,
                           const at::Tensor& slot_mapping,
                           const std::optional<at::Tensor>& query_start_loc,
                           const std::optional<at::Tensor>& token_to_req_indices,
                           const at::Tensor& rms_norm_weight, double rms_norm_eps,
                           int64_t compress_ratio, const at::Tensor& cos_sin_cache,
                           const at::Tensor& kv_cache, const at::Tensor& kv_slot_mapping,
                           const std::optional<at::Tensor>& latent_out,
                           const std::optional<at::Tensor>& fp8_scale,
                       std::optional<c10::string_view> cache_layout, bool pdl);

}  // namespace kvc_torch
