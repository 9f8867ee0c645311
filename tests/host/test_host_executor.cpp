// SPDX-License-Identifier: Apache-2.0
// Host tier: a host executor of contract §1 (Op A) built from the library's own pieces —
// GatedPool with one "thread" owning the whole row, RmsNorm, RingLayout, float_to_bf16 —
// run on random batches and compared with the float64 reference. This cross-checks the
// reference and the functors before any GPU runs: latent within 1 bf16 ulp of float64,
// ring bit-exact, every non-closing latent row untouched (poisoned).
#include <doctest/doctest.h>

#include <kvcompress/core/codecs.hpp>
#include <kvcompress/functor/gated_pool.hpp>
#include <kvcompress/functor/rms_norm.hpp>
#include <kvcompress/launch/dispatch.hpp>
#include <kvcompress/layout/ring.hpp>

#include "common/batch.hpp"
#include "reference/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr uint16_t kPoison = 0x7fa5;  // a NaN float_to_bf16 never produces (its NaN is 0x7fff)

template <int R, int D>
struct Members {
  kvc::Array<float, D> kv[R];
  kvc::Array<float, D> score[R];
};

/// contract §1 on the host. `latent` is [T, latent_stride_elems] bf16 bits (pre-poisoned); `ring` is
/// updated in place. Every ring read happens before the first ring store.
template <int R, int D>
void host_compress(const kvctest::Batch& b, std::vector<uint16_t>& latent, int64_t latent_stride_elems,
                   std::vector<float>& ring) {
  const int64_t T = b.num_tokens();
  const kvc::RingLayout layout{b.capacity, b.ring_page_stride, b.ring_row_stride};
  auto m = std::make_unique<Members<R, D>>();
  auto pooled = std::make_unique<kvc::Array<float, D>>();
  auto weight = std::make_unique<kvc::Array<uint16_t, D>>();
  for (int d = 0; d < D; ++d) (*weight)[d] = b.weight[static_cast<size_t>(d)];

  for (int64_t t = 0; t < T; ++t) {
    const int64_t slot = b.slot[static_cast<size_t>(t)];
    const int64_t p = b.positions[static_cast<size_t>(t)];
    if (slot < 0 || (p + 1) % R != 0) continue;
    if constexpr (R == 1) {
      const float* row = b.kv_score.data() + t * b.stride;
      for (int d = 0; d < D; ++d) m->kv[0][d] = row[d];
      *pooled = kvc::GatedPool<1>::pool(m->kv);
    } else {
      const int32_t r = b.req[static_cast<size_t>(t)];
      const int64_t chunk_start = b.positions[static_cast<size_t>(b.qsl[static_cast<size_t>(r)])];
      const int64_t block = layout.block_of(slot);
      for (int j = 0; j < R; ++j) {
        const int64_t q = p - R + 1 + j;
        const float* row = q >= chunk_start ? b.kv_score.data() + (t - (p - q)) * b.stride
                                            : ring.data() + layout.position_offset(block, q);
        for (int d = 0; d < D; ++d) {
          m->kv[j][d] = row[d];
          m->score[j][d] = row[D + d];
        }
      }
      *pooled = kvc::GatedPool<R>::pool(m->kv, m->score);
    }
    using Norm = kvc::RmsNorm<D>;
    const float inv = Norm::inv_rms(Norm::sum_squares(*pooled), b.eps);
    const kvc::Array<float, D> out = Norm::apply(*pooled, inv, *weight);
    for (int d = 0; d < D; ++d)
      latent[static_cast<size_t>(t * latent_stride_elems + d)] = kvc::float_to_bf16(out[d]);
  }

  if constexpr (R > 1) {
    for (int r = 0; r < b.num_reqs(); ++r) {
      const int64_t first = b.qsl[static_cast<size_t>(r)], end = b.qsl[static_cast<size_t>(r) + 1];
      const int64_t n = end - first;
      for (int64_t t = end - std::min<int64_t>(n, b.capacity); t < end; ++t) {
        const int64_t slot = b.slot[static_cast<size_t>(t)];
        if (slot < 0) continue;
        std::memcpy(ring.data() + layout.slot_offset(slot), b.kv_score.data() + t * b.stride,
                    sizeof(float) * 2 * D);
      }
    }
  }
}

/// Runtime (R, D) -> host_compress<R, D>, through the library's closed dispatch lists.
kvc::Status run_host_compress(const kvctest::Batch& b, std::vector<uint16_t>& latent,
                              int64_t latent_stride_elems, std::vector<float>& ring) {
  return kvc::dispatch_ratio(b.ratio, [&](auto r) {
    return kvc::dispatch_head_dim(b.head_dim, [&](auto d) {
      constexpr int kR = decltype(r)::value, kD = decltype(d)::value;
      // Only the combinations this file tests are instantiated (compile time).
      if constexpr ((kR == 1 || kR == 2 || kR == 4 || kR == 128) && (kD == 128 || kD == 512)) {
        host_compress<kR, kD>(b, latent, latent_stride_elems, ring);
        return kvc::Status::success();
      } else {
        return kvc::Status::not_supported("not instantiated in this test");
      }
    });
  });
}

std::string hex32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", u);
  return buf;
}

struct Outcome {
  int64_t closing = 0, latent_mismatches = 0, ring_mismatches = 0, untouched_mismatches = 0;
  std::string first_latent, first_ring, first_untouched;
};

/// Runs executor and reference on `b`; compares everything.
Outcome run_and_compare(const kvctest::Batch& b) {
  const int64_t T = b.num_tokens();
  const int D = b.head_dim;
  const int64_t latent_stride_elems = D + 8;  // padded rows: the padding must stay poisoned too
  std::vector<uint16_t> latent(static_cast<size_t>(T * latent_stride_elems), kPoison);
  std::vector<float> ring = b.ring;
  const kvc::Status s = run_host_compress(b, latent, latent_stride_elems, ring);
  REQUIRE_MESSAGE(s.ok(), s.message());

  const kvcref::CompressExpected want = kvcref::compress_reference(kvctest::reference_inputs(b));
  REQUIRE(want.closes.size() == static_cast<size_t>(T));

  Outcome o;
  for (int64_t t = 0; t < T; ++t) {
    const bool closes = want.closes[static_cast<size_t>(t)] != 0;
    o.closing += closes;
    for (int64_t d = 0; d < latent_stride_elems; ++d) {
      const uint16_t got = latent[static_cast<size_t>(t * latent_stride_elems + d)];
      char buf[224];
      if (!closes || d >= D) {
        if (got != kPoison && o.untouched_mismatches++ == 0) {
          std::snprintf(buf, sizeof buf, "token %lld (pos %lld, slot %lld) dim %lld: written 0x%04x",
                        static_cast<long long>(t),
                        static_cast<long long>(b.positions[static_cast<size_t>(t)]),
                        static_cast<long long>(b.slot[static_cast<size_t>(t)]),
                        static_cast<long long>(d), got);
          o.first_untouched = buf;
        }
        continue;
      }
      const double exact = want.latent[static_cast<size_t>(t * D + d)];
      const double value = kvcref::bf16_to_double(got);
      const bool ok = std::isfinite(exact) && std::isfinite(value) &&
                      std::fabs(value - exact) <= kvcref::bf16_ulp(exact);
      if (!ok && o.latent_mismatches++ == 0) {
        std::snprintf(buf, sizeof buf,
                      "token %lld (pos %lld) dim %lld: bf16 0x%04x = %a, float64 %a (bf16 0x%04x), "
                      "ulp %a",
                      static_cast<long long>(t),
                      static_cast<long long>(b.positions[static_cast<size_t>(t)]),
                      static_cast<long long>(d), got, value, exact, kvcref::bf16_round(exact),
                      kvcref::bf16_ulp(exact));
        o.first_latent = buf;
      }
    }
  }
  REQUIRE(want.ring_after.size() == ring.size());
  for (size_t i = 0; i < ring.size(); ++i) {
    if (std::memcmp(&ring[i], &want.ring_after[i], sizeof(float)) != 0 &&
        o.ring_mismatches++ == 0) {
      const int64_t e = static_cast<int64_t>(i);
      const int64_t blk = e / b.ring_page_stride, in_page = e % b.ring_page_stride;
      char buf[192];
      std::snprintf(buf, sizeof buf, "ring element %lld (block %lld, row %lld, col %lld): %s, want %s",
                    static_cast<long long>(e), static_cast<long long>(blk),
                    static_cast<long long>(in_page / b.ring_row_stride),
                    static_cast<long long>(in_page % b.ring_row_stride), hex32(ring[i]).c_str(),
                    hex32(want.ring_after[i]).c_str());
      o.first_ring = buf;
    }
  }
  return o;
}

/// Checks one batch; returns the number of closing rows.
int64_t check_batch(const kvctest::Batch& b, const std::string& what) {
  const Outcome o = run_and_compare(b);
  INFO(what, ": R = ", b.ratio, ", D = ", b.head_dim, ", C = ", b.capacity, ", T = ",
       b.num_tokens(), ", requests = ", b.num_reqs());
  CHECK_MESSAGE(o.latent_mismatches == 0, o.latent_mismatches, " latent mismatches; first: ",
                o.first_latent);
  CHECK_MESSAGE(o.untouched_mismatches == 0, o.untouched_mismatches,
                " written elements that must stay poisoned; first: ", o.first_untouched);
  CHECK_MESSAGE(o.ring_mismatches == 0, o.ring_mismatches, " ring mismatches; first: ",
                o.first_ring);
  return o.closing;
}

kvctest::BatchShape shape_of(int ratio, int head_dim, std::vector<kvctest::RequestShape> requests,
                             int padding = 0) {
  kvctest::BatchShape s;
  s.ratio = ratio;
  s.head_dim = head_dim;
  s.requests = std::move(requests);
  s.padding_tokens = padding;
  return s;
}

}  // namespace

TEST_CASE("host executor == reference: hand-shaped batches, R = 2") {
  std::mt19937_64 rng(2);
  for (int D : {128, 512}) {
    // Decode steps (one token each), odd and even positions; a prefill from 0; a chunk
    // longer than the ring starting on an odd position; an empty chunk; padding.
    auto s = shape_of(2, D, {{1, 7}, {1, 8}, {9, 0}, {0, 40}, {20, 13}, {3, 100}}, 4);
    CHECK(check_batch(kvctest::make_batch(rng, s), "mixed") > 0);
    // vLLM's padded ring pages (row 2D, page 8208 for C = 8 at D = 512).
    s.ring_row_stride = 2 * D;
    s.ring_page_stride = 8 * 2 * D + 16;
    s.kv_score_stride_elems = 2 * D + 4;
    CHECK(check_batch(kvctest::make_batch(rng, s), "padded strides") > 0);
    // Speculative steps: 4 tokens per request, ring C = 8 (vLLM's rule for 3 drafts).
    auto spec = shape_of(2, D, {{4, 11}, {4, 20}, {4, 5}});
    spec.capacity = 8;
    CHECK(check_batch(kvctest::make_batch(rng, spec), "speculative") > 0);
  }
}

TEST_CASE("host executor == reference: edge shapes") {
  std::mt19937_64 rng(3);
  // Nothing closes: R = 4, single tokens at positions that do not close a group, + padding.
  {
    auto s = shape_of(4, 128, {{1, 0}, {1, 1}, {1, 6}, {2, 8}}, 3);
    CHECK(check_batch(kvctest::make_batch(rng, s), "no group closes") == 0);
  }
  // Only padding and empty requests.
  {
    auto s = shape_of(2, 128, {{0, 5}, {0, 0}}, 5);
    CHECK(check_batch(kvctest::make_batch(rng, s), "padding only") == 0);
  }
  // Empty batch.
  {
    auto s = shape_of(2, 128, {{0, 3}});
    const auto b = kvctest::make_batch(rng, s);
    CHECK(b.num_tokens() == 0);
    CHECK(check_batch(b, "empty") == 0);
  }
  // A chunk of 3 C + 1 tokens, starting mid-group: the first group reads the old ring, the
  // store writes only the last C tokens, and reads see the old contents.
  for (int R : {2, 4}) {
    auto s = shape_of(R, 128, {{3 * 8 + 1, 4 * R - 1}, {2, 2 * R - 1}}, 1);
    s.capacity = 8;
    CHECK(check_batch(kvctest::make_batch(rng, s), "chunk longer than the ring") > 0);
  }
  // Ring larger than needed, padded rows and pages, ratio 4.
  {
    auto s = shape_of(4, 512, {{5, 3}, {7, 9}, {1, 15}, {12, 0}}, 2);
    s.capacity = 16;
    s.ring_row_stride = 1024 + 32;
    s.ring_page_stride = 16 * (1024 + 32) + 64;
    s.extra_ring_blocks = 3;
    CHECK(check_batch(kvctest::make_batch(rng, s), "ratio 4, padded ring") > 0);
  }
  // Ratio 128: a group closed from the ring only (one token), one spanning ring and chunk,
  // one inside a long chunk, and a chunk longer than the 128-row ring.
  {
    auto s = shape_of(128, 128, {{1, 127}, {60, 200}, {130, 128}, {140, 250}}, 2);
    CHECK(check_batch(kvctest::make_batch(rng, s), "ratio 128") > 0);
  }
  // Ratio 1: every non-padding token closes; no ring.
  {
    auto s = shape_of(1, 512, {{3, 10}, {0, 4}, {5, 0}}, 3);
    CHECK(check_batch(kvctest::make_batch(rng, s), "ratio 1") == 8);
  }
}

TEST_CASE("host executor == reference: eps 1e-20 and tiny values") {
  std::mt19937_64 rng(20);
  auto s = shape_of(2, 512, {{6, 1}, {3, 10}});
  s.eps = 1e-20f;
  s.kv_range = 1e-12f;  // mean square ~1e-25: eps matters less than the values, but is added
  CHECK(check_batch(kvctest::make_batch(rng, s), "tiny kv, eps 1e-20") > 0);
  s.eps = 1e-6f;
  s.kv_range = 1e-3f;  // mean square ~ eps
  s.score_range = 80.f;
  CHECK(check_batch(kvctest::make_batch(rng, s), "kv ~ sqrt(eps), scores +-80") > 0);
}

TEST_CASE("host executor == reference: random batches, ratios 1/2/4/128, head dims 128/512") {
  std::mt19937_64 rng(0xba7c);
  struct Config {
    int ratio, head_dim, batches, num_reqs, max_chunk;
    int64_t max_start;
  };
  const Config configs[] = {
      {1, 128, 6, 6, 12, 1000},  {1, 512, 4, 5, 12, 1000},  {2, 128, 12, 8, 24, 1000},
      {2, 512, 8, 8, 20, 1000},  {4, 128, 10, 6, 30, 500},  {4, 512, 6, 6, 30, 500},
      {128, 128, 3, 3, 300, 600}, {128, 512, 1, 2, 260, 600},
  };
  for (const Config& c : configs) {
    int64_t closing = 0;
    for (int i = 0; i < c.batches; ++i) {
      auto shape = kvctest::random_shape(rng, c.ratio, c.head_dim, c.num_reqs, c.max_chunk,
                                         c.max_start, 4);
      if (i % 2 == 1) {  // padded strides on every other batch
        shape.kv_score_stride_elems = (c.ratio > 1 ? 2 * c.head_dim : c.head_dim) + 8 * (1 + i % 3);
        shape.ring_row_stride = 2 * c.head_dim + 4 * (i % 4);
        const int cap = kvctest::default_capacity(c.ratio);
        shape.ring_page_stride = cap * shape.ring_row_stride + 16 * (1 + i % 2);
      }
      closing += check_batch(kvctest::make_batch(rng, shape), "random");
    }
    INFO("R = ", c.ratio, ", D = ", c.head_dim);
    CHECK(closing > 0);  // the random batches did exercise closing groups
  }
}
