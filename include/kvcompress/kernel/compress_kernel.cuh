// kvcompress — Op A kernel: save, compress, norm (SPEC §1).
//
// Work mapping. A block owns a window of consecutive tokens. Phase 1: one thread per token
// of the window reads the token's indices and plans its work (does it close a group, does
// it store its row into the ring, is it the group that reads the ring) into shared memory.
// Phase 2: the rows of non-closing tokens that go to the ring are copied by the whole block
// (independent rows, several 16-byte moves in flight per thread); then groups, in one of
// two shapes chosen at compile time:
//  - small ratios (R < 16): each warp owns R consecutive tokens — about one group — and
//    pools the whole group itself, members loaded kBatch at a time with 16-byte loads;
//  - large ratios (R >= 16): the whole block pools each group closing in its window, every
//    warp a slice of the members, merged through shared memory in a fixed tree, so a group
//    of 128 rows is not serialized on one warp. The window is 2 tokens per warp (a decode
//    batch spreads its ring copies over many blocks).
// The RMSNorm weight is staged in shared memory with the plans.
// The pooled row stays in registers through RMSNorm to the epilogue (bf16 latent store, or
// the fused op's cache record).
//
// Ring ordering. Only the group that straddles a chunk's start (the "head" group) reads the
// ring, and it must see the ring as it was before this launch (SPEC §1.5). A tail store that
// would overwrite one of the rows it reads is deferred: the head group's own warp (or block)
// performs it after its reads. Every other store is free to go at once.
#pragma once

#include <cstdint>

#include "../arch/convert.cuh"
#include "../arch/memory.cuh"
#include "../arch/pdl.cuh"
#include "../arch/reduce.cuh"
#include "../core/array.hpp"
#include "../core/bit.hpp"
#include "../core/codecs.hpp"
#include "../functor/gated_pool.hpp"
#include "../functor/rms_norm.hpp"
#include "compress_params.hpp"
#include "row_fragment.cuh"

namespace kvc {

/// Compile-time shape of the Op A kernel for one (Ratio, HeadDim, element type).
template <int Ratio, int HeadDim, typename In>
struct CompressConfig {
  static_assert(Ratio >= 1, "ratio must be positive");
  static_assert(HeadDim % 32 == 0 && HeadDim >= 64, "head dim must be a multiple of 32, >= 64");
  using Element = In;
  static constexpr int kChannels = HeadDim / 32;  // channels of a row per lane
  static constexpr int kVecElems =  // elements per vector access (16 B at most)
      largest_pow2_divisor(kChannels, 16 / int(sizeof(In)));
  static constexpr int kVecs = kChannels / kVecElems;  // vector accesses per lane per half row
  static_assert(kChannels % kVecElems == 0, "head dim must split into whole vectors per lane");
  static_assert(kVecElems % 2 == 0, "bf16 pairs");
  static constexpr bool kGated = Ratio > 1;
  static constexpr int kRowWidth = kGated ? 2 * HeadDim : HeadDim;  // elements of a kv_score row
  static constexpr bool kSplitGroup = Ratio >= 16;
  // Split groups over up to 8 warps (a power of two dividing the ratio, for the merge tree).
  static constexpr int kWarps = kSplitGroup ? largest_pow2_divisor(Ratio, 8) : 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kMembersPerWarp = kSplitGroup ? Ratio / kWarps : Ratio;
  // Members whose rows are loaded together: about 64 floats of input per lane in flight.
  static constexpr int kBatchWanted = 32 / kChannels > 1 ? 32 / kChannels : 1;
  static constexpr int kBatch = largest_divisor(kMembersPerWarp, kBatchWanted);
  static_assert(kMembersPerWarp % kBatch == 0, "members per warp must be a multiple of the batch");
  // Small ratios: one group per warp, a window of Ratio * kWarps tokens. Large ratios: 2
  // tokens per warp, so a decode batch spreads its ring copies and rare closings over many
  // blocks. The window is a launch argument (tokens_per_block <= kMaxTokensPerBlock); R-token
  // windows for large split-group calls were measured and were slower (bench/NOTES.md 8),
  // so every call uses kSmallWindow today.
  static constexpr int kSmallWindow = kSplitGroup ? 2 * kWarps : Ratio * kWarps;
  static constexpr int kMaxTokensPerBlock = kSmallWindow;
  /// The window the launch uses for a call of `num_tokens` tokens (<= kMaxTokensPerBlock).
  KVC_HOST_DEVICE static constexpr int tokens_per_block(int64_t /*num_tokens*/) { return kSmallWindow; }

  /// Channel held by fragment element i of `lane` (vector v = i / kVecElems).
  KVC_HOST_DEVICE static constexpr int channel(int lane, int i) {
    return (i / kVecElems) * 32 * kVecElems + lane * kVecElems + i % kVecElems;
  }
};

namespace detail {

/// What one token of the window does, decided in phase 1.
struct TokenPlan {
  int64_t slot;         // ring slot; < 0: padding, nothing to do
  int64_t pos;          // position
  int64_t chunk_start;  // position of its request's first token (set for tail and head tokens)
  int32_t chunk_first;  // token index of its request's first token
  int32_t tail_begin;   // its request's ring-store tokens are tail_begin .. chunk_end-1
  int32_t chunk_end;
  uint32_t flags;
};
enum : uint32_t { kCloses = 1u, kStoresOwnRow = 2u, kIsHead = 4u };

/// The ring rows the head group of a chunk reads: positions q0 .. q0+count-1 of `block`.
struct HeadReads {
  bool active;
  int64_t block, q0, count, token;
};

template <int Ratio>
KVC_DEVICE HeadReads head_reads(const CompressParams& p, int64_t first, int64_t end,
                                int64_t chunk_start) {
  HeadReads h{false, 0, 0, 0, 0};
  const int64_t into_group = chunk_start % Ratio;
  if (into_group == 0) return h;  // the chunk starts a fresh group: nothing read from the ring
  const int64_t closing_pos = chunk_start - into_group + Ratio - 1;
  const int64_t token = first + (closing_pos - chunk_start);
  if (token >= end) return h;  // the group does not close in this call
  const int64_t slot = p.slot.load(token);
  if (slot < 0) return h;
  h.active = true;
  h.block = p.ring_layout.block_of(slot);
  h.q0 = closing_pos - Ratio + 1;
  h.count = into_group;
  h.token = token;
  return h;
}

/// Whether a store to ring slot `slot` would overwrite a row the head group reads.
KVC_DEVICE bool collides(const HeadReads& h, int64_t slot, const RingLayout& ring) {
  if (!h.active || ring.block_of(slot) != h.block) return false;
  const int64_t distance = ring.row_of(ring.row_of(slot) - ring.row_of(h.q0) + ring.capacity);
  return distance < h.count;
}

template <int Ratio>
KVC_DEVICE TokenPlan plan_token(const CompressParams& p, int64_t t) {
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
    real_end = p.qsl[p.qsl_size - 1];
  }
  if (slot < 0) return tp;
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
    const int64_t first = p.qsl[r];
    const int64_t end = p.qsl[r + 1];
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

/// Op A's per-warp building blocks for one configuration.
template <int Ratio, int HeadDim, typename In>
struct CompressWarp {
  using Cfg = CompressConfig<Ratio, HeadDim, In>;
  static constexpr int N = Cfg::kChannels;
  static constexpr int E = Cfg::kVecElems;
  using Raw = Array<In, N>;

  // Half a row (kv or score) of this lane, read-only path (kv_score) or plain (ring).
  template <bool ReadOnly>
  static KVC_DEVICE Raw load_half(const In* half, int lane) {
    Raw out;
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Cfg::kVecs; ++v) {
      const In* src = half + v * 32 * E + lane * E;
      const Array<In, E> vec = ReadOnly ? arch::load_readonly<E>(src) : arch::load<E>(src);
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) out[v * E + e] = vec[e];
    }
    return out;
  }

  static KVC_DEVICE void store_half(In* half, int lane, const Raw& x) {
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Cfg::kVecs; ++v) {
      Array<In, E> vec;
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) vec[e] = x[v * E + e];
      arch::store<E>(half + v * 32 * E + lane * E, vec);
    }
  }

  static KVC_DEVICE Array<float, N> widen(const Raw& x) {
    Array<float, N> out;
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = to_float(x[i]);
    return out;
  }

  static KVC_DEVICE const In* input_row(const CompressParams& p, int64_t t) {
    return static_cast<const In*>(p.kv_score) + t * p.kv_score_stride;
  }
  static KVC_DEVICE In* ring_row(const CompressParams& p, int64_t offset) {
    return static_cast<In*>(p.ring) + offset;
  }

  /// Copies input row t whole (kv and score) into the ring row of `slot`.
  static KVC_DEVICE void copy_row_to_ring(const CompressParams& p, int64_t t, int64_t slot,
                                          int lane) {
    const In* src = input_row(p, t);
    In* dst = ring_row(p, p.ring_layout.slot_offset(slot));
    const Raw kv = load_half<true>(src, lane);
    const Raw score = load_half<true>(src + HeadDim, lane);
    store_half(dst, lane, kv);
    store_half(dst + HeadDim, lane, score);
  }

  /// Pools members [begin, begin + count) of the group closed by token t at `pos`
  /// (count a multiple of kBatch). Member j is position pos - Ratio + 1 + j: an input row
  /// when inside the chunk, else a ring row. Stores t's own row to the ring on the way when
  /// `store_own` (it is member Ratio - 1, already in registers).
  static KVC_DEVICE PoolState<N> pool_members(const CompressParams& p, int64_t t,
                                              const TokenPlan& tp, int begin, int count,
                                              bool store_own, int lane) {
    PoolState<N> state = GatedPool<Ratio>::template empty<N>();
    const int64_t block = p.ring_layout.block_of(tp.slot);
    for (int b = begin; b < begin + count; b += Cfg::kBatch) {
      Raw kv_raw[Cfg::kBatch], score_raw[Cfg::kBatch];
      // Issue every load of the batch before the first use.
      KVC_PRAGMA_UNROLL
      for (int j = 0; j < Cfg::kBatch; ++j) {
        const int member = b + j;
        const int64_t q = tp.pos - (Ratio - 1) + member;
        const int64_t member_token = t - (Ratio - 1 - member);
        if (member_token >= tp.chunk_first) {  // inside the chunk (positions are consecutive)
          const In* row = input_row(p, member_token);
          kv_raw[j] = load_half<true>(row, lane);
          score_raw[j] = load_half<true>(row + HeadDim, lane);
        } else {
          const In* row = ring_row(p, p.ring_layout.position_offset(block, q));
          kv_raw[j] = load_half<false>(row, lane);
          score_raw[j] = load_half<false>(row + HeadDim, lane);
        }
      }
      if (store_own && b + Cfg::kBatch == Ratio) {
        In* dst = ring_row(p, p.ring_layout.slot_offset(tp.slot));
        store_half(dst, lane, kv_raw[Cfg::kBatch - 1]);
        store_half(dst + HeadDim, lane, score_raw[Cfg::kBatch - 1]);
      }
      Array<float, N> kv[Cfg::kBatch], score[Cfg::kBatch];
      KVC_PRAGMA_UNROLL
      for (int j = 0; j < Cfg::kBatch; ++j) {
        kv[j] = widen(kv_raw[j]);
        score[j] = widen(score_raw[j]);
      }
      const PoolState<N> part = GatedPool<Ratio>::template partial<Cfg::kBatch>(kv, score);
      if (b == begin)
        state = part;
      else
        GatedPool<Ratio>::merge(state, part);
    }
    return state;
  }

  using Row = RowFragment<HeadDim, E>;

  /// RMSNorm of a pooled row held by one warp, rounded to bf16 (the latent row). The
  /// weight comes from the block's shared-memory copy (load_weight).
  static KVC_DEVICE Row normalize(const CompressParams& p, const uint16_t* weight_smem,
                                  const Array<float, N>& pooled, int lane) {
    const float total = arch::group_sum<32>(RmsNorm<HeadDim>::sum_squares(pooled));
    const float inv_rms = RmsNorm<HeadDim>::inv_rms(total, p.eps);
    Array<uint16_t, N> weight;
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Cfg::kVecs; ++v) {
      const Array<uint16_t, E> w = arch::load<E>(weight_smem + Row::run_start(lane, v));
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) weight[v * E + e] = w[e];
    }
    Row row;
    row.bits = arch::to_bf16(RmsNorm<HeadDim>::apply(pooled, inv_rms, weight));
    row.lane = lane;
    row.sanitize = false;
    return row;
  }

  /// The deferred tail stores of a head group, after its ring reads: every tail token of
  /// the chunk whose store collides with a row the head group read. Lanes test 32 tokens
  /// at a time; the whole warp copies each hit. `part`/`parts` split the hits over warps.
  static KVC_DEVICE void deferred_stores(const CompressParams& p, const TokenPlan& head,
                                         int lane, int part, int parts) {
    const int capacity = p.ring_layout.capacity;
    HeadReads h;
    h.active = true;
    h.block = p.ring_layout.block_of(head.slot);
    h.q0 = head.pos - Ratio + 1;
    h.count = head.chunk_start - h.q0;
    h.token = 0;
    // Ring rows are position % capacity (SPEC §1): when the rows the head group reads and
    // the whole chunk fit in the ring together, no store collides (every decode step).
    if (h.count + (head.chunk_end - head.chunk_first) <= capacity) return;
    int hit_index = 0;
    for (int64_t base = head.tail_begin; base < head.chunk_end; base += 32) {
      const int64_t t = base + lane;
      int64_t slot = -1;
      if (t < head.chunk_end) slot = p.slot.load(t);
      const bool hit = slot >= 0 && collides(h, slot, p.ring_layout);
      unsigned mask = __ballot_sync(0xffffffffu, hit);
      while (mask != 0u) {
        const int src_lane = __ffs(mask) - 1;
        mask &= mask - 1u;
        const int64_t hit_slot = __shfl_sync(0xffffffffu, slot, src_lane);
        if (hit_index++ % parts == part) copy_row_to_ring(p, base + src_lane, hit_slot, lane);
      }
    }
  }
};

/// Copies the listed input rows whole into their ring rows (element offsets `ring_offsets`,
/// computed once per row) with every thread of the block, four 16-byte moves in flight per
/// thread: the rows are independent, so a block streams them instead of a warp waiting on
/// one row at a time.
template <int HeadDim, typename In, int E, int Threads>
KVC_DEVICE void copy_rows_to_ring(const CompressParams& p, const int32_t* tokens,
                                  const int64_t* ring_offsets, int count, int64_t window) {
  constexpr int kVecsPerRow = 2 * HeadDim / E;
  constexpr int kUnroll = 4;
  const int total = count * kVecsPerRow;
  for (int base = threadIdx.x; base < total; base += Threads * kUnroll) {
    Array<In, E> v[kUnroll];
    KVC_PRAGMA_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * Threads;
      if (i < total)
        v[u] = arch::load_readonly<E>(static_cast<const In*>(p.kv_score) +
                                      (window + tokens[i / kVecsPerRow]) * p.kv_score_stride +
                                      (i % kVecsPerRow) * E);
    }
    KVC_PRAGMA_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * Threads;
      if (i < total)
        arch::store<E>(static_cast<In*>(p.ring) + ring_offsets[i / kVecsPerRow] +
                           (i % kVecsPerRow) * E,
                       v[u]);
    }
  }
}

}  // namespace detail

/// Op A's epilogue: stores the bf16 latent row (skipped when `latent` is null, which only
/// the fused op allows). Kernels call an epilogue with the warp's finished row.
struct LatentEpilogue {
  template <int Ratio, int HeadDim, int E>
  KVC_DEVICE void operator()(const CompressParams& p, int64_t t, const detail::TokenPlan&,
                             const RowFragment<HeadDim, E>& row) const {
    if (p.latent == nullptr) return;
    uint16_t* dst = reinterpret_cast<uint16_t*>(p.latent) + t * p.latent_stride;
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < RowFragment<HeadDim, E>::kVecs; ++v) {
      Array<uint16_t, E> vec;
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) vec[e] = row.bits[v * E + e];
      arch::store<E>(dst + RowFragment<HeadDim, E>::run_start(row.lane, v), vec);
    }
  }
};

/// Op A: one launch pools, normalises and stores the latent of every group closed in the
/// batch and refreshes the ring (SPEC §1). The fused op is this kernel with an epilogue that
/// also writes the cache record (fused_kernel.cuh). Launch with CompressConfig::kThreads
/// threads, tokens_per_block = CompressConfig::tokens_per_block(num_tokens) and
/// ceil(num_tokens / tokens_per_block) blocks; kvc::compress() does this after validation.
template <int Ratio, int HeadDim, typename In, class Epilogue = LatentEpilogue>
__global__ void __launch_bounds__(CompressConfig<Ratio, HeadDim, In>::kThreads)
    compress_kernel(const CompressParams p, const Epilogue epilogue, const int tokens_per_block) {
  using Cfg = CompressConfig<Ratio, HeadDim, In>;
  using Warp = detail::CompressWarp<Ratio, HeadDim, In>;
  constexpr int N = Cfg::kChannels;
  constexpr int E = Cfg::kVecElems;
  // The warp path's window is fixed; the split path's is the launch's choice.
  const int window_size = Cfg::kSplitGroup ? tokens_per_block : Cfg::kSmallWindow;

  __shared__ detail::TokenPlan plans[Cfg::kMaxTokensPerBlock];
  __shared__ int32_t copy_token[Cfg::kMaxTokensPerBlock];  // rows stored to the ring by the block
  __shared__ int64_t copy_offset[Cfg::kMaxTokensPerBlock];  // their ring rows
  __shared__ int copy_count;
  __shared__ __align__(16) uint16_t weight_smem[HeadDim];  // RMSNorm weight, loaded with the plans
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int64_t window = static_cast<int64_t>(blockIdx.x) * window_size;

  // PDL (LaunchOptions::pdl): nothing global is touched before the previous grid is done.
  arch::wait_for_prior_grids();
  arch::allow_dependent_grids();
  if (threadIdx.x == 0) copy_count = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < HeadDim / E; i += Cfg::kThreads)
    arch::store<E>(weight_smem + i * E,
                   arch::load_readonly<E>(reinterpret_cast<const uint16_t*>(p.weight) + i * E));
  for (int k = threadIdx.x; k < window_size; k += Cfg::kThreads) {
    const int64_t t = window + k;
    const detail::TokenPlan tp = t < p.num_tokens ? detail::plan_token<Ratio>(p, t)
                                                  : detail::TokenPlan{-1, 0, 0, 0, 0, 0, 0u};
    plans[k] = tp;
    // A closing token stores its row from registers while pooling; the rest go in a list.
    if ((tp.flags & (detail::kStoresOwnRow | detail::kCloses)) == detail::kStoresOwnRow) {
      const int i = atomicAdd(&copy_count, 1);
      copy_token[i] = k;
      copy_offset[i] = p.ring_layout.slot_offset(tp.slot);
    }
  }
  __syncthreads();
  if constexpr (Ratio > 1)
    detail::copy_rows_to_ring<HeadDim, In, Cfg::kVecElems, Cfg::kThreads>(p, copy_token, copy_offset,
                                                                         copy_count, window);

  if constexpr (!Cfg::kSplitGroup) {
    // One warp per Ratio consecutive tokens.
    for (int k = warp * Ratio; k < (warp + 1) * Ratio; ++k) {
      const detail::TokenPlan tp = plans[k];
      const int64_t t = window + k;
      if (tp.flags & detail::kCloses) {
        Array<float, N> pooled;
        if constexpr (Ratio == 1) {
          pooled = Warp::widen(Warp::template load_half<true>(Warp::input_row(p, t), lane));
        } else {
          const bool store_own = (tp.flags & detail::kStoresOwnRow) != 0;
          pooled = GatedPool<Ratio>::finish(Warp::pool_members(p, t, tp, 0, Ratio, store_own, lane));
        }
        epilogue.template operator()<Ratio>(p, t, tp, Warp::normalize(p, weight_smem, pooled, lane));
      }
      if constexpr (Ratio > 1) {
        if (tp.flags & detail::kIsHead) {
          __syncwarp();  // every lane's ring reads precede the deferred overwrites
          Warp::deferred_stores(p, tp, lane, 0, 1);
        }
      }
    }
  } else {
    // The whole block pools each group; warp w takes members [w*M, (w+1)*M).
    constexpr int M = Cfg::kMembersPerWarp;
    __shared__ float merge_buf[Cfg::kWarps > 1 ? Cfg::kWarps / 2 : 1][3][HeadDim];
    for (int k = 0; k < window_size; ++k) {
      const detail::TokenPlan tp = plans[k];
      const int64_t t = window + k;
      if (tp.flags & detail::kCloses) {
        const bool store_own = (tp.flags & detail::kStoresOwnRow) != 0 && warp == Cfg::kWarps - 1;
        PoolState<N> state = Warp::pool_members(p, t, tp, warp * M, M, store_own, lane);
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
        if (warp == 0)
          epilogue.template operator()<Ratio>(
              p, t, tp, Warp::normalize(p, weight_smem, GatedPool<Ratio>::finish(state), lane));
        if (tp.flags & detail::kIsHead) Warp::deferred_stores(p, tp, lane, warp, Cfg::kWarps);
      }
    }
  }
}

}  // namespace kvc
