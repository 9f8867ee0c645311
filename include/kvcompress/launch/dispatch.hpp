// SPDX-License-Identifier: Apache-2.0
// kvcompress — the closed lists of compiled configurations, and the runtime -> template
// dispatch over them. Tests and benchmarks iterate the same lists.
//
// Compiling fewer instances. kvc::compress, kvc::insert and kvc::fused compile a kernel set
// per (ratio, head dim, dtype, layout) of the lists below, in every translation unit that
// calls them. Measured (nvcc 13.0 -O3 -arch=sm_90 -c, one TU calling all three ops, one core
// of the 2-core CI-class host, 2026-12-04):
//   default lists (7 layouts)                              472 kernels, 18.8 MB SASS, 148 s
//   KVC_RATIOS 1, 2 / KVC_HEAD_DIMS 512 / kFloat32 / kFp8DsMla   12 kernels, 0.32 MB SASS, 5 s
// To compile only what you call, define the lists before including any kvcompress header
// (a header of yours that every TU includes first), or set them on the target with the
// CMake function kvc_instance_lists() (cmake/KvcInstanceLists.cmake). Not as plain
// `-DKVC_RATIOS=1,2`: nvcc splits -D values at commas.
//
//   #define KVC_RATIOS 1, 2
//   #define KVC_HEAD_DIMS 512
//   #define KVC_DTYPES kFloat32              // kFloat32, kBFloat16 (or kvc::DType::...)
//   #define KVC_LAYOUTS kFp8DsMla            // kvc::CacheLayout names: kFp8DsMla, kBf16Rows,
//                                    // kFp8Rows, kMxfp8, kNvfp4, kNvfp4Rows, kFp8DsMlaV32
//   #include <kvcompress/kvcompress.cuh>
//
//   kvc_instance_lists(my_app RATIOS 1 2 HEAD_DIMS 512 DTYPES kFloat32 LAYOUTS kFp8DsMla)
//
// A runtime value outside the lists returns kNotSupported naming the compiled list, as a
// ratio outside the default list always has. Every TU of one program must see the same
// lists (the dispatch functions are inline: different definitions in two TUs are an ODR
// violation). The launch_* instance templates are not restricted by the lists.
#pragma once

#include "../config.hpp"

#include <cstddef>
#include <iterator>
#include <string>
#include <type_traits>

#include "../core/codecs.hpp"
#include "../core/status.hpp"
#include "../core/types.hpp"
#include "../layout/cache.hpp"
#include "validate.hpp"

#ifndef KVC_RATIOS
#define KVC_RATIOS 1, 2, 4, 8, 16, 32, 64, 128
#endif
#ifndef KVC_HEAD_DIMS
#define KVC_HEAD_DIMS 128, 256, 512
#endif
#ifndef KVC_DTYPES
#define KVC_DTYPES kFloat32, kBFloat16
#endif
#ifndef KVC_LAYOUTS
#define KVC_LAYOUT_LIST_ENTRY(name, ...) name,
// Every built-in layout (layout/cache.hpp); fixed-head-dim formats compile only at theirs.
#define KVC_LAYOUTS KVC_BUILTIN_LAYOUTS(KVC_LAYOUT_LIST_ENTRY)
#endif

KVC_NAMESPACE_BEGIN

template <int V>
using Int = std::integral_constant<int, V>;

namespace detail {
template <int... Vs>
struct IntList {};

template <class T, std::size_t N>
constexpr bool list_contains(const T (&list)[N], T value) {
  for (std::size_t i = 0; i < N; ++i)
    if (list[i] == value) return true;
  return false;
}

// The short names KVC_DTYPES / KVC_LAYOUTS may use (kvc::DType::kFloat32 works as well).
namespace list_names {
inline constexpr DType kFloat32 = DType::kFloat32;
inline constexpr DType kBFloat16 = DType::kBFloat16;
#define KVC_LAYOUT_LIST_NAME(name, ...) inline constexpr CacheLayout name = CacheLayout::name;
KVC_BUILTIN_LAYOUTS(KVC_LAYOUT_LIST_NAME)
#undef KVC_LAYOUT_LIST_NAME
}  // namespace list_names
namespace lists {
using namespace list_names;
inline constexpr DType kDTypes[] = {KVC_DTYPES};
inline constexpr CacheLayout kLayouts[] = {KVC_LAYOUTS};
}  // namespace lists
}  // namespace detail

/// Compress ratios the host API dispatches to (KVC_RATIOS). Other ratios: instantiate the
/// kernel templates yourself (examples/02_custom_ratio).
inline constexpr int kSupportedRatios[] = {KVC_RATIOS};
/// Head dims the host API dispatches to (KVC_HEAD_DIMS).
inline constexpr int kSupportedHeadDims[] = {KVC_HEAD_DIMS};
/// Input dtypes of kv_score the host API dispatches to (KVC_DTYPES).
inline constexpr const auto& kSupportedDTypes = detail::lists::kDTypes;
/// Cache layouts the host API dispatches to (KVC_LAYOUTS).
inline constexpr const auto& kSupportedLayouts = detail::lists::kLayouts;

namespace detail {
using CompiledRatios = IntList<KVC_RATIOS>;
using CompiledHeadDims = IntList<KVC_HEAD_DIMS>;

template <int... Vs>
constexpr bool all_positive(IntList<Vs...>) {
  return ((Vs >= 1) && ...);
}
static_assert(all_positive(CompiledRatios{}), "KVC_RATIOS: every compress ratio must be >= 1");
static_assert(all_positive(CompiledHeadDims{}), "KVC_HEAD_DIMS: every head dim must be >= 1");

inline std::string list_string(const int* values, int n) {
  std::string s = "{";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(values[i]);
  return s + "}";
}

template <class T, std::size_t N, class Name>
std::string name_list_string(const T (&values)[N], Name name) {
  std::string s = "{";
  for (std::size_t i = 0; i < N; ++i) s += (i ? ", " : "") + std::string(name(values[i]));
  return s + "}";
}

/// Calls f(Int<V>{}) for the V of the list equal to `value`; `found` says whether one was.
/// f's Status is returned as it is built (no assignment into a local, which would move its
/// message string on every valid call: the host cost bench/kvc_host_cost.cpp measures).
template <class F>
Status dispatch_int(IntList<>, int, F&, bool& found) {
  found = false;
  return Status::success();
}
template <int V, int... Vs, class F>
Status dispatch_int(IntList<V, Vs...>, int value, F& f, bool& found) {
  if (value == V) {
    found = true;
    return f(Int<V>{});
  }
  return dispatch_int(IntList<Vs...>{}, value, f, found);
}
}  // namespace detail

/// Calls f(Int<R>{}) for the runtime ratio, or returns kNotSupported naming the list; a
/// ratio < 1 is no ratio at all: kInvalidArgument "compress ratio R must be >= 1", the message
/// of compress_check_params / insert_check_params, never "not compiled".
template <class F>
Status dispatch_ratio(int ratio, F&& f) {
  bool found = false;
  Status s = detail::dispatch_int(detail::CompiledRatios{}, ratio, f, found);
  if (found) return s;
  if (ratio < 1) return detail::invalid("compress ratio ", ratio, " must be >= 1");
  return Status::not_supported(
      "compress ratio " + std::to_string(ratio) + " is not one of the compiled ratios " +
      detail::list_string(kSupportedRatios, int(std::size(kSupportedRatios))) +
      "; instantiate the kernel template for it (see examples/02_custom_ratio)");
}

/// Calls f(Int<D>{}) for the runtime head dim, or returns kNotSupported naming the list.
template <class F>
Status dispatch_head_dim(int head_dim, F&& f) {
  bool found = false;
  Status s = detail::dispatch_int(detail::CompiledHeadDims{}, head_dim, f, found);
  if (found) return s;
  return Status::not_supported(
      "head dim " + std::to_string(head_dim) + " is not one of the compiled head dims " +
      detail::list_string(kSupportedHeadDims, int(std::size(kSupportedHeadDims))));
}

namespace detail {
inline Status dtype_not_compiled(DType dtype) {
  return Status::not_supported(std::string("dtype ") + dtype_name(dtype) +
                               " is not one of the compiled dtypes " +
                               name_list_string(kSupportedDTypes, dtype_name));
}
inline Status layout_not_compiled(CacheLayout layout) {
  return Status::not_supported(std::string("cache layout ") + cache_layout_name(layout) +
                               " is not one of the compiled layouts " +
                               name_list_string(kSupportedLayouts, cache_layout_name));
}
}  // namespace detail

/// Calls f(T{}) with T = float or bf16_t for the runtime dtype, or returns kNotSupported
/// naming the list.
template <class F>
Status dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      if constexpr (detail::list_contains(kSupportedDTypes, DType::kFloat32)) {
        return f(float{});
      } else {
        return detail::dtype_not_compiled(dtype);
      }
    case DType::kBFloat16:
      if constexpr (detail::list_contains(kSupportedDTypes, DType::kBFloat16)) {
        return f(bf16_t{});
      } else {
        return detail::dtype_not_compiled(dtype);
      }
  }
  return Status::not_supported("unknown dtype");
}

/// Calls f(Layout{}) for the runtime cache layout at a compile-time head dim (rope dim 64),
/// or returns kNotSupported naming the list. One case per entry of KVC_BUILTIN_LAYOUTS.
template <int HeadDim, class F>
Status dispatch_layout(CacheLayout layout, F&& f) {
  switch (layout) {
#define KVC_DISPATCH_LAYOUT_CASE(name, ...)                                                   \
  case CacheLayout::name: {                                                                   \
    using L = typename BuiltinLayout<CacheLayout::name, HeadDim>::type;                       \
    if constexpr (!detail::list_contains(kSupportedLayouts, CacheLayout::name)) {             \
      return detail::layout_not_compiled(layout);                                             \
    } else if constexpr (L::kHeadDim != HeadDim) {                                            \
      return Status::not_supported(std::string("cache layout ") + L::kName + " holds head dim " + \
                                   std::to_string(L::kHeadDim) + ", not " +                   \
                                   std::to_string(HeadDim));                                  \
    } else {                                                                                  \
      return f(L{});                                                                          \
    }                                                                                         \
  }
    KVC_BUILTIN_LAYOUTS(KVC_DISPATCH_LAYOUT_CASE)
#undef KVC_DISPATCH_LAYOUT_CASE
  }
  return Status::not_supported("unknown cache layout");
}

KVC_NAMESPACE_END
