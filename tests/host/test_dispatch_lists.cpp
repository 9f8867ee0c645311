// SPDX-License-Identifier: Apache-2.0
// Host tier: the compiled lists of launch/dispatch.hpp (KVC_RATIOS, KVC_HEAD_DIMS,
// KVC_DTYPES, KVC_LAYOUTS).
//
// This file is built twice. In kvc_host_tests (the tests/host glob) it checks the default
// lists. In kvc_dispatch_lists_tests, an executable of its own (tests/CMakeLists.txt), it is
// compiled with KVC_TEST_RESTRICTED_LISTS and restricts the lists to vLLM's configuration
// before including anything: the lists must be the same in every TU of a program (the
// dispatch functions are inline), so the restricted build cannot share kvc_host_tests.
#if defined(KVC_TEST_RESTRICTED_LISTS)
#define KVC_RATIOS 1, 2
#define KVC_HEAD_DIMS 512
#define KVC_DTYPES kFloat32
#define KVC_LAYOUTS kvc::CacheLayout::kFp8DsMla  // qualified names work as well
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#endif
// KVC_TEST_CMAKE_LISTS: the lists come from kvc_instance_lists() on the target
// (tests/CMakeLists.txt: ratios 1 4, head dim 512, bf16, fp8_ds_mla and nvfp4).
#if defined(KVC_TEST_CMAKE_LISTS)
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#endif

#include <doctest/doctest.h>

#include <iterator>
#include <string>
#include <vector>

#include <kvcompress/launch/compress.hpp>
#include <kvcompress/launch/dispatch.hpp>
#include <kvcompress/launch/insert.hpp>
#include <kvcompress/launch/fused.hpp>

namespace {

using kvc::Status;
using kvc::StatusCode;

template <class T, std::size_t N>
std::vector<T> to_vector(const T (&a)[N]) {
  return std::vector<T>(a, a + N);
}

// The ratio the dispatcher selected, or -1 when it called nothing.
int dispatched_ratio(int ratio, Status* status) {
  int seen = -1;
  *status = kvc::dispatch_ratio(ratio, [&](auto r) {
    seen = decltype(r)::value;
    return Status::success();
  });
  return seen;
}

int dispatched_head_dim(int head_dim, Status* status) {
  int seen = -1;
  *status = kvc::dispatch_head_dim(head_dim, [&](auto d) {
    seen = decltype(d)::value;
    return Status::success();
  });
  return seen;
}

Status dispatched_dtype(kvc::DType dtype) {
  return kvc::dispatch_dtype(dtype, [](auto) { return Status::success(); });
}

template <int HeadDim>
Status dispatched_layout(kvc::CacheLayout layout) {
  return kvc::dispatch_layout<HeadDim>(layout, [](auto) { return Status::success(); });
}

}  // namespace

#if defined(KVC_TEST_CMAKE_LISTS)

TEST_CASE("dispatch lists: set by kvc_instance_lists() (CMake)") {
  CHECK(to_vector(kvc::kSupportedRatios) == std::vector<int>{1, 4});
  CHECK(to_vector(kvc::kSupportedHeadDims) == std::vector<int>{512});
  CHECK(to_vector(kvc::kSupportedDTypes) == std::vector<kvc::DType>{kvc::DType::kBFloat16});
  CHECK(to_vector(kvc::kSupportedLayouts) ==
        std::vector<kvc::CacheLayout>{kvc::CacheLayout::kFp8DsMla, kvc::CacheLayout::kNvfp4});
  CHECK(dispatched_layout<512>(kvc::CacheLayout::kNvfp4).ok());
  CHECK(std::string(dispatched_layout<512>(kvc::CacheLayout::kMxfp8).message()) ==
        "cache layout mxfp8 is not one of the compiled layouts {fp8_ds_mla, nvfp4}");
  Status s;
  CHECK(dispatched_ratio(2, &s) == -1);
  CHECK(std::string(s.message()).find("{1, 4}") != std::string::npos);
  CHECK(dispatched_head_dim(512, &s) == 512);
  CHECK(dispatched_head_dim(128, &s) == -1);
  CHECK(dispatched_dtype(kvc::DType::kBFloat16).ok());
  CHECK(std::string(dispatched_dtype(kvc::DType::kFloat32).message()) ==
        "dtype float32 is not one of the compiled dtypes {bfloat16}");
}

#elif !defined(KVC_TEST_RESTRICTED_LISTS)

TEST_CASE("dispatch lists: the defaults") {
  CHECK(to_vector(kvc::kSupportedRatios) == std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128});
  CHECK(to_vector(kvc::kSupportedHeadDims) == std::vector<int>{128, 256, 512});
  CHECK(to_vector(kvc::kSupportedDTypes) ==
        std::vector<kvc::DType>{kvc::DType::kFloat32, kvc::DType::kBFloat16});
  CHECK(to_vector(kvc::kSupportedLayouts) ==
        std::vector<kvc::CacheLayout>{kvc::CacheLayout::kFp8DsMla, kvc::CacheLayout::kBf16Rows,
                                      kvc::CacheLayout::kFp8Rows, kvc::CacheLayout::kMxfp8,
                                      kvc::CacheLayout::kNvfp4, kvc::CacheLayout::kNvfp4Rows,
                                      kvc::CacheLayout::kFp8DsMlaV32});
  CHECK(to_vector(kvc::kSupportedLayouts) == to_vector(kvc::kBuiltinLayouts));
  Status s;
  for (int r : kvc::kSupportedRatios) {
    CHECK(dispatched_ratio(r, &s) == r);
    CHECK(s.ok());
  }
  for (int d : kvc::kSupportedHeadDims) {
    CHECK(dispatched_head_dim(d, &s) == d);
    CHECK(s.ok());
  }
  CHECK(dispatched_dtype(kvc::DType::kFloat32).ok());
  CHECK(dispatched_dtype(kvc::DType::kBFloat16).ok());
  CHECK(dispatched_layout<512>(kvc::CacheLayout::kFp8DsMla).ok());
  CHECK(dispatched_layout<256>(kvc::CacheLayout::kBf16Rows).ok());
  CHECK(dispatched_layout<128>(kvc::CacheLayout::kFp8Rows).ok());
  // Not compiled, not invalid: kNotSupported with the list; ratio < 1 is invalid.
  CHECK(dispatched_ratio(3, &s) == -1);
  CHECK(s.code() == StatusCode::kNotSupported);
  CHECK(std::string(s.message()) ==
        "compress ratio 3 is not one of the compiled ratios {1, 2, 4, 8, 16, 32, 64, 128}; "
        "instantiate the kernel template for it (see examples/02_custom_ratio)");
  CHECK(dispatched_ratio(0, &s) == -1);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(dispatched_head_dim(384, &s) == -1);
  CHECK(std::string(s.message()) == "head dim 384 is not one of the compiled head dims {128, 256, 512}");
  CHECK(dispatched_layout<256>(kvc::CacheLayout::kFp8DsMla).code() == StatusCode::kNotSupported);
  for (auto l : {kvc::CacheLayout::kMxfp8, kvc::CacheLayout::kNvfp4, kvc::CacheLayout::kNvfp4Rows}) {
    CHECK(dispatched_layout<512>(l).ok());
    CHECK(dispatched_layout<256>(l).code() == StatusCode::kNotSupported);
  }
  // V3.2's records hold head dim 576 only.
  CHECK(dispatched_layout<576>(kvc::CacheLayout::kFp8DsMlaV32).ok());
  CHECK(std::string(dispatched_layout<512>(kvc::CacheLayout::kFp8DsMlaV32).message()) ==
        "cache layout fp8_ds_mla_v32 holds head dim 576, not 512");
}

#else  // KVC_TEST_RESTRICTED_LISTS

TEST_CASE("dispatch lists: restricted to ratios {1, 2}, head dim 512, fp32, fp8_ds_mla") {
  CHECK(to_vector(kvc::kSupportedRatios) == std::vector<int>{1, 2});
  CHECK(to_vector(kvc::kSupportedHeadDims) == std::vector<int>{512});
  CHECK(to_vector(kvc::kSupportedDTypes) == std::vector<kvc::DType>{kvc::DType::kFloat32});
  CHECK(to_vector(kvc::kSupportedLayouts) ==
        std::vector<kvc::CacheLayout>{kvc::CacheLayout::kFp8DsMla});

  Status s;
  CHECK(dispatched_ratio(2, &s) == 2);
  CHECK(s.ok());
  CHECK(dispatched_ratio(1, &s) == 1);
  CHECK(s.ok());
  // A ratio of the default list that this build does not compile.
  CHECK(dispatched_ratio(4, &s) == -1);
  CHECK(s.code() == StatusCode::kNotSupported);
  CHECK(std::string(s.message()) ==
        "compress ratio 4 is not one of the compiled ratios {1, 2}; "
        "instantiate the kernel template for it (see examples/02_custom_ratio)");
  CHECK(dispatched_ratio(0, &s) == -1);
  CHECK(s.code() == StatusCode::kInvalidArgument);
  CHECK(std::string(s.message()) == "compress ratio 0 must be >= 1");

  CHECK(dispatched_head_dim(512, &s) == 512);
  CHECK(s.ok());
  CHECK(dispatched_head_dim(256, &s) == -1);
  CHECK(std::string(s.message()) == "head dim 256 is not one of the compiled head dims {512}");

  CHECK(dispatched_dtype(kvc::DType::kFloat32).ok());
  s = dispatched_dtype(kvc::DType::kBFloat16);
  CHECK(s.code() == StatusCode::kNotSupported);
  CHECK(std::string(s.message()) == "dtype bfloat16 is not one of the compiled dtypes {float32}");

  CHECK(dispatched_layout<512>(kvc::CacheLayout::kFp8DsMla).ok());
  s = dispatched_layout<512>(kvc::CacheLayout::kBf16Rows);
  CHECK(s.code() == StatusCode::kNotSupported);
  CHECK(std::string(s.message()) ==
        "cache layout bf16_rows is not one of the compiled layouts {fp8_ds_mla}");
  CHECK(dispatched_layout<512>(kvc::CacheLayout::kFp8Rows).code() == StatusCode::kNotSupported);
}

TEST_CASE("dispatch lists: the host API reports what this build does not compile") {
  // Only the ratio is changed from params that are otherwise never looked at: the dispatch
  // comes before the parameter checks, so a ratio outside the list fails first.
  kvc::CompressParams a;
  a.ratio = 4;
  a.head_dim = 512;
  a.num_tokens = 1;
  const Status s = kvc::compress_can_implement(a);
  CHECK(s.code() == StatusCode::kNotSupported);
  CHECK(std::string(s.message()).find("{1, 2}") != std::string::npos);
  kvc::InsertParams b;
  b.ratio = 8;
  b.head_dim = 512;
  b.num_tokens = 1;
  CHECK(kvc::insert_can_implement(b).code() == StatusCode::kNotSupported);
}

#endif  // KVC_TEST_RESTRICTED_LISTS
