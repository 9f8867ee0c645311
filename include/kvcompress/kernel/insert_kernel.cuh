// SPDX-License-Identifier: Apache-2.0
// kvcompress — Op B kernel: rope, quantize, insert (contract §2).
//
// Work mapping. A row group of threads (the whole 128-thread block for decode-sized calls,
// a warp for large ones) owns a window of consecutive tokens and shares every record:
// thread k (0 .. InsertConfig::kRowThreads - 1) holds 4 (block) or 16 (warp) of a record's
// 512 channels, so a block rotates and quantizes a record in a quarter of a warp's
// instruction stream (at decode that stream is the critical path, bench/NOTES.md 15).
//  1. one round trip: in every warp, each lane loads its token's cache slot and position,
//     and the warp ballots the tokens that write a record (at ratio R one in R closes a
//     group); every warp finds the same writers, so no barrier is needed;
//  2. per record: the latent row and the angles of its group position in one round trip,
//     the next record's loads issued before the current record is rotated, quantized and
//     stored (vector stores straight from registers).
// Decode-sized windows (a block per record, at most kSpeculativeRows tokens: ratios 1 and
// 2) load every latent row of the window in step 1, next to the indices, before anyone
// knows which token writes (at most one row more than needed), then the angles of each
// writer as soon as the positions are in, and store the NoPE segments before rotating: the
// NoPE channels' chain is then one round trip and a store, the RoPE channels' two.
// The window is a launch argument: R tokens for small calls (decode: one record per row
// group, the work spread over many blocks), growing to 32 for large calls while the call
// still fills the GPU, so a row group keeps several records in flight.
#pragma once

#include "../config.hpp"

#include <cstdint>

#include "../arch/memory.cuh"
#include "../arch/pdl.cuh"
#include "../core/array.hpp"
#include "../core/bit.hpp"
#include "../layout/cache.hpp"
#include "insert_params.hpp"
#include "record_writer.cuh"
#include "row_fragment.cuh"
#include "wave_rule.hpp"

KVC_NAMESPACE_BEGIN

/// Op B calls of at least this many tokens hold a record per warp (enough records to fill
/// the GPU with warps); smaller ones (decode steps) spread a record over kRowThreads threads.
/// Measured on the H200 (bench/NOTES.md 15): block records are faster up to 768 tokens
/// (spec 128x6), warp records from 4096 (decode 1024x4).
constexpr int64_t kWarpRecordMinTokens = 2048;

/// Compile-time shape of the Op B kernel. RowThreads: threads per record, 0 for the default
/// (default_row_threads: 128 at head dim 512) or 32; the launch picks one by call size.
template <int Ratio, int HeadDim, int RowThreads = 0>
struct InsertConfig {
  static_assert(Ratio >= 1, "compress ratio must be >= 1");
  static_assert(HeadDim % 64 == 0 && HeadDim >= 64,
                "head dim must be a multiple of 64 (each thread holds whole bf16 pairs of a row)");
  static constexpr int kRowThreads = RowThreads > 0 ? RowThreads : default_row_threads(HeadDim);
  static_assert(kRowThreads == 32 || kRowThreads == 64 || kRowThreads == 128,
                "a record is held by 32, 64 or 128 threads");
  static constexpr int kVecElems = largest_pow2_divisor(HeadDim / kRowThreads, 8);  // bf16 per access
  // The block: one record's threads, or 4 warps of a record each.
  static constexpr int kWarps = kRowThreads > 32 ? kRowThreads / 32 : 4;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kGroups = kThreads / kRowThreads;  // row groups (windows) per block
  // Tokens per window: at least one record's worth (R, capped at a lane each), at most 32.
  static constexpr int kSmallWindow = Ratio < 32 ? Ratio : 32;
  static constexpr int kLargeWindow = 32;
  /// Windows of at most this many tokens load their latent rows with the indices (0: never):
  /// block records at ratios 1 and 2, where a window holds one record and one spare row.
  static constexpr int kSpeculativeRows = kRowThreads > 32 && kSmallWindow <= 2 ? kSmallWindow : 0;
  // Below this many blocks a larger window would leave warps idle (about eight 4-warp blocks
  // per SM of a 132-SM GPU); the rule when the GPU's size is not known.
  static constexpr int64_t kMinBlocks = 1024;
  /// The windows of a launch of `num_tokens` tokens (the kernel's launch argument): a
  /// power-of-two multiple of kSmallWindow up to kLargeWindow. `wave_blocks`: how many blocks
  /// of this kernel the GPU runs at once (SMs x resident blocks per SM; 0 when unknown).
  /// Known: the largest window whose blocks still fill 7/8 of a wave — one wave of
  /// two-record warps beats two waves of one-record warps, while a half-filled wave of
  /// longer pipelines is slower than a second, nearly empty wave (bench/NOTES.md 35) — and
  /// where those windows need between one and two waves, twice that window for the first
  /// ones, so the launch is one wave (NOTES 41; detail::window_sizes). Unknown: the largest
  /// window that still gives kMinBlocks blocks. Block records (kRowThreads > 32) never
  /// split: their kernel reads only `window` (bench/NOTES.md 44).
  KVC_HOST_DEVICE static constexpr detail::WindowSizes windows(int64_t num_tokens, int64_t wave_blocks = 0) {
    detail::WindowSizes w =
        detail::window_sizes(num_tokens, kSmallWindow, kLargeWindow, kGroups, wave_blocks, kMinBlocks);
    if (kRowThreads > 32) w.wide = 0;
    return w;
  }
  /// The window of windows() (its first `wide` windows are twice as long).
  KVC_HOST_DEVICE static constexpr int tokens_per_window(int64_t num_tokens, int64_t wave_blocks = 0) {
    return windows(num_tokens, wave_blocks).window;
  }
  /// Blocks of a launch of `num_tokens` tokens in windows `w`.
  KVC_HOST_DEVICE static constexpr int64_t blocks(int64_t num_tokens, detail::WindowSizes w) {
    return (w.count(num_tokens) + kGroups - 1) / kGroups;
  }
  using Row = RowFragment<HeadDim, kVecElems, kRowThreads>;
};

namespace detail {

/// Whether a token at `pos` with cache slot `slot` writes a record; also returns its group
/// position (the rope position). A token with a slot is skipped, and counted in `errors`
/// when given (one thread per token passes it), when its position is negative, its slot lies
/// past the cache's bound (num_pages) or its group position past the table (contract §4.3).
template <int Ratio>
KVC_DEVICE bool record_target(const RecordArgs& r, int64_t pos, int64_t slot, int64_t& group_pos,
                              ErrorCounters* errors = nullptr) {
  if (slot < 0) return false;
  if (pos < 0) {
    count_error(errors, &ErrorCounters::position_out_of_range);
    return false;
  }
  if ((pos + 1) % Ratio != 0) return false;
  if (r.cache.num_pages >= 0 && slot >= r.cache.num_pages * r.cache.block_size) {
    count_error(errors, &ErrorCounters::cache_slot_out_of_range);
    return false;
  }
  group_pos = (pos / Ratio) * Ratio;
  if (group_pos >= r.cos_sin_rows) {
    count_error(errors, &ErrorCounters::position_out_of_range);
    return false;
  }
  return true;
}

/// record_target for the tokens of a warp's lanes at once (Op B's phase 1), without a
/// branch per lane, in two steps. This first one reads only parameters of the first round
/// trip (their constant-cache lines are read before the PDL wait, arch/pdl.cuh): whether the
/// lane's token closes a group at a position inside the cos/sin table (a candidate), and its
/// group position. Lanes without a token pass slot -1.
template <int Ratio>
KVC_DEVICE bool record_candidate(const RecordArgs& r, int64_t pos, int64_t slot, int64_t& group_pos) {
  const bool closes = slot >= 0 && pos >= 0 && (pos + 1) % Ratio == 0;
  group_pos = (pos / Ratio) * Ratio;
  return closes && group_pos < r.cos_sin_rows;
}

/// The second step: the lanes whose candidate token writes a record (its slot inside the
/// cache's bound, num_pages), as a ballot; skips of both steps are counted as record_target
/// counts them, by the lane with `counter` set, only when `errors` is given. It reads the
/// parameters' last line (record.cache, errors), whose constant-cache miss comes after the
/// wait: call it after the candidates' loads are issued, so the miss overlaps them (it cost
/// Op B 4-6 % at decode where it preceded them, bench/NOTES.md 30). Every lane of the warp
/// calls it.
template <int Ratio>
KVC_DEVICE unsigned record_writers_warp(const RecordArgs& r, int64_t pos, int64_t slot, bool candidate,
                                        ErrorCounters* errors, bool counter) {
  const bool in_cache = r.cache.num_pages < 0 || slot < r.cache.num_pages * r.cache.block_size;
  if (errors != nullptr) {  // uniform
    const bool has_slot = slot >= 0;
    const bool closes = has_slot && pos >= 0 && (pos + 1) % Ratio == 0;
    // A closing token that is no candidate lies past the table (the cache bound is checked first).
    const unsigned pos_bad =
        __ballot_sync(0xffffffffu, (has_slot && pos < 0) || (closes && in_cache && !candidate));
    const unsigned cache_bad = __ballot_sync(0xffffffffu, closes && !in_cache);
    if (counter && pos_bad != 0u) atomicAdd(&errors->position_out_of_range, __popc(pos_bad));
    if (counter && cache_bad != 0u) atomicAdd(&errors->cache_slot_out_of_range, __popc(cache_bad));
  }
  return __ballot_sync(0xffffffffu, candidate && in_cache);
}

/// The angles of a record's group position, for thread `lane` of the threads holding rows
/// as Row.
template <class Layout, class Row>
KVC_DEVICE RopeAngles<Row> record_angles(const RecordArgs& r, int lane, int64_t group_pos) {
  return load_rope_angles<Layout::kRopeDim, Row>(lane, r.rope_style, r.cos_sin, r.cos_sin_dtype,
                                                 r.cos_sin_stride_elems, group_pos);
}

/// Page and row of a record slot (>= 0): a shift and a mask for power-of-two block sizes
/// (vLLM's 64), a 64-bit division otherwise.
KVC_DEVICE void split_slot(const CacheParams& c, int64_t slot, int64_t& page, int64_t& row) {
  if (is_pow2(c.block_size)) {
    page = slot >> lowest_bit(static_cast<uint32_t>(c.block_size));
    row = slot & (c.block_size - 1);
  } else {
    page = slot / c.block_size;
    row = slot % c.block_size;
  }
}

/// Rope + record store of one row held by the row's threads (all of them call it).
/// NopeFirst: the segments of NoPE channels only are stored before the rotation, so they
/// need not wait for angles still in flight (the bytes are the same either way).
template <class Layout, bool NopeFirst = false, class Row>
KVC_DEVICE void write_record(const RecordArgs& r, Row& row, int64_t slot, const RopeAngles<Row>& angles) {
  int64_t page, record;
  if constexpr (NopeFirst) {
    split_slot(r.cache, slot, page, record);
    store_record<Layout, RecordPart::kNopeSegments>(r.cache, page, record, row);
    apply_rope<Layout::kRopeDim>(row, r.rope_style, angles);
    store_record<Layout, RecordPart::kOtherSegments>(r.cache, page, record, row);
  } else {
    apply_rope<Layout::kRopeDim>(row, r.rope_style, angles);
    split_slot(r.cache, slot, page, record);
    store_record<Layout>(r.cache, page, record, row);
  }
}

}  // namespace detail

/// Op B (rope_quant_insert). The rope style is a run-time choice inside the kernel. Launch
/// with InsertConfig<..., RowThreads>::kThreads threads, `windows` =
/// InsertConfig::windows(T, wave_blocks) and InsertConfig::blocks(T, windows) blocks;
/// kvc::insert() does this after validation, with RowThreads = 32 from kWarpRecordMinTokens
/// tokens.
template <int Ratio, int HeadDim, class Layout, int RowThreads = 0>
__global__ void __launch_bounds__(InsertConfig<Ratio, HeadDim, RowThreads>::kThreads)
    insert_kernel(const InsertParams p, const detail::WindowSizes windows) {
  using Cfg = InsertConfig<Ratio, HeadDim, RowThreads>;
  using Row = typename Cfg::Row;
  constexpr int E = Cfg::kVecElems;
  constexpr unsigned kAll = 0xffffffffu;
  static_assert(Layout::kHeadDim == HeadDim, "layout and kernel head dims differ");

  const int lane = threadIdx.x % 32;                // one token per lane
  const int thread = threadIdx.x % Cfg::kRowThreads;  // channel slice of every record
  // This row group's window (launch order: block, then row group), <= 32 tokens. Block
  // records (decode steps) are launched without the wave, so their windows are uniform
  // (windows.wide == 0): kept out of their code, whose schedule the split's selects
  // lengthened by 10-16 % at ratio 2 (bench/NOTES.md 44).
  constexpr bool kUniform = Cfg::kRowThreads > 32;
  const int64_t w = static_cast<int64_t>(blockIdx.x) * Cfg::kGroups + threadIdx.x / Cfg::kRowThreads;
  const int window = kUniform ? windows.window : windows.size(w);
  const int64_t w0 = kUniform ? w * windows.window : windows.first_token(w);
  // Uniform over the record's threads (a warp or the block). Decided before the PDL wait,
  // so the parameters' constant-cache misses come before it (arch/pdl.cuh).
  if ((w0 >= p.num_tokens) | !required_pointers_set(p)) return;
  // PDL (LaunchOptions::pdl): nothing global is touched before the previous grid is done.
  arch::wait_for_prior_grids();
  arch::allow_dependent_grids();

  // 1. One token per lane: slot and position together, then the writers of the window
  // (the same in every warp of the row group).
  int64_t slot = -1, pos = 0, group_pos = 0;
  if (lane < window && w0 + lane < p.num_tokens) {
    slot = p.record.cache_slot.load(w0 + lane);
    pos = p.positions.load(w0 + lane);
  }
  const uint16_t* latent = reinterpret_cast<const uint16_t*>(p.latent);
  const auto load_row = [&](int src) {
    Row row;
    row.lane = thread;
    row.sanitize = p.record.sanitize;
    const uint16_t* src_row = latent + (w0 + src) * p.latent_stride_elems;
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Row::kVecs; ++v) {
      const Array<uint16_t, E> vec = arch::load_readonly<E>(src_row + Row::run_start(thread, v));
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) row.bits[v * E + e] = vec[e];
    }
    return row;
  };
  const auto angles_of = [&](int src) {
    return detail::record_angles<Layout, Row>(p.record, thread, __shfl_sync(kAll, group_pos, src));
  };

  if constexpr (Cfg::kSpeculativeRows > 0) {
    if (window <= Cfg::kSpeculativeRows) {  // uniform over the record's threads
      constexpr int S = Cfg::kSpeculativeRows;
      // The window's rows before the decisions (issued right after the index loads above).
      // Past the call's last token: that token's row again (only a writer's row is used).
      Row rows[S];
      KVC_PRAGMA_UNROLL
      for (int j = 0; j < S; ++j) rows[j] = load_row(w0 + j < p.num_tokens ? j : static_cast<int>(p.num_tokens - 1 - w0));
      const bool candidate = detail::record_candidate<Ratio>(p.record, pos, slot, group_pos);
      const unsigned candidates = __ballot_sync(kAll, candidate);
      RopeAngles<Row> angles[S];
      KVC_PRAGMA_UNROLL
      for (int j = 0; j < S; ++j)
        if (candidates >> j & 1u) angles[j] = angles_of(j);
      // The row group's first thread counts skipped tokens (every warp sees the same ones).
      const unsigned writers =
          detail::record_writers_warp<Ratio>(p.record, pos, slot, candidate, p.errors, thread == 0);
      if (writers == 0u) return;  // uniform over the record's threads
      // One copy of the record code: the writer's row and angles by element-wise selects.
#pragma unroll 1
      for (unsigned mask = writers; mask != 0u; mask &= mask - 1u) {
        const int j = __ffs(mask) - 1;
        Row row = rows[0];
        RopeAngles<Row> a = angles[0];
        KVC_PRAGMA_UNROLL
        for (int k = 1; k < S; ++k) {
          KVC_PRAGMA_UNROLL
          for (int c = 0; c < Row::kChannels; ++c) {
            row.bits[c] = j == k ? rows[k].bits[c] : row.bits[c];
            a.cos[c] = j == k ? angles[k].cos[c] : a.cos[c];
            a.sin[c] = j == k ? angles[k].sin[c] : a.sin[c];
          }
        }
        detail::write_record<Layout, true>(p.record, row, __shfl_sync(kAll, slot, j), a);
      }
      return;
    }
  }

  // The row group's first thread counts skipped tokens (every warp sees the same ones).
  const bool candidate = detail::record_candidate<Ratio>(p.record, pos, slot, group_pos);
  unsigned writers =
      detail::record_writers_warp<Ratio>(p.record, pos, slot, candidate, p.errors, thread == 0);
  if (writers == 0u) return;  // uniform over the record's threads

  // 2. Records one after another, each one's loads in flight while the previous is written.
  struct Fetched {
    Row row;
    RopeAngles<Row> angles;
    int64_t slot;
  };
  const auto fetch = [&](unsigned& mask) {
    const int src = __ffs(mask) - 1;
    mask &= mask - 1u;
    Fetched f;
    f.slot = __shfl_sync(kAll, slot, src);
    f.row.lane = thread;
    f.row.sanitize = p.record.sanitize;
    const uint16_t* src_row = latent + (w0 + src) * p.latent_stride_elems;
    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Row::kVecs; ++v) {
      const Array<uint16_t, E> vec = arch::load_readonly<E>(src_row + Row::run_start(thread, v));
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e) f.row.bits[v * E + e] = vec[e];
    }
    // After the row's loads (the angles' uniform branches would otherwise hold them back).
    f.angles =
        detail::record_angles<Layout, Row>(p.record, thread, __shfl_sync(kAll, group_pos, src));
    return f;
  };
  Fetched current = fetch(writers);
  while (true) {
    const bool more = writers != 0u;
    Fetched next;
    if (more) next = fetch(writers);
    detail::write_record<Layout>(p.record, current.row, current.slot, current.angles);
    if (!more) break;
    current = next;
  }
}

KVC_NAMESPACE_END
