// SPDX-License-Identifier: Apache-2.0
// Host tier: Op A's small-ratio decisions (kernel/window_rules.hpp), made from requests alone,
// against their definitions from the chunk bounds, on random batches: odd chunk starts,
// empty and one-token chunks, chunks longer than the ring, trailing padding, padding slots.
// The safety properties the kernel relies on are checked by brute force: a tail store that
// skips the slow path never overwrites a ring row its head group reads, and every chunk
// with a colliding store has a head group that defers the stores.
#include <doctest/doctest.h>

#include <kvcompress/kernel/compress_params.hpp>
#include <kvcompress/kernel/window_rules.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

struct Batch {
  int capacity = 8;
  std::vector<int64_t> qsl;       // [num_reqs + 1]
  std::vector<int32_t> req;       // [T]
  std::vector<int64_t> pos, slot; // [T]
  std::vector<int64_t> chunk_start, block;  // per request
  int64_t T = 0;
};

Batch make_batch(std::mt19937& rng, int ratio, int capacity) {
  Batch b;
  b.capacity = capacity;
  const int num_reqs = std::uniform_int_distribution<int>(1, 6)(rng);
  const int lengths[] = {0, 1, 2, 3, ratio - 1, ratio, ratio + 1, capacity - 1, capacity, capacity + 1,
                         capacity + ratio, 2 * capacity + 3, 37};
  b.qsl.push_back(0);
  std::vector<int64_t> blocks(static_cast<size_t>(num_reqs));
  for (int r = 0; r < num_reqs; ++r) blocks[static_cast<size_t>(r)] = r;
  std::shuffle(blocks.begin(), blocks.end(), rng);
  for (int r = 0; r < num_reqs; ++r) {
    const int len = std::max(0, lengths[std::uniform_int_distribution<int>(0, 12)(rng)]);
    const int64_t start = std::uniform_int_distribution<int>(0, 41)(rng);
    b.chunk_start.push_back(start);
    b.block.push_back(blocks[static_cast<size_t>(r)]);
    for (int i = 0; i < len; ++i) {
      const int64_t p = start + i;
      b.req.push_back(r);
      b.pos.push_back(p);
      // Ring slot of the position in the request's block; now and then a padding slot.
      const bool pad = std::uniform_int_distribution<int>(0, 19)(rng) == 0;
      b.slot.push_back(pad ? -1 : blocks[static_cast<size_t>(r)] * capacity + p % capacity);
    }
    b.qsl.push_back(static_cast<int64_t>(b.req.size()));
  }
  // Trailing padding: past qsl[num_reqs], some with slots (the kernel ignores their rows).
  const int trailing = std::uniform_int_distribution<int>(0, 4)(rng);
  for (int i = 0; i < trailing; ++i) {
    b.req.push_back(std::uniform_int_distribution<int>(0, num_reqs - 1)(rng));
    b.pos.push_back(std::uniform_int_distribution<int>(0, 60)(rng));
    b.slot.push_back(std::uniform_int_distribution<int>(0, 1)(rng) ? -1 : 3);
  }
  b.T = static_cast<int64_t>(b.req.size());
  return b;
}

// Index: the kernel's token index type (int64_t, or int32_t in the compact-index block rows).
template <int R, class Index>
kvc::detail::BasicWindowFacts<Index> facts_of(const Batch& b, int64_t t) {
  const int reach = b.capacity - R + 1;
  kvc::detail::BasicWindowFacts<Index> f;
  f.t = static_cast<Index>(t);
  f.real_end = static_cast<Index>(b.qsl.back());
  f.slot = b.slot[static_cast<size_t>(t)];
  f.pos = b.pos[static_cast<size_t>(t)];
  f.req = b.req[static_cast<size_t>(t)];
  f.req_ahead = t + b.capacity < b.T ? b.req[static_cast<size_t>(t + b.capacity)] : -1;
  f.req_back = t - reach >= 0 ? b.req[static_cast<size_t>(t - reach)] : -1;
  f.req_long = t + reach < b.T ? b.req[static_cast<size_t>(t + reach)] : -1;
  return f;
}

template <int R, class Index>
void check_ratio(int capacity, int batches) {
  using Rules = kvc::detail::WindowRules<R>;
  std::mt19937 rng(1234u + static_cast<unsigned>(R * 100 + capacity));
  int64_t tails = 0, slow = 0, collisions = 0, heads = 0, deferring = 0;
  for (int n = 0; n < batches; ++n) {
    const Batch b = make_batch(rng, R, capacity);
    const int64_t real_end = b.qsl.back();
    const int num_reqs = static_cast<int>(b.qsl.size()) - 1;
    for (int r = 0; r < num_reqs; ++r) {
      const int64_t first = b.qsl[static_cast<size_t>(r)], end = b.qsl[static_cast<size_t>(r) + 1];
      if (first == end) continue;
      // The head group by definition: the group straddling the chunk start, if it closes in
      // the chunk, reads ring positions q0 .. q0 + into - 1 of the request's block.
      const int64_t start = b.chunk_start[static_cast<size_t>(r)];
      const int64_t into = start % R;
      const int64_t head_token = first + (start - into + R - 1 - start);
      const bool head_active = into != 0 && head_token < end && b.slot[static_cast<size_t>(head_token)] >= 0;
      const auto collides = [&](int64_t t) {
        if (!head_active) return false;
        const int64_t s = b.slot[static_cast<size_t>(t)];
        if (s < 0 || s / capacity != b.block[static_cast<size_t>(r)]) return false;
        for (int64_t q = start - into; q < start; ++q)
          if (q % capacity == s % capacity) return true;
        return false;
      };
      bool any_collision = false;
      for (int64_t t = first; t < end; ++t) {
        const auto f = facts_of<R, Index>(b, t);
        int32_t member_req[R - 1];
        for (int k = 1; k < R; ++k) member_req[k - 1] = t - k >= 0 ? b.req[static_cast<size_t>(t - k)] : -1;
        const int count = Rules::members_before_chunk(f.req, member_req);
        CHECK(count == static_cast<int>(std::clamp<int64_t>(first - (t - (R - 1)), 0, R)));
        const bool tail = Rules::tail(f, capacity);
        const bool tail_def = f.slot >= 0 && t >= std::max(end - capacity, first);
        CHECK(tail == tail_def);
        if (!tail) continue;
        ++tails;
        const bool hits = collides(t);
        any_collision = any_collision || hits;
        collisions += hits;
        slow += Rules::may_collide(f, tail);
        // A store that skips the slow path must never overwrite a row the head group reads.
        if (hits) CHECK(Rules::may_collide(f, tail));
      }
      if (head_active) {
        const auto f = facts_of<R, Index>(b, head_token);
        int32_t member_req[R - 1];
        for (int k = 1; k < R; ++k)
          member_req[k - 1] = head_token - k >= 0 ? b.req[static_cast<size_t>(head_token - k)] : -1;
        const int count = Rules::members_before_chunk(f.req, member_req);
        CHECK(Rules::closes(f));
        CHECK(count == into);
        ++heads;
        const bool defers = Rules::defers_stores(f, count, capacity);
        deferring += defers;
        // Colliding stores are the head group's to make, after its reads.
        if (any_collision) CHECK(defers);
      }
      // No other closing token of the chunk has members in the ring.
      for (int64_t t = first; t < end; ++t) {
        const auto f = facts_of<R, Index>(b, t);
        if (!Rules::closes(f) || (head_active && t == head_token)) continue;
        int32_t member_req[R - 1];
        for (int k = 1; k < R; ++k) member_req[k - 1] = t - k >= 0 ? b.req[static_cast<size_t>(t - k)] : -1;
        CHECK(Rules::members_before_chunk(f.req, member_req) == 0);
        CHECK_FALSE(Rules::defers_stores(f, 0, capacity));
      }
    }
    // Trailing padding neither stores into the ring nor defers.
    for (int64_t t = real_end; t < b.T; ++t) {
      const auto f = facts_of<R, Index>(b, t);
      CHECK_FALSE(Rules::tail(f, capacity));
      CHECK_FALSE(Rules::defers_stores(f, R - 1, capacity));
    }
  }
  // The batches reach every case at least once (else the test proves nothing).
  CHECK(tails > 0);
  CHECK(slow > 0);
  CHECK(collisions > 0);
  CHECK(heads > 0);
  CHECK(deferring > 0);
}

}  // namespace

TEST_CASE_TEMPLATE("small-ratio window rules match the chunk-bound definitions (ratio 2, rings of 8 and 16)", Index,
                   int64_t, int32_t) {
  check_ratio<2, Index>(8, 3000);
  check_ratio<2, Index>(16, 2000);
}

TEST_CASE_TEMPLATE("small-ratio window rules match the chunk-bound definitions (ratios 3, 4, 8)", Index, int64_t,
                   int32_t) {
  check_ratio<3, Index>(8, 2000);
  check_ratio<4, Index>(8, 2000);
  check_ratio<4, Index>(16, 2000);
  check_ratio<8, Index>(16, 2000);
}

// The rules in 32-bit indices at the top of the range (compact-index instances allow up to
// 2^30 tokens; the rules themselves hold up to INT32_MAX): they compare differences, so no
// token + capacity is formed (it would overflow here), and the answers equal the same facts'
// in 64 bits.
TEST_CASE("small-ratio window rules: 32-bit token indices at INT32_MAX give the 64-bit answers") {
  using Rules2 = kvc::detail::WindowRules<2>;
  using Rules3 = kvc::detail::WindowRules<3>;
  constexpr int32_t kTop = 2147483647;
  const int capacity = 8;
  for (int32_t real_end : {kTop, kTop - 5, kTop - 8, kTop - 9, kTop - 100})
    for (int32_t back = 1; back <= 12; ++back) {
      const int32_t t = real_end - back;
      for (int32_t ahead : {-1, 0, 1})
        for (int32_t along : {-1, 0})
          for (int64_t pos : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{(int64_t{1} << 32) + 1},
                              int64_t{(int64_t{1} << 32) + 2}, int64_t{-1}, int64_t{-2}}) {
            kvc::detail::BasicWindowFacts<int32_t> f32;
            f32.t = t;
            f32.real_end = real_end;
            f32.slot = 3;
            f32.pos = pos;
            f32.req = 0;
            f32.req_ahead = ahead;
            f32.req_back = 0;
            f32.req_long = along;
            kvc::detail::WindowFacts f64;
            f64.t = t;
            f64.real_end = real_end;
            f64.slot = f32.slot;
            f64.pos = f32.pos;
            f64.req = f32.req;
            f64.req_ahead = f32.req_ahead;
            f64.req_back = f32.req_back;
            f64.req_long = f32.req_long;
            INFO("real_end ", real_end, " t ", t, " ahead ", ahead, " pos ", pos);
            // The definitions, in 64 bits.
            const bool tail = int64_t{t} + capacity >= real_end || ahead != 0;
            CHECK(Rules2::tail(f32, capacity) == tail);
            CHECK(Rules2::tail(f64, capacity) == tail);
            CHECK(Rules2::closes(f32) == ((pos + 1) % 2 == 0));
            CHECK(Rules3::closes(f32) == ((pos + 1) % 3 == 0));
            const int reach2 = capacity - 2 + 1;
            const bool defers = (pos + 1) % 2 == 0 && along == 0 && int64_t{t} + reach2 < real_end;
            CHECK(Rules2::defers_stores(f32, 1, capacity) == defers);
            CHECK(Rules2::defers_stores(f64, 1, capacity) == defers);
          }
    }
}

// Which calls fit the block rows' 32-bit indices (kernel/compress_params.hpp): the bound is
// exact at the limit, every operand out of range fails (negatives, and values whose low
// 32 bits alone would fit), and the latent stride counts only when a latent is written.
TEST_CASE("compact_index_fits: token count and row offsets below 2^31, exact at the limit") {
  constexpr int64_t kMax = kvc::kCompactMaxOffset;
  static_assert(kMax == 2147483647, "compact offsets are int32_t");
  kvc::CompressParams p;
  p.ratio = 2;
  p.num_tokens = 512;
  p.kv_score_stride_elems = 1024;
  p.latent_stride_elems = 512;
  uint16_t latent_storage = 0;
  p.latent = reinterpret_cast<kvc::bf16_t*>(&latent_storage);
  const auto fits = [&] { return kvc::compact_index_fits<2, 512>(p); };
  CHECK(fits());
  // Tokens: 1 .. 2^30.
  p.kv_score_stride_elems = 1;
  p.latent_stride_elems = 1;
  p.num_tokens = kvc::kCompactMaxTokens;
  CHECK(fits());
  p.num_tokens = kvc::kCompactMaxTokens + 1;
  CHECK_FALSE(fits());
  for (int64_t bad : {int64_t{0}, int64_t{-1}, std::numeric_limits<int64_t>::min(), (int64_t{1} << 32) + 5}) {
    p.num_tokens = bad;
    CHECK_FALSE(fits());
  }
  // The last kv_score row ends (one past its last element) exactly at the limit:
  // (T - 1) * stride + 2 * 512 == kMax; one more element and it does not fit.
  p.num_tokens = 2;
  p.kv_score_stride_elems = kMax - 1024;
  CHECK(fits());
  p.kv_score_stride_elems += 1;
  CHECK_FALSE(fits());
  p.num_tokens = 3;
  p.kv_score_stride_elems = (kMax - 1024) / 2;  // ends at kMax - 1
  CHECK(fits());
  p.kv_score_stride_elems += 1;  // ends at kMax + 1
  CHECK_FALSE(fits());
  p.num_tokens = 1;  // one row: any stride up to kMax
  p.kv_score_stride_elems = kMax;
  CHECK(fits());
  for (int64_t bad : {kMax + 1, int64_t{-1}, int64_t{-1024}, (int64_t{1} << 32) + 1024, std::numeric_limits<int64_t>::max()}) {
    p.kv_score_stride_elems = bad;
    INFO("kv stride ", bad);
    CHECK_FALSE(fits());
  }
  // The latent's stride, when a latent is written (the kv_score row's width bounds it too).
  p.num_tokens = 3;
  p.kv_score_stride_elems = 1024;
  p.latent_stride_elems = (kMax - 1024) / 2 + 1;
  CHECK_FALSE(fits());
  p.latent = nullptr;  // the fused op without a latent
  CHECK(fits());
  p.latent_stride_elems = -1;
  CHECK(fits());
  p.latent = reinterpret_cast<kvc::bf16_t*>(&latent_storage);
  CHECK_FALSE(fits());
  p.latent_stride_elems = (int64_t{1} << 32) + 512;  // low 32 bits alone would fit
  CHECK_FALSE(fits());
  // Ratio 1 rows are head_dim wide.
  p.num_tokens = 2;
  p.latent_stride_elems = 512;
  p.kv_score_stride_elems = kMax - 512;
  CHECK(kvc::compact_index_fits<1, 512>(p));
  CHECK_FALSE(kvc::compact_index_fits<2, 512>(p));
}

TEST_CASE("use_block_rows: decode steps that fit 32-bit indices, else warp rows") {
  kvc::CompressParams p;
  p.ratio = 2;
  p.num_tokens = 512;  // decode 256x2
  p.qsl_size = 257;
  p.kv_score_stride_elems = 1024;
  p.latent_stride_elems = 512;
  uint16_t latent_storage = 0;
  p.latent = reinterpret_cast<kvc::bf16_t*>(&latent_storage);
  CHECK(kvc::use_block_rows<2, 512>(p));
  p.kv_score_stride_elems = int64_t{1} << 23;  // 511 rows * 2^23 elements: past 2^31
  CHECK_FALSE(kvc::use_block_rows<2, 512>(p));
  p.kv_score_stride_elems = 1024;
  p.latent_stride_elems = int64_t{1} << 23;
  CHECK_FALSE(kvc::use_block_rows<2, 512>(p));
  p.latent = nullptr;
  CHECK(kvc::use_block_rows<2, 512>(p));
  // A large call takes warp rows whatever its strides.
  p.num_tokens = 2 * kvc::kWarpRowMinWindows;
  p.qsl_size = 2;
  CHECK_FALSE(kvc::use_block_rows<2, 512>(p));
}

// The lane roles of a window (wide windows: several groups a warp): each token the window's
// groups need, its own W tokens and the R - 1 before it, has one lane within the warp, and the
// lane a member's request is read from (window_token_lane) holds that member.
TEST_CASE("window lane roles: every token of a window and the R - 1 before it has one lane") {
  using kvc::detail::widest_window;
  using kvc::detail::window_lane_token;
  using kvc::detail::window_token_lane;
  CHECK(widest_window(2, 32) == 16);
  CHECK(widest_window(3, 32) == 24);
  CHECK(widest_window(4, 32) == 16);
  CHECK(widest_window(15, 32) == 15);
  for (int ratio = 2; ratio <= 15; ++ratio)
    for (int window = ratio; window <= widest_window(ratio, 32); window *= 2) {
      INFO("R=", ratio, " window ", window);
      const int lanes = window + ratio - 1;
      REQUIRE(lanes <= 32);
      std::vector<int> seen(static_cast<size_t>(lanes), 0);
      for (int lane = 0; lane < lanes; ++lane) {
        const int offset = window_lane_token(lane, window);
        CHECK(offset >= -(ratio - 1));
        CHECK(offset < window);
        CHECK(window_token_lane(offset, window) == lane);
        ++seen[static_cast<size_t>(offset + ratio - 1)];
      }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
      // Member k of the group token i closes (i - k, k = 1 .. R-1) comes from a lane in range.
      for (int i = 0; i < window; ++i)
        for (int k = 1; k < ratio; ++k) {
          const int src = window_token_lane(i - k, window);
          CHECK(src >= 0);
          CHECK(src < lanes);
          CHECK(window_lane_token(src, window) == i - k);
        }
    }
}

// Which row mapping a small-ratio Op A / fused call gets (kernel/compress_params.hpp): a warp
// per row from kWarpRowMinWindows windows, or, up to ratio kWarpRowPrefillMaxRatio, from
// kWarpRowPrefillMinWindows windows when the requests average kWarpRowMinTokensPerRequest
// tokens or more; a block per row below.
TEST_CASE("use_warp_rows: decode steps keep block rows, large and prefill-heavy calls get warp rows") {
  using kvc::use_warp_rows;
  // The shapes of the benchmark at ratio 2: decode 64x2, 256x2, 1024x4, 128x6 (block rows),
  // prefill 1x8192 (warp rows), mixed 2x2048 + 192x2 (194 requests, 4480 tokens: warp rows).
  CHECK_FALSE(use_warp_rows(2, 64, 128, 64));
  CHECK_FALSE(use_warp_rows(2, 256, 512, 256));
  CHECK_FALSE(use_warp_rows(2, 2048, 4096, 1024));
  CHECK_FALSE(use_warp_rows(2, 384, 768, 128));
  CHECK(use_warp_rows(2, 4096, 8192, 1));
  CHECK(use_warp_rows(2, 2240, 4480, 194));
  // Ratio 4: prefill 1x8192 is 2048 windows, block rows (the warp rows measured slower there).
  CHECK_FALSE(use_warp_rows(4, 2048, 8192, 1));
  CHECK(use_warp_rows(4, 4096, 16384, 1));
  // The edges: windows, tokens per request, and an unknown request count (ratio 1: no qsl).
  CHECK(use_warp_rows(2, kvc::kWarpRowMinWindows, 8192, 4096));
  CHECK_FALSE(use_warp_rows(2, kvc::kWarpRowMinWindows - 1, 8190, 4095));
  CHECK(use_warp_rows(2, kvc::kWarpRowPrefillMinWindows, 4096, 4096 / kvc::kWarpRowMinTokensPerRequest));
  CHECK_FALSE(use_warp_rows(2, kvc::kWarpRowPrefillMinWindows, 4096, 4096 / kvc::kWarpRowMinTokensPerRequest + 1));
  CHECK_FALSE(use_warp_rows(2, kvc::kWarpRowPrefillMinWindows - 1, 4094, 1));
  CHECK(use_warp_rows(kvc::kWarpRowPrefillMaxRatio, kvc::kWarpRowPrefillMinWindows, 4096, 1));
  CHECK_FALSE(use_warp_rows(kvc::kWarpRowPrefillMaxRatio + 1, kvc::kWarpRowPrefillMinWindows, 6144, 1));
  CHECK_FALSE(use_warp_rows(1, 3000, 3000, 0));
  CHECK(use_warp_rows(1, 4096, 4096, 0));
  static_assert(kvc::kWarpRowPrefillMinWindows <= kvc::kWarpRowMinWindows, "the prefill rule only lowers the switch");
}
