// SPDX-License-Identifier: Apache-2.0
// kvcompress — Op A for large ratios (R >= 16): a block, or a cluster of blocks, pools each group.
//
// Work mapping. A block owns a window of consecutive tokens (up to 2 per warp, so a decode
// batch spreads its ring copies over many blocks; fewer where the launch has few tokens,
// detail::split_group_window, since a window pools its closing groups one after the
// other); on sm_90 kvc::compress launches a cluster of blocks per window instead (up to
// CompressConfig::cluster_blocks, 4 at ratio 128, where the clusters fit one wave,
// CompressConfig::launch_cluster_blocks), one block an SM. Phase 1: one thread per token of
// the window reads the token's indices and plans its work (does it close a group, does it
// store its row into the ring, is it the group that reads the ring) into shared memory,
// with the RMSNorm weight; each block of a cluster plans the same window. Phase 2: each
// group closing in the window is pooled by every warp, each a slice of the members (loaded
// in one batch where the slice allows: CompressConfig::kWideBatch). The warps' states merge
// through shared memory in a fixed order, each warp ending with a slice of the channels; in
// a cluster, each peer stores its slices into rank 0's shared memory asynchronously
// (st.async, completing a transfer of rank 0's mbarrier) and rank 0's warps merge them in
// rank order once the mbarrier's phase completes: no cluster barrier and no remote load on
// a group's way. So a group of 128 rows is neither serialized on one warp nor on one SM,
// and the merges' exps spread over the warps. Rank 0's warps finish their slices into
// shared memory and warp 0 runs RMSNorm and the epilogue on the whole row. The rows of
// non-closing tokens that go to the ring are copied by all the threads (independent rows,
// several 16-byte moves in flight per thread): before the groups in a window that closes
// none, after them (by every warp but the one running the epilogue) in one that does, off
// the group's critical path.
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

/// Pooling states in shared memory, one per slot: lane l's fragment elements [v*W, (v+1)*W)
/// of a field at [field][v][l] (W floats, a 16-byte vector where the fragment allows), so a
/// warp's `put` of a whole state is conflict-free. The merge reads them by position instead
/// (a field's N x 32 floats in that order; a warp a contiguous slice, a float a lane: also
/// conflict-free): the merge is per channel, so any split of the positions works.
template <int N>
struct StateSlot {
  static constexpr int W = N % 4 == 0 ? 4 : N % 2 == 0 ? 2 : 1;
  static constexpr int kPositions = N * 32;  // floats of a field
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
  KVC_DEVICE float* field(int i) { return &f[i][0][0][0]; }
  KVC_DEVICE const float* field(int i) const { return &f[i][0][0][0]; }
};

/// A warp's slice of a state's positions: warp w of `Warps` owns positions [w*Q, (w+1)*Q)
/// of each field (Q = N x 32 / Warps), lane l those at w*Q + 32 j + l; P of them a lane
/// (fewer than 32 a warp: lanes Q .. 31 hold none).
template <int N, int Warps>
struct StateSlice {
  static constexpr int Q = StateSlot<N>::kPositions / Warps;
  static constexpr int P = (Q + 31) / 32;
  static_assert(StateSlot<N>::kPositions % Warps == 0, "the warps split a state's positions evenly");
  PoolState<P> s;

  KVC_DEVICE static bool holds(int j, int lane) { return Q % 32 == 0 || 32 * j + lane < Q; }
  KVC_DEVICE static int position(int warp, int j, int lane) { return warp * Q + 32 * j + lane; }
  /// Reads this slice of `slot` (the shared memory of this block or, through a peer
  /// pointer, another's).
  KVC_DEVICE void load(const StateSlot<N>& slot, int warp, int lane) {
    KVC_PRAGMA_UNROLL
    for (int j = 0; j < P; ++j) {
      const int i = holds(j, lane) ? position(warp, j, lane) : 0;
      s.max[j] = slot.field(0)[i], s.sum[j] = slot.field(1)[i], s.acc[j] = slot.field(2)[i];
    }
  }
  /// Stores this slice into block `rank`'s copy of `slot` (a slot of this block's layout)
  /// asynchronously, each float completing 4 bytes of a transfer of that block's `bar`.
  KVC_DEVICE void store_async(StateSlot<N>& slot, uint64_t* bar, int rank, int warp, int lane) const {
    const uint32_t remote_bar = arch::peer_address(bar, rank);
    KVC_PRAGMA_UNROLL
    for (int j = 0; j < P; ++j)
      if (holds(j, lane)) {
        const int i = position(warp, j, lane);
        arch::store_async(arch::peer_address(slot.field(0) + i, rank), s.max[j], remote_bar);
        arch::store_async(arch::peer_address(slot.field(1) + i, rank), s.sum[j], remote_bar);
        arch::store_async(arch::peer_address(slot.field(2) + i, rank), s.acc[j], remote_bar);
      }
  }
  static constexpr uint32_t kBlockBytes = 3u * StateSlot<N>::kPositions * sizeof(float);  // all warps' slices
};

/// The pooled values of a group in shared memory, in StateSlot's order (one field), for the
/// warp that runs the epilogue; each warp finishes its slice into it.
template <int N>
struct PooledRow {
  static constexpr int W = StateSlot<N>::W;
  float f[N / W][32][W];

  template <int Ratio, int Warps>
  KVC_DEVICE void put_slice(const StateSlice<N, Warps>& slice, int warp, int lane) {
    const Array<float, StateSlice<N, Warps>::P> pooled = GatedPool<Ratio>::finish(slice.s);
    KVC_PRAGMA_UNROLL
    for (int j = 0; j < StateSlice<N, Warps>::P; ++j)
      if (StateSlice<N, Warps>::holds(j, lane)) (&f[0][0][0])[StateSlice<N, Warps>::position(warp, j, lane)] = pooled[j];
  }
  KVC_DEVICE Array<float, N> get(int lane) const {
    Array<float, N> out;
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < N / W; ++v) {
      const Array<float, W> x = arch::load<W>(f[v][lane]);
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < W; ++e) out[v * W + e] = x[e];
    }
    return out;
  }
};

/// Merges the block's warps' states, each warp ending with its slice of the block's state
/// (StateSlice). The order is the halving tree of warps (warp w absorbs w + half while half
/// halves), the same bits as merging whole states that way: warps [H, 2H) put theirs into
/// the slots, warps [0, H) absorb them (H = kWarps / 2); then warps [0, H) put theirs, and
/// every warp merges its slice of the H slots down the rest of the tree. Two rounds of
/// stores and loads of the states instead of one per level (log2 kWarps), and the last
/// levels' exps spread over every warp instead of one (bench/NOTES.md 50).
template <int Ratio, int kWarps, int N>
KVC_DEVICE StateSlice<N, kWarps> merge_block_states(PoolState<N> state, StateSlot<N>* slots, int warp, int lane) {
  constexpr int H = kWarps > 1 ? kWarps / 2 : 1;
  if constexpr (kWarps > 1) {
    if (warp >= H) slots[warp - H].put(state, lane);
    __syncthreads();
    if (warp < H) GatedPool<Ratio>::merge(state, slots[warp].get(lane));
    __syncthreads();
  }
  if (warp < H) slots[warp].put(state, lane);
  __syncthreads();
  StateSlice<N, kWarps> part[H];
  KVC_PRAGMA_UNROLL
  for (int h = 0; h < H; ++h) part[h].load(slots[h], warp, lane);
  KVC_PRAGMA_UNROLL
  for (int active = H; active > 1; active /= 2)
    KVC_PRAGMA_UNROLL
    for (int h = 0; h < active / 2; ++h) GatedPool<Ratio>::merge(part[h].s, part[h + active / 2].s);
  return part[0];
}

/// Op A for large ratios. Launched with clusters (kvc::compress on sm_90: `cluster_blocks`
/// blocks each, CompressConfig::cluster_blocks), the blocks of a cluster share one window:
/// each plans it (rank 0 counts the errors), the ring copies are spread over all of them,
/// and every closing group is pooled by all their warps, Ratio / (blocks x warps) members a
/// warp; each block merges its warps through shared memory (each warp ending with a slice of
/// the channels), then each peer's warps store their slices into rank 0's shared memory
/// (distributed shared memory, st.async onto rank 0's mbarrier), and when they have landed
/// rank 0's warps merge them in rank order, finish their slices, and warp 0 runs the norm
/// and epilogue; rank 0 also runs a head group's deferred ring stores. A group's 128
/// rows (512 KiB at fp32) then stream into 4 SMs at once instead of one (bench/NOTES.md 42).
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
  __shared__ int32_t close_token[Cfg::kTokensPerBlock];  // the window's closing tokens, in order
  __shared__ int list_count[2];  // listed rows and closing tokens
  __shared__ __align__(16) uint16_t weight_smem[HeadDim];  // RMSNorm weight, loaded with the plans
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int cluster = arch::cluster_size();
  const int rank = arch::cluster_rank();
  const int64_t window = static_cast<int64_t>(blockIdx.x / cluster) * window_size;

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
    const unsigned below = (1u << lane) - 1u;
    const unsigned listed_mask = __ballot_sync(0xffffffffu, listed);
    if (listed) {
      const int i = __popc(listed_mask & below);
      copy_token[i] = lane;
      copy_offset[i] = p.ring_layout.slot_offset(tp.slot);
    }
    const bool closes = (tp.flags & kCloses) != 0;
    const unsigned close_mask = __ballot_sync(0xffffffffu, closes);
    if (closes) close_token[__popc(close_mask & below)] = lane;
    if (lane == 0) list_count[0] = __popc(listed_mask), list_count[1] = __popc(close_mask);
  }
  __syncthreads();
  const int copy_count = list_count[0], close_count = list_count[1];
  // The listed rows are no member of a group read here (a head group's reads collide with
  // no listed store; every other group reads input rows only), so they may go at any time:
  // right away in a window that closes no group; after the groups in one that does, by
  // every thread but rank 0's warp 0, while that warp runs the epilogue, so the copy's round
  // trip is off the group's critical path (bench/NOTES.md 47).
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
    using Slice = StateSlice<N, Cfg::kWarps>;
    constexpr int kSlots = Cfg::kWarps > 1 ? Cfg::kWarps / 2 : 1;
    constexpr int kPeers = Cfg::kMaxClusterBlocks > 1 ? Cfg::kMaxClusterBlocks - 1 : 1;
    __shared__ StateSlot<N> slots[kSlots];       // the block's merge (merge_block_states)
    __shared__ StateSlot<N> peer_slots[kPeers];  // rank 0: its peers' slices, by rank - 1
    __shared__ PooledRow<N> pooled;              // rank 0: the finished group, for warp 0
    // Clusters: rank 0's `slots_full` completes a phase a group when its peers' slices have
    // landed (their bytes, plus rank 0's one arrival that announces them); a peer's
    // `slots_free` when rank 0 has read its slot, before the peer stores the next group's.
    __shared__ uint64_t slots_full, slots_free;
    if (cluster > 1) {
      if (threadIdx.x == 0) {
        arch::mbarrier_init(&slots_full, 1);
        arch::mbarrier_init(&slots_free, 1);
        arch::fence_mbarrier_init();
      }
      // Every block's initialisations before any peer's first arrival or transfer; waited on
      // before the group loop (long arrived by then).
      arch::cluster_arrive_relaxed();
      arch::cluster_wait();
    }
    // The window's closing tokens, in token order (a block whose window closes none walks
    // nothing: bench/NOTES.md 49).
    for (int c = 0; c < close_count; ++c) {
      const int k = close_token[c];
      const TokenPlan tp = plans[k];
      const int64_t t = window + k;
      const bool store_own = (tp.flags & kStoresOwnRow) != 0 && cluster_warp == warps - 1;
      if (cluster > 1 && rank == 0 && threadIdx.x == 0)
        arch::mbarrier_arrive_expect_tx(&slots_full, static_cast<uint32_t>(cluster - 1) * Slice::kBlockBytes);
      // A warp's members in the widest batches they split into (one round trip at ratio 128
      // in clusters of up to 4 blocks), else in kBatch.
      PoolState<N> state;
      if (Cfg::kWideBatch != Cfg::kBatch && M % Cfg::kWideBatch == 0)
        state = Warp::template pool_members<Cfg::kWideBatch>(p, t, tp, cluster_warp * M, M, store_own, lane);
      else
        state = Warp::template pool_members<Cfg::kBatch>(p, t, tp, cluster_warp * M, M, store_own, lane);
      Slice slice = merge_block_states<Ratio, Cfg::kWarps>(state, slots, warp, lane);
      if (cluster > 1) {
        if (rank > 0) {
          // The previous group's slot read by rank 0, this one's stored into it.
          if (c > 0) arch::mbarrier_wait_parity(&slots_free, (c - 1) & 1);
          slice.store_async(peer_slots[rank - 1], &slots_full, 0, warp, lane);
          // Every warp's slice loaded before the next group's states overwrite the slots
          // (rank 0 has its barrier below).
          if (c + 1 < close_count) __syncthreads();
        } else {
          // Every peer's slices landed (so their reads of the group are done too); merged in
          // rank order from this block's shared memory.
          arch::mbarrier_wait_parity(&slots_full, c & 1);
          for (int r = 1; r < cluster; ++r) {
            Slice peer;
            peer.load(peer_slots[r - 1], warp, lane);
            GatedPool<Ratio>::merge(slice.s, peer.s);
          }
        }
      }
      if (rank == 0) {
        pooled.template put_slice<Ratio>(slice, warp, lane);
        __syncthreads();
        // The peers' slots are read: warp 1's lane r frees peer r's for the next group (none
        // after the last: a peer may have exited). Not warp 0: the arrival's release waits
        // for the thread's outstanding memory operations, and warp 0 runs the epilogue.
        if (c + 1 < close_count && warp == 1 && lane >= 1 && lane < cluster)
          arch::mbarrier_arrive_remote(arch::peer_address(&slots_free, lane));
        if (warp == 0) {
          const auto pending = epilogue.template begin<Ratio, typename Warp::Row>(p, t, tp.pos, lane);
          const Array<uint16_t, N> weight = Warp::template load_weight<false>(weight_smem, lane);
          epilogue.template operator()<Ratio, typename Warp::Row>(
              p, t, tp.pos, pending, Warp::normalize(p, weight, pooled.get(lane), lane));
        }
        // A head group's deferred ring stores, once every block's reads of it are done:
        // rank 0's warps (after the barrier above and, in a cluster, its peers' slices).
        if (tp.flags & kIsHead) Warp::deferred_stores(p, tp, lane, lane, warp, Cfg::kWarps);
      }
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
