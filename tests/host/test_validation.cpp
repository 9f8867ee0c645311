// SPDX-License-Identifier: Apache-2.0
// Host tier: Op A validation, kvc::compress_can_implement (launch/compress.hpp, contract §4);
// the message helpers of launch/validate.hpp; the validate-once dispatch of the public calls
// (detail::validate_dispatch_*) and Op B / fused messages (launch/insert.hpp).
// The functions never dereference pointers, so fake but aligned addresses into a host arena
// stand in for device buffers.
#include <doctest/doctest.h>

#include <kvcompress/launch/compress.hpp>
#include <kvcompress/launch/insert.hpp>
#include <kvcompress/launch/fused.hpp>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <new>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

// Counts every heap allocation of the test program: validating valid params must make none.
#include "common/alloc_counter.hpp"

namespace {

/// Heap allocations made by f().
template <class F>
long long allocations_of(F&& f) {
  const long long before = kvc_test::allocations();
  f();
  return kvc_test::allocations() - before;
}

alignas(256) unsigned char g_arena[1 << 16];

template <class T = void>
T* at(int offset) {
  return reinterpret_cast<T*>(g_arena + offset);
}

/// A fully valid Op A launch: T = 5, D = 512, fp32, strides with padding, ring C = 8 with
/// vLLM's padded pages (row 1024, page 8208).
kvc::CompressParams valid_params(int ratio, int head_dim = 512,
                                 kvc::DType dtype = kvc::DType::kFloat32) {
  kvc::CompressParams p;
  p.ratio = ratio;
  p.head_dim = head_dim;
  p.dtype = dtype;
  p.num_tokens = 5;
  const int64_t width = ratio > 1 ? 2 * head_dim : head_dim;
  p.kv_score = at(0);
  p.kv_score_stride_elems = width + 32;
  p.positions = kvc::IndexPtr{at(4096), kvc::IndexType::kInt64};
  p.slot = kvc::IndexPtr{at(4096 + 64), kvc::IndexType::kInt32};
  p.weight = at<const kvc::bf16_t>(8192);
  p.eps = 1e-20f;
  p.latent = at<kvc::bf16_t>(12288);
  p.latent_stride_elems = head_dim + 64;
  if (ratio > 1) {
    p.qsl = at<const int32_t>(16384);
    p.qsl_size = 3;
    p.req = at<const int32_t>(16384 + 64);
    p.ring = at(20480);
    p.ring_layout = kvc::RingLayout{8 > ratio ? 8 : ratio, 0, 2 * int64_t{head_dim}};
    p.ring_layout.page_stride_elems = p.ring_layout.capacity * p.ring_layout.row_stride_elems + 16;
  }
  return p;
}

bool contains(const char* message, const std::string& words) {
  return std::string(message).find(words) != std::string::npos;
}

struct Broken {
  const char* name;
  std::function<void(kvc::CompressParams&)> breaks;
  kvc::StatusCode code;
  std::vector<std::string> words;  // every one must appear in the message
};

/// Applies each breakage to a fresh valid params; checks code and words; returns messages.
std::vector<std::string> check_broken(const kvc::CompressParams& valid,
                                      const std::vector<Broken>& cases) {
  std::vector<std::string> messages;
  for (const Broken& b : cases) {
    kvc::CompressParams p = valid;
    b.breaks(p);
    const kvc::Status s = kvc::compress_can_implement(p);
    INFO("case: ", b.name, "; message: ", s.message());
    CHECK_FALSE(s.ok());
    CHECK_FALSE(static_cast<bool>(s));
    CHECK(s.code() == b.code);
    for (const std::string& w : b.words) CHECK_MESSAGE(contains(s.message(), w), "missing: ", w);
    messages.push_back(s.message());
  }
  return messages;
}

using kvc::StatusCode;
const StatusCode kInvalid = StatusCode::kInvalidArgument;
const StatusCode kNotSupported = StatusCode::kNotSupported;

/// Conditions shared by every ratio.
std::vector<Broken> common_cases() {
  return {
      {"negative num_tokens", [](auto& p) { p.num_tokens = -1; }, kInvalid,
       {"num_tokens -1", "negative"}},
      {"num_tokens beyond int32", [](auto& p) { p.num_tokens = int64_t{1} << 31; }, kInvalid,
       {"num_tokens 2147483648", "int32"}},
      {"ratio 3", [](auto& p) { p.ratio = 3; }, kNotSupported, {"compress ratio 3", "128"}},
      {"ratio 0", [](auto& p) { p.ratio = 0; }, kInvalid, {"compress ratio 0 must be >= 1"}},
      {"ratio -2", [](auto& p) { p.ratio = -2; }, kInvalid, {"compress ratio -2 must be >= 1"}},
      {"ratio 256", [](auto& p) { p.ratio = 256; }, kNotSupported, {"compress ratio 256"}},
      {"head dim 384", [](auto& p) { p.head_dim = 384; }, kNotSupported, {"head dim 384", "512"}},
      {"head dim 64", [](auto& p) { p.head_dim = 64; }, kNotSupported, {"head dim 64"}},
      {"kv_score null", [](auto& p) { p.kv_score = nullptr; }, kInvalid, {"kv_score is null"}},
      {"kv_score misaligned", [](auto& p) { p.kv_score = at(4); }, kInvalid,
       {"kv_score address", "not aligned to 16 bytes"}},
      {"positions null", [](auto& p) { p.positions.data = nullptr; }, kInvalid,
       {"positions is null"}},
      {"positions misaligned", [](auto& p) { p.positions.data = at(4096 + 4); }, kInvalid,
       {"positions address", "not aligned to 8 bytes"}},
      {"slot null", [](auto& p) { p.slot.data = nullptr; }, kInvalid, {"slot is null"}},
      {"slot misaligned", [](auto& p) { p.slot.data = at(4096 + 64 + 2); }, kInvalid,
       {"slot address", "not aligned to 4 bytes"}},
      {"positions index type out of range",
       [](auto& p) { p.positions.type = static_cast<kvc::IndexType>(2); }, kInvalid,
       {"positions index type 2", "kInt32", "kInt64"}},
      {"slot index type out of range",
       [](auto& p) { p.slot.type = static_cast<kvc::IndexType>(-1); }, kInvalid,
       {"slot index type -1", "kInt32", "kInt64"}},
      {"weight null", [](auto& p) { p.weight = nullptr; }, kInvalid, {"weight is null"}},
      {"weight misaligned", [](auto& p) { p.weight = at<const kvc::bf16_t>(8192 + 2); }, kInvalid,
       {"weight address", "not aligned to 8 bytes"}},
      {"latent null", [](auto& p) { p.latent = nullptr; }, kInvalid, {"latent is null"}},
      {"latent misaligned", [](auto& p) { p.latent = at<kvc::bf16_t>(12288 + 4); }, kInvalid,
       {"latent address", "not aligned to 8 bytes"}},
      {"latent stride short", [](auto& p) { p.latent_stride_elems = 500; }, kInvalid,
       {"latent row stride 500", "smaller than", "512"}},
      {"latent stride odd", [](auto& p) { p.latent_stride_elems = 514; }, kInvalid,
       {"latent row stride 514", "not a multiple of 4 elements"}},
      {"eps NaN", [](auto& p) { p.eps = std::numeric_limits<float>::quiet_NaN(); }, kInvalid,
       {"eps", "finite"}},
      {"eps inf", [](auto& p) { p.eps = std::numeric_limits<float>::infinity(); }, kInvalid,
       {"eps", "finite"}},
      {"eps negative", [](auto& p) { p.eps = -1e-6f; }, kInvalid, {"eps", "> 0"}},
      {"eps zero", [](auto& p) { p.eps = 0.f; }, kInvalid, {"eps 0.000000", "finite and > 0"}},
      {"errors misaligned", [](auto& p) { p.errors = at<kvc::ErrorCounters>(48000 + 2); },
       kInvalid, {"errors address", "not aligned to 4 bytes"}},
      {"kv_score stride past the bound", [](auto& p) { p.kv_score_stride_elems = int64_t{1} << 62; },
       kInvalid, {"kv_score row stride 4611686018427387904 elements", "2^48 bytes"}},
      {"latent stride past the bound", [](auto& p) { p.latent_stride_elems = int64_t{1} << 62; },
       kInvalid, {"latent row stride 4611686018427387904 elements", "2^48 bytes"}},
  };
}

}  // namespace

TEST_CASE("compress_can_implement: the valid launches pass") {
  for (int ratio : {1, 2, 4, 8, 16, 32, 64, 128})
    for (int head_dim : {128, 256, 512})
      for (kvc::DType dtype : {kvc::DType::kFloat32, kvc::DType::kBFloat16}) {
        const kvc::Status s = kvc::compress_can_implement(valid_params(ratio, head_dim, dtype));
        INFO("R = ", ratio, ", D = ", head_dim, ", dtype ", kvc::dtype_name(dtype), ": ",
             s.message());
        CHECK(s.ok());
        CHECK(s.code() == StatusCode::kSuccess);
      }
  // vLLM's exact shapes: rows of 2D = 1024 floats, pages of 8208.
  auto p = valid_params(2);
  p.kv_score_stride_elems = 1024;
  p.latent_stride_elems = 512;
  p.ring_layout = kvc::RingLayout{8, 8208, 1024};
  CHECK(kvc::compress_can_implement(p).ok());
  // Ratio 1 needs no ring, qsl or req.
  auto q = valid_params(1);
  CHECK(q.ring == nullptr);
  CHECK(q.qsl == nullptr);
  q.kv_score_stride_elems = 512;
  CHECK(kvc::compress_can_implement(q).ok());
  q.kv_score_stride_elems = 1000;  // >= D and a multiple of 4 floats: fine for R = 1
  CHECK(kvc::compress_can_implement(q).ok());
}

TEST_CASE("compress_can_implement: num_tokens == 0 is a no-op success, even with null pointers") {
  kvc::CompressParams p;  // every pointer null
  p.num_tokens = 0;
  CHECK(kvc::compress_can_implement(p).ok());
  p.ratio = 1;
  CHECK(kvc::compress_can_implement(p).ok());
  p.num_tokens = -1;
  const kvc::Status s = kvc::compress_can_implement(p);
  CHECK_FALSE(s.ok());
  CHECK(s.code() == kInvalid);
  CHECK(contains(s.message(), "num_tokens -1 is negative"));
  p.num_tokens = 1;  // one token and null pointers: fails
  CHECK_FALSE(kvc::compress_can_implement(p).ok());
}

TEST_CASE("compress_can_implement, ratio 2: each broken condition gives its own status") {
  auto cases = common_cases();
  const std::vector<Broken> ring_cases = {
      {"kv_score stride short", [](auto& p) { p.kv_score_stride_elems = 1000; }, kInvalid,
       {"kv_score row stride 1000", "smaller than", "2 * head_dim", "1024"}},
      {"kv_score stride odd", [](auto& p) { p.kv_score_stride_elems = 1026; }, kInvalid,
       {"kv_score row stride 1026", "not a multiple of 4 elements"}},
      {"qsl null", [](auto& p) { p.qsl = nullptr; }, kInvalid, {"qsl is null"}},
      {"qsl misaligned", [](auto& p) { p.qsl = at<const int32_t>(16384 + 2); }, kInvalid,
       {"qsl address", "not aligned to 4 bytes"}},
      {"qsl_size 1", [](auto& p) { p.qsl_size = 1; }, kInvalid, {"qsl_size 1"}},
      {"qsl_size 0", [](auto& p) { p.qsl_size = 0; }, kInvalid, {"qsl_size 0"}},
      {"req null", [](auto& p) { p.req = nullptr; }, kInvalid, {"req is null"}},
      {"req misaligned", [](auto& p) { p.req = at<const int32_t>(16384 + 64 + 1); }, kInvalid,
       {"req address", "not aligned to 4 bytes"}},
      {"ring null", [](auto& p) { p.ring = nullptr; }, kInvalid, {"ring is null"}},
      {"ring misaligned", [](auto& p) { p.ring = at(20480 + 8); }, kInvalid,
       {"ring address", "not aligned to 16 bytes"}},
      {"ring capacity 1", [](auto& p) { p.ring_layout.capacity = 1; }, kInvalid,
       {"ring capacity 1", "smaller than the compress ratio 2"}},
      {"ring capacity 0", [](auto& p) { p.ring_layout.capacity = 0; }, kInvalid,
       {"ring capacity 0"}},
      {"ring row stride short", [](auto& p) { p.ring_layout.row_stride_elems = 1020; }, kInvalid,
       {"ring row stride 1020", "smaller than", "1024"}},
      {"ring row stride odd", [](auto& p) { p.ring_layout.row_stride_elems = 1030; }, kInvalid,
       {"ring row stride 1030", "not a multiple of 4 elements"}},
      {"ring pages overlap", [](auto& p) { p.ring_layout.page_stride_elems = 8 * 1024 - 4; }, kInvalid,
       {"ring page stride 8188", "overlaps", "8192"}},
      {"ring page stride odd", [](auto& p) { p.ring_layout.page_stride_elems = 8210; }, kInvalid,
       {"ring page stride 8210", "not a multiple of 4 elements"}},
      {"qsl_size past the bound", [](auto& p) { p.qsl_size = int64_t{1} << 62; }, kInvalid,
       {"qsl_size 4611686018427387904 elements", "2^48 bytes"}},
      {"ring row stride past the bound", [](auto& p) { p.ring_layout.row_stride_elems = int64_t{1} << 62; },
       kInvalid, {"ring row stride 4611686018427387904 elements", "2^48 bytes"}},
      {"ring page stride past the bound",
       [](auto& p) { p.ring_layout.page_stride_elems = int64_t{1} << 62; }, kInvalid,
       {"ring page stride 4611686018427387904 elements", "2^48 bytes"}},
      {"ring num_blocks -2", [](auto& p) { p.ring_layout.num_blocks = -2; }, kInvalid,
       {"ring num_blocks -2", "-1 (not given) or >= 0"}},
      {"ring num_blocks past the bound", [](auto& p) { p.ring_layout.num_blocks = int64_t{1} << 62; },
       kInvalid, {"ring num_blocks * capacity", "2^48 bytes"}},
  };
  cases.insert(cases.end(), ring_cases.begin(), ring_cases.end());
  const auto messages = check_broken(valid_params(2), cases);
  // Every distinct condition names itself: no two messages are equal.
  const std::set<std::string> distinct(messages.begin(), messages.end());
  CHECK(distinct.size() == messages.size());
  CHECK(messages.size() == cases.size());
}

TEST_CASE("compress_can_implement, ratio 1: kv rows are D wide, ring/qsl/req are not needed") {
  auto cases = common_cases();
  cases.push_back({"kv_score stride short", [](auto& p) { p.kv_score_stride_elems = 510; }, kInvalid,
                   {"kv_score row stride 510", "smaller than", "head_dim", "512"}});
  cases.push_back({"kv_score stride odd", [](auto& p) { p.kv_score_stride_elems = 1001; }, kInvalid,
                   {"kv_score row stride 1001", "not a multiple of 4 elements"}});
  const auto messages = check_broken(valid_params(1), cases);
  const std::set<std::string> distinct(messages.begin(), messages.end());
  CHECK(distinct.size() == messages.size());
}

TEST_CASE("compress_can_implement: vector width follows dtype and head dim") {
  CHECK(kvc::compress_vector_elems(512, kvc::DType::kFloat32) == 4);
  CHECK(kvc::compress_vector_elems(512, kvc::DType::kBFloat16) == 8);
  CHECK(kvc::compress_vector_elems(128, kvc::DType::kFloat32) == 4);
  CHECK(kvc::compress_vector_elems(128, kvc::DType::kBFloat16) == 4);
  // bf16 input, D = 512: 8-element (16-byte) vectors.
  auto p = valid_params(2, 512, kvc::DType::kBFloat16);
  p.kv_score_stride_elems = 1028;
  kvc::Status s = kvc::compress_can_implement(p);
  CHECK(s.code() == kInvalid);
  CHECK(contains(s.message(), "kv_score row stride 1028 is not a multiple of 8 elements"));
  p = valid_params(2, 512, kvc::DType::kBFloat16);
  p.kv_score = at(8);
  s = kvc::compress_can_implement(p);
  CHECK(contains(s.message(), "not aligned to 16 bytes"));
  p = valid_params(2, 512, kvc::DType::kBFloat16);
  p.latent = at<kvc::bf16_t>(12288 + 8);  // 16-byte latent vectors for bf16 at D = 512
  s = kvc::compress_can_implement(p);
  CHECK(contains(s.message(), "latent address"));
  // D = 128, fp32: 4-float vectors; a 2D + 4 stride is fine.
  p = valid_params(4, 128);
  p.kv_score_stride_elems = 260;
  CHECK(kvc::compress_can_implement(p).ok());
  p.kv_score_stride_elems = 258;
  CHECK_FALSE(kvc::compress_can_implement(p).ok());
  // Larger ratios need larger rings.
  p = valid_params(128, 512);
  p.ring_layout.capacity = 64;
  p.ring_layout.page_stride_elems = 64 * 1024;
  s = kvc::compress_can_implement(p);
  CHECK(contains(s.message(), "ring capacity 64 is smaller than the compress ratio 128"));
}

TEST_CASE("compress_can_implement: the first violated condition is the one reported") {
  auto p = valid_params(2);
  p.weight = nullptr;
  p.ring = nullptr;
  p.kv_score_stride_elems = 1026;
  const kvc::Status s = kvc::compress_can_implement(p);
  CHECK(contains(s.message(), "kv_score row stride 1026"));
  CHECK_FALSE(contains(s.message(), "weight"));
  auto q = valid_params(2);
  q.ratio = 3;
  q.kv_score = nullptr;
  CHECK(kvc::compress_can_implement(q).code() == kNotSupported);
}

// ---------------------------------------------------------------------------------------
// Message helpers (launch/validate.hpp): pieces are formatted only when a check fails.

TEST_CASE("detail::message formats pieces like std::to_string and %p") {
  using kvc::detail::message;
  CHECK(message() == "");
  CHECK(message("kv_score", " is null") == "kv_score is null");
  CHECK(message(std::string("ring"), " row stride ", int64_t{-1030}, " is odd") ==
        "ring row stride -1030 is odd");
  CHECK(message("num_tokens ", int64_t{1} << 31, " x") == "num_tokens 2147483648 x");
  CHECK(message(7, " ", 4u, " ", int64_t{-3}) == "7 4 -3");
  // Floats as std::to_string writes them ("%f"), as the eps message always did.
  CHECK(message("eps ", -1e-6f) == "eps " + std::to_string(-1e-6f));
  CHECK(message("eps ", -1e-6f) == "eps -0.000001");
  CHECK(message(std::numeric_limits<float>::quiet_NaN()) ==
        std::to_string(std::numeric_limits<float>::quiet_NaN()));
  const void* p = at(12);
  CHECK(message("at ", kvc::detail::Hex{p}) == "at " + kvc::detail::hex_address(p));
  const kvc::Status s = kvc::detail::invalid("latent row stride ", 514, " is odd");
  CHECK(s.code() == kInvalid);
  CHECK(std::string(s.message()) == "latent row stride 514 is odd");
}

TEST_CASE("detail::Validator: the first failure wins; passing checks build no message") {
  kvc::detail::Validator v;
  const long long passing = allocations_of([&] {
    v.require(true, "never ", 1, " built ", std::string("x"))
        .not_null(at(0), "kv_score")
        .aligned(at(16), 16, "kv_score")
        .stride(1024, 1024, 4, "kv_score row stride", "the row width 2 * head_dim =");
  });
  CHECK(v.ok());
  CHECK(passing == 0);
  v.aligned(at(4), 16, "ring")
      .not_null(nullptr, "weight")
      .require(false, "later check")
      .stride(3, 8, 4, "latent row stride", "head_dim =");
  CHECK_FALSE(v.ok());
  CHECK(v.status().code() == kInvalid);
  CHECK(std::string(v.status().message()) ==
        "ring address " + kvc::detail::hex_address(at(4)) + " is not aligned to 16 bytes");
  kvc::detail::Validator w;
  w.stride(1000, 1024, 4, "kv_score row stride", "the row width 2 * head_dim =");
  CHECK(std::string(w.status().message()) ==
        "kv_score row stride 1000 is smaller than the row width 2 * head_dim = 1024");
  kvc::detail::Validator x;
  x.stride(1030, 1024, 4, "ring row stride", "the row width 2 * head_dim =");
  CHECK(std::string(x.status().message()) == "ring row stride 1030 is not a multiple of 4 elements");
  const kvc::Status moved = std::move(x).status();
  CHECK(std::string(moved.message()) == "ring row stride 1030 is not a multiple of 4 elements");
  kvc::detail::Validator y;
  y.not_null(nullptr, "cache slot");
  CHECK(std::string(y.status().message()) == "cache slot is null");
}

// ---------------------------------------------------------------------------------------
// Op B / fused validation and the validate-once dispatch of kvc::compress / insert / fused.

namespace {

/// A valid fp8_ds_mla record for head dim 512 (vLLM's padded pages: 64 records, 37440 B).
kvc::RecordArgs valid_record() {
  kvc::RecordArgs r;
  r.layout = kvc::CacheLayout::kFp8DsMla;
  r.cos_sin = at(32768);
  r.cos_sin_stride_elems = 64;
  r.cos_sin_rows = 4096;
  r.cache_slot = kvc::IndexPtr{at(36864), kvc::IndexType::kInt64};
  r.cache.data = at(40960);
  r.cache.block_size = 64;
  r.cache.page_stride_bytes = 37440;
  return r;
}

kvc::InsertParams valid_insert(int ratio) {
  kvc::InsertParams b;
  b.ratio = ratio;
  b.head_dim = 512;
  b.num_tokens = 5;
  b.latent = at<const kvc::bf16_t>(12288);
  b.latent_stride_elems = 512;
  b.positions = kvc::IndexPtr{at(4096), kvc::IndexType::kInt64};
  b.record = valid_record();
  return b;
}

std::string message_of(const kvc::Status& s) { return s.message(); }

/// valid_insert with fp8_rows records: 512-byte rows, 64 per page, a 4-byte-aligned scale.
kvc::InsertParams valid_fp8_rows_insert(int ratio) {
  kvc::InsertParams b = valid_insert(ratio);
  b.record.layout = kvc::CacheLayout::kFp8Rows;
  b.record.cache.row_stride_bytes = 512;
  b.record.cache.page_stride_bytes = 64 * 512;
  b.record.cache.scale = at<const float>(36864 + 256);
  return b;
}

}  // namespace

TEST_CASE("insert/fused_can_implement: valid calls pass; broken ones give the exact message") {
  for (int ratio : {1, 2, 4, 128}) {
    CHECK(kvc::insert_can_implement(valid_insert(ratio)).ok());
    kvc::FusedParams f{valid_params(ratio), valid_record()};
    CHECK(kvc::fused_can_implement(f).ok());
    f.compress.latent = nullptr;  // the fused op may skip the latent
    CHECK(kvc::fused_can_implement(f).ok());
  }
  auto b = valid_insert(2);
  b.head_dim = 256;
  CHECK(kvc::insert_can_implement(b).code() == kNotSupported);
  CHECK(message_of(kvc::insert_can_implement(b)) ==
        "cache layout fp8_ds_mla holds head dim 512, not 256");
  b = valid_insert(2);
  b.record.rope_dim = 32;
  CHECK(message_of(kvc::insert_can_implement(b)) ==
        "rope dim 32 is not compiled; the host API supports 64");
  b = valid_insert(2);
  b.record.cache.page_stride_bytes = 37360;
  CHECK(message_of(kvc::insert_can_implement(b)) ==
        "fp8_ds_mla page stride 37360 bytes is smaller than the page, 37376 bytes");
  b = valid_insert(2);
  b.record.cache.page_stride_bytes = 37448;
  CHECK(message_of(kvc::insert_can_implement(b)) ==
        "fp8_ds_mla page stride 37448 bytes is not a multiple of 16");
  b = valid_insert(2);
  b.record.cache.num_pages = -2;
  CHECK(message_of(kvc::insert_can_implement(b)) == "num_pages -2 must be -1 (not given) or >= 0");
  b = valid_insert(2);
  b.record.cos_sin_stride_elems = 32;
  CHECK(message_of(kvc::insert_can_implement(b)) ==
        "cos_sin row stride 32 is smaller than the rope dim 64");
  b = valid_insert(2);
  b.record.cos_sin_rows = 0;
  CHECK(message_of(kvc::insert_can_implement(b)) == "cos_sin_rows 0 must be >= 1");
  b = valid_insert(2);
  b.latent_stride_elems = 514;
  CHECK(message_of(kvc::insert_can_implement(b)) ==
        "latent row stride 514 is not a multiple of 8 elements");
  b = valid_insert(2);
  b.latent_stride_elems = 500;
  CHECK(message_of(kvc::insert_can_implement(b)) ==
        "latent row stride 500 is smaller than head_dim = 512");
  b = valid_insert(2);
  b.record.cache_slot.data = nullptr;
  CHECK(message_of(kvc::insert_can_implement(b)) == "cache slot is null");
  b = valid_insert(2);
  b.num_tokens = -3;
  CHECK(message_of(kvc::insert_can_implement(b)) == "num_tokens -3 is negative");
  // Record checks come before Op A's in the fused op.
  kvc::FusedParams f{valid_params(2), valid_record()};
  f.compress.eps = -1e-6f;
  CHECK(message_of(kvc::fused_can_implement(f)) == "eps -0.000001 must be finite and > 0");
  f.record.cache.block_size = 0;
  CHECK(message_of(kvc::fused_can_implement(f)) == "cache block size 0 must be >= 1");
  f = {valid_params(2), valid_record()};
  f.compress.ring_layout.page_stride_elems = 8 * 1024 - 4;
  CHECK(message_of(kvc::fused_can_implement(f)) ==
        "ring page stride 8188 overlaps the next page: it must be >= capacity * row stride = 8192");
  f.compress.ratio = 3;
  CHECK(message_of(kvc::fused_can_implement(f)) ==
        "compress ratio 3 is not one of the compiled ratios {1, 2, 4, 8, 16, 32, 64, 128}; "
        "instantiate the kernel template for it (see examples/02_custom_ratio)");
}

TEST_CASE("Op A messages are exact") {
  auto p = valid_params(2);
  p.ring_layout.capacity = 1;
  CHECK(message_of(kvc::compress_can_implement(p)) ==
        "ring capacity 1 is smaller than the compress ratio 2");
  p = valid_params(2);
  p.qsl_size = 1;
  CHECK(message_of(kvc::compress_can_implement(p)) ==
        "qsl_size 1 must be num_reqs + 1 >= 2 when compress ratio > 1");
  p = valid_params(2);
  p.ring_layout.page_stride_elems = 8210;
  CHECK(message_of(kvc::compress_can_implement(p)) ==
        "ring page stride 8210 is not a multiple of 4 elements");
  p = valid_params(2);
  p.kv_score = at(4);
  CHECK(message_of(kvc::compress_can_implement(p)) ==
        "kv_score address " + kvc::detail::hex_address(at(4)) + " is not aligned to 16 bytes");
  p = valid_params(2);
  p.num_tokens = int64_t{1} << 31;
  CHECK(message_of(kvc::compress_can_implement(p)) ==
        "num_tokens 2147483648 exceeds the int32 range of qsl");
  p = valid_params(2);
  p.head_dim = 384;
  CHECK(message_of(kvc::compress_can_implement(p)) ==
        "head dim 384 is not one of the compiled head dims {128, 256, 512}");
  p = valid_params(1);
  p.kv_score_stride_elems = 510;
  CHECK(message_of(kvc::compress_can_implement(p)) ==
        "kv_score row stride 510 is smaller than the row width head_dim = 512");
}

TEST_CASE("validating valid params allocates nothing") {
  const kvc::CompressParams a = valid_params(2);
  const kvc::InsertParams b = valid_insert(2);
  const kvc::FusedParams f{valid_params(2), valid_record()};
  bool ok = true;
  CHECK(allocations_of([&] { ok = ok && kvc::compress_can_implement(a).ok(); }) == 0);
  CHECK(allocations_of([&] { ok = ok && kvc::insert_can_implement(b).ok(); }) == 0);
  CHECK(allocations_of([&] { ok = ok && kvc::fused_can_implement(f).ok(); }) == 0);
  CHECK(allocations_of([&] { ok = ok && kvc::record_can_implement(b.record, 512).ok(); }) == 0);
  const kvc::InsertParams fp8_rows = valid_fp8_rows_insert(2);
  CHECK(allocations_of([&] { ok = ok && kvc::insert_can_implement(fp8_rows).ok(); }) == 0);
  CHECK(ok);
  // A failing check builds its message (and may allocate): the counter does see it.
  auto broken = valid_params(2);
  broken.ring_layout.page_stride_elems = 8 * 1024 - 4;
  CHECK(allocations_of([&] { ok = kvc::compress_can_implement(broken).ok(); }) > 0);
  CHECK_FALSE(ok);
}

TEST_CASE("validate_dispatch_*: one validation, then the matching instance") {
  int calls = 0;
  // Op A: the instance gets Int<R>, Int<D> and the element type.
  auto a = valid_params(4, 256, kvc::DType::kBFloat16);
  kvc::Status s = kvc::detail::validate_dispatch_compress(a, [&](auto r, auto d, auto e) {
    ++calls;
    CHECK(decltype(r)::value == 4);
    CHECK(decltype(d)::value == 256);
    CHECK(std::is_same<decltype(e), kvc::bf16_t>::value);
    return kvc::Status::invalid("from the instance");
  });
  CHECK(calls == 1);
  CHECK(message_of(s) == "from the instance");  // the instance's status is returned
  // Failed validation or no tokens: the instance is not called.
  const auto count = [&](auto...) {
    ++calls;
    return kvc::Status::success();
  };
  calls = 0;
  a.weight = nullptr;
  s = kvc::detail::validate_dispatch_compress(a, count);
  CHECK(message_of(s) == "weight is null");
  CHECK(message_of(s) == message_of(kvc::compress_can_implement(a)));
  a.num_tokens = 0;
  CHECK(kvc::detail::validate_dispatch_compress(a, count).ok());
  CHECK(calls == 0);
  // Op B: Int<R>, Int<D>, the layout type.
  auto b = valid_insert(2);
  b.record.layout = kvc::CacheLayout::kBf16Rows;
  b.record.cache.row_stride_bytes = 1024;
  b.record.cache.page_stride_bytes = 64 * 1024;
  s = kvc::detail::validate_dispatch_insert(b, [&](auto r, auto d, auto layout) {
    ++calls;
    CHECK(decltype(r)::value == 2);
    CHECK(decltype(d)::value == 512);
    CHECK(std::is_same<decltype(layout), kvc::Bf16RowsLayout<512, 64>>::value);
    return kvc::Status::success();
  });
  CHECK(s.ok());
  CHECK(calls == 1);
  b.record.cache.row_stride_bytes = 1000;
  s = kvc::detail::validate_dispatch_insert(b, count);
  CHECK(message_of(s) == message_of(kvc::insert_can_implement(b)));
  CHECK(message_of(s) == "bf16_rows: row stride 1000 bytes is smaller than a record, 1024");
  CHECK(calls == 1);
  // Fused: Int<R>, Int<D>, element type, layout type.
  kvc::FusedParams f{valid_params(8), valid_record()};
  f.compress.latent = nullptr;
  s = kvc::detail::validate_dispatch_fused(f, [&](auto r, auto d, auto e, auto layout) {
    ++calls;
    CHECK(decltype(r)::value == 8);
    CHECK(decltype(d)::value == 512);
    CHECK(std::is_same<decltype(e), float>::value);
    CHECK(std::is_same<decltype(layout), kvc::Fp8DsMlaLayout>::value);
    return kvc::Status::success();
  });
  CHECK(s.ok());
  CHECK(calls == 2);
  f.record.cos_sin = nullptr;
  s = kvc::detail::validate_dispatch_fused(f, count);
  CHECK(message_of(s) == "cos_sin is null");
  CHECK(calls == 2);
}

// ---------------------------------------------------------------------------------------
// Issue 15: qsl/req alignment, the fp8_rows scale, IndexType range, ratio < 1.

TEST_CASE("Op A, ratio > 1: misaligned qsl and req are rejected, naming pointer and address") {
  for (int ratio : {2, 4, 128}) {
    CAPTURE(ratio);
    auto p = valid_params(ratio);
    p.qsl = at<const int32_t>(16384 + 2);
    CHECK(kvc::compress_can_implement(p).code() == kInvalid);
    CHECK(message_of(kvc::compress_can_implement(p)) ==
          "qsl address " + kvc::detail::hex_address(p.qsl) + " is not aligned to 4 bytes");
    p = valid_params(ratio);
    p.req = at<const int32_t>(16384 + 64 + 3);
    CHECK(message_of(kvc::compress_can_implement(p)) ==
          "req address " + kvc::detail::hex_address(p.req) + " is not aligned to 4 bytes");
    // The fused op and the validate-once path of kvc::compress / kvc::fused check them too.
    kvc::FusedParams f{valid_params(ratio), valid_record()};
    f.compress.req = at<const int32_t>(16384 + 64 + 2);
    CHECK(message_of(kvc::fused_can_implement(f)) ==
          "req address " + kvc::detail::hex_address(f.compress.req) + " is not aligned to 4 bytes");
    int calls = 0;
    const auto count = [&](auto...) {
      ++calls;
      return kvc::Status::success();
    };
    CHECK_FALSE(kvc::detail::validate_dispatch_fused(f, count).ok());
    CHECK_FALSE(kvc::detail::validate_dispatch_compress(p, count).ok());
    CHECK(calls == 0);
  }
  // Ratio 1 reads neither: a misaligned (or null) qsl/req is ignored there.
  auto q = valid_params(1);
  q.qsl = at<const int32_t>(16384 + 2);
  q.req = at<const int32_t>(16384 + 64 + 1);
  CHECK(kvc::compress_can_implement(q).ok());
}

TEST_CASE("fp8_rows: the per-tensor scale must be non-null and fp32-aligned") {
  auto b = valid_fp8_rows_insert(2);
  CHECK(kvc::insert_can_implement(b).ok());
  kvc::FusedParams f{valid_params(2), b.record};
  CHECK(kvc::fused_can_implement(f).ok());
  b.record.cache.scale = nullptr;
  CHECK(message_of(kvc::insert_can_implement(b)) == "fp8_rows: scale is null");
  const float* misaligned = reinterpret_cast<const float*>(at(36864 + 256 + 2));
  b.record.cache.scale = misaligned;
  CHECK(kvc::insert_can_implement(b).code() == kInvalid);
  const std::string want = "fp8_rows: scale address " + kvc::detail::hex_address(misaligned) +
                           " is not aligned to 4 bytes";
  CHECK(message_of(kvc::insert_can_implement(b)) == want);
  CHECK(message_of(kvc::record_can_implement(b.record, 512)) == want);
  CHECK(message_of(kvc::Fp8RowsLayout<512, 64>::check(b.record.cache)) == want);
  f.record.cache.scale = misaligned;
  CHECK(message_of(kvc::fused_can_implement(f)) == want);
  // Other head dims dispatch to Fp8RowsLayout<D, 64>: checked the same way.
  f = {valid_params(2, 256), b.record};
  f.record.cache.row_stride_bytes = 256;
  f.record.cache.page_stride_bytes = 64 * 256;
  CHECK(message_of(kvc::fused_can_implement(f)) == want);
  // Layouts without a scale do not look at it.
  auto d = valid_insert(2);
  d.record.cache.scale = misaligned;
  CHECK(kvc::insert_can_implement(d).ok());
}

TEST_CASE("IndexType outside {kInt32, kInt64} is rejected for every index view") {
  const auto bad = static_cast<kvc::IndexType>(2);
  const std::string tail = " is not a valid IndexType: it must be kInt32 (int32) or kInt64 (int64)";
  for (int ratio : {1, 2}) {
    CAPTURE(ratio);
    auto p = valid_params(ratio);
    p.positions.type = bad;
    CHECK(kvc::compress_can_implement(p).code() == kInvalid);
    CHECK(message_of(kvc::compress_can_implement(p)) == "positions index type 2" + tail);
    p = valid_params(ratio);
    p.slot.type = static_cast<kvc::IndexType>(-1);
    CHECK(message_of(kvc::compress_can_implement(p)) == "slot index type -1" + tail);
  }
  auto b = valid_insert(2);
  b.positions.type = bad;
  CHECK(kvc::insert_can_implement(b).code() == kInvalid);
  CHECK(message_of(kvc::insert_can_implement(b)) == "positions index type 2" + tail);
  b = valid_insert(2);
  b.record.cache_slot.type = static_cast<kvc::IndexType>(7);
  CHECK(message_of(kvc::insert_can_implement(b)) == "cache slot index type 7" + tail);
  CHECK(message_of(kvc::record_can_implement(b.record, 512)) == "cache slot index type 7" + tail);
  kvc::FusedParams f{valid_params(2), valid_record()};
  f.record.cache_slot.type = bad;
  CHECK(message_of(kvc::fused_can_implement(f)) == "cache slot index type 2" + tail);
  f = {valid_params(2), valid_record()};
  f.compress.positions.type = bad;
  CHECK(message_of(kvc::fused_can_implement(f)) == "positions index type 2" + tail);
  // A null view is reported as null, before its type.
  f.compress.positions.data = nullptr;
  CHECK(message_of(kvc::fused_can_implement(f)) == "positions is null");
  // Validator::index_type on its own: both valid types pass without a message.
  kvc::detail::Validator v;
  v.index_type(kvc::IndexType::kInt32, "slot").index_type(kvc::IndexType::kInt64, "slot");
  CHECK(v.ok());
  v.index_type(bad, "slot");
  CHECK(message_of(v.status()) == "slot index type 2" + tail);
}

TEST_CASE("ratio < 1 is 'must be >= 1' (invalid) in every entry point, never 'not compiled'") {
  for (int ratio : {0, -1, -128}) {
    CAPTURE(ratio);
    const std::string want = "compress ratio " + std::to_string(ratio) + " must be >= 1";
    const auto check = [&](const kvc::Status& s) {
      INFO("message: ", message_of(s));
      CHECK(s.code() == kInvalid);
      CHECK(message_of(s) == want);
    };
    auto a = valid_params(2);
    a.ratio = ratio;
    check(kvc::compress_can_implement(a));
    auto b = valid_insert(2);
    b.ratio = ratio;
    check(kvc::insert_can_implement(b));
    kvc::FusedParams f{valid_params(2), valid_record()};
    f.compress.ratio = ratio;
    check(kvc::fused_can_implement(f));
    f.compress.latent = nullptr;  // the fused op's optional latent changes nothing
    check(kvc::fused_can_implement(f));
    // The validate-once paths of kvc::compress / insert / fused: no instance is called.
    int calls = 0;
    const auto count = [&](auto...) {
      ++calls;
      return kvc::Status::success();
    };
    check(kvc::detail::validate_dispatch_compress(a, count));
    check(kvc::detail::validate_dispatch_insert(b, count));
    check(kvc::detail::validate_dispatch_fused(f, count));
    CHECK(calls == 0);
    // The >= 1 check comes before head dim, layout, record and pointer checks.
    a.head_dim = 384;
    a.kv_score = nullptr;
    check(kvc::compress_can_implement(a));
    b.head_dim = 256;
    b.record.rope_dim = 32;
    b.latent = nullptr;
    check(kvc::insert_can_implement(b));
    f.record.cache.block_size = 0;
    f.record.cos_sin = nullptr;
    f.compress.weight = nullptr;
    check(kvc::fused_can_implement(f));
    // The dispatcher itself, as the torch examples call it.
    check(kvc::dispatch_ratio(ratio, [&](auto) {
      ++calls;
      return kvc::Status::success();
    }));
    CHECK(calls == 0);
  }
  // Ratios >= 1 that are not compiled are still kNotSupported with the list.
  auto a = valid_params(2);
  a.ratio = 3;
  CHECK(kvc::compress_can_implement(a).code() == kNotSupported);
  CHECK(contains(kvc::compress_can_implement(a).message(), "not one of the compiled ratios"));
  // num_tokens == 0 stays a no-op success whatever the ratio; a negative count comes first.
  a.ratio = 0;
  a.num_tokens = 0;
  CHECK(kvc::compress_can_implement(a).ok());
  a.num_tokens = -1;
  CHECK(message_of(kvc::compress_can_implement(a)) == "num_tokens -1 is negative");
}

// ---------------------------------------------------------------------------------------
// Issue 13: bounds that cannot overflow, ring num_blocks, errors, eps > 0.

namespace {

const std::string kBound = " exceeds the buffer bound of 2^48 bytes";
const std::string kFp32Bound = kBound + " (70368744177664 elements of 4 bytes)";
const std::string kBf16Bound = kBound + " (140737488355328 elements of 2 bytes)";
constexpr int64_t k2to62 = int64_t{1} << 62;

/// Whether the validate-once path of the public call reaches its instance (a launch).
int launches_compress(const kvc::CompressParams& p) {
  int calls = 0;
  (void)kvc::detail::validate_dispatch_compress(p, [&](auto...) {
    ++calls;
    return kvc::Status::success();
  });
  return calls;
}
int launches_insert(const kvc::InsertParams& p) {
  int calls = 0;
  (void)kvc::detail::validate_dispatch_insert(p, [&](auto...) {
    ++calls;
    return kvc::Status::success();
  });
  return calls;
}
int launches_fused(const kvc::FusedParams& p) {
  int calls = 0;
  (void)kvc::detail::validate_dispatch_fused(p, [&](auto...) {
    ++calls;
    return kvc::Status::success();
  });
  return calls;
}

/// Op A rejects `p` with exactly `want`; kvc::compress would not launch; the fused op with
/// the same compress params rejects it the same way.
void check_compress_rejects(const kvc::CompressParams& p, const std::string& want) {
  const kvc::Status s = kvc::compress_can_implement(p);
  CHECK(s.code() == kInvalid);
  CHECK(message_of(s) == want);
  CHECK(launches_compress(p) == 0);
  const kvc::FusedParams f{p, valid_record()};
  CHECK(message_of(kvc::fused_can_implement(f)) == want);
  CHECK(launches_fused(f) == 0);
}

/// Op B and the fused op reject `record` with exactly `want`, without a launch.
void check_record_rejects(const kvc::RecordArgs& record, const std::string& want) {
  kvc::InsertParams b = valid_insert(2);
  b.record = record;
  const kvc::Status s = kvc::insert_can_implement(b);
  CHECK(s.code() == kInvalid);
  CHECK(message_of(s) == want);
  CHECK(launches_insert(b) == 0);
  CHECK(message_of(kvc::record_can_implement(record, 512)) == want);
  const kvc::FusedParams f{valid_params(2), record};
  CHECK(message_of(kvc::fused_can_implement(f)) == want);
  CHECK(launches_fused(f) == 0);
}

}  // namespace

TEST_CASE("detail::mul_fits and buffer_bound: exact, never overflowing") {
  using kvc::detail::mul_fits;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  CHECK(mul_fits(0, kMax, 0));
  CHECK(mul_fits(kMax, 0, 0));
  CHECK(mul_fits(1, kMax, kMax));
  CHECK(mul_fits(8, 1024, 8192));
  CHECK_FALSE(mul_fits(8, 1025, 8192));
  CHECK(mul_fits(int64_t{1} << 31, int64_t{1} << 31, int64_t{1} << 62));
  CHECK_FALSE(mul_fits(int64_t{1} << 31, (int64_t{1} << 31) + 1, int64_t{1} << 62));
  CHECK_FALSE(mul_fits(int64_t{1} << 32, int64_t{1} << 32, kMax));  // 2^64 would wrap to 0
  CHECK_FALSE(mul_fits(3, int64_t{1} << 62, kMax));                  // wraps to a negative
  CHECK_FALSE(mul_fits(kMax, kMax, kMax));
  CHECK_FALSE(mul_fits(-1, 1, kMax));
  CHECK_FALSE(mul_fits(1, -1, kMax));
  CHECK_FALSE(mul_fits(-(int64_t{1} << 40), -(int64_t{1} << 40), kMax));
  static_assert(kvc::detail::mul_fits(int64_t{1} << 24, int64_t{1} << 24, int64_t{1} << 48),
                "constexpr");
  CHECK(kvc::detail::kMaxBufferBytes == int64_t{1} << 48);
  CHECK(kvc::detail::buffer_bound(1) == int64_t{1} << 48);
  CHECK(kvc::detail::buffer_bound(2) == int64_t{1} << 47);
  CHECK(kvc::detail::buffer_bound(4) == int64_t{1} << 46);
  CHECK(kvc::detail::buffer_bound(8) == int64_t{1} << 45);
  CHECK(kvc::detail::buffer_bound(584) == (int64_t{1} << 48) / 584);
  kvc::detail::Validator v;
  v.within_bound(int64_t{1} << 46, 4, "x", "elements")
      .product_within_bound(int64_t{1} << 23, int64_t{1} << 23, 4, "a * b", "elements");
  CHECK(v.ok());
  v.product_within_bound(int64_t{1} << 23, (int64_t{1} << 23) + 1, 4, "a * b", "elements");
  CHECK(message_of(v.status()) == "a * b = 8388608 * 8388609 elements" + kFp32Bound);
  kvc::detail::Validator w;
  w.within_bound((int64_t{1} << 48) + 1, 1, "cache page stride", "bytes");
  CHECK(message_of(w.status()) == "cache page stride 281474976710657 bytes" + kBound);
}

TEST_CASE("Op A: strides and sizes past 2^48 bytes are rejected before they are multiplied") {
  auto p = valid_params(2);
  p.kv_score_stride_elems = k2to62;
  check_compress_rejects(p, "kv_score row stride 4611686018427387904 elements" + kFp32Bound);
  p = valid_params(2);
  p.num_tokens = int64_t{1} << 30;
  p.kv_score_stride_elems = int64_t{1} << 17;  // 2^47 elements in all
  check_compress_rejects(
      p, "num_tokens * kv_score row stride = 1073741824 * 131072 elements" + kFp32Bound);
  p.kv_score_stride_elems = int64_t{1} << 16;  // 2^46 elements: exactly the bound
  CHECK(kvc::compress_can_implement(p).ok());
  p = valid_params(2);
  p.latent_stride_elems = k2to62;
  check_compress_rejects(p, "latent row stride 4611686018427387904 elements" + kBf16Bound);
  p = valid_params(2);
  p.num_tokens = int64_t{1} << 31;  // the int32 limit comes first
  CHECK(message_of(kvc::compress_can_implement(p)) ==
        "num_tokens 2147483648 exceeds the int32 range of qsl");
  p = valid_params(2);
  p.num_tokens = int64_t{1} << 30;
  p.kv_score_stride_elems = 1056;
  p.latent_stride_elems = int64_t{1} << 18;  // 2^48 bf16 elements
  check_compress_rejects(
      p, "num_tokens * latent row stride = 1073741824 * 262144 elements" + kBf16Bound);
  // The fused op with a null latent does not look at its stride.
  kvc::FusedParams f{p, valid_record()};
  f.compress.latent = nullptr;
  CHECK(kvc::fused_can_implement(f).ok());
  p = valid_params(2);
  p.qsl_size = k2to62;
  check_compress_rejects(p, "qsl_size 4611686018427387904 elements" + kFp32Bound);

  // The ring (fp32 here; bf16 has twice the elements).
  p = valid_params(2);
  p.ring_layout.row_stride_elems = k2to62;  // the old check multiplied it by the capacity: it wrapped
  p.ring_layout.page_stride_elems = k2to62;
  check_compress_rejects(p, "ring row stride 4611686018427387904 elements" + kFp32Bound);
  p = valid_params(2);
  p.ring_layout.page_stride_elems = k2to62;
  check_compress_rejects(p, "ring page stride 4611686018427387904 elements" + kFp32Bound);
  p = valid_params(2);
  p.ring_layout.capacity = 1 << 30;
  p.ring_layout.row_stride_elems = int64_t{1} << 20;
  check_compress_rejects(
      p, "ring capacity * row stride = 1073741824 * 1048576 elements" + kFp32Bound);
  p = valid_params(2, 512, kvc::DType::kBFloat16);
  p.ring_layout.row_stride_elems = (int64_t{1} << 47) + 8;
  CHECK(message_of(kvc::compress_can_implement(p)) ==
        "ring row stride 140737488355336 elements" + kBf16Bound);
  // Exactly at the bound: 8 rows of 2^43 floats = 2^46 elements = 2^48 bytes, one block.
  p = valid_params(2);
  p.ring_layout.row_stride_elems = int64_t{1} << 43;
  p.ring_layout.page_stride_elems = int64_t{1} << 46;
  CHECK(kvc::compress_can_implement(p).ok());
  p.ring_layout.num_blocks = 1;
  CHECK(kvc::compress_can_implement(p).ok());
  p.ring_layout.num_blocks = 2;
  check_compress_rejects(p,
                         "ring extent (num_blocks - 1) * page stride + capacity * row stride = "
                         "1 * 70368744177664 + 70368744177664 elements" + kFp32Bound);
}

TEST_CASE("Op A: ring num_blocks is -1 or >= 0 and bounds the whole ring (ratio > 1 only)") {
  for (int64_t n : {int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{4096}, int64_t{1} << 20}) {
    CAPTURE(n);
    auto p = valid_params(2);
    p.ring_layout.num_blocks = n;
    CHECK(kvc::compress_can_implement(p).ok());
    CHECK(launches_compress(p) == 1);
    CHECK(kvc::fused_can_implement({p, valid_record()}).ok());
  }
  for (int64_t n : {int64_t{-2}, int64_t{-1000}, std::numeric_limits<int64_t>::min()}) {
    CAPTURE(n);
    auto p = valid_params(4);
    p.ring_layout.num_blocks = n;
    check_compress_rejects(p, "ring num_blocks " + std::to_string(n) +
                                  " must be -1 (not given) or >= 0");
  }
  auto p = valid_params(2);
  p.ring_layout.num_blocks = k2to62;  // num_blocks * capacity = 2^65 would wrap to 0
  check_compress_rejects(p, "ring num_blocks * capacity = 4611686018427387904 * 8 rows" + kBound);
  p.ring_layout.num_blocks = std::numeric_limits<int64_t>::max();
  check_compress_rejects(p, "ring num_blocks * capacity = 9223372036854775807 * 8 rows" + kBound);
  // 2^40 blocks of 8208 floats: the slots fit, the ring's bytes do not.
  p.ring_layout.num_blocks = int64_t{1} << 40;
  check_compress_rejects(p,
                         "ring extent (num_blocks - 1) * page stride + capacity * row stride = "
                         "1099511627775 * 8208 + 8192 elements" + kFp32Bound);
  // The largest ring that fits: (n - 1) * 8208 + 8192 <= 2^46.
  const int64_t largest = ((int64_t{1} << 46) - 8192) / 8208 + 1;
  p.ring_layout.num_blocks = largest;
  CHECK(kvc::compress_can_implement(p).ok());
  p.ring_layout.num_blocks = largest + 1;
  CHECK_FALSE(kvc::compress_can_implement(p).ok());
  // Ratio 1 has no ring: num_blocks (and the ring strides) are not looked at.
  auto q = valid_params(1);
  q.ring_layout.num_blocks = -5;
  q.ring_layout.row_stride_elems = k2to62;
  CHECK(kvc::compress_can_implement(q).ok());
  CHECK(kvc::fused_can_implement({q, valid_record()}).ok());
}

TEST_CASE("errors: null or 4-byte aligned (Op A, Op B, the fused op's compress.errors)") {
  auto* aligned = at<kvc::ErrorCounters>(48000);
  auto* misaligned = reinterpret_cast<kvc::ErrorCounters*>(at(48000 + 2));
  CHECK(alignof(kvc::ErrorCounters) == 4);
  for (int ratio : {1, 2, 128}) {
    CAPTURE(ratio);
    auto p = valid_params(ratio);
    p.errors = aligned;
    CHECK(kvc::compress_can_implement(p).ok());
    CHECK(kvc::fused_can_implement({p, valid_record()}).ok());
    p.errors = misaligned;
    check_compress_rejects(p, "errors address " + kvc::detail::hex_address(misaligned) +
                                  " is not aligned to 4 bytes");
  }
  auto b = valid_insert(2);
  b.errors = aligned;
  CHECK(kvc::insert_can_implement(b).ok());
  b.errors = misaligned;
  CHECK(kvc::insert_can_implement(b).code() == kInvalid);
  CHECK(message_of(kvc::insert_can_implement(b)) ==
        "errors address " + kvc::detail::hex_address(misaligned) + " is not aligned to 4 bytes");
  CHECK(launches_insert(b) == 0);
  // The fused op counts in compress.errors only (InsertParams.errors is Op B's).
  kvc::FusedParams f{valid_params(2), valid_record()};
  f.compress.errors = aligned;
  f.compress.latent = nullptr;
  CHECK(kvc::fused_can_implement(f).ok());
  CHECK(launches_fused(f) == 1);
}

TEST_CASE("eps must be finite and > 0: eps = 0 would make an all-zero row NaN") {
  for (float eps : {0.f, -0.f, -1e-20f, -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    CAPTURE(eps);
    auto p = valid_params(2);
    p.eps = eps;
    check_compress_rejects(p, "eps " + std::to_string(eps) + " must be finite and > 0");
  }
  auto p = valid_params(2);
  p.eps = 0.f;
  CHECK(message_of(kvc::compress_can_implement(p)) == "eps 0.000000 must be finite and > 0");
  for (float eps : {1e-20f, 1e-6f, std::numeric_limits<float>::denorm_min(),
                    std::numeric_limits<float>::min(), 1.f}) {
    CAPTURE(eps);
    p.eps = eps;
    CHECK(kvc::compress_can_implement(p).ok());
  }
}

TEST_CASE("records: cache and cos_sin strides and sizes past 2^48 bytes are rejected") {
  auto r = valid_record();
  r.cache.page_stride_bytes = k2to62;
  check_record_rejects(r, "cache page stride 4611686018427387904 bytes" + kBound);
  r = valid_record();
  r.cache.row_stride_bytes = int64_t{1} << 58;  // ignored by fp8_ds_mla, but no buffer is that large
  check_record_rejects(r, "cache row stride 288230376151711744 bytes" + kBound);
  // bf16 rows: a row stride of 2^58 with a 64 KiB page used to wrap (B - 1) * row stride.
  auto bf16 = valid_record();
  bf16.layout = kvc::CacheLayout::kBf16Rows;
  bf16.cache.row_stride_bytes = 1024;
  bf16.cache.page_stride_bytes = 64 * 1024;
  CHECK(kvc::record_can_implement(bf16, 512).ok());
  r = bf16;
  r.cache.row_stride_bytes = int64_t{1} << 58;
  check_record_rejects(r, "cache row stride 288230376151711744 bytes" + kBound);
  r = bf16;
  r.cache.block_size = 1 << 20;
  r.cache.row_stride_bytes = int64_t{1} << 30;
  check_record_rejects(r, "cache block size * row stride = 1048576 * 1073741824 bytes" + kBound);
  // fp8 rows go through the same checks.
  auto fp8 = valid_fp8_rows_insert(2).record;
  fp8.cache.row_stride_bytes = int64_t{1} << 58;
  check_record_rejects(fp8, "cache row stride 288230376151711744 bytes" + kBound);
  // fp8_ds_mla may leave row_stride 0 (it has no rows of its own).
  r = valid_record();
  r.cache.row_stride_bytes = 0;
  CHECK(kvc::record_can_implement(r, 512).ok());

  // num_pages bounds the whole cache.
  r = valid_record();
  r.cache.num_pages = k2to62;
  check_record_rejects(r, "cache num_pages * block size = 4611686018427387904 * 64 records" + kBound);
  r.cache.num_pages = int64_t{1} << 33;
  check_record_rejects(r, "cache num_pages * page stride = 8589934592 * 37440 bytes" + kBound);
  for (int64_t n : {int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{100000},
                    (int64_t{1} << 48) / 37440}) {
    CAPTURE(n);
    r.cache.num_pages = n;
    CHECK(kvc::record_can_implement(r, 512).ok());
  }
  r.cache.num_pages = (int64_t{1} << 48) / 37440 + 1;
  CHECK_FALSE(kvc::record_can_implement(r, 512).ok());

  // The rotary table.
  r = valid_record();
  r.cos_sin_stride_elems = k2to62;
  check_record_rejects(r, "cos_sin row stride 4611686018427387904 elements" + kFp32Bound);
  r = valid_record();
  r.cos_sin_dtype = kvc::DType::kBFloat16;
  r.cos_sin_rows = int64_t{1} << 50;
  check_record_rejects(
      r, "cos_sin_rows * cos_sin row stride = 1125899906842624 * 64 elements" + kBf16Bound);
  r.cos_sin_rows = int64_t{1} << 41;  // 2^47 bf16 elements: exactly the bound
  CHECK(kvc::record_can_implement(r, 512).ok());

  // Op B's latent.
  auto b = valid_insert(2);
  b.latent_stride_elems = k2to62;
  CHECK(message_of(kvc::insert_can_implement(b)) ==
        "latent row stride 4611686018427387904 elements" + kBf16Bound);
  CHECK(launches_insert(b) == 0);
  b = valid_insert(2);
  b.num_tokens = int64_t{1} << 30;
  b.latent_stride_elems = int64_t{1} << 18;
  CHECK(message_of(kvc::insert_can_implement(b)) ==
        "num_tokens * latent row stride = 1073741824 * 262144 elements" + kBf16Bound);
  CHECK(launches_insert(b) == 0);
}

TEST_CASE("both bounds given (as the torch op and the README do): valid, no allocation") {
  auto a = valid_params(2);
  a.ring_layout.num_blocks = 256;
  a.errors = at<kvc::ErrorCounters>(48000);
  auto b = valid_insert(2);
  b.record.cache.num_pages = 4096;
  b.errors = at<kvc::ErrorCounters>(48000);
  const kvc::FusedParams f{a, b.record};
  bool ok = true;
  CHECK(allocations_of([&] { ok = ok && kvc::compress_can_implement(a).ok(); }) == 0);
  CHECK(allocations_of([&] { ok = ok && kvc::insert_can_implement(b).ok(); }) == 0);
  CHECK(allocations_of([&] { ok = ok && kvc::fused_can_implement(f).ok(); }) == 0);
  CHECK(ok);
  CHECK(launches_compress(a) == 1);
  CHECK(launches_insert(b) == 1);
  CHECK(launches_fused(f) == 1);
}

// The kernels' own pointer test before their PDL wait (required_pointers_set, arch/pdl.cuh)
// must never be stricter than the host validation: a launch that validates would otherwise do
// nothing. Every launch that validates passes it, and each pointer (or index type) it tests is
// one whose null (or out-of-range value) the validation rejects.
namespace {
bool kernel_pointers_ok(const kvc::CompressParams& p) {
  return p.ratio == 1 ? kvc::required_pointers_set<1>(p) : kvc::required_pointers_set<2>(p);
}
}  // namespace

TEST_CASE("required_pointers_set: true for every validated launch; its pointers and index types are required") {
  for (int ratio : {1, 2}) {
    const kvc::CompressParams a = valid_params(ratio);
    REQUIRE(kvc::compress_can_implement(a).ok());
    CHECK(kernel_pointers_ok(a));
    kvc::FusedParams f{a, valid_record()};
    f.compress.latent = nullptr;  // optional in the fused op: not tested by the kernel
    REQUIRE(kvc::fused_can_implement(f).ok());
    CHECK(kernel_pointers_ok(f.compress));
    const kvc::InsertParams b = valid_insert(ratio);
    REQUIRE(kvc::insert_can_implement(b).ok());
    CHECK(kvc::required_pointers_set(b));

    const auto bad_type = static_cast<kvc::IndexType>(7);  // neither int32 nor int64
    std::vector<std::function<void(kvc::CompressParams&)>> a_nulls = {
        [](auto& p) { p.kv_score = nullptr; }, [](auto& p) { p.positions.data = nullptr; },
        [](auto& p) { p.slot.data = nullptr; }, [](auto& p) { p.weight = nullptr; },
        [=](auto& p) { p.positions.type = bad_type; }, [=](auto& p) { p.slot.type = bad_type; }};
    if (ratio > 1) {
      a_nulls.push_back([](auto& p) { p.qsl = nullptr; });
      a_nulls.push_back([](auto& p) { p.req = nullptr; });
      a_nulls.push_back([](auto& p) { p.ring = nullptr; });
    }
    for (size_t i = 0; i < a_nulls.size(); ++i) {
      INFO("ratio ", ratio, ", Op A pointer case ", i);
      kvc::CompressParams p = valid_params(ratio);
      a_nulls[i](p);
      CHECK_FALSE(kernel_pointers_ok(p));
      CHECK_FALSE(kvc::compress_can_implement(p).ok());
    }
    const std::vector<std::function<void(kvc::InsertParams&)>> b_nulls = {
        [](auto& p) { p.latent = nullptr; }, [](auto& p) { p.positions.data = nullptr; },
        [](auto& p) { p.record.cos_sin = nullptr; },
        [](auto& p) { p.record.cache_slot.data = nullptr; },
        [=](auto& p) { p.positions.type = bad_type; },
        [=](auto& p) { p.record.cache_slot.type = bad_type; }};
    for (size_t i = 0; i < b_nulls.size(); ++i) {
      INFO("ratio ", ratio, ", Op B pointer case ", i);
      kvc::InsertParams p = valid_insert(ratio);
      b_nulls[i](p);
      CHECK_FALSE(kvc::required_pointers_set(p));
      CHECK_FALSE(kvc::insert_can_implement(p).ok());
    }
    // The cache itself is read after the wait; the validation still requires it.
    kvc::InsertParams c = valid_insert(ratio);
    c.record.cache.data = nullptr;
    CHECK(kvc::required_pointers_set(c));
    CHECK_FALSE(kvc::insert_can_implement(c).ok());
  }
}
