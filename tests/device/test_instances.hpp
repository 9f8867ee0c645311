// SPDX-License-Identifier: Apache-2.0
// Device tier: the ops through explicit kernel instances, for test files that need only a
// few configurations.
//
// kvc::compress / insert / fused compile every instance of the default lists in each
// translation unit that calls them (472 kernels, minutes of nvcc per file; launch/
// dispatch.hpp), and a program must see one set of lists in all its files. A test that
// exercises kernel behaviour (bounds, PDL ordering) at a handful of ratios and layouts calls
// these instead: the same validation and launch as the runtime calls (launch_compress /
// launch_insert / launch_fused validate like them), at head dim 512, for the ratios and
// (runtime layout, layout type) pairs it names. A configuration outside them returns
// kNotSupported naming the test's lists, so a case that drifts out of them fails loudly.
//
//   using Ops = kvctest::Instances<kvctest::Layouts<kvctest::LayoutIs<kvc::CacheLayout::kFp8DsMla,
//                                                   kvc::Fp8DsMlaLayout>>, 4, 128>;
//   KVC_CHECK_STATUS(Ops::compress(params, stream, options));
#pragma once

#include <kvcompress/kvcompress.cuh>

#include <string>

namespace kvctest {

/// A runtime layout name and the layout type the tests launch for it.
template <kvc::CacheLayout Name, class Type>
struct LayoutIs {
  static constexpr kvc::CacheLayout kName = Name;
  using type = Type;
};
template <class... L>
struct Layouts {};

template <class LayoutList, int... Ratios>
struct Instances;

template <class... L, int... Ratios>
struct Instances<Layouts<L...>, Ratios...> {
  static constexpr int kHeadDim = 512;

  static kvc::Status compress(const kvc::CompressParams& p, cudaStream_t stream,
                              const kvc::LaunchOptions& options = {}) {
    kvc::Status s = missing("compress", p.ratio, p.head_dim);
    (void)((p.ratio == Ratios && p.head_dim == kHeadDim &&
            (s = compress_at<Ratios>(p, stream, options), true)) ||
           ...);
    return s;
  }

  static kvc::Status insert(const kvc::InsertParams& p, cudaStream_t stream,
                            const kvc::LaunchOptions& options = {}) {
    kvc::Status s = missing("insert", p.ratio, p.head_dim);
    (void)((p.ratio == Ratios && p.head_dim == kHeadDim &&
            (s = insert_at<Ratios>(p, stream, options), true)) ||
           ...);
    return s;
  }

  static kvc::Status fused(const kvc::FusedParams& p, cudaStream_t stream,
                           const kvc::LaunchOptions& options = {}) {
    const kvc::CompressParams& c = p.compress;
    kvc::Status s = missing("fused", c.ratio, c.head_dim);
    (void)((c.ratio == Ratios && c.head_dim == kHeadDim &&
            (s = fused_at<Ratios>(p, stream, options), true)) ||
           ...);
    return s;
  }

 private:
  static kvc::Status missing(const char* op, int ratio, int head_dim) {
    return kvc::Status::not_supported(std::string("test instances: ") + op + " at ratio " +
                                      std::to_string(ratio) + ", head dim " +
                                      std::to_string(head_dim) +
                                      " (or this layout / dtype) is not among the test's instances");
  }

  template <int R>
  static kvc::Status compress_at(const kvc::CompressParams& p, cudaStream_t stream,
                                 const kvc::LaunchOptions& options) {
    if (p.dtype == kvc::DType::kBFloat16)
      return kvc::launch_compress<R, kHeadDim, kvc::bf16_t>(p, stream, options);
    return kvc::launch_compress<R, kHeadDim, float>(p, stream, options);
  }

  template <int R>
  static kvc::Status insert_at(const kvc::InsertParams& p, cudaStream_t stream,
                               const kvc::LaunchOptions& options) {
    kvc::Status s = missing("insert", R, kHeadDim);
    (void)((p.record.layout == L::kName &&
            (s = kvc::launch_insert<R, kHeadDim, typename L::type>(p, stream, options), true)) ||
           ...);
    return s;
  }

  template <int R>
  static kvc::Status fused_at(const kvc::FusedParams& p, cudaStream_t stream,
                              const kvc::LaunchOptions& options) {
    kvc::Status s = missing("fused", R, kHeadDim);
    const bool bf16 = p.compress.dtype == kvc::DType::kBFloat16;
    (void)((p.record.layout == L::kName &&
            (s = bf16 ? kvc::launch_fused<R, kHeadDim, kvc::bf16_t, typename L::type>(p, stream, options)
                      : kvc::launch_fused<R, kHeadDim, float, typename L::type>(p, stream, options),
             true)) ||
           ...);
    return s;
  }
};

}  // namespace kvctest
