// kvcompress — the closed lists of compiled configurations, and the runtime -> template
// dispatch over them. Tests and benchmarks iterate the same lists.
#pragma once

#include <iterator>
#include <string>
#include <type_traits>

#include "../core/codecs.hpp"
#include "../core/status.hpp"
#include "../core/types.hpp"
#include "../layout/cache.hpp"
#include "validate.hpp"

namespace kvc {

/// Compress ratios the host API dispatches to. Other ratios: instantiate the kernel
/// templates yourself (examples/02_custom_ratio).
inline constexpr int kSupportedRatios[] = {1, 2, 4, 8, 16, 32, 64, 128};
/// Head dims the host API dispatches to.
inline constexpr int kSupportedHeadDims[] = {128, 256, 512};

template <int V>
using Int = std::integral_constant<int, V>;

namespace detail {
inline std::string list_string(const int* values, int n) {
  std::string s = "{";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "}";
}
}  // namespace detail

/// Calls f(Int<R>{}) for the runtime ratio, or returns kNotSupported naming the list; a
/// ratio < 1 is no ratio at all: kInvalidArgument "compress ratio R must be >= 1", the message
/// of compress_check_params / insert_check_params, never "not compiled".
template <class F>
Status dispatch_ratio(int ratio, F&& f) {
  switch (ratio) {
    case 1: return f(Int<1>{});
    case 2: return f(Int<2>{});
    case 4: return f(Int<4>{});
    case 8: return f(Int<8>{});
    case 16: return f(Int<16>{});
    case 32: return f(Int<32>{});
    case 64: return f(Int<64>{});
    case 128: return f(Int<128>{});
    default:
      if (ratio < 1) return detail::invalid("compress ratio ", ratio, " must be >= 1");
      return Status::not_supported(
          "compress ratio " + std::to_string(ratio) + " is not one of the compiled ratios " +
          detail::list_string(kSupportedRatios, int(std::size(kSupportedRatios))) +
          "; instantiate the kernel template for it (see examples/02_custom_ratio)");
  }
}

/// Calls f(Int<D>{}) for the runtime head dim, or returns kNotSupported naming the list.
template <class F>
Status dispatch_head_dim(int head_dim, F&& f) {
  switch (head_dim) {
    case 128: return f(Int<128>{});
    case 256: return f(Int<256>{});
    case 512: return f(Int<512>{});
    default:
      return Status::not_supported(
          "head dim " + std::to_string(head_dim) + " is not one of the compiled head dims " +
          detail::list_string(kSupportedHeadDims, int(std::size(kSupportedHeadDims))));
  }
}

/// Calls f(T{}) with T = float or bf16_t for the runtime dtype.
template <class F>
Status dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: return f(float{});
    case DType::kBFloat16: return f(bf16_t{});
  }
  return Status::not_supported("unknown dtype");
}

/// Calls f(Layout{}) for the runtime cache layout at a compile-time head dim (rope dim 64).
template <int HeadDim, class F>
Status dispatch_layout(CacheLayout layout, F&& f) {
  switch (layout) {
    case CacheLayout::kFp8DsMla:
      if constexpr (HeadDim == Fp8DsMlaLayout::kHeadDim) {
        return f(Fp8DsMlaLayout{});
      } else {
        return Status::not_supported("cache layout fp8_ds_mla holds head dim 512, not " +
                                     std::to_string(HeadDim));
      }
    case CacheLayout::kBf16Rows: return f(Bf16RowsLayout<HeadDim, 64>{});
    case CacheLayout::kFp8Rows: return f(Fp8RowsLayout<HeadDim, 64>{});
  }
  return Status::not_supported("unknown cache layout");
}

}  // namespace kvc
