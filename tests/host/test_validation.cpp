// Host tier: Op A validation, kvc::compress_can_implement (launch/compress.hpp, SPEC §4).
// The function never dereferences pointers, so fake but aligned addresses into a host arena
// stand in for device buffers.
#include <doctest/doctest.h>

#include <kvcompress/launch/compress.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

namespace {

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
  p.kv_score_stride = width + 32;
  p.positions = kvc::IndexPtr{at(4096), kvc::IndexType::kInt64};
  p.slot = kvc::IndexPtr{at(4096 + 64), kvc::IndexType::kInt32};
  p.weight = at<const kvc::bf16_t>(8192);
  p.eps = 1e-20f;
  p.latent = at<kvc::bf16_t>(12288);
  p.latent_stride = head_dim + 64;
  if (ratio > 1) {
    p.qsl = at<const int32_t>(16384);
    p.qsl_size = 3;
    p.req = at<const int32_t>(16384 + 64);
    p.ring = at(20480);
    p.ring_layout = kvc::RingLayout{8 > ratio ? 8 : ratio, 0, 2 * int64_t{head_dim}};
    p.ring_layout.page_stride = p.ring_layout.capacity * p.ring_layout.row_stride + 16;
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
      {"ratio 0", [](auto& p) { p.ratio = 0; }, kNotSupported, {"compress ratio 0"}},
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
      {"weight null", [](auto& p) { p.weight = nullptr; }, kInvalid, {"weight is null"}},
      {"weight misaligned", [](auto& p) { p.weight = at<const kvc::bf16_t>(8192 + 2); }, kInvalid,
       {"weight address", "not aligned to 8 bytes"}},
      {"latent null", [](auto& p) { p.latent = nullptr; }, kInvalid, {"latent is null"}},
      {"latent misaligned", [](auto& p) { p.latent = at<kvc::bf16_t>(12288 + 4); }, kInvalid,
       {"latent address", "not aligned to 8 bytes"}},
      {"latent stride short", [](auto& p) { p.latent_stride = 500; }, kInvalid,
       {"latent row stride 500", "smaller than", "512"}},
      {"latent stride odd", [](auto& p) { p.latent_stride = 514; }, kInvalid,
       {"latent row stride 514", "not a multiple of 4 elements"}},
      {"eps NaN", [](auto& p) { p.eps = std::numeric_limits<float>::quiet_NaN(); }, kInvalid,
       {"eps", "finite"}},
      {"eps inf", [](auto& p) { p.eps = std::numeric_limits<float>::infinity(); }, kInvalid,
       {"eps", "finite"}},
      {"eps negative", [](auto& p) { p.eps = -1e-6f; }, kInvalid, {"eps", ">= 0"}},
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
  p.kv_score_stride = 1024;
  p.latent_stride = 512;
  p.ring_layout = kvc::RingLayout{8, 8208, 1024};
  CHECK(kvc::compress_can_implement(p).ok());
  // Ratio 1 needs no ring, qsl or req.
  auto q = valid_params(1);
  CHECK(q.ring == nullptr);
  CHECK(q.qsl == nullptr);
  q.kv_score_stride = 512;
  CHECK(kvc::compress_can_implement(q).ok());
  q.kv_score_stride = 1000;  // >= D and a multiple of 4 floats: fine for R = 1
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
      {"kv_score stride short", [](auto& p) { p.kv_score_stride = 1000; }, kInvalid,
       {"kv_score row stride 1000", "smaller than", "2 * head_dim", "1024"}},
      {"kv_score stride odd", [](auto& p) { p.kv_score_stride = 1026; }, kInvalid,
       {"kv_score row stride 1026", "not a multiple of 4 elements"}},
      {"qsl null", [](auto& p) { p.qsl = nullptr; }, kInvalid, {"qsl is null"}},
      {"qsl_size 1", [](auto& p) { p.qsl_size = 1; }, kInvalid, {"qsl_size 1"}},
      {"qsl_size 0", [](auto& p) { p.qsl_size = 0; }, kInvalid, {"qsl_size 0"}},
      {"req null", [](auto& p) { p.req = nullptr; }, kInvalid, {"req is null"}},
      {"ring null", [](auto& p) { p.ring = nullptr; }, kInvalid, {"ring is null"}},
      {"ring misaligned", [](auto& p) { p.ring = at(20480 + 8); }, kInvalid,
       {"ring address", "not aligned to 16 bytes"}},
      {"ring capacity 1", [](auto& p) { p.ring_layout.capacity = 1; }, kInvalid,
       {"ring capacity 1", "smaller than the compress ratio 2"}},
      {"ring capacity 0", [](auto& p) { p.ring_layout.capacity = 0; }, kInvalid,
       {"ring capacity 0"}},
      {"ring row stride short", [](auto& p) { p.ring_layout.row_stride = 1020; }, kInvalid,
       {"ring row stride 1020", "smaller than", "1024"}},
      {"ring row stride odd", [](auto& p) { p.ring_layout.row_stride = 1030; }, kInvalid,
       {"ring row stride 1030", "not a multiple of 4 elements"}},
      {"ring pages overlap", [](auto& p) { p.ring_layout.page_stride = 8 * 1024 - 4; }, kInvalid,
       {"ring page stride 8188", "overlaps", "8192"}},
      {"ring page stride odd", [](auto& p) { p.ring_layout.page_stride = 8210; }, kInvalid,
       {"ring page stride 8210", "not a multiple of 4 elements"}},
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
  cases.push_back({"kv_score stride short", [](auto& p) { p.kv_score_stride = 510; }, kInvalid,
                   {"kv_score row stride 510", "smaller than", "head_dim", "512"}});
  cases.push_back({"kv_score stride odd", [](auto& p) { p.kv_score_stride = 1001; }, kInvalid,
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
  p.kv_score_stride = 1028;
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
  p.kv_score_stride = 260;
  CHECK(kvc::compress_can_implement(p).ok());
  p.kv_score_stride = 258;
  CHECK_FALSE(kvc::compress_can_implement(p).ok());
  // Larger ratios need larger rings.
  p = valid_params(128, 512);
  p.ring_layout.capacity = 64;
  p.ring_layout.page_stride = 64 * 1024;
  s = kvc::compress_can_implement(p);
  CHECK(contains(s.message(), "ring capacity 64 is smaller than the compress ratio 128"));
}

TEST_CASE("compress_can_implement: the first violated condition is the one reported") {
  auto p = valid_params(2);
  p.weight = nullptr;
  p.ring = nullptr;
  p.kv_score_stride = 1026;
  const kvc::Status s = kvc::compress_can_implement(p);
  CHECK(contains(s.message(), "kv_score row stride 1026"));
  CHECK_FALSE(contains(s.message(), "weight"));
  auto q = valid_params(2);
  q.ratio = 3;
  q.kv_score = nullptr;
  CHECK(kvc::compress_can_implement(q).code() == kNotSupported);
}
