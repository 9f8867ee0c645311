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
// Phase 2: each group closing in the window is pooled by every warp, each a slice of the
// members (loaded in one batch where the slice allows: CompressConfig::kWideBatch), merged
// through shared memory in a fixed tree and, in a cluster, the blocks' states by rank 0
// (gathered through distributed shared memory by its warps at once, merged in rank order);
// so a group of 128 rows is neither serialized on one warp nor on one SM. The pooled row
// stays in registers through RMSNorm to the epilogue. The rows of non-closing tokens that
// go to the ring are copied by all the threads (independent rows, several 16-byte moves in
// flight per thread): before the groups in a window that closes none, after them (by every
// warp but the one running the epilogue) in one that does, off the group's critical path.
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
  // One branch on the slot and the request together: with an early return on the slot
  // alone, the compiler sank the request's load past it, a dependent round trip of its own
  // (bench/NOTES.md 48). The skips are counted as before (usable_slot first).
  const bool usable = usable_slot<Ratio>(p, slot, pos, count_errors) >= 0;
  if (!usable | !(Ratio == 1 || known_request(p, r))) return tp;
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
      // A closing token whose group starts before its chunk is the head group's own closing
      // token (head_reads' `token` is t, its slot this one): no loads (every decode group).
      const HeadReads h = maybe_head && t >= first && t < end
                              ? HeadReads{true, p.ring_layout.block_of(slot), pos - Ratio + 1,
                                          tp.chunk_start - (pos - Ratio + 1), t}
                              : head_reads<Ratio>(p, first, end, tp.chunk_start);
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
/// through distributed shared memory. Every warp of rank 0 calls it. Where the peers fit
/// the `slots` (clusters of up to kSlots + 1 blocks), rank 0's warps 1 .. size - 1 each copy
/// one peer's state into a slot at once, so the remote reads are one round trip instead of
/// size - 1 in a row; warp 0 then merges the slots. Larger clusters: warp 0 reads the peers
/// one after the other.
template <int Ratio, int kSlots, int N>
KVC_DEVICE void merge_cluster_states(PoolState<N>& state, const ClusterState<N>& local,
                                     ClusterState<N> (&slots)[kSlots], int size, int warp, int lane) {
  if (size - 1 <= kSlots) {
    if (warp >= 1 && warp < size) slots[warp - 1].put(arch::peer_shared(&local, warp)->get(lane), lane);
    __syncthreads();
    if (warp == 0)
      for (int r = 1; r < size; ++r) GatedPool<Ratio>::merge(state, slots[r - 1].get(lane));
  } else if (warp == 0) {
    for (int r = 1; r < size; ++r) GatedPool<Ratio>::merge(state, arch::peer_shared(&local, r)->get(lane));
  }
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

  constexpr int kPlanWarps = (Cfg::kTokensPerBlock + 31) / 32;  // warps planning a full window
  __shared__ TokenPlan plans[Cfg::kTokensPerBlock];
  __shared__ int32_t copy_token[Cfg::kTokensPerBlock];  // rows stored to the ring by the block
  __shared__ int64_t copy_offset[Cfg::kTokensPerBlock];  // their ring rows
  __shared__ int32_t close_token[Cfg::kTokensPerBlock];  // the window's closing tokens, in order
  __shared__ int list_count[2][kPlanWarps];  // listed rows and closing tokens a planning warp
  __shared__ __align__(16) uint16_t weight_smem[HeadDim];  // RMSNorm weight, loaded with the plans
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int cluster = arch::cluster_size();
  const int rank = arch::cluster_rank();
  const int64_t window = static_cast<int64_t>(blockIdx.x / cluster) * window_size;

  static_assert(Cfg::kTokensPerBlock <= 32 * Cfg::kWarps, "the block's warps plan the window, a token a lane");
  for (int i = threadIdx.x; i < HeadDim / E; i += Cfg::kThreads)
    arch::store<E>(weight_smem + i * E,
                   arch::load_readonly<E>(reinterpret_cast<const uint16_t*>(p.weight) + i * E));
  // Warp w plans tokens [32 w, 32 w + 32) of the window (warp 0 alone at decode).
  if (warp < kPlanWarps && 32 * warp < window_size) {
    const int k = 32 * warp + lane;
    const int64_t t = window + k;
    const TokenPlan tp = k < window_size && t < p.num_tokens ? plan_token<Ratio>(p, t, rank == 0)
                                                             : TokenPlan{-1, 0, 0, 0, 0, 0, 0u};
    if (k < window_size) plans[k] = tp;
    // A closing token stores its row from registers while pooling; the rest go in a list,
    // in token order: every block of a cluster builds the same list, and the cluster's
    // threads split it by position. Each planning warp lists its tokens from 32 w on;
    // longer windows close the gaps below.
    const bool listed = (tp.flags & (kStoresOwnRow | kCloses)) == kStoresOwnRow;
    const unsigned below = (1u << lane) - 1u;
    const unsigned listed_mask = __ballot_sync(0xffffffffu, listed);
    if (listed) {
      const int i = 32 * warp + __popc(listed_mask & below);
      copy_token[i] = k;
      copy_offset[i] = p.ring_layout.slot_offset(tp.slot);
    }
    const bool closes = (tp.flags & kCloses) != 0;
    const unsigned close_mask = __ballot_sync(0xffffffffu, closes);
    if (closes) close_token[32 * warp + __popc(close_mask & below)] = k;
    if (lane == 0) list_count[0][warp] = __popc(listed_mask), list_count[1][warp] = __popc(close_mask);
  }
  __syncthreads();
  int copy_count = list_count[0][0], close_count = list_count[1][0];
  if constexpr (kPlanWarps > 1) {
    if (window_size > 32) {  // uniform: close the gaps between the planning warps' lists
      int copy_at[kPlanWarps], close_at[kPlanWarps];
      copy_count = close_count = 0;
      KVC_PRAGMA_UNROLL
      for (int w = 0; w < kPlanWarps; ++w) {
        copy_at[w] = copy_count, close_at[w] = close_count;
        if (32 * w < window_size) copy_count += list_count[0][w], close_count += list_count[1][w];
      }
      if (warp == 0) {
        // Warp 0 moves each later list down, one after the other (every lane reads before
        // any writes: a list may overlap its destination).
        KVC_PRAGMA_UNROLL
        for (int w = 1; w < kPlanWarps; ++w) {
          if (32 * w >= window_size) break;
          const bool copy_lane = lane < list_count[0][w], close_lane = lane < list_count[1][w];
          const int32_t ct = copy_lane ? copy_token[32 * w + lane] : 0;
          const int64_t co = copy_lane ? copy_offset[32 * w + lane] : 0;
          const int32_t kt = close_lane ? close_token[32 * w + lane] : 0;
          __syncwarp();
          if (copy_lane) copy_token[copy_at[w] + lane] = ct, copy_offset[copy_at[w] + lane] = co;
          if (close_lane) close_token[close_at[w] + lane] = kt;
          __syncwarp();
        }
      }
      __syncthreads();
    }
  }
  // The listed rows are no member of a group read here (a head group's reads collide with
  // no listed store; every other group reads input rows only), so they may go at any time:
  // right away in a window that closes no group; after the groups in one that does, by
  // every thread but rank 0's warp 0, while that warp runs the merge and the epilogue, so
  // the copy's round trip is off the group's critical path (bench/NOTES.md 47).
  const bool copy_after = close_count > 0;
  if constexpr (Ratio > 1)
    if (!copy_after)
      copy_rows_to_ring<HeadDim, In, E>(p, copy_token, copy_offset, copy_count, window,
                                        rank * Cfg::kThreads + threadIdx.x, cluster * Cfg::kThreads);

  {
    // The cluster pools each group; warp w of block `rank` takes members [c*M, (c+1)*M) with
    // c = rank * kWarps + w.
    const int warps = cluster * Cfg::kWarps;
    const int cluster_warp = rank * Cfg::kWarps + warp;
    const int M = Ratio / warps;
    // The merge tree's slots, in ClusterState's layout (16-byte accesses, no bank conflicts);
    // after the tree, rank 0 gathers its peers' states into them (merge_cluster_states).
    constexpr int kSlots = Cfg::kWarps > 1 ? Cfg::kWarps / 2 : 1;
    __shared__ ClusterState<N> merge_buf[kSlots];
    __shared__ ClusterState<N> cluster_state;
    // The window's closing tokens, in token order (a block whose window closes none walks
    // nothing: bench/NOTES.md 49).
    for (int c = 0; c < close_count; ++c) {
      const int k = close_token[c];
      const TokenPlan tp = plans[k];
      const int64_t t = window + k;
      const bool store_own = (tp.flags & kStoresOwnRow) != 0 && cluster_warp == warps - 1;
      // A warp's members in the widest batches they split into (one round trip at ratio 128
      // in clusters of up to 4 blocks), else in kBatch (clusters of 8).
      PoolState<N> state;
      if (Cfg::kWideBatch != Cfg::kBatch && M % Cfg::kWideBatch == 0)
        state = Warp::template pool_members<Cfg::kWideBatch>(p, t, tp, cluster_warp * M, M, store_own, lane);
      else
        state = Warp::template pool_members<Cfg::kBatch>(p, t, tp, cluster_warp * M, M, store_own, lane);
      // Fixed merge tree: warp w absorbs warp w + half, halving until warp 0 holds all.
      for (int active = Cfg::kWarps; active > 1; active /= 2) {
        const int half = active / 2;
        if (warp >= half && warp < active) merge_buf[warp - half].put(state, lane);
        __syncthreads();
        if (warp < half) GatedPool<Ratio>::merge(state, merge_buf[warp].get(lane));
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
        if (rank == 0) merge_cluster_states<Ratio, kSlots>(state, cluster_state, merge_buf, cluster, warp, lane);
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
  if constexpr (Ratio > 1)
    if (copy_after && (rank > 0 || warp > 0))
      copy_rows_to_ring<HeadDim, In, E>(p, copy_token, copy_offset, copy_count, window,
                                        rank * Cfg::kThreads + threadIdx.x - 32,
                                        cluster * Cfg::kThreads - 32);
}

}  // namespace detail
KVC_NAMESPACE_END
