// SPDX-License-Identifier: Apache-2.0
// kvcompress host-cost benchmark: the host work kvc::compress, kvc::insert and kvc::fused
// do before their kernel launch, timed on the CPU (no GPU, no CUDA runtime: plain C++).
//
// A public call is detail::validate_dispatch_{compress,insert,fused}(params, launch): one
// validation pass, then the runtime -> compile-time dispatch to the instance, whose launch
// it calls. This program calls the same functions with a no-op in place of the launch, for
// a vLLM decode step (256 requests x 2 tokens, ratio 2, head dim 512, fp32 kv_score, int64
// indices; Op B and the fused op into fp8_ds_mla): median over repeats of the mean time of
// `iterations` back-to-back calls (std::chrono::steady_clock). Fails (exit 1) when a call
// does not validate, reaches another instance, or allocates on the heap.
//
//   kvc_host_cost [--iterations N] [--repeats N]
//   host cost: compress 0.02 us, insert 0.02 us, fused 0.03 us
//
// Not included: the grid arithmetic and the launch itself (cudaLaunchKernel /
// cudaLaunchKernelEx; with LaunchOptions::pdl also cudaGetDevice, see device_supports_pdl).
#include <kvcompress/launch/insert.hpp>
#include <kvcompress/launch/fused.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <vector>

// Every heap allocation of the program is counted: the timed calls must make none.
#include "common/alloc_counter.hpp"

namespace {

constexpr int kRequests = 256;
constexpr int kTokensPerRequest = 2;  // one speculative token
constexpr int kTokens = kRequests * kTokensPerRequest;
constexpr int kRatio = 2;
constexpr int kHeadDim = 512;
constexpr int kBlockSize = 64;
constexpr int kMaxPositions = 163840;

// Validation never dereferences: aligned addresses in a host arena stand in for device buffers.
alignas(256) unsigned char g_arena[1 << 16];

template <class T = void>
T* at(int offset) {
  return reinterpret_cast<T*>(g_arena + offset);
}

kvc::CompressParams decode_compress() {
  kvc::CompressParams a;
  a.ratio = kRatio;
  a.head_dim = kHeadDim;
  a.dtype = kvc::DType::kFloat32;
  a.num_tokens = kTokens;
  a.kv_score = at(0);
  a.kv_score_stride_elems = 2 * kHeadDim;
  a.positions = {at(4096), kvc::IndexType::kInt64};
  a.slot = {at(8192), kvc::IndexType::kInt64};
  a.qsl = at<const int32_t>(12288);
  a.qsl_size = kRequests + 1;
  a.req = at<const int32_t>(16384);
  a.ring = at(20480);
  a.ring_layout = {kvc::ring_capacity(kRatio, kTokensPerRequest - 1), 8208, 2 * kHeadDim};
  a.weight = at<const kvc::bf16_t>(24576);
  a.eps = 1e-20f;
  a.latent = at<kvc::bf16_t>(28672);
  a.latent_stride_elems = kHeadDim;
  return a;
}

kvc::RecordArgs decode_record() {
  kvc::RecordArgs r;
  r.layout = kvc::CacheLayout::kFp8DsMla;
  r.cos_sin = at(32768);
  r.cos_sin_dtype = kvc::DType::kFloat32;
  r.cos_sin_stride_elems = 64;
  r.cos_sin_rows = kMaxPositions;
  r.cache_slot = {at(36864), kvc::IndexType::kInt64};
  r.cache.data = at(40960);
  r.cache.block_size = kBlockSize;
  r.cache.page_stride_bytes = 37440;  // 64 records of 584 bytes, padded as vLLM does
  return r;
}

kvc::InsertParams decode_insert() {
  const kvc::CompressParams a = decode_compress();
  kvc::InsertParams b;
  b.ratio = kRatio;
  b.head_dim = kHeadDim;
  b.num_tokens = kTokens;
  b.latent = a.latent;
  b.latent_stride_elems = a.latent_stride_elems;
  b.positions = a.positions;
  b.record = decode_record();
  return b;
}

// Makes the compiler assume `p` changed: every call validates again, nothing is hoisted.
template <class T>
inline void clobber(T* p) {
#if defined(__GNUC__) || defined(__clang__)
  asm volatile("" : : "g"(p) : "memory");
#else
  static volatile T* volatile sink;
  sink = p;
#endif
}

// The instance each no-op "launch" reached: checked once per repeat.
int g_reached = 0;

template <class In>
constexpr int element_id() {
  return std::is_same<In, float>::value ? 1 : 2;
}

struct Result {
  double median_us, min_us, max_us;
  long long allocations;
  long long failures;
};

template <class Call>
Result time_calls(Call&& call, int expected_instance, long iterations, int repeats) {
  std::vector<double> per_call_us;
  per_call_us.reserve(static_cast<size_t>(repeats));
  long long failures = 0;
  for (int i = 0; i < 10000; ++i) failures += call() ? 0 : 1;  // warm up
  const long long allocations_before = kvc_test::allocations();
  for (int r = 0; r < repeats; ++r) {
    g_reached = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < iterations; ++i) failures += call() ? 0 : 1;
    const auto t1 = std::chrono::steady_clock::now();
    if (g_reached != expected_instance) ++failures;
    per_call_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() /
                          static_cast<double>(iterations));
  }
  const long long allocations = kvc_test::allocations() - allocations_before;
  std::sort(per_call_us.begin(), per_call_us.end());
  return {per_call_us[per_call_us.size() / 2], per_call_us.front(), per_call_us.back(),
          allocations, failures};
}

}  // namespace

int main(int argc, char** argv) {
  long iterations = 1000000;
  int repeats = 9;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iterations") && i + 1 < argc) iterations = std::atol(argv[++i]);
    else if (!std::strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "kvc_host_cost: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  if (iterations < 1 || repeats < 1) {
    std::fprintf(stderr, "kvc_host_cost: --iterations and --repeats must be >= 1\n");
    return 2;
  }

  kvc::CompressParams a = decode_compress();
  kvc::InsertParams b = decode_insert();
  kvc::FusedParams f{decode_compress(), decode_record()};
  // The instance ids the no-op launches record: ratio, head dim, element type / layout.
  const int compress_id = kRatio * 100000 + kHeadDim * 10 + element_id<float>();
  const int insert_id = kRatio * 100000 + kHeadDim * 10 + 7;
  const int fused_id = kRatio * 100000 + kHeadDim * 10 + element_id<float>() + 7;
  const auto layout_id = [](auto layout) {
    return std::is_same<decltype(layout), kvc::Fp8DsMlaLayout>::value ? 7 : 8;
  };

  // kvc::compress(a, stream) without its launch.
  const auto compress_call = [&] {
    clobber(&a);
    return kvc::detail::validate_dispatch_compress(a, [](auto ratio, auto head_dim, auto element) {
             g_reached = decltype(ratio)::value * 100000 + decltype(head_dim)::value * 10 +
                         element_id<decltype(element)>();
             return kvc::Status::success();
           }).ok();
  };
  // kvc::insert(b, stream) without its launch.
  const auto insert_call = [&] {
    clobber(&b);
    return kvc::detail::validate_dispatch_insert(b, [&](auto ratio, auto head_dim, auto layout) {
             g_reached = decltype(ratio)::value * 100000 + decltype(head_dim)::value * 10 +
                         layout_id(layout);
             return kvc::Status::success();
           }).ok();
  };
  // kvc::fused(f, stream) without its launch.
  const auto fused_call = [&] {
    clobber(&f);
    return kvc::detail::validate_dispatch_fused(
               f, [&](auto ratio, auto head_dim, auto element, auto layout) {
                 g_reached = decltype(ratio)::value * 100000 + decltype(head_dim)::value * 10 +
                             element_id<decltype(element)>() + layout_id(layout);
                 return kvc::Status::success();
               })
        .ok();
  };

  // The params must be valid, or the loop would time a failure path.
  const kvc::Status checks[] = {kvc::compress_can_implement(a), kvc::insert_can_implement(b),
                                kvc::fused_can_implement(f)};
  for (const kvc::Status& s : checks)
    if (!s.ok()) {
      std::fprintf(stderr, "kvc_host_cost: the decode params do not validate: %s\n", s.message());
      return 1;
    }

  const Result rc = time_calls(compress_call, compress_id, iterations, repeats);
  const Result ri = time_calls(insert_call, insert_id, iterations, repeats);
  const Result rf = time_calls(fused_call, fused_id, iterations, repeats);

  int rc_exit = 0;
  const struct {
    const char* name;
    const Result& r;
  } rows[] = {{"compress", rc}, {"insert", ri}, {"fused", rf}};
  std::printf("kvc_host_cost: decode %dx%d, ratio %d, head dim %d, fp32, int64 indices, "
              "fp8_ds_mla; median of %d repeats x %ld calls\n",
              kRequests, kTokensPerRequest, kRatio, kHeadDim, repeats, iterations);
  for (const auto& row : rows) {
    std::printf("  %-8s median %.4f us (min %.4f, max %.4f), %lld heap allocations, %lld failures\n",
                row.name, row.r.median_us, row.r.min_us, row.r.max_us, row.r.allocations,
                row.r.failures);
    if (row.r.allocations != 0 || row.r.failures != 0) rc_exit = 1;
  }
  std::printf("host cost: compress %.2f us, insert %.2f us, fused %.2f us\n", rc.median_us,
              ri.median_us, rf.median_us);
  if (rc_exit != 0)
    std::fprintf(stderr, "kvc_host_cost: a call failed, reached another instance or allocated\n");
  return rc_exit;
}
