// SPDX-License-Identifier: Apache-2.0
// kvcompress — Op A for large ratios (R >= 16): a block, or a cluster of blocks, pools each group.
//
// Work mapping. A block owns a window of consecutive tokens (up to 2 per warp, so a decode
// batch spreads its ring copies over many blocks; fewer where the launch has few tokens,
// detail::split_group_window, since a window pools its closing groups one after the
// other); on sm_90 kvc::compress launches a cluster of blocks per window instead (the
// kernel runs up to CompressConfig::cluster_blocks, 8 at ratio 128; the launch uses up to 4
// where the clusters fit one wave, CompressConfig::launch_cluster_blocks), one block an
// SM. Phase 1:
// one thread per token of the window reads the token's indices and plans its work (does it
// close a group, does it store its row into the ring, is it the group that reads the ring)
// into shared memory, with the RMSNorm weight; each block of a cluster plans the same window.
// Phase 2: the rows of non-closing tokens that go to the ring are copied by all the threads
// (independent rows, several 16-byte moves in flight per thread); then each group closing in
// the window is pooled by every warp, each a slice of the members, merged through shared
// memory in a fixed tree and, in a cluster, the blocks' states by rank 0 through distributed
// shared memory in rank order; so a group of 128 rows is neither serialized on one warp nor
// on one SM. The pooled row stays in registers through RMSNorm to the epilogue.
#pragma once

#include "../config.hpp"

#include <cstdint>

#include "../arch/cluster.cuh"
#include "compress_parts.cuh"

KVC_NAMESPACE_BEGIN
namespace detail {

/// `count_errors`: whether the slot and position skips of token t are counted in p.errors
/// (one block of a cluster plans for counting; its peers plan the same tokens again).
template <int Ratio>
KVC_DEVICE TokenPlan plan_token(const CompressParams& p, int64_t t, bool count_errors) {
  TokenPlan tp{-1, 0, 0, 0, 0, 0, 0u};
  // Independent loads first: slot, position and request travel together, with the requests
  // of the tokens R - 1 behind and C ahead and the end of the real tokens.
  const int64_t slot = p.slot.load(t);
  const int64_t pos = p.positions.load(t);
  int32_t r = 0;
  [[maybe_unused]] int32_t r_behind = -1, r_ahead = -1;
  [[maybe_unused]] int64_t real_end = 0;
  [[maybe_unused]] const int capacity = p.ring_layout.capacity;
  if constexpr (Ratio > 1) {
    r = p.req[t];
    if (t >= Ratio - 1) r_behind = p.req[t - (Ratio - 1)];
    if (t + capacity < p.num_tokens) r_ahead = p.req[t + capacity];
    real_end = real_tokens_end(p);
  }
  if (slot < 0) return tp;
  if (usable_slot<Ratio>(p, slot, pos, count_errors) < 0) return tp;
  if constexpr (Ratio > 1) {
    if (!known_request(p, r)) return tp;
  }
  tp.slot = slot;
  tp.pos = pos;
  if ((pos + 1) % Ratio == 0) tp.flags |= kCloses;
  if constexpr (Ratio > 1) {
    // Most prefill tokens: token t + C is a real token of the same request, so t is not among
    // its chunk's last C tokens (no ring store), and if t closes a group, token t - R + 1 is
    // of the same request, so the whole group is inside the chunk (not the head group).
    // Requests own contiguous token ranges, so neither needs the chunk bounds (qsl): one
    // dependent round trip fewer.
    const bool not_tail = r_ahead == r && t + capacity < real_end;
    if (not_tail && (!(tp.flags & kCloses) || r_behind == r)) {
      tp.chunk_first = static_cast<int32_t>(t - (Ratio - 1));  // every member is an input row
      return tp;
    }
    int64_t first, end;
    chunk_bounds(p, r, first, end);
    tp.chunk_first = static_cast<int32_t>(first);
    tp.chunk_end = static_cast<int32_t>(end);
    tp.tail_begin = static_cast<int32_t>(end - capacity > first ? end - capacity : first);
    // Tokens past qsl[num_reqs] (trailing padding with a slot) belong to no chunk: never stored.
    const bool tail = t >= tp.tail_begin && t < end;
    // Only a tail token (its store may hit a row the head group reads) and a group that
    // starts before the chunk (the head group itself) need the head group: two more
    // dependent loads, skipped for the bulk of a prefill.
    const bool maybe_head = (tp.flags & kCloses) && t - (Ratio - 1) < first;
    if (tail || maybe_head) {
      tp.chunk_start = pos - (t - first);  // positions are consecutive within a chunk
      const HeadReads h = head_reads<Ratio>(p, first, end, tp.chunk_start);
      if (h.active && h.token == t) tp.flags |= kIsHead;
      if (tail && !collides(h, tp.slot, p.ring_layout)) tp.flags |= kStoresOwnRow;
    }
  }
  return tp;
}

/// Copies the listed input rows whole into their ring rows (element offsets `ring_offsets`,
/// computed once per row) with every thread of the cluster (`threads` of them, this one
/// `thread`), four 16-byte moves in flight per thread: the rows are independent, so the
/// blocks stream them instead of a warp waiting on one row at a time.
template <int HeadDim, typename In, int E>
KVC_DEVICE void copy_rows_to_ring(const CompressParams& p, const int32_t* tokens,
                                  const int64_t* ring_offsets, int count, int64_t window,
                                  int thread, int threads) {
  constexpr int kVecsPerRow = 2 * HeadDim / E;
  constexpr int kUnroll = 4;
  const int total = count * kVecsPerRow;
  for (int base = thread; base < total; base += threads * kUnroll) {
    Array<In, E> v[kUnroll];
    KVC_PRAGMA_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * threads;
      if (i < total)
        v[u] = arch::load_readonly<E>(static_cast<const In*>(p.kv_score) +
                                      (window + tokens[i / kVecsPerRow]) * p.kv_score_stride_elems +
                                      (i % kVecsPerRow) * E);
    }
    KVC_PRAGMA_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * threads;
      if (i < total)
        arch::store<E>(static_cast<In*>(p.ring) + ring_offsets[i / kVecsPerRow] +
                           (i % kVecsPerRow) * E,
                       v[u]);
    }
  }
}

/// One block's partial pooling state in its shared memory, for its cluster's rank 0: lane
/// l's fragment elements [v*W, (v+1)*W) of a field at [field][v][l] (W floats, a 16-byte
/// vector where the fragment allows), so a warp's accesses are conflict-free.
template <int N>
struct ClusterState {
  static constexpr int W = N % 4 == 0 ? 4 : N % 2 == 0 ? 2 : 1;
  float f[3][N / W][32][W];

  KVC_DEVICE void put(const PoolState<N>& s, int lane) {
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < N / W; ++v) {
      Array<float, W> m, x, a;
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < W; ++e) m[e] = s.max[v * W + e], x[e] = s.sum[v * W + e], a[e] = s.acc[v * W + e];
      arch::store<W>(f[0][v][lane], m);
      arch::store<W>(f[1][v][lane], x);
      arch::store<W>(f[2][v][lane], a);
    }
  }
  KVC_DEVICE PoolState<N> get(int lane) const {
    PoolState<N> s;
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < N / W; ++v) {
      const Array<float, W> m = arch::load<W>(f[0][v][lane]), x = arch::load<W>(f[1][v][lane]),
                            a = arch::load<W>(f[2][v][lane]);
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < W; ++e) s.max[v * W + e] = m[e], s.sum[v * W + e] = x[e], s.acc[v * W + e] = a[e];
    }
    return s;
  }
};

/// Rank 0's warp 0 merges the states of the cluster's blocks 1 .. size - 1 into its own, in
/// rank order (a fixed order: the same bits every launch), reading each peer's `local`
/// through distributed shared memory.
template <int Ratio, int N>
KVC_DEVICE void merge_cluster_states(PoolState<N>& state, const ClusterState<N>& local, int size,
                                     int lane) {
  for (int r = 1; r < size; ++r) GatedPool<Ratio>::merge(state, arch::peer_shared(&local, r)->get(lane));
}

/// Op A for large ratios. Launched with clusters (kvc::compress on sm_90: `cluster_blocks`
/// blocks each, CompressConfig::cluster_blocks), the blocks of a cluster share one window:
/// each plans it (rank 0 counts the errors), the ring copies are spread over all of them,
/// and every closing group is pooled by all their warps, Ratio / (blocks x warps) members a
/// warp; each block merges its warps through shared memory, then rank 0 merges the blocks'
/// states through distributed shared memory and runs the norm and epilogue. A group's 128
/// rows (512 KiB at fp32) then stream into 8 SMs at once instead of one (bench/NOTES.md 42).
/// Without a cluster (a launch of `CompressConfig::blocks` blocks, or before sm_90) each
/// block owns its window alone. The cluster size must divide Ratio / (kWarps x kBatch).
template <int Ratio, int HeadDim, typename In, class Epilogue>
KVC_DEVICE void compress_split_group(const CompressParams& p, const Epilogue& epilogue, const int window_size) {
  using Cfg = CompressConfig<Ratio, HeadDim, In>;
  using Warp = CompressWarp<Ratio, HeadDim, In>;
  constexpr int N = Cfg::kChannels;
  constexpr int E = Cfg::kVecElems;

  __shared__ TokenPlan plans[Cfg::kTokensPerBlock];
  __shared__ int32_t copy_token[Cfg::kTokensPerBlock];  // rows stored to the ring by the block
  __shared__ int64_t copy_offset[Cfg::kTokensPerBlock];  // their ring rows
  __shared__ int copy_count;
  __shared__ __align__(16) uint16_t weight_smem[HeadDim];  // RMSNorm weight, loaded with the plans
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int cluster = arch::cluster_size();
  const int rank = arch::cluster_rank();
  const int64_t window = static_cast<int64_t>(blockIdx.x / cluster) * window_size;

  static_assert(Cfg::kTokensPerBlock <= 32, "warp 0 plans the window, a token a lane");
  for (int i = threadIdx.x; i < HeadDim / E; i += Cfg::kThreads)
    arch::store<E>(weight_smem + i * E,
                   arch::load_readonly<E>(reinterpret_cast<const uint16_t*>(p.weight) + i * E));
  if (warp == 0) {
    const int64_t t = window + lane;
    const TokenPlan tp = lane < window_size && t < p.num_tokens ? plan_token<Ratio>(p, t, rank == 0)
                                                                : TokenPlan{-1, 0, 0, 0, 0, 0, 0u};
    if (lane < window_size) plans[lane] = tp;
    // A closing token stores its row from registers while pooling; the rest go in a list,
    // in token order: every block of a cluster builds the same list, and the cluster's
    // threads split it by position.
    const bool listed = (tp.flags & (kStoresOwnRow | kCloses)) == kStoresOwnRow;
    const unsigned listed_mask = __ballot_sync(0xffffffffu, listed);
    if (listed) {
      const int i = __popc(listed_mask & ((1u << lane) - 1u));
      copy_token[i] = lane;
      copy_offset[i] = p.ring_layout.slot_offset(tp.slot);
    }
    if (lane == 0) copy_count = __popc(listed_mask);
  }
  __syncthreads();
  if constexpr (Ratio > 1)
    copy_rows_to_ring<HeadDim, In, E>(p, copy_token, copy_offset, copy_count, window,
                                      rank * Cfg::kThreads + threadIdx.x, cluster * Cfg::kThreads);

  {
    // The cluster pools each group; warp w of block `rank` takes members [c*M, (c+1)*M) with
    // c = rank * kWarps + w.
    const int warps = cluster * Cfg::kWarps;
    const int cluster_warp = rank * Cfg::kWarps + warp;
    const int M = Ratio / warps;
    __shared__ float merge_buf[Cfg::kWarps > 1 ? Cfg::kWarps / 2 : 1][3][HeadDim];
    __shared__ ClusterState<N> cluster_state;
    for (int k = 0; k < window_size; ++k) {
      const TokenPlan tp = plans[k];
      const int64_t t = window + k;
      if (tp.flags & kCloses) {
        const bool store_own = (tp.flags & kStoresOwnRow) != 0 && cluster_warp == warps - 1;
        PoolState<N> state = Warp::pool_members(p, t, tp, cluster_warp * M, M, store_own, lane);
        // Fixed merge tree: warp w absorbs warp w + half, halving until warp 0 holds all.
        for (int active = Cfg::kWarps; active > 1; active /= 2) {
          const int half = active / 2;
          if (warp >= half && warp < active) {
            KVC_PRAGMA_UNROLL
            for (int i = 0; i < N; ++i) {
              const int c = Cfg::channel(lane, i);
              merge_buf[warp - half][0][c] = state.max[i];
              merge_buf[warp - half][1][c] = state.sum[i];
              merge_buf[warp - half][2][c] = state.acc[i];
            }
          }
          __syncthreads();
          if (warp < half) {
            PoolState<N> other;
            KVC_PRAGMA_UNROLL
            for (int i = 0; i < N; ++i) {
              const int c = Cfg::channel(lane, i);
              other.max[i] = merge_buf[warp][0][c];
              other.sum[i] = merge_buf[warp][1][c];
              other.acc[i] = merge_buf[warp][2][c];
            }
            GatedPool<Ratio>::merge(state, other);
          }
          __syncthreads();
        }
        if (cluster > 1) {
          // Every block's state in its own shared memory; after the barrier every block's
          // ring reads of the group are done too (the deferred stores may go), and rank 0
          // reads its peers' states. The second barrier keeps a peer's state (and the
          // block) alive until rank 0 has read it.
          if (rank > 0 && warp == 0) cluster_state.put(state, lane);
          arch::cluster_arrive();
          arch::cluster_wait();
          if (rank == 0 && warp == 0) merge_cluster_states<Ratio>(state, cluster_state, cluster, lane);
          arch::cluster_arrive();
        }
        if (rank == 0 && warp == 0) {
          const auto pending = epilogue.template begin<Ratio, typename Warp::Row>(p, t, tp.pos, lane);
          const Array<uint16_t, N> weight = Warp::template load_weight<false>(weight_smem, lane);
          epilogue.template operator()<Ratio, typename Warp::Row>(
              p, t, tp.pos, pending, Warp::normalize(p, weight, GatedPool<Ratio>::finish(state), lane));
        }
        if (tp.flags & kIsHead) Warp::deferred_stores(p, tp, lane, lane, cluster_warp, warps);
        if (cluster > 1) arch::cluster_wait();
      }
    }
  }
}

}  // namespace detail
KVC_NAMESPACE_END
