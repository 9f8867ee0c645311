// kvcompress — Op B kernel: rope, quantize, insert (SPEC §2).
//
// Work mapping. Most tokens write nothing (at ratio R only one in R closes a group), so a
// program per token would leave most warps idle. Instead a block owns a window of tokens:
// phase 1 tests every token of the window (one thread each) and compacts the writers into
// shared memory; phase 2 gives each warp one writer at a time — the whole record from one
// warp, the latent row read with 16-byte loads and the record written with vector stores.
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

/// Op B (rope_quant_insert). The rope style is a run-time choice inside the kernel. Launch with InsertConfig::kThreads threads and ceil(T / kTokensPerBlock) blocks;
/// kvc::insert() does this after validation.
template <int Ratio, int HeadDim, class Layout>
__global__ void __launch_bounds__(InsertConfig<Ratio, HeadDim>::kThreads)
    insert_kernel(const InsertParams p) {
  using Cfg = InsertConfig<Ratio, HeadDim>;
  using Row = typename Cfg::Row;
  constexpr int E = Cfg::kVecElems;
  static_assert(Layout::kHeadDim == HeadDim, "layout and kernel head dims differ");

  __shared__ int writer_count;
  __shared__ int32_t writer_token[Cfg::kTokensPerBlock];
  __shared__ int64_t writer_slot[Cfg::kTokensPerBlock];
  __shared__ int64_t writer_group_pos[Cfg::kTokensPerBlock];

  const int64_t window = static_cast<int64_t>(blockIdx.x) * Cfg::kTokensPerBlock;
  // PDL (LaunchOptions::pdl): nothing global is touched before the previous grid is done.
  arch::wait_for_prior_grids();
  arch::allow_dependent_grids();
  if (threadIdx.x == 0) writer_count = 0;
  __syncthreads();
  for (int k = threadIdx.x; k < Cfg::kTokensPerBlock; k += Cfg::kThreads) {
    const int64_t t = window + k;
    if (t >= p.num_tokens) break;
    const int64_t slot = p.record.cache_slot.load(t);  // both loads before any branch
    const int64_t pos = p.positions.load(t);
    int64_t group_pos;
    if (detail::record_target<Ratio>(p.record, pos, slot, group_pos)) {
      const int i = atomicAdd(&writer_count, 1);
      writer_token[i] = k;
      writer_slot[i] = slot;
      writer_group_pos[i] = group_pos;
    }
  }
  __syncthreads();

  const int lane = threadIdx.x % 32;
  for (int i = threadIdx.x / 32; i < writer_count; i += Cfg::kWarps) {
    const int64_t t = window + writer_token[i];
    const uint16_t* src = reinterpret_cast<const uint16_t*>(p.latent) + t * p.latent_stride;
    const RopeAngles<HeadDim> angles =
        detail::record_angles<Layout, Row>(p.record, lane, writer_group_pos[i]);
    Row row;
    row.lane = lane;
    row.sanitize = p.record.sanitize;
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Row::kVecs; ++v) {
      const Array<uint16_t, E> vec = arch::load_readonly<E>(src + Row::run_start(lane, v));
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) row.bits[v * E + e] = vec[e];
    }
    detail::write_record<Layout>(p.record, row, writer_slot[i], angles);
  }
}

}  // namespace kvc
