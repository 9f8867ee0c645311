// SPDX-License-Identifier: Apache-2.0
// kvcompress — the per-token decisions of Op A's small-ratio path (compress_small_ratio.cuh)
// as plain functions of the values its first round trip loads, so the host tier can check
// them against the chunk-bound definitions they stand for (tests/host/test_window_rules.cpp).
//
// Requests own contiguous token ranges (contract §1.1), so "token m is in t's chunk" is
// req[m] == req[t] and none of the rules below needs the chunk bounds (qsl): a decode step
// decides everything from one round trip.
#pragma once

#include <cstdint>

#include "../config.hpp"

KVC_NAMESPACE_BEGIN
namespace detail {

/// Lane roles of a window of `window` tokens starting at token w0 (one token per lane):
/// lane i < window holds token w0 + i, lane window - 1 + j holds w0 - j (j = 1 .. R - 1,
/// the tokens before the window whose requests the window's first groups need).
/// The token offset (token - w0) of `lane`, for lanes < window + R - 1.
KVC_HOST_DEVICE constexpr int window_lane_token(int lane, int window) {
  return lane < window ? lane : window - 1 - lane;
}
/// The lane holding the token at `offset` from w0 (-(R - 1) <= offset < window).
KVC_HOST_DEVICE constexpr int window_token_lane(int offset, int window) {
  return offset >= 0 ? offset : window - 1 - offset;
}
/// The widest window of `ratio` x 2^k tokens whose lanes, with the ratio - 1 before it, fit
/// in `lanes` lanes.
KVC_HOST_DEVICE constexpr int widest_window(int ratio, int lanes) {
  int w = ratio;
  while (2 * w + ratio - 1 <= lanes) w *= 2;
  return w;
}

/// What the first round trip gives the lane of token t (ratio R > 1, ring capacity C,
/// reach = C - R + 1); a request of -1 means "no such token". `Index`: the type of token
/// indices, int64_t, or int32_t in the instances whose launches keep every token index and
/// element offset below 2^31 (CompressConfig::kCompactIndex, compact_index_fits): 32-bit
/// arithmetic is about half the instructions of the decode path's index work (bench/NOTES.md
/// 54). The rules below never form t + C or t + reach, so they hold up to the type's limit.
template <class Index>
struct BasicWindowFacts {
  Index t = 0;            // the token
  Index real_end = 0;     // qsl[num_reqs]: tokens at or past it belong to no chunk
  int64_t slot = -1;      // ring slot (< 0: padding)
  int64_t pos = 0;        // position
  int32_t req = -1;       // req[t]
  int32_t req_ahead = -1; // req[t + C], -1 when t + C >= num_tokens
  int32_t req_back = -1;  // req[t - reach], -1 when t - reach < 0
  int32_t req_long = -1;  // req[t + reach], -1 when t + reach >= num_tokens
};
using WindowFacts = BasicWindowFacts<int64_t>;

template <int Ratio>
struct WindowRules {
  static_assert(Ratio > 1, "ratio 1 has no groups to plan");

  /// Whether t is a token (not padding) that closes a group. At a power-of-two ratio only
  /// the position's low bits decide (for any position, negative ones included), so the
  /// test is on 32 bits.
  template <class Index>
  KVC_HOST_DEVICE static bool closes(const BasicWindowFacts<Index>& f) {
    if constexpr ((Ratio & (Ratio - 1)) == 0)
      return f.slot >= 0 && ((static_cast<uint32_t>(f.pos) + 1u) & uint32_t{Ratio - 1}) == 0u;
    else
      return f.slot >= 0 && (f.pos + 1) % Ratio == 0;
  }

  /// Members of t's group before t's chunk (read from the ring), from member_req[k - 1] =
  /// req[t - k], k = 1 .. R-1 (-1 where t - k < 0). Members leave the chunk from the
  /// farthest back, so the nearest member that is out gives the count. Only for real tokens
  /// (t < real_end); a trailing token's chunk starts at qsl[req] (the kernel loads it).
  KVC_HOST_DEVICE static int members_before_chunk(int32_t req, const int32_t (&member_req)[Ratio - 1]) {
    int count = 0;
    for (int k = Ratio - 1; k >= 1; --k)
      if (member_req[k - 1] != req) count = Ratio - k;
    return count;
  }

  /// Whether t's row goes to the ring: t is a real token among its chunk's last C tokens,
  /// i.e. token t + C belongs to another request or is past real_end (real_end - t <= C:
  /// t < real_end first, so the difference neither overflows nor is negative).
  template <class Index>
  KVC_HOST_DEVICE static bool tail(const BasicWindowFacts<Index>& f, int capacity) {
    return f.slot >= 0 && f.t < f.real_end && (f.real_end - f.t <= capacity || f.req_ahead != f.req);
  }

  /// Whether t's ring store might overwrite a row its chunk's head group reads: only when
  /// the chunk holds the reach tokens before t (else every ring row t writes is one the
  /// head group does not read, or there is no head group). Such a token takes the slow
  /// path (the chunk bounds and the head group's slot) to find out.
  template <class Index>
  KVC_HOST_DEVICE static bool may_collide(const BasicWindowFacts<Index>& f, bool is_tail) {
    return is_tail && f.req_back == f.req;
  }

  /// Whether t closes its chunk's head group (count > 0 members in the ring) and the chunk
  /// is long enough for a tail store to collide with its reads: it then performs the
  /// colliding stores itself, after its reads.
  template <class Index>
  KVC_HOST_DEVICE static bool defers_stores(const BasicWindowFacts<Index>& f, int count, int capacity) {
    const int reach = capacity - Ratio + 1;
    return closes(f) && f.t < f.real_end && count > 0 && f.req_long == f.req && f.real_end - f.t > reach;
  }
};

}  // namespace detail
KVC_NAMESPACE_END
