// kvcompress — Op B kernel: rope, quantize, insert (SPEC §2).
//
// Work mapping. Most tokens write nothing (at ratio R only one in R closes a group), so a
// program per token would leave most warps idle. Instead a block works through windows of
// 8 * R tokens: it tests every token of the window (one thread each) and compacts the
// writers into shared memory, then gives each warp one writer at a time — the whole record
// from one warp, the latent row read with 16-byte loads and the record written with vector
// stores. Blocks are persistent (at most one wave): the index loads of a block's next
// window are issued before it writes the current window's records.
#pragma once

#include <cstdint>

#include "../arch/pdl.cuh"
#include "../core/array.hpp"
#include "../layout/cache.hpp"
#include "insert_params.hpp"
#include "row_fragment.cuh"

namespace kvc {

template <int Ratio, int HeadDim>
struct InsertConfig {
  static constexpr int kVecElems = largest_pow2_divisor(HeadDim / 32, 8);  // bf16 per access
  static constexpr int kWarps = 8;
  static constexpr int kThreads = 32 * kWarps;
  // About one writer per warp: a warp that wrote several records one after the other would
  // wait a full memory round trip for each (measured: 16 per warp cost 25 us at decode).
  static constexpr int kTokensPerBlock = kWarps * Ratio;
  // Registers capped at 64 per thread: 4 blocks (32 warps, 32 records in flight) per SM.
  static constexpr int kMinBlocksPerSm = 4;
  using Row = RowFragment<HeadDim, kVecElems>;
};

namespace detail {

/// Whether token t of `positions`/`record.cache_slot` writes a record; also returns its
/// slot and group position (the rope position).
template <int Ratio>
KVC_DEVICE bool record_target(const RecordArgs& r, int64_t pos, int64_t slot, int64_t& group_pos) {
  if (slot < 0 || (pos + 1) % Ratio != 0) return false;
  if (r.cache.num_pages >= 0 && slot >= r.cache.num_pages * r.cache.block_size) return false;
  group_pos = (pos / Ratio) * Ratio;
  return group_pos < r.cos_sin_rows;
}

/// The angles of a record's group position, for the lanes of a warp holding rows as Row.
template <class Layout, class Row>
KVC_DEVICE RopeAngles<Row::kHeadDim> record_angles(const RecordArgs& r, int lane, int64_t group_pos) {
  return load_rope_angles<Layout::kRopeDim, Row::kHeadDim, Row::kVecElems>(
      lane, r.rope_style, r.cos_sin, r.cos_sin_dtype, r.cos_sin_stride, group_pos);
}

/// Rope + layout store of one row held by a warp.
template <class Layout, class Row>
KVC_DEVICE void write_record(const RecordArgs& r, Row& row, int64_t slot,
                             const RopeAngles<Row::kHeadDim>& angles) {
  apply_rope<Layout::kRopeDim>(row, r.rope_style, angles);
  Layout::store(r.cache, slot / r.cache.block_size, slot % r.cache.block_size, row);
}

}  // namespace detail

/// Op B (rope_quant_insert). The rope style is a run-time choice inside the kernel.
/// Launch with InsertConfig::kThreads threads and any number of blocks up to
/// ceil(T / kTokensPerBlock): block b takes windows b, b + gridDim.x, ... (kvc::insert()
/// launches at most as many blocks as fit on the GPU at once). While its warps write one
/// window's records, the block's index loads for its next window are already in flight,
/// so a window costs about one memory round trip instead of two.
template <int Ratio, int HeadDim, class Layout>
__global__ void __launch_bounds__(InsertConfig<Ratio, HeadDim>::kThreads, InsertConfig<Ratio, HeadDim>::kMinBlocksPerSm)
    insert_kernel(const InsertParams p) {
  using Cfg = InsertConfig<Ratio, HeadDim>;
  using Row = typename Cfg::Row;
  constexpr int E = Cfg::kVecElems;
  constexpr int W = Cfg::kTokensPerBlock;
  constexpr int kPerThread = (W + Cfg::kThreads - 1) / Cfg::kThreads;  // tokens planned per thread
  static_assert(Layout::kHeadDim == HeadDim, "layout and kernel head dims differ");

  // Writers of a window, double-buffered by iteration parity; counts triple-buffered so
  // that one barrier per window orders every reuse (see the loop).
  __shared__ int writer_count[3];
  __shared__ int32_t writer_token[2][W];
  __shared__ int64_t writer_slot[2][W];
  __shared__ int64_t writer_group_pos[2][W];

  const int64_t num_windows = (p.num_tokens + W - 1) / W;
  // PDL (LaunchOptions::pdl): nothing global is touched before the previous grid is done.
  arch::wait_for_prior_grids();
  arch::allow_dependent_grids();
  if (threadIdx.x < 3) writer_count[threadIdx.x] = 0;

  // This thread's tokens of the current window: slot and position, loaded ahead.
  int64_t slot[kPerThread], pos[kPerThread];
  auto load_indices = [&](int64_t w) {
    KVC_PRAGMA_UNROLL
    for (int j = 0; j < kPerThread; ++j) {
      const int k = threadIdx.x + j * Cfg::kThreads;
      const int64_t t = w * W + k;
      slot[j] = -1;
      pos[j] = 0;
      if (k < W && w < num_windows && t < p.num_tokens) {
        slot[j] = p.record.cache_slot.load(t);  // both loads before any branch
        pos[j] = p.positions.load(t);
      }
    }
  };
  load_indices(blockIdx.x);
  __syncthreads();

  const int lane = threadIdx.x % 32;
  int iteration = 0;
  for (int64_t w = blockIdx.x; w < num_windows; w += gridDim.x, ++iteration) {
    const int buf = iteration & 1;
    int* count = &writer_count[iteration % 3];
    // Compact this window's writers. Buffer `buf` was last read two windows ago, before the
    // previous barrier; count[(iteration + 1) % 3] was last read three barriers ago.
    KVC_PRAGMA_UNROLL
    for (int j = 0; j < kPerThread; ++j) {
      int64_t group_pos;
      if (detail::record_target<Ratio>(p.record, pos[j], slot[j], group_pos)) {
        const int i = atomicAdd(count, 1);
        writer_token[buf][i] = threadIdx.x + j * Cfg::kThreads;
        writer_slot[buf][i] = slot[j];
        writer_group_pos[buf][i] = group_pos;
      }
    }
    if (threadIdx.x == 0) writer_count[(iteration + 1) % 3] = 0;
    load_indices(w + gridDim.x);  // in flight while this window's records are written
    __syncthreads();

    const int writers = *count;
    const int64_t window = w * W;
    for (int i = threadIdx.x / 32; i < writers; i += Cfg::kWarps) {
      const int64_t t = window + writer_token[buf][i];
      const uint16_t* src = reinterpret_cast<const uint16_t*>(p.latent) + t * p.latent_stride;
      const RopeAngles<HeadDim> angles =
          detail::record_angles<Layout, Row>(p.record, lane, writer_group_pos[buf][i]);
      Row row;
      row.lane = lane;
      row.sanitize = p.record.sanitize;
      KVC_PRAGMA_UNROLL
      for (int v = 0; v < Row::kVecs; ++v) {
        const Array<uint16_t, E> vec = arch::load_readonly<E>(src + Row::run_start(lane, v));
        KVC_PRAGMA_UNROLL
        for (int e = 0; e < E; ++e) row.bits[v * E + e] = vec[e];
      }
      detail::write_record<Layout>(p.record, row, writer_slot[buf][i], angles);
    }
  }
}

}  // namespace kvc
