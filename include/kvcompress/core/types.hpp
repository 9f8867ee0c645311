// SPDX-License-Identifier: Apache-2.0
// kvcompress — runtime descriptions of element and index types used by the host API.
#pragma once

#include <cstdint>

#include "../config.hpp"

KVC_NAMESPACE_BEGIN

/// Element type of a floating-point tensor, chosen at run time and dispatched to templates.
enum class DType { kFloat32, kBFloat16 };

/// Width of an integer index tensor (positions, slots). Read at run time inside kernels:
/// indices are a few bytes per token, so a uniform branch costs nothing measurable and
/// saves a template instance per combination.
enum class IndexType { kInt32, kInt64 };

inline const char* dtype_name(DType t) { return t == DType::kFloat32 ? "float32" : "bfloat16"; }
inline int dtype_size(DType t) { return t == DType::kFloat32 ? 4 : 2; }
inline int index_size(IndexType t) { return t == IndexType::kInt32 ? 4 : 8; }

/// A pointer to int32 or int64 indices; `load(i)` widens to int64.
struct IndexPtr {
  const void* data = nullptr;
  IndexType type = IndexType::kInt64;

  /// Whether the pointer is set and its type one of the two (the host validation requires
  /// both). The kernels test it before their PDL wait, so the type, which every load(i)
  /// branches on, is read before the wait too (arch/pdl.cuh).
  KVC_HOST_DEVICE bool usable() const {
    return (data != nullptr) & ((type == IndexType::kInt32) | (type == IndexType::kInt64));
  }

  /// Element i widened to int64. `I`: the caller's index type (an int32_t index makes the
  /// address one wide multiply-add instead of a 64-bit shift and add pair).
  template <class I>
  KVC_HOST_DEVICE int64_t load(I i) const {
    return type == IndexType::kInt64 ? static_cast<const int64_t*>(data)[i]
                                     : static_cast<int64_t>(static_cast<const int32_t*>(data)[i]);
  }
};

KVC_NAMESPACE_END
