// kvcompress — Op B kernel: rope, quantize, insert (SPEC §2).
//
// Work mapping. Most tokens write nothing (at ratio R only one in R closes a group), so a
// program per token would leave most warps idle. Instead a block owns a window of tokens
// (at most one per thread):
//  1. every thread tests its token and the writers are compacted into shared memory;
//  2. the block stages the writers' latent rows (cp.async, no registers held) and their
//     cos/sin rows in shared memory — every row of the window in one memory round trip;
//  3. each warp rotates, quantizes and stores one staged record at a time (vector stores).
// The window is a launch argument: one record per warp for small calls (decode: the work
// spread over many blocks), up to kMaxRecords per block for large ones, so a block's index
// round trip is paid once for many rows and an SM keeps ~kMaxRecords rows per block in
// flight (bench/NOTES.md 10).
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
  // Four warps: 93 registers per thread (no spill) and ~42 KiB of shared memory leave five
  // blocks, 160 staged rows, per SM.
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  // Rows staged in shared memory at once: 32 (32 KiB of bf16 at D = 512; fewer for wider rows).
  static constexpr int kMaxRecords = 2 * HeadDim * 32 <= 32768 ? 32 : 32768 / (2 * HeadDim);
  static_assert(kMaxRecords >= kWarps, "at least one staged record per warp");
  // Windows (tokens per block, at most one per thread): about one writer per warp, or about
  // kMaxRecords writers.
  static constexpr int kSmallWindow = kWarps * Ratio < kThreads ? kWarps * Ratio : kThreads;
  static constexpr int kLargeWindow = kMaxRecords * Ratio < kThreads ? kMaxRecords * Ratio : kThreads;
  static constexpr int kMaxTokensPerBlock = kLargeWindow;
  // Below this many blocks a larger window would leave SMs idle (about four blocks per SM
  // of a 132-SM GPU).
  static constexpr int64_t kMinBlocks = 512;
  /// The window a launch of `num_tokens` tokens uses: the largest power-of-two multiple of
  /// kSmallWindow (up to kLargeWindow) that still gives kMinBlocks blocks.
  KVC_HOST_DEVICE static constexpr int tokens_per_block(int64_t num_tokens) {
    int w = kSmallWindow;
    while (2 * w <= kLargeWindow && (num_tokens + 2 * w - 1) / (2 * w) >= kMinBlocks) w *= 2;
    return w;
  }
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

/// Op B (rope_quant_insert). The rope style is a run-time choice inside the kernel. Launch
/// with InsertConfig::kThreads threads, tokens_per_block = InsertConfig::tokens_per_block(T)
/// and ceil(T / tokens_per_block) blocks; kvc::insert() does this after validation.
template <int Ratio, int HeadDim, class Layout>
__global__ void __launch_bounds__(InsertConfig<Ratio, HeadDim>::kThreads)
    insert_kernel(const InsertParams p, const int tokens_per_block) {
  using Cfg = InsertConfig<Ratio, HeadDim>;
  using Row = typename Cfg::Row;
  constexpr int E = Cfg::kVecElems;
  constexpr int P = Layout::kRopeDim;
  constexpr int kPieces = HeadDim / E;  // E-element vector pieces of a latent row
  static_assert(Layout::kHeadDim == HeadDim, "layout and kernel head dims differ");

  __shared__ int writer_count;
  __shared__ int32_t writer_token[Cfg::kMaxTokensPerBlock];
  __shared__ int64_t writer_slot[Cfg::kMaxTokensPerBlock];
  __shared__ int64_t writer_group_pos[Cfg::kMaxTokensPerBlock];
  __shared__ __align__(16) uint16_t staged_row[Cfg::kMaxRecords][HeadDim];
  __shared__ float staged_angles[Cfg::kMaxRecords][P];

  const int64_t window = static_cast<int64_t>(blockIdx.x) * tokens_per_block;
  // PDL (LaunchOptions::pdl): nothing global is touched before the previous grid is done.
  arch::wait_for_prior_grids();
  arch::allow_dependent_grids();
  if (threadIdx.x == 0) writer_count = 0;
  __syncthreads();
  // 1. One token per thread: both index loads before any branch; writers compacted.
  if (threadIdx.x < tokens_per_block && window + threadIdx.x < p.num_tokens) {
    const int64_t t = window + threadIdx.x;
    const int64_t slot = p.record.cache_slot.load(t);
    const int64_t pos = p.positions.load(t);
    int64_t group_pos;
    if (detail::record_target<Ratio>(p.record, pos, slot, group_pos)) {
      const int i = atomicAdd(&writer_count, 1);
      writer_token[i] = static_cast<int32_t>(threadIdx.x);
      writer_slot[i] = slot;
      writer_group_pos[i] = group_pos;
    }
  }
  __syncthreads();

  const int lane = threadIdx.x % 32;
  const int count = writer_count;
  const uint16_t* latent = reinterpret_cast<const uint16_t*>(p.latent);
  for (int base = 0; base < count; base += Cfg::kMaxRecords) {
    const int n = count - base < Cfg::kMaxRecords ? count - base : Cfg::kMaxRecords;
    // 2. Stage the rows and the angles: one round trip for the whole batch.
    for (int c = threadIdx.x; c < n * kPieces; c += Cfg::kThreads) {
      const int i = c / kPieces, piece = c % kPieces;
      arch::async_copy<2 * E>(&staged_row[i][piece * E],
                              latent + (window + writer_token[base + i]) * p.latent_stride + piece * E);
    }
    // fp32 tables: asynchronous 4-byte copies. bf16 tables: loads widened to fp32, a few
    // in flight per thread (holding more would cost registers the record phase needs).
    if (p.record.cos_sin_dtype == DType::kFloat32) {
      const float* table = static_cast<const float*>(p.record.cos_sin);
      for (int c = threadIdx.x; c < n * P; c += Cfg::kThreads)
        arch::async_copy<4>(&staged_angles[c / P][c % P],
                            table + writer_group_pos[base + c / P] * p.record.cos_sin_stride + c % P);
    } else {
      constexpr int kInFlight = 4;
      for (int c0 = threadIdx.x; c0 < n * P; c0 += kInFlight * Cfg::kThreads) {
        float angle[kInFlight];
        KVC_PRAGMA_UNROLL
        for (int u = 0; u < kInFlight; ++u) {
          const int c = c0 + u * Cfg::kThreads;
          if (c < n * P)
            angle[u] = detail::load_table(p.record.cos_sin, DType::kBFloat16,
                                          writer_group_pos[base + c / P] * p.record.cos_sin_stride + c % P);
        }
        KVC_PRAGMA_UNROLL
        for (int u = 0; u < kInFlight; ++u) {
          const int c = c0 + u * Cfg::kThreads;
          if (c < n * P) staged_angles[c / P][c % P] = angle[u];
        }
      }
    }
    arch::async_copy_wait_all();
    __syncthreads();
    // 3. One warp per staged record.
    for (int i = threadIdx.x / 32; i < n; i += Cfg::kWarps) {
      Row row;
      row.lane = lane;
      row.sanitize = p.record.sanitize;
      KVC_PRAGMA_UNROLL
      for (int v = 0; v < Row::kVecs; ++v) {
        const Array<uint16_t, E> vec = arch::load<E>(&staged_row[i][Row::run_start(lane, v)]);
        KVC_PRAGMA_UNROLL
        for (int e = 0; e < E; ++e) row.bits[v * E + e] = vec[e];
      }
      const float* table = staged_angles[i];
      const RopeAngles<HeadDim> angles = rope_angles<P, HeadDim, E>(
          lane, p.record.rope_style, [&](int k) { return table[k]; });
      detail::write_record<Layout>(p.record, row, writer_slot[base + i], angles);
    }
    if (base + Cfg::kMaxRecords < count) __syncthreads();  // the next batch reuses the stage
  }
}

}  // namespace kvc
