// SPDX-License-Identifier: Apache-2.0
// Adversarial tier (issue 13): the batch every case starts from, its ownership map, and the
// skip counts the kernels' contract (contract §4.3, core/error_counters.hpp) predicts.
//
// Host-only: plain vectors in the library's conventions (fp32 kv_score rows, int64
// positions and slots, int32 qsl / req, bf16 bits), and the three ops' Params structs.
// Device memory and the launch are in harness.cuh.
#pragma once

#include <kvcompress/kernel/insert_params.hpp>
#include <kvcompress/kernel/fused_params.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace adv {

enum class Op { kCompress, kInsert, kFused };

inline const char* op_letter(Op op) {
  return op == Op::kCompress ? "A" : op == Op::kInsert ? "B" : "F";
}

constexpr int kHeadDim = 512;
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t k2p61 = int64_t{1} << 61;

inline uint16_t bf16_bits(float x) {  // round to nearest even; inputs here are finite or inf/NaN
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/// One case's host data. The default batch (make_scenario) has three requests, each with a
/// ring block and a cache page of its own, and as many blocks / pages again that belong to
/// no request of the call ("foreign": another request's state; they must keep their bytes):
///   request 0: 2R+1 tokens from position R+1 (odd start: its head group reads the ring;
///              at R = 4 the chunk is longer than the ring, so a store collides with a read),
///   request 1: one decode token at position 3R-1 (closes a group, reads R-1 ring rows),
///   request 2: 2R+2 tokens from position 0 (a prefill, leaves an open group),
///   2 trailing padding tokens (slot -1, positions that would close a group).
/// Ring: C = 8 rows per block, 6 blocks, rows of 2 * 512 fp32, pages padded to 8208
/// elements as vLLM pads them; requests own blocks 1, 3, 5. Cache: fp8_ds_mla, 64 records
/// per page, 6 pages of 37440 bytes (vLLM's padding); requests own pages 4, 1, 2.
struct Scenario {
  Op op = Op::kCompress;
  int ratio = 2;
  int64_t num_tokens = 0;

  std::vector<int64_t> positions, ring_slot, cache_slot;  // [T]
  std::vector<int32_t> qsl, req;                          // [num_reqs + 1], [T]
  std::vector<float> kv_score;                            // [T, kv_stride]
  int64_t kv_stride = 0;
  std::vector<uint16_t> latent_in;                        // Op B input [T, latent_stride_elems]
  int64_t latent_stride_elems = kHeadDim + 8;                   // padding columns must keep their bytes
  std::vector<uint16_t> weight;                           // [D] bf16
  std::vector<float> cos_sin;                             // [cos_sin_rows, 64]
  int64_t cos_sin_rows = 64;

  // Ring geometry (elements) and ownership.
  int capacity = 8;
  int64_t ring_blocks = 6;
  int64_t ring_row_stride = 2 * kHeadDim;
  int64_t ring_page_stride = 8 * 2 * kHeadDim + 16;
  std::vector<int64_t> own_blocks{1, 3, 5};  // request r's block (R > 1; R = 1 has no ring)
  bool ring_nan_own = false;                 // own blocks start as NaN rows instead of poison

  // Cache geometry (bytes) and ownership.
  int block_size = 64;
  int64_t pages = 6;
  int64_t cache_page_stride = 37440;
  std::vector<int64_t> own_pages{4, 1, 2};

  // Tokens the cases pick on.
  int t_mid0 = 0;   // request 0's first closing token (position 2R-1; R = 1: its first token)
  int t_last0 = 0;  // request 0's last token (stored to the ring)
  int t_dec = 0;    // request 1's decode token (position 3R-1, closes)
  int t_req2 = 0;   // request 2's first token (position 0)

  int num_reqs() const { return static_cast<int>(qsl.size()) - 1; }
  int64_t row_width() const { return ratio > 1 ? 2 * kHeadDim : kHeadDim; }
  int64_t ring_elems() const { return ring_blocks * ring_page_stride; }
  int64_t cache_bytes() const { return pages * cache_page_stride; }
  int request_of(int t) const { return req[static_cast<size_t>(t)]; }

  /// Ring slot of token t at its position, in its request's own block.
  int64_t own_ring_slot(int t) const {
    const int64_t p = positions[static_cast<size_t>(t)];
    const int64_t row = ((p % capacity) + capacity) % capacity;
    return own_blocks[static_cast<size_t>(request_of(t))] * capacity + row;
  }
  /// Cache slot of token t: its request's page, row = group index mod block size.
  int64_t own_cache_slot(int t) const {
    const int64_t g = positions[static_cast<size_t>(t)] / ratio;
    const int64_t row = ((g % block_size) + block_size) % block_size;
    return own_pages[static_cast<size_t>(request_of(t))] * block_size + row;
  }
  /// Recomputes the slots of the real tokens (after positions or the capacity changed).
  void reslot() {
    const int end = qsl.back();
    for (int t = 0; t < end; ++t) {
      ring_slot[static_cast<size_t>(t)] = own_ring_slot(t);
      cache_slot[static_cast<size_t>(t)] = own_cache_slot(t);
    }
  }
  /// Ring capacity C: rows per block, pages padded by 16 elements; slots follow.
  void set_capacity(int c) {
    capacity = c;
    ring_page_stride = int64_t{std::max(c, 1)} * ring_row_stride + 16;
    if (c >= 1) reslot();  // capacity 0 (rejected by validation) keeps the old slots
  }
  /// Ring slot of position p in foreign block 2 (a block no request of the call owns).
  int64_t foreign_ring_slot(int64_t p) const { return 2 * capacity + p % capacity; }
  /// Cache slot of a record in foreign page 0.
  int64_t foreign_cache_slot(int row) const { return row; }
};

inline Scenario make_scenario(Op op, int ratio, uint64_t seed) {
  Scenario s;
  s.op = op;
  s.ratio = ratio;
  const int R = ratio;
  struct Req {
    int len;
    int64_t start;
  };
  const Req reqs[3] = {{R == 1 ? 3 : 2 * R + 1, R == 1 ? 2 : R + 1},
                       {1, R == 1 ? 2 : 3 * R - 1},
                       {R == 1 ? 4 : 2 * R + 2, 0}};
  s.qsl.push_back(0);
  for (int r = 0; r < 3; ++r) {
    for (int i = 0; i < reqs[r].len; ++i) {
      s.positions.push_back(reqs[r].start + i);
      s.req.push_back(r);
    }
    s.qsl.push_back(static_cast<int32_t>(s.positions.size()));
  }
  s.t_mid0 = R == 1 ? 0 : R - 2;
  s.t_last0 = s.qsl[1] - 1;
  s.t_dec = s.qsl[1];
  s.t_req2 = s.qsl[2];
  for (int i = 0; i < 2; ++i) {  // trailing padding
    s.positions.push_back(int64_t{3 + i} * R + R - 1);
    s.req.push_back(2);
  }
  s.num_tokens = static_cast<int64_t>(s.positions.size());
  s.ring_slot.assign(s.positions.size(), -1);
  s.cache_slot.assign(s.positions.size(), -1);
  s.reslot();

  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> kv(-2.f, 2.f), score(-4.f, 4.f), w(-1.5f, 1.5f);
  s.kv_stride = s.row_width();
  s.kv_score.resize(static_cast<size_t>(s.num_tokens * s.kv_stride));
  for (int64_t t = 0; t < s.num_tokens; ++t) {
    float* row = &s.kv_score[static_cast<size_t>(t * s.kv_stride)];
    for (int d = 0; d < kHeadDim; ++d) row[d] = kv(rng);
    if (R > 1)
      for (int d = 0; d < kHeadDim; ++d) row[kHeadDim + d] = score(rng);
  }
  s.latent_in.resize(static_cast<size_t>(s.num_tokens * s.latent_stride_elems));
  for (size_t i = 0; i < s.latent_in.size(); ++i) {
    const int64_t col = static_cast<int64_t>(i) % s.latent_stride_elems;
    s.latent_in[i] = col < kHeadDim ? bf16_bits(std::ldexp(kv(rng), static_cast<int>(rng() % 12) - 6))
                                    : static_cast<uint16_t>(rng());
  }
  s.weight.resize(kHeadDim);
  for (auto& x : s.weight) x = bf16_bits(w(rng));
  s.cos_sin.resize(static_cast<size_t>(s.cos_sin_rows * 64));
  for (int64_t p = 0; p < s.cos_sin_rows; ++p)
    for (int i = 0; i < 32; ++i) {
      const double theta = std::pow(10000.0, -2.0 * i / 64.0);
      s.cos_sin[static_cast<size_t>(p * 64 + i)] = static_cast<float>(std::cos(p * theta));
      s.cos_sin[static_cast<size_t>(p * 64 + 32 + i)] = static_cast<float>(std::sin(p * theta));
    }
  return s;
}

/// The Params of one call, as the harness builds them from a Scenario's device copies
/// (both bounds given: ring_layout.num_blocks and record.cache.num_pages, as the torch op
/// passes them). A case's `tweak` edits them before the call.
struct Launch {
  Op op = Op::kCompress;
  kvc::CompressParams a;  // Op A, and the compress half of the fused op
  kvc::InsertParams b;    // Op B; b.record is also the fused op's record half
  kvc::FusedParams fused() const { return kvc::FusedParams{a, b.record}; }
  kvc::ErrorCounters* errors() const { return op == Op::kInsert ? b.errors : a.errors; }
  void set_errors(kvc::ErrorCounters* e) {
    a.errors = e;
    b.errors = e;
  }
  void set_num_tokens(int64_t t) {
    a.num_tokens = t;
    b.num_tokens = t;
  }
};

/// Counts of skipped tokens (the fields of kvc::ErrorCounters, host copy).
struct Counts {
  unsigned ring = 0, cache = 0, position = 0, non_finite = 0;
  bool operator==(const Counts& o) const {
    return ring == o.ring && cache == o.cache && position == o.position && non_finite == o.non_finite;
  }
  std::string str() const {
    return "{ring=" + std::to_string(ring) + " cache=" + std::to_string(cache) +
           " pos=" + std::to_string(position) + " nonfinite=" + std::to_string(non_finite) + "}";
  }
};

/// What the kernels' skip rules (issue 13) count for the call `l` on the data of `s`:
///   Op A / fused: a token with ring slot s >= 0 is padding when R > 1, num_blocks >= 0 and
///     s >= num_blocks * C (ring_slot_out_of_range), or when its position is negative
///     (position_out_of_range); a token of an unknown request (req outside 0..num_reqs-1)
///     is padding, not counted.
///   Op B: a token with cache slot >= 0 and a negative position (position); a closing
///     token with slot >= num_pages * B (cache_slot_out_of_range), else one whose group
///     position is >= cos_sin_rows (position).
///   Fused records: the Op B rules for the closing tokens Op A kept.
/// Every skipped token once. Finite inputs: no non-finite rows.
inline Counts expected_counts(const Scenario& s, const Launch& l) {
  Counts c;
  const int R = s.ratio;
  // The call's token count, within the data (a case may claim more tokens than there are;
  // validation rejects those).
  const int64_t T = std::min(l.op == Op::kInsert ? l.b.num_tokens : l.a.num_tokens, s.num_tokens);
  const kvc::RecordArgs& rec = l.b.record;
  const auto closes = [R](int64_t p) { return p >= 0 && p % R == R - 1; };  // (p+1) % R == 0, no overflow
  const auto record = [&](int64_t p, int64_t slot) {
    if (slot < 0) return;
    if (p < 0) {
      ++c.position;
      return;
    }
    if (!closes(p)) return;
    if (rec.cache.num_pages >= 0 && slot >= rec.cache.num_pages * rec.cache.block_size) {
      ++c.cache;
      return;
    }
    if ((p / R) * R >= rec.cos_sin_rows) ++c.position;
  };
  for (int64_t t = 0; t < T; ++t) {
    const size_t i = static_cast<size_t>(t);
    const int64_t p = s.positions[i];
    if (l.op == Op::kInsert) {
      record(p, s.cache_slot[i]);
      continue;
    }
    const int64_t slot = s.ring_slot[i];
    if (slot < 0) continue;
    const kvc::RingLayout& ring = l.a.ring_layout;
    if (R > 1 && ring.num_blocks >= 0 && slot >= ring.num_blocks * ring.capacity) {
      ++c.ring;
      continue;
    }
    if (p < 0) {
      ++c.position;
      continue;
    }
    if (R > 1 && (s.req[i] < 0 || s.req[i] >= l.a.qsl_size - 1)) continue;
    if (l.op == Op::kFused && closes(p)) record(p, s.cache_slot[i]);
  }
  return c;
}

}  // namespace adv
