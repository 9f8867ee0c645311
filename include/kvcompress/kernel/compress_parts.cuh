// SPDX-License-Identifier: Apache-2.0
// kvcompress — Op A's building blocks (contract §1): the compile-time shape of a kernel
// instance, a warp's row loads, pooling, RMSNorm and deferred ring stores, the ring-ordering
// rules, and the latent epilogue. The two work mappings that use them are
// compress_small_ratio.cuh (R < 16) and compress_split_group.cuh (R >= 16); the kernel that
// picks one is compress_kernel.cuh.
//
// Ring ordering. Only the group that straddles a chunk's start (the "head" group) reads the
// ring, and it must see the ring as it was before this launch (contract §1.5). A tail store that
// would overwrite one of the rows it reads is deferred: the head group's own warp (or block)
// performs it after its reads. Every other store is free to go at once.
#pragma once

#include "../config.hpp"

#include <cstdint>
#include <type_traits>

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
#include "wave_rule.hpp"
#include "window_rules.hpp"

KVC_NAMESPACE_BEGIN

/// Compile-time shape of the Op A kernel for one (Ratio, HeadDim, element type). RowThreads:
/// the threads holding one row at small ratios, 0 for the default (default_row_threads:
/// 128 at head dim 512) or 32 (a warp per row); the launch picks one by call size.
template <int Ratio, int HeadDim, typename In, int RowThreads = 0>
struct CompressConfig {
  static_assert(Ratio >= 1, "compress ratio must be >= 1");
  static_assert(HeadDim % 64 == 0 && HeadDim >= 64,
                "head dim must be a multiple of 64 (each thread holds whole bf16 pairs of a row)");
  static_assert(std::is_same<In, float>::value || std::is_same<In, bf16_t>::value,
                "kv_score element type must be float or kvc::bf16_t");
  using Element = In;
  static constexpr bool kGated = Ratio > 1;
  static constexpr int kRowWidth = kGated ? 2 * HeadDim : HeadDim;  // elements of a kv_score row
  static constexpr bool kSplitGroup = Ratio >= 16;
  // Threads holding one row. Small ratios, small calls: a whole 4-warp block per row (4
  // channels per thread at head dim 512), so the group's pooling, norm and epilogue are a
  // quarter of a warp's instruction stream each — at decode that stream is the critical
  // path (bench/NOTES.md 15); large calls: a warp per row. Split groups: one warp per row
  // (the block splits the members).
  static constexpr int kRowThreads =
      kSplitGroup ? 32 : RowThreads > 0 ? RowThreads : default_row_threads(HeadDim);
  static_assert(kRowThreads == 32 || kRowThreads == 64 || kRowThreads == 128,
                "a row is held by 32, 64 or 128 threads");
  static constexpr int kChannels = HeadDim / kRowThreads;  // channels of a row per thread
  static constexpr int kVecElems =  // elements per vector access (16 B at most)
      largest_pow2_divisor(kChannels, 16 / int(sizeof(In)));
  static constexpr int kVecs = kChannels / kVecElems;  // vector accesses per thread per half row
  static_assert(kChannels % kVecElems == 0, "head dim must split into whole vectors per thread");
  static_assert(kVecElems % 2 == 0, "bf16 pairs");
  // Split groups over up to 8 warps (a power of two dividing the ratio, for the merge tree);
  // small ratios: the block is one row's threads, or 4 warps of a row each.
  static constexpr int kWarps =
      kSplitGroup ? largest_pow2_divisor(Ratio, 8) : kRowThreads > 32 ? kRowThreads / 32 : 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWindowsPerBlock = kSplitGroup ? 1 : kThreads / kRowThreads;
  // Blocks per SM the fused kernels (a record epilogue) are compiled for, 0 for no minimum
  // (plain Op A; an explicit 1 is not the same: it changes ptxas's choices). Left to
  // itself, ptxas gives the small-ratio fused instances more registers than they need (head
  // dim 512, fp8_ds_mla): block rows 91-96 instead of 80 (5 blocks per SM instead of 6),
  // warp rows 104 instead of 93 at ratio 1 (4 blocks instead of 5) and 200+ at ratio 2 (2
  // instead of 3; every layout fits 168 without spilling in its loops). Ratio 4 would spill
  // 88 bytes at 168 and keeps its ~200. Ratio-2 warp rows with fp32 input run 4 blocks an
  // SM (128 registers, 8-24 bytes of spill; 144-148 at 3 blocks): fused fp8_ds_mla prefill
  // 1x8192 -15 %, 1x32768 -10.5 %, mixed -1.9 % (bench/NOTES.md 37). bf16 input would spill
  // 28-100 bytes there, unmeasured, and keeps 3.
  static constexpr int kRecordMinBlocksPerSm =
      kSplitGroup            ? 0
      : kRowThreads > 32     ? 6
      : Ratio == 1           ? 5
      : Ratio == 2           ? (std::is_same<In, float>::value ? 4 : 3)
                             : 0;
  static constexpr int kMembersPerWarp = kSplitGroup ? Ratio / kWarps : Ratio;
  // Members whose rows are loaded together: about 64 floats of input per thread in flight.
  static constexpr int kBatchWanted = 32 / kChannels > 1 ? 32 / kChannels : 1;
  static constexpr int kBatch = largest_divisor(kMembersPerWarp, kBatchWanted);
  static_assert(kMembersPerWarp % kBatch == 0, "members per warp must be a multiple of the batch");
  /// Split groups: the batch a warp loads at once where its share of the members allows
  /// (about 128 floats of input per thread: the path runs one block an SM, so the registers
  /// cost no occupancy), so that a warp's members at clusters of up to 4 blocks (ratio 128,
  /// head dim 512) are one round trip instead of two (bench/NOTES.md 47). kBatch stays the
  /// unit a cluster splits the members by (kMaxClusterBlocks); other instances: kBatch.
  static constexpr int kWideBatch =
      kSplitGroup ? largest_divisor(kMembersPerWarp, 2 * kBatchWanted) : kBatch;
  /// Tokens of a block: at small ratios each row group of threads owns a window of Ratio
  /// consecutive tokens. Split groups: the longest window the kernel runs and a launch
  /// picks (windows), 2 tokens a warp, planned by warp 0 a token a lane; down to 1 at
  /// decode, where short windows spread the ring copies and the rare closings over many
  /// blocks (bench/NOTES.md 46). Longer windows measured slower: a prefill at ratio 128 in
  /// 128-token windows (each block one group) took 92 µs against 62 in 16-token ones on an
  /// H100 (bench/NOTES.md 49).
  static constexpr int kTokensPerBlock = kSplitGroup ? 2 * kWarps : Ratio * kWindowsPerBlock;
  static_assert(kTokensPerBlock <= 32 || !kSplitGroup, "warp 0 plans a split-group window");
  /// Split groups on sm_90 and newer: the blocks of a thread-block cluster that share a
  /// window and pool each closing group together (kernel/compress_split_group.cuh), so its
  /// Ratio rows are read by that many SMs at once: as many as leave each warp one batch of
  /// members, at most 4 (a divisor of the batches a warp has without a cluster; rank 0
  /// holds a slot per peer for their states, bench/NOTES.md 50). Clusters of 8 measured
  /// 3-5 % slower than 4 on an H100 where both fit one wave (decode 64x2 at ratio 128,
  /// bench/NOTES.md 44, 46). 1 for every other instance and before sm_90 (`cc_major`: the
  /// device's compute capability major version).
  static constexpr int kMaxClusterBlocks = kSplitGroup ? largest_divisor(kMembersPerWarp / kBatch, 4) : 1;
  static_assert(kMembersPerWarp % (kMaxClusterBlocks * kBatch) == 0,
                "a cluster splits a group's members into whole batches per warp");
  /// The largest cluster a launch uses (a 4-block cluster leaves room for twice the windows
  /// of an 8-block one, detail::split_group_window).
  KVC_HOST_DEVICE static constexpr int cluster_blocks(int cc_major) {
    return cc_major >= 9 ? kMaxClusterBlocks : 1;
  }
  /// The cluster of a launch of `windows` windows (Cfg::blocks): the largest power of two up
  /// to cluster_blocks(cc_major) whose clusters all run in one wave of `wave_blocks` blocks
  /// (SMs x resident blocks per SM; 0 when unknown: no cluster). Every block of a cluster
  /// plans its window again and the split group path holds one block an SM, so a cluster
  /// that makes the launch a second wave costs more than it saves: measured on an H100,
  /// 8-block clusters for every window took decode 1024x4 from 37 to 89 us and prefill
  /// 1x32768 from 82 to 497 us (bench/NOTES.md 43).
  KVC_HOST_DEVICE static constexpr int launch_cluster_blocks(int cc_major, int64_t windows, int64_t wave_blocks) {
    int c = cluster_blocks(cc_major);
    while (c > 1 && (wave_blocks <= 0 || windows * c > wave_blocks)) c /= 2;
    return c;
  }
  // Ratio 1, and ratio 2 in block rows (decode), load every row of a window together with
  // its indices (one round trip for a decode group whose rows are all in the input). Larger
  // ratios would hold Ratio rows in registers and load members after the indices instead;
  // so do ratio-2 warp rows (prefill, mixed batches): holding both rows and a ring row cost
  // them 50 registers (164 -> 114), a quarter of their warps per SM (bench/NOTES.md 36).
  static constexpr bool kSpeculativeRows =
      !kSplitGroup && (Ratio == 1 || (Ratio == 2 && kRowThreads > 32));
  /// Wide windows: warp rows whose rows are loaded after the decisions (ratios 2 .. 15) may
  /// own a window of several groups, Ratio x 2^k tokens, one token's indices per lane plus
  /// the Ratio - 1 tokens before the window (kMaxWindow + Ratio - 1 <= 32 lanes). The launch
  /// sizes the window to the GPU (windows); every other instance's window is Ratio.
  static constexpr bool kWideWindows = !kSplitGroup && kRowThreads == 32 && !kSpeculativeRows;
  /// Block rows (decode-sized calls) index tokens and the rows of kv_score and latent in 32
  /// bits (`Index`); a launch for a call that does not fit (compact_index_fits,
  /// compress_params.hpp) takes warp rows instead, and a direct one writes nothing. Ring
  /// slots and offsets stay 64-bit: the ring's extent is known only where num_blocks is given.
  static constexpr bool kCompactIndex = !kSplitGroup && kRowThreads > 32;
  using Index = std::conditional_t<kCompactIndex, int32_t, int64_t>;
  static constexpr int kMaxWindow = kWideWindows ? detail::widest_window(Ratio, 32) : Ratio;
  /// The windows of a call of `num_tokens` tokens (the kernel's last argument; in launch
  /// order, kWindowsPerBlock a block). `wave_blocks`: blocks of this instance the GPU runs
  /// at once (SMs x resident blocks per SM; 0 when unknown). Wide windows: Ratio tokens,
  /// and where those would leave a second wave at most 1/8 full, twice that for the first
  /// ones, so the launch is one wave (detail::one_wave_split, kernel/wave_rule.hpp): on an
  /// H100, mixed 2x2048+192x2 at ratio 2 (a 6 % second wave) -5 % for Op A and the fused op.
  /// A warp pools its groups one after the other, so two groups a warp cost about what two
  /// waves do: 4-token windows at prefill 1x8192 (1.94 waves of 2-token ones) +11 %, 16-token
  /// windows at 1x32768 +4 % (ratio 4: +6 %; bench/NOTES.md 43); the kernel still runs any
  /// window up to kMaxWindow (tests and bench's tune_windows launch them directly). Split
  /// groups: detail::split_group_window with the clusters of `cc_major` (the device's compute
  /// capability major version; 0, the default, for a launch without clusters): kTokensPerBlock
  /// tokens except at decode (the kernel runs any shorter window too); launch them with
  /// launch_cluster_blocks(cc_major, ...) blocks a cluster. Every other instance:
  /// kTokensPerBlock / kWindowsPerBlock tokens a window (`cc_major` unused).
  KVC_HOST_DEVICE static constexpr detail::WindowSizes windows(int64_t num_tokens, int64_t wave_blocks,
                                                               int cc_major = 0) {
    if (kSplitGroup)
      return detail::WindowSizes{
          detail::split_group_window(num_tokens, kTokensPerBlock, cluster_blocks(cc_major), wave_blocks), 0};
    if (!kWideWindows || wave_blocks <= 0) return detail::WindowSizes{kTokensPerBlock / kWindowsPerBlock, 0};
    const detail::WindowSizes w = detail::one_wave_split(detail::WindowSizes{Ratio, 0}, num_tokens, kMaxWindow,
                                                         kWindowsPerBlock, wave_blocks);
    return 8 * int64_t{w.wide} <= wave_blocks * kWindowsPerBlock ? w : detail::WindowSizes{Ratio, 0};
  }
  /// Blocks of a launch of `num_tokens` tokens in windows `w`.
  KVC_HOST_DEVICE static constexpr int64_t blocks(int64_t num_tokens, detail::WindowSizes w) {
    return (w.count(num_tokens) + kWindowsPerBlock - 1) / kWindowsPerBlock;
  }
  /// Whether windows `w` need an instance that reads its windows at run time (not
  /// compress_kernel's RatioWindowsOnly): wide windows other than Ratio tokens each.
  KVC_HOST_DEVICE static constexpr bool reads_windows(detail::WindowSizes w) {
    return kWideWindows && (w.wide != 0 || w.window != Ratio);
  }
  /// Whether windows `w` are ones compress_kernel can run (it writes nothing for any
  /// other; kvc::compress launches only those of `windows`): split groups a window of 1 ..
  /// kTokensPerBlock tokens (its plans are kTokensPerBlock shared-memory rows), none twice as
  /// long; wide windows a multiple of Ratio, the longest (2 x window where `wide` > 0) at
  /// most kMaxWindow (a lane per token and one per token before it). Other instances, and
  /// compress_kernel's RatioWindowsOnly, ignore `w`.
  KVC_HOST_DEVICE static constexpr bool usable_windows(detail::WindowSizes w) {
    if (kSplitGroup) return w.wide == 0 && w.window >= 1 && w.window <= kTokensPerBlock;
    if (kWideWindows)
      return w.window >= Ratio && w.window % Ratio == 0 && w.wide >= 0 &&
             (w.wide > 0 ? 2 * int64_t{w.window} : int64_t{w.window}) <= kMaxWindow;
    return true;
  }

  /// Channel held by fragment element i of thread `lane` (vector v = i / kVecElems).
  KVC_HOST_DEVICE static constexpr int channel(int lane, int i) {
    return (i / kVecElems) * kRowThreads * kVecElems + lane * kVecElems + i % kVecElems;
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

/// The ring slot of a token as the kernel uses it (contract §4.3): `slot`, or -1 (padding:
/// nothing read or written for the token) when the slot lies past the ring's bound
/// (RingLayout::num_blocks; ratio > 1, ratio 1 has no ring) or the position is negative.
/// A skip is counted in p.errors when `count` (one thread per token does).
template <int Ratio>
KVC_DEVICE int64_t usable_slot(const CompressParams& p, int64_t slot, int64_t pos, bool count) {
  if (slot < 0) return slot;
  if (Ratio > 1 && !p.ring_layout.holds_slot(slot)) {
    if (count) count_error(p.errors, &ErrorCounters::ring_slot_out_of_range);
    return -1;
  }
  if (pos < 0) {
    if (count) count_error(p.errors, &ErrorCounters::position_out_of_range);
    return -1;
  }
  return slot;
}

/// Whether `req` names a request of the call (0 .. num_reqs - 1). A token of any other
/// request breaks the caller's contract; it is treated as padding, so no chunk bound is read
/// for it. One unsigned compare: a negative req widens to more than any request count.
KVC_DEVICE bool known_request(const CompressParams& p, int32_t req) {
  const int64_t num_reqs = p.qsl_size > 0 ? p.qsl_size - 1 : 0;
  return static_cast<uint64_t>(int64_t{req}) < static_cast<uint64_t>(num_reqs);
}

/// usable_slot and known_request for the tokens of a warp's lanes at once, without a branch
/// per lane (the small-ratio path's decode-critical decisions): `slot`, or -1 when the slot
/// lies past the ring's bound, the position is negative or (Ratio > 1) the request is
/// unknown. Skips are counted by ballot, by the thread with `counter` set (lane 0 of the
/// warp), only when p.errors is given; every lane of the warp must call it.
template <int Ratio>
KVC_DEVICE int64_t usable_slot_warp(const CompressParams& p, int64_t slot, int64_t pos,
                                    int32_t req, bool counter) {
  const bool has_slot = slot >= 0;
  const bool in_ring = Ratio == 1 || slot < p.ring_layout.slot_end();
  const bool pos_ok = pos >= 0;
  if (p.errors != nullptr) {  // uniform
    const unsigned ring_bad = __ballot_sync(0xffffffffu, has_slot && !in_ring);
    const unsigned pos_bad = __ballot_sync(0xffffffffu, has_slot && in_ring && !pos_ok);
    if (counter && ring_bad != 0u) atomicAdd(&p.errors->ring_slot_out_of_range, __popc(ring_bad));
    if (counter && pos_bad != 0u) atomicAdd(&p.errors->position_out_of_range, __popc(pos_bad));
  }
  const bool req_ok = Ratio == 1 || known_request(p, req);
  return has_slot && in_ring && pos_ok && req_ok ? slot : int64_t{-1};
}

/// The chunk bounds of request `req` (known_request), clamped to the call's tokens: qsl
/// values outside 0 .. T (a broken contract) never make a kernel index past its arrays.
KVC_DEVICE void chunk_bounds(const CompressParams& p, int32_t req, int64_t& first, int64_t& end) {
  const int64_t T = p.num_tokens;
  const int64_t a = p.qsl[req], b = p.qsl[req + 1];
  first = a < 0 ? 0 : a > T ? T : a;
  end = b < first ? first : b > T ? T : b;
}

/// qsl[num_reqs], the end of the real tokens, clamped to 0 .. T; `Index` int32_t only
/// where T fits it (compact-index instances).
template <class Index = int64_t>
KVC_DEVICE Index real_tokens_end(const CompressParams& p) {
  const Index T = static_cast<Index>(p.num_tokens);
  const Index e = p.qsl[p.qsl_size - 1];
  return e < 0 ? 0 : e > T ? T : e;
}

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
  const int64_t slot = usable_slot<Ratio>(p, p.slot.load(token), p.positions.load(token), false);
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

/// Op A's building blocks for the threads of one row, for one configuration.
template <int Ratio, int HeadDim, typename In, int RowThreads = 0>
struct CompressWarp {
  using Cfg = CompressConfig<Ratio, HeadDim, In, RowThreads>;
  static constexpr int N = Cfg::kChannels;
  static constexpr int E = Cfg::kVecElems;
  using Raw = Array<In, N>;
  using Row = RowFragment<HeadDim, E, Cfg::kRowThreads>;

  // `lane` below is the thread's index among the row's Cfg::kRowThreads threads.
  // Half a row (kv or score) of this thread, read-only path (kv_score) or plain (ring).
  template <bool ReadOnly>
  static KVC_DEVICE Raw load_half(const In* half, int lane) {
    return load_half_at<ReadOnly>(half, 0, lane);
  }
  /// The same for the half row at element `offset` from `base`, the offsets summed in `Index`
  /// (int32_t: one wide multiply-add per address instead of 64-bit adds).
  template <bool ReadOnly, class Index>
  static KVC_DEVICE Raw load_half_at(const In* base, Index offset, int lane) {
    Raw out;
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Cfg::kVecs; ++v) {
      const In* src = base + (offset + static_cast<Index>(Row::run_start(lane, v)));
      const Array<In, E> vec = ReadOnly ? arch::load_readonly<E>(src) : arch::load<E>(src);
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) out[v * E + e] = vec[e];
    }
    return out;
  }
  /// Half a row of kv_score at element `offset` (input_offset, + HeadDim for the score half).
  template <class Index>
  static KVC_DEVICE Raw load_input_half(const CompressParams& p, Index offset, int lane) {
    return load_half_at<true>(static_cast<const In*>(p.kv_score), offset, lane);
  }

  static KVC_DEVICE void store_half(In* half, int lane, const Raw& x) {
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Cfg::kVecs; ++v) {
      Array<In, E> vec;
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) vec[e] = x[v * E + e];
      arch::store<E>(half + Row::run_start(lane, v), vec);
    }
  }

  static KVC_DEVICE Array<float, N> widen(const Raw& x) {
    Array<float, N> out;
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) out[i] = to_float(x[i]);
    return out;
  }

  static KVC_DEVICE const In* input_row(const CompressParams& p, int64_t t) {
    return static_cast<const In*>(p.kv_score) + t * p.kv_score_stride_elems;
  }
  /// Element offset of row t of kv_score, in `Index` (int32_t in compact-index instances).
  template <class Index>
  static KVC_DEVICE Index input_offset(const CompressParams& p, Index t) {
    return t * static_cast<Index>(p.kv_score_stride_elems);
  }
  static KVC_DEVICE In* ring_row(const CompressParams& p, int64_t offset) {
    return static_cast<In*>(p.ring) + offset;
  }

  /// Copies input row t whole (kv and score) into the ring row of `slot`.
  static KVC_DEVICE void copy_row_to_ring(const CompressParams& p, int64_t t, int64_t slot,
                                          int lane) {
    copy_row_to_ring_at(p, t, p.ring_layout.slot_offset(slot), lane);
  }
  /// The same, to the ring row at element offset `offset` (RingLayout::slot_offset).
  static KVC_DEVICE void copy_row_to_ring_at(const CompressParams& p, int64_t t, int64_t offset,
                                             int lane) {
    const In* src = input_row(p, t);
    In* dst = ring_row(p, offset);
    const Raw kv = load_half<true>(src, lane);
    const Raw score = load_half<true>(src + HeadDim, lane);
    store_half(dst, lane, kv);
    store_half(dst + HeadDim, lane, score);
  }

  /// Pools members [begin, begin + count) of the group closed by token t at `pos`
  /// (count a multiple of Batch, the members loaded together). Member j is position
  /// pos - Ratio + 1 + j: an input row when inside the chunk, else a ring row. Stores t's own
  /// row to the ring on the way when `store_own` (it is member Ratio - 1, already in registers).
  template <int Batch = Cfg::kBatch>
  static KVC_DEVICE PoolState<N> pool_members(const CompressParams& p, int64_t t,
                                              const TokenPlan& tp, int begin, int count,
                                              bool store_own, int lane) {
    PoolState<N> state = GatedPool<Ratio>::template empty<N>();
    const int64_t block = p.ring_layout.block_of(tp.slot);
    for (int b = begin; b < begin + count; b += Batch) {
      Raw kv_raw[Batch], score_raw[Batch];
      // Issue every load of the batch before the first use.
      KVC_PRAGMA_UNROLL
      for (int j = 0; j < Batch; ++j) {
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
      if (store_own && b + Batch == Ratio) {
        In* dst = ring_row(p, p.ring_layout.slot_offset(tp.slot));
        store_half(dst, lane, kv_raw[Batch - 1]);
        store_half(dst + HeadDim, lane, score_raw[Batch - 1]);
      }
      Array<float, N> kv[Batch], score[Batch];
      KVC_PRAGMA_UNROLL
      for (int j = 0; j < Batch; ++j) {
        kv[j] = widen(kv_raw[j]);
        score[j] = widen(score_raw[j]);
      }
      const PoolState<N> part = GatedPool<Ratio>::template partial<Batch>(kv, score);
      if (b == begin)
        state = part;
      else
        GatedPool<Ratio>::merge(state, part);
    }
    return state;
  }

  /// This lane's part of the RMSNorm weight (the channels it holds), from global memory
  /// (read-only path) or from a shared-memory copy.
  template <bool Global>
  static KVC_DEVICE Array<uint16_t, N> load_weight(const uint16_t* weight, int lane) {
    Array<uint16_t, N> w;
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Cfg::kVecs; ++v) {
      const uint16_t* src = weight + Row::run_start(lane, v);
      const Array<uint16_t, E> vec = Global ? arch::load_readonly<E>(src) : arch::load<E>(src);
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) w[v * E + e] = vec[e];
    }
    return w;
  }

  /// RMSNorm of a pooled row held by the row's threads, rounded to bf16 (the latent row).
  /// Every thread of the row takes part (a block-wide sum when the row spans the block).
  static KVC_DEVICE Row normalize(const CompressParams& p, const Array<uint16_t, N>& weight,
                                  const Array<float, N>& pooled, int lane) {
    const float total = arch::row_sum<Cfg::kRowThreads>(RmsNorm<HeadDim>::sum_squares(pooled));
    if (lane == 0 && !isfinite(total)) count_error(p.errors, &ErrorCounters::non_finite_rows);
    const float inv_rms = RmsNorm<HeadDim>::inv_rms(total, p.eps);
    Row row;
    row.bits = arch::to_bf16(RmsNorm<HeadDim>::apply(pooled, inv_rms, weight));
    row.lane = lane;
    row.sanitize = false;
    return row;
  }

  /// The deferred tail stores of a head group, after its ring reads: every tail token of
  /// the chunk whose store collides with a row the head group read. The lanes of each warp
  /// test 32 tokens at a time; the row's threads (`thread`, their channel index) copy each
  /// hit. `part`/`parts` split the hits over the warps of a split-group block (each warp a
  /// whole row there).
  static KVC_DEVICE void deferred_stores(const CompressParams& p, const TokenPlan& head,
                                         int lane, int thread, int part, int parts) {
    const int capacity = p.ring_layout.capacity;
    HeadReads h;
    h.active = true;
    h.block = p.ring_layout.block_of(head.slot);
    h.q0 = head.pos - Ratio + 1;
    h.count = head.chunk_start - h.q0;
    h.token = 0;
    // Ring rows are position % capacity (contract §1): when the rows the head group reads and
    // the whole chunk fit in the ring together, no store collides (every decode step).
    if (h.count + (head.chunk_end - head.chunk_first) <= capacity) return;
    int hit_index = 0;
    for (int64_t base = head.tail_begin; base < head.chunk_end; base += 32) {
      const int64_t t = base + lane;
      int64_t slot = -1;
      if (t < head.chunk_end) slot = usable_slot<Ratio>(p, p.slot.load(t), p.positions.load(t), false);
      const bool hit = slot >= 0 && collides(h, slot, p.ring_layout);
      unsigned mask = __ballot_sync(0xffffffffu, hit);
      while (mask != 0u) {
        const int src_lane = __ffs(mask) - 1;
        mask &= mask - 1u;
        const int64_t hit_slot = __shfl_sync(0xffffffffu, slot, src_lane);
        if (hit_index++ % parts == part) copy_row_to_ring(p, base + src_lane, hit_slot, thread);
      }
    }
  }
};

}  // namespace detail

/// Op A's epilogue: stores the bf16 latent row (skipped when `latent` is null, which only
/// the fused op allows). An epilogue has two steps: `begin<Ratio, Row>(p, t, pos, lane)`
/// right after the closing token's indices are known, to issue its own loads while the
/// group's rows are in flight, and `operator()` with the finished Row (a RowFragment, the
/// calling thread's part of the row) and what begin returned. Every thread holding the row
/// calls both, with the same t and pos.
struct LatentEpilogue {
  struct Pending {};
  template <int Ratio, class Row, class Index>
  KVC_DEVICE Pending begin(const CompressParams&, Index /*t*/, int64_t /*pos*/, int /*lane*/) const {
    return {};
  }
  template <int Ratio, class Row, class Index>
  KVC_DEVICE void operator()(const CompressParams& p, Index t, int64_t /*pos*/, const Pending&,
                             const Row& row) const {
    store(p, t, row);
  }
  /// `Index`: int32_t from compact-index instances (the row offset in 32 bits), else int64_t.
  template <class Row, class Index>
  KVC_DEVICE static void store(const CompressParams& p, Index t, const Row& row) {
    if (p.latent == nullptr) return;
    constexpr int E = Row::kVecElems;
    uint16_t* const latent = reinterpret_cast<uint16_t*>(p.latent);
    const Index offset = t * static_cast<Index>(p.latent_stride_elems);
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Row::kVecs; ++v) {
      Array<uint16_t, E> vec;
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) vec[e] = row.bits[v * E + e];
      arch::store<E>(latent + (offset + static_cast<Index>(Row::run_start(row.lane, v))), vec);
    }
  }
};

KVC_NAMESPACE_END
