// SPDX-License-Identifier: Apache-2.0
// kvcompress — Op A for small ratios (R < 16): the threads of one row (RowThreads: a warp,
// or a whole 128-thread block for decode-sized calls) per window of W consecutive tokens:
// W = R, except in warp rows at R >= 2, where the launch may give a warp several groups
// (CompressConfig::kWideWindows, CompressConfig::windows: fewer, longer warps instead of a second
// wave of blocks; below, "the window" is those W tokens and lane roles count up to W).
//
// The row's threads share the rows: thread k (0 .. CompressConfig::kRowThreads - 1) holds
// channels of every row of the window (4 of 512 per thread with a 128-thread row, 16 with a
// warp), so a block row splits the pooling, the norm and the epilogue of a group four ways;
// every warp makes the index decisions below for itself (the same loads, the same results,
// no barrier), so the warps never wait on each other except in the RMSNorm sum. A decode step is a chain of dependent memory round
// trips and one group's instruction stream, so this mapping keeps it to two round trips
// and a quarter of the instructions:
//  1. one round trip: the lanes of each warp load the window's indices (lane i < W: token
//     w0 + i's slot, position and request, and the requests of the tokens C ahead, C - R + 1 behind and
//     C - R + 1 ahead of it; lanes W .. W+R-2: the requests of the R - 1 tokens before the
//     window), the end of the real tokens qsl[num_reqs], the RMSNorm weight, and at ratio 1
//     and in ratio-2 block rows (CompressConfig::kSpeculativeRows) the window's own input
//     rows (other instances load a group's rows after the decisions, in pool_members);
//  2. decisions from those values alone (which tokens close, which members lie in the
//     chunk, which rows go to the ring and whether any could hit a row the head group
//     reads), then the second round trip: the rows still missing (a head group's ring rows,
//     the input row just before the window) together with the epilogue's loads (the fused
//     op's cache slot and angles);
//  3. pool, normalise, store the latent / record; the tail rows go to the ring from
//     registers.
// Requests own contiguous token ranges, so "member m is in t's chunk" is req[m] == req[t],
// and "t is among its chunk's last C tokens" is "token t + C belongs to another request or
// is past qsl[num_reqs]": no chunk bounds are loaded. A tail store can only collide with a
// head group's reads when the chunk holds the C - R + 1 tokens before it; only those tokens
// (and the head group of such a long chunk, for its deferred stores) take the slow path
// through qsl and the head group's slot — prefill edges, never a decode step.
#pragma once

#include "../config.hpp"

#include <cstdint>

#include "compress_parts.cuh"
#include "window_rules.hpp"

KVC_NAMESPACE_BEGIN
namespace detail {

/// What one lane loads in the first round trip (roles in the file comment); -1: no such token.
struct WindowIndices {
  int64_t slot = -1, pos = 0;
  int32_t req = -1, req_ahead = -1, req_back = -1, req_long = -1;
};

/// `windows`: the rows' windows in launch order (kWindowsPerBlock a block), read only where
/// ReadsWindows (wide windows, CompressConfig::kWideWindows: multiples of Ratio, at most
/// kMaxWindow); else every window is Ratio tokens, a compile-time constant. The code with a
/// run-time window holds more registers (ratio 4: 179 instead of 168, two blocks an SM
/// instead of three; prefill 1x32768 +5 % on an H100, bench/NOTES.md 44), so only launches
/// with other windows run it.
template <int Ratio, int HeadDim, typename In, int RowThreads, bool ReadsWindows, class Epilogue>
KVC_DEVICE void compress_small_ratio(const CompressParams& p, const Epilogue& epilogue,
                                     const WindowSizes& windows) {
  using Cfg = CompressConfig<Ratio, HeadDim, In, RowThreads>;
  using Warp = CompressWarp<Ratio, HeadDim, In, RowThreads>;
  using Raw = typename Warp::Raw;
  using Index = typename Cfg::Index;  // token indices: int32_t in block rows (compact), else int64_t
  constexpr int R = Ratio;
  constexpr int N = Cfg::kChannels;
  constexpr int kRows = Cfg::kSpeculativeRows ? R : 1;
  constexpr unsigned kAll = 0xffffffffu;
  static_assert(!Cfg::kSplitGroup && Cfg::kMaxWindow + R - 1 <= 32,
                "small-ratio path: a window's tokens and the R - 1 before it fit in a warp");
  static_assert(Cfg::kRowThreads == 32 || Cfg::kThreads == Cfg::kRowThreads,
                "a row is a warp, or the whole block (its reductions use __syncthreads)");

  // This row's window: W tokens from w0 (W = R, or for wide windows the launch's choice:
  // one or more groups).
  const int64_t window = static_cast<int64_t>(blockIdx.x) * Cfg::kWindowsPerBlock + threadIdx.x / Cfg::kRowThreads;
  const int W = ReadsWindows ? windows.size(window) : R;
  const int lane = threadIdx.x % 32;                // index roles (one token per lane)
  const int thread = threadIdx.x % Cfg::kRowThreads;  // channel slice of every row
  Index w0;
  if constexpr (Cfg::kCompactIndex) {
    // The block's one window: compress_kernel returned for blocks at or past T already, and
    // its gate (compact_index_fits) keeps T, so w0 + 32, below 2^31.
    static_assert(Cfg::kWindowsPerBlock == 1 && !ReadsWindows, "compact instances: block rows");
    w0 = static_cast<Index>(blockIdx.x) * R;
  } else {
    w0 = ReadsWindows ? windows.first_token(window) : window * R;
    if (w0 >= p.num_tokens) return;  // uniform over the row's threads (a warp or the block)
  }
  const Index T = static_cast<Index>(p.num_tokens);
  [[maybe_unused]] const int C = p.ring_layout.capacity;
  [[maybe_unused]] const int reach = C - R + 1;  // a tail store can hit a head row only this far in

  // 1. The first round trip: every load below is independent of the others.
  // Bounds are tested as differences (C < T - t), never as t + C, which could overflow Index.
  WindowIndices mine;
  const Index t_mine = w0 + lane;  // the token of lanes 0 .. W-1
  if (lane < W) {
    if (t_mine < T) {
      mine.slot = p.slot.load(t_mine);
      mine.pos = p.positions.load(t_mine);
      if constexpr (R > 1) {
        mine.req = p.req[t_mine];
        if (C < T - t_mine) mine.req_ahead = p.req[t_mine + C];
        if (t_mine >= reach) mine.req_back = p.req[t_mine - reach];
        if (reach < T - t_mine) mine.req_long = p.req[t_mine + reach];
      }
    }
  } else if (R > 1 && lane < W + R - 1) {
    const Index m = w0 + window_lane_token(lane, W);  // a token before the window
    if (m >= 0) mine.req = p.req[m];
  }
  Index real_end = T;  // tokens at or past it (trailing padding) belong to no chunk
  if constexpr (R > 1) real_end = real_tokens_end<Index>(p);
  const Array<uint16_t, N> weight =
      Warp::template load_weight<true>(reinterpret_cast<const uint16_t*>(p.weight), thread);
  [[maybe_unused]] Raw kv_raw[kRows], score_raw[kRows];
  if constexpr (Cfg::kSpeculativeRows) {
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < R; ++i) {
      const Index row = Warp::input_offset(p, w0 + i < T ? w0 + i : T - 1);
      kv_raw[i] = Warp::load_input_half(p, row, thread);
      if constexpr (R > 1) score_raw[i] = Warp::load_input_half(p, row + HeadDim, thread);
    }
  }

  // 2. Decisions, each lane for its own token (window_rules.hpp, tested on the host). A
  // token past the ring's bound, at a negative position or of an unknown request is
  // padding from here on (contract §4.3); the row's first thread counts it.
  mine.slot = usable_slot_warp<R>(p, mine.slot, mine.pos, mine.req, thread == 0);
  const bool real = t_mine < real_end;
  bool closes = lane < W && t_mine < T && mine.slot >= 0 && (mine.pos + 1) % R == 0;
  int count = 0;  // members before the chunk (read from the ring): the head group has count > 0
  bool store_row = false;  // this token's row goes to the ring now (not deferred)
  bool deferred = false;   // a head group of a long chunk: it performs the colliding stores
  if constexpr (R > 1) {
    using Rules = WindowRules<R>;
    BasicWindowFacts<Index> f;
    f.t = t_mine;
    f.real_end = real_end;
    f.slot = lane < W ? mine.slot : -1;
    f.pos = mine.pos;
    f.req = mine.req;
    f.req_ahead = mine.req_ahead;
    f.req_back = mine.req_back;
    f.req_long = mine.req_long;
    closes = lane < W && Rules::closes(f);
    int32_t member_req[R - 1];
    KVC_PRAGMA_UNROLL
    for (int k = 1; k < R; ++k) {
      const int src = window_token_lane(lane - k, W);  // lane holding req[t - k]
      const int32_t r = __shfl_sync(kAll, mine.req, src);
      member_req[k - 1] = t_mine - k >= 0 ? r : -1;
    }
    count = Rules::members_before_chunk(mine.req, member_req);
    if (__any_sync(kAll, closes && !real)) {  // never in a batch without trailing slots
      if (closes && !real) {
        // Trailing token with a slot: its "chunk" starts at qsl[req] (as the reference reads it).
        int64_t first, end;
        chunk_bounds(p, mine.req, first, end);
        const int64_t out = first - (t_mine - (R - 1));
        count = static_cast<int>(out < 0 ? 0 : (out > R ? R : out));
      }
    }
    const bool tail = lane < W && t_mine < T && Rules::tail(f, C);
    store_row = tail;
    if (Rules::may_collide(f, tail)) {
      // Slow path: the chunk is long enough for this store to hit a row its head group reads.
      int64_t first, end;
      chunk_bounds(p, mine.req, first, end);
      const HeadReads h = head_reads<R>(p, first, end, mine.pos - (t_mine - first));
      store_row = !collides(h, mine.slot, p.ring_layout);
    }
    deferred = closes && Rules::defers_stores(f, count, C);
  }
  const unsigned close_mask = __ballot_sync(kAll, closes);
  [[maybe_unused]] unsigned store_mask = __ballot_sync(kAll, store_row);
  [[maybe_unused]] const unsigned deferred_mask = __ballot_sync(kAll, deferred);
  // Ring offsets, each lane for its own token, so a store or read below costs a shuffle
  // instead of the block/row arithmetic in every thread: the row of the token's slot, and
  // (R == 2) the row of position pos - 1, which a closing token reads when its first member
  // is before the chunk.
  [[maybe_unused]] int64_t ring_offset = 0, prev_offset = 0;
  if constexpr (R > 1) {
    if (mine.slot >= 0) {
      const RingLayout& ring = p.ring_layout;
      if constexpr (Cfg::kSpeculativeRows)
        ring.slot_and_position_offsets(mine.slot, mine.pos - 1, ring_offset, prev_offset);
      else
        ring_offset = ring.slot_offset(mine.slot);
    }
  }

  if constexpr (Cfg::kSpeculativeRows && R > 1) {
    // Tail rows from registers; none of them is a row a head group still has to read.
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < R; ++i) {
      if (!(store_mask >> i & 1u)) continue;
      In* dst = Warp::ring_row(p, __shfl_sync(kAll, ring_offset, i));
      Warp::store_half(dst, thread, kv_raw[i]);
      Warp::store_half(dst + HeadDim, thread, score_raw[i]);
    }
  }

  // 3. The groups closed in the window (one, except where a chunk boundary falls inside). A
  // run-time loop, not unrolled: one copy of the pooling code keeps the kernel small.
#pragma unroll 1
  for (unsigned pending_mask = close_mask; pending_mask != 0u; pending_mask &= pending_mask - 1u) {
    const int i = __ffs(pending_mask) - 1;
    const Index t = w0 + i;
    TokenPlan tp{__shfl_sync(kAll, mine.slot, i), __shfl_sync(kAll, mine.pos, i), 0, 0, 0, 0, 0u};
    const int out = __shfl_sync(kAll, count, i);
    tp.chunk_first = static_cast<int32_t>(t - (R - 1) + out);  // first member that is an input row
    const auto pending = epilogue.template begin<Ratio, typename Warp::Row>(p, t, tp.pos, thread);
    Array<float, N> pooled;
    if constexpr (R == 1) {
      pooled = Warp::widen(kv_raw[0]);
    } else if constexpr (Cfg::kSpeculativeRows) {
      // R == 2: member 1 is token t (registers); member 0 is token t - 1 — the window's first
      // row when t is its second token and both are in the chunk, else the input row before
      // the window or the ring row of position pos - 1.
      Raw kv_first, score_first;
      const int64_t first_offset = __shfl_sync(kAll, prev_offset, i);
      if (out > 0) {
        const In* row = Warp::ring_row(p, first_offset);
        kv_first = Warp::template load_half<false>(row, thread);
        score_first = Warp::template load_half<false>(row + HeadDim, thread);
      } else if (i == 0) {
        const Index row = Warp::input_offset(p, t - 1);
        kv_first = Warp::load_input_half(p, row, thread);
        score_first = Warp::load_input_half(p, row + HeadDim, thread);
      } else {
        kv_first = kv_raw[0];
        score_first = score_raw[0];
      }
      Array<float, N> kv[2], score[2];
      KVC_PRAGMA_UNROLL
      for (int c = 0; c < N; ++c) {  // element-wise selects keep the window's rows in registers
        kv[0][c] = to_float(kv_first[c]);
        score[0][c] = to_float(score_first[c]);
        kv[1][c] = to_float(i == 0 ? kv_raw[0][c] : kv_raw[1][c]);
        score[1][c] = to_float(i == 0 ? score_raw[0][c] : score_raw[1][c]);
      }
      pooled = GatedPool<R>::finish(GatedPool<R>::template partial<2>(kv, score));
    } else {
      const bool store_own = (store_mask >> i & 1u) != 0;
      store_mask &= ~(1u << i);  // stored by pool_members on the way
      pooled = GatedPool<R>::finish(Warp::pool_members(p, t, tp, 0, R, store_own, thread));
    }
    epilogue.template operator()<Ratio, typename Warp::Row>(p, t, tp.pos, pending,
                                                           Warp::normalize(p, weight, pooled, thread));
    if constexpr (R > 1) {
      if (deferred_mask >> i & 1u) {
        // Each thread overwrites only the channels it read itself (the same slice), after
        // its reads in program order.
        int64_t first, end;
        chunk_bounds(p, p.req[t], first, end);
        tp.chunk_start = tp.pos - (t - first);
        tp.chunk_first = static_cast<int32_t>(first);
        tp.chunk_end = static_cast<int32_t>(end);
        tp.tail_begin = static_cast<int32_t>(end - C > first ? end - C : first);
        Warp::deferred_stores(p, tp, lane, thread, 0, 1);
      }
    }
  }

  if constexpr (!Cfg::kSpeculativeRows && R > 1) {
    // Tail rows of tokens that close no group (a closing token stored its own while pooling).
#pragma unroll 1
    for (; store_mask != 0u; store_mask &= store_mask - 1u) {
      const int i = __ffs(store_mask) - 1;
      Warp::copy_row_to_ring_at(p, w0 + i, __shfl_sync(kAll, ring_offset, i), thread);
    }
  }
}

}  // namespace detail
KVC_NAMESPACE_END
