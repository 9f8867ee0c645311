// SPDX-License-Identifier: Apache-2.0
// Adversarial tier: the case table. Host-only (no CUDA call): the parent process lists and
// names the cases before it starts any child.
//
// A case is an op, a ratio, an edit of the default batch's data (`setup`, scenario.hpp)
// and an edit of the Params the harness builds from it (`tweak`), and a kind that says
// which rule it is held to (main.cu, evaluate()):
//   kBaseline  a valid call: success, nothing outside its own rows, counters all zero, and
//              it writes something (the harness's own check);
//   kCounted   slots / positions the kernels skip (issue 13): the general rule, and the
//              counters equal expected_counts();
//   kGeneric   anything else: host-rejected => nothing written at all; otherwise nothing in
//              guards, padding, inputs or foreign rows (own rows may hold anything);
//   kNoop      T = 0: success and not one byte written;
//   kStale     a non-sticky CUDA error is pending before the call: success, and the same
//              bytes as a run of the same case without it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "adversarial/scenario.hpp"

namespace adv {

enum class Kind { kBaseline, kCounted, kGeneric, kNoop, kStale };

struct Case {
  std::string name;
  Op op = Op::kCompress;
  int ratio = 2;
  Kind kind = Kind::kGeneric;
  std::function<void(Scenario&)> setup;  // edits the data before the upload
  std::function<void(Launch&)> tweak;    // edits the Params after the build
  std::string note;                      // printed with the result
};

namespace detail {

template <class T>
T* byte_offset(T* p, int bytes) {
  using Byte = std::conditional_t<std::is_const<T>::value, const char, char>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) + bytes);
}
inline const void* byte_offset(const void* p, int bytes) { return static_cast<const char*>(p) + bytes; }
inline void* byte_offset(void* p, int bytes) { return static_cast<char*>(p) + bytes; }

inline float& kv(Scenario& s, int t, int d) { return s.kv_score[static_cast<size_t>(t * s.kv_stride + d)]; }
inline float& score(Scenario& s, int t, int d) { return kv(s, t, kHeadDim + d); }
inline uint16_t& lat(Scenario& s, int t, int d) { return s.latent_in[static_cast<size_t>(t * s.latent_stride_elems + d)]; }
inline void slot(std::vector<int64_t>& v, int t, int64_t x) { v[static_cast<size_t>(t)] = x; }

// A ring slot value for token t (its position picks the row of the aliasing slot).
using SlotValue = std::function<int64_t(const Scenario&, int t)>;

}  // namespace detail

inline std::vector<Case> make_cases() {
  using namespace detail;
  std::vector<Case> v;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const auto add = [&](Op op, int R, Kind kind, const std::string& what, std::function<void(Scenario&)> setup,
                       std::function<void(Launch&)> tweak = {}, const std::string& note = "") {
    Case c;
    c.name = std::string(op_letter(op)) + ".r" + std::to_string(R) + "." + what;
    c.op = op;
    c.ratio = R;
    c.kind = kind;
    c.setup = std::move(setup);
    c.tweak = std::move(tweak);
    c.note = note;
    v.push_back(std::move(c));
  };
  const Op kA = Op::kCompress, kB = Op::kInsert, kF = Op::kFused;
  const std::string reject = "expect: host rejects";
  const std::string broken = "caller contract broken: own rows may hold anything";

  // --- Baselines: the harness's control (valid batches, both bounds given).
  for (Op op : {kA, kB, kF})
    for (int R : {1, 2, 4}) add(op, R, Kind::kBaseline, "valid", {});

  // --- Ring slots out of range (Op A, fused): tokens t_mid0 (closes), t_last0 (stored to
  // the ring), t_dec (closes, reads the ring) get the value; each is padding, counted once.
  const std::vector<std::pair<std::string, SlotValue>> ring_values = {
      {"one_past_end", [](const Scenario& s, int) { return s.ring_blocks * s.capacity; }},
      {"int64_max", [](const Scenario&, int) { return kInt64Max; }},
      {"2p61", [](const Scenario&, int) { return k2p61; }},
      // block_of = 2^58 + 2; with 8208-element pages (2^58 * 8208 * 4 bytes = 513 * 2^64)
      // the unchecked address wraps onto foreign block 2, row pos % C.
      {"2p61_plus_foreign_slot",
       [](const Scenario& s, int t) { return k2p61 + s.foreign_ring_slot(s.positions[static_cast<size_t>(t)]); }},
      {"negative_not_minus1", [](const Scenario& s, int t) {
         return t == s.t_mid0 ? -2 : t == s.t_dec ? kInt64Min : int64_t{-1000};
       }}};
  for (Op op : {kA, kF})
    for (int R : {2, 4})
      for (const auto& rv : ring_values) {
        const SlotValue f = rv.second;
        add(op, R, Kind::kCounted, "ring_slot." + rv.first, [f](Scenario& s) {
          for (int t : {s.t_mid0, s.t_last0, s.t_dec}) slot(s.ring_slot, t, f(s, t));
        }, {}, rv.first == "negative_not_minus1" ? "padding: nothing counted" : "");
      }
  for (Op op : {kA, kF})
    add(op, 1, Kind::kCounted, "ring_slot.int64_max", [](Scenario& s) {
      for (int t : {s.t_mid0, s.t_dec}) slot(s.ring_slot, t, kInt64Max);
    }, {}, "ratio 1 has no ring: the slot only marks padding, nothing skipped");

  // --- Cache slots out of range (Op B, fused): t_mid0 and t_dec close, t_nc does not (R > 1;
  // at R = 1 every token closes: t_last0). Closing tokens past num_pages * B are counted.
  const std::vector<std::pair<std::string, SlotValue>> cache_values = {
      {"one_past_end", [](const Scenario& s, int) { return s.pages * s.block_size; }},
      {"int64_max", [](const Scenario&, int) { return kInt64Max; }},
      {"2p61", [](const Scenario&, int) { return k2p61; }},
      {"2p61_plus_foreign_slot", [](const Scenario& s, int t) { return k2p61 + s.foreign_cache_slot(t % 64); }},
      // With 37888-byte pages (2^10 * 37) page 2^54 + 0 wraps onto foreign page 0 exactly.
      {"wraps_onto_foreign_page", [](const Scenario& s, int t) {
         return (int64_t{1} << 54) * s.block_size + s.foreign_cache_slot(t % 64);
       }},
      {"negative_not_minus1", [](const Scenario& s, int t) {
         return t == s.t_mid0 ? -2 : t == s.t_dec ? kInt64Min : int64_t{-1000};
       }}};
  for (Op op : {kB, kF})
    for (int R : {1, 2, 4})
      for (const auto& cv : cache_values) {
        if (op == kF && R != 2 && cv.first != "one_past_end" && cv.first != "wraps_onto_foreign_page") continue;
        const SlotValue f = cv.second;
        const bool wraps = cv.first == "wraps_onto_foreign_page";
        add(op, R, Kind::kCounted, "cache_slot." + cv.first, [f, wraps](Scenario& s) {
          if (wraps) s.cache_page_stride = 37888;
          const int t_nc = s.ratio > 1 ? s.t_mid0 + 1 : s.t_last0;
          for (int t : {s.t_mid0, s.t_dec, t_nc}) slot(s.cache_slot, t, f(s, t));
        }, {}, cv.first == "negative_not_minus1" ? "no record: nothing counted" : "");
      }

  // --- Negative positions (slots valid): -1 on the decode token, INT64_MIN and -2R inside
  // request 0. Op A / fused: padding; Op B: no record; each counted once.
  for (Op op : {kA, kB, kF})
    for (int R : {1, 2, 4})
      add(op, R, Kind::kCounted, "position.negative", [](Scenario& s) {
        s.positions[static_cast<size_t>(s.t_dec)] = -1;
        s.positions[static_cast<size_t>(s.t_mid0)] = kInt64Min;
        s.positions[static_cast<size_t>(s.t_last0)] = -2 * s.ratio;
      }, {}, "request 0's positions also stop being consecutive: " + broken);

  // --- Positions past the rotary table (cos_sin_rows = 64).
  for (Op op : {kA, kB, kF})
    for (int R : {1, 2, 4})
      add(op, R, Kind::kCounted, "position.past_cos_sin_rows", [](Scenario& s) {
        s.positions[static_cast<size_t>(s.t_dec)] = 1000 * s.ratio - 1;  // a decode step far along
        s.reslot();
      }, {}, op == kA ? "Op A reads no table: nothing counted" : "");
  for (Op op : {kA, kB, kF})
    add(op, 2, Kind::kCounted, "position.int64_max", [](Scenario& s) {
      s.positions[static_cast<size_t>(s.t_dec)] = kInt64Max;
      s.reslot();
    }, {}, "pos + 1 overflows int64; the token closes a group (INT64_MAX % R == R - 1)");
  for (Op op : {kB, kF})
    add(op, 2, Kind::kCounted, "cos_sin_rows_2", {}, [](Launch& l) { l.b.record.cos_sin_rows = 2; },
        "every group from position 2 on has no angles");

  // --- Positions that break the caller's contract (not negative).
  for (Op op : {kA, kF})
    for (int R : {2, 4}) {
      add(op, R, Kind::kGeneric, "position.jump", [](Scenario& s) {
        for (int t = 2; t < s.qsl[1]; ++t) s.positions[static_cast<size_t>(t)] = 40 + t;
        s.reslot();
      }, {}, broken);
      add(op, R, Kind::kGeneric, "position.decreasing", [](Scenario& s) {
        const int n = s.qsl[1];
        for (int t = 0; t < n; ++t) s.positions[static_cast<size_t>(t)] = s.ratio + 1 + (n - 1 - t);
        s.reslot();
      }, {}, broken);
    }

  // --- Requests out of range (req[t] outside 0 .. num_reqs-1).
  for (Op op : {kA, kF})
    for (int R : {2, 4}) {
      add(op, R, Kind::kGeneric, "req.num_reqs", [](Scenario& s) {
        s.req[static_cast<size_t>(s.t_mid0 + 1)] = s.num_reqs();
      }, {}, "kernels from 1682b93 treat it as padding (uncounted); earlier ones read qsl[num_reqs + 1]");
      add(op, R, Kind::kGeneric, "req.minus5", [](Scenario& s) { s.req[static_cast<size_t>(s.t_dec)] = -5; }, {},
          "kernels from 1682b93 treat it as padding (uncounted); earlier ones read qsl[-5]");
    }

  // --- qsl that breaks the contract.
  for (Op op : {kA, kF})
    for (int R : {2, 4})
      add(op, R, Kind::kGeneric, "qsl.non_monotone", [](Scenario& s) { std::swap(s.qsl[1], s.qsl[2]); }, {}, broken);
  for (Op op : {kA, kF})
    add(op, 2, Kind::kGeneric, "qsl.end_past_T",
        [](Scenario& s) { s.qsl.back() = static_cast<int32_t>(s.num_tokens + 100); }, {}, broken);
  add(kA, 2, Kind::kGeneric, "qsl.start_3", [](Scenario& s) { s.qsl[0] = 3; }, {}, broken);
  add(kA, 2, Kind::kGeneric, "qsl.negative_entry", [](Scenario& s) { s.qsl[1] = -7; }, {}, broken);
  add(kA, 2, Kind::kGeneric, "qsl_size_1", {}, [](Launch& l) { l.a.qsl_size = 1; }, reject);

  // --- Token counts.
  for (Op op : {kA, kB, kF}) {
    add(op, 2, Kind::kNoop, "T0", {}, [](Launch& l) { l.set_num_tokens(0); });
    add(op, 2, Kind::kNoop, "T0_null_pointers", {}, [](Launch& l) {
      l.set_num_tokens(0);
      l.a = kvc::CompressParams{};
      l.a.num_tokens = 0;
      l.b = kvc::InsertParams{};
      l.b.num_tokens = 0;
    });
  }
  add(kA, 2, Kind::kGeneric, "T_minus1", {}, [](Launch& l) { l.set_num_tokens(-1); }, reject);
  for (Op op : {kA, kB})
    add(op, 2, Kind::kGeneric, "T_2p31", {}, [](Launch& l) { l.set_num_tokens(int64_t{1} << 31); }, reject);

  // --- Non-finite inputs (the values are free; only where they are written is checked).
  for (Op op : {kA, kF})
    for (int R : {1, 2, 4})
      add(op, R, Kind::kGeneric, "nan_inf_kv_score", [nan, inf](Scenario& s) {
        kv(s, s.t_mid0, 5) = nan;
        kv(s, s.t_dec, 7) = inf;
        kv(s, s.t_last0, 9) = -inf;
        if (s.ratio > 1) {
          for (int i = 0; i < s.ratio; ++i) score(s, s.t_req2 + i, 11) = -inf;  // a group all -inf
          score(s, s.t_req2 + s.ratio, 3) = inf;
          score(s, s.t_req2 + s.ratio + 1, 4) = nan;
          score(s, s.t_dec, 100) = -inf;
        }
      }, {}, "non_finite_rows is printed, not checked");
  for (int R : {1, 2})
    add(kB, R, Kind::kGeneric, "nan_inf_latent", [](Scenario& s) {
      lat(s, s.t_mid0, 5) = 0x7fc0;
      lat(s, s.t_dec, 70) = 0x7f80;
      lat(s, s.t_dec, 460) = 0xff80;  // RoPE dims
      lat(s, s.t_last0, 300) = 0xffc0;
      lat(s, s.t_last0, 500) = 0x7fc0;
    });
  add(kA, 2, Kind::kGeneric, "nan_ring_rows", [](Scenario& s) { s.ring_nan_own = true; }, {},
      "the requests' ring blocks hold NaN rows before the call");
  add(kF, 2, Kind::kGeneric, "nan_ring_rows", [](Scenario& s) { s.ring_nan_own = true; }, {},
      "the requests' ring blocks hold NaN rows before the call");
  add(kA, 2, Kind::kGeneric, "huge_finite_kv", [](Scenario& s) {
    for (int d = 0; d < kHeadDim; ++d) kv(s, s.t_dec, d) = 1e30f;
  }, {}, "squares overflow fp32");

  // --- Ring capacity.
  for (Op op : {kA, kF}) add(op, 4, Kind::kGeneric, "capacity_2", [](Scenario& s) { s.set_capacity(2); }, {}, reject);
  add(kA, 2, Kind::kGeneric, "capacity_1", [](Scenario& s) { s.set_capacity(1); }, {}, reject);
  add(kA, 2, Kind::kGeneric, "capacity_0", [](Scenario& s) { s.set_capacity(0); }, {}, reject);
  for (Op op : {kA, kF})
    add(op, 4, Kind::kBaseline, "capacity_4", [](Scenario& s) { s.set_capacity(4); }, {},
        "C = R: valid; request 0's stores collide with its head group's reads");
  add(kA, 2, Kind::kBaseline, "capacity_3", [](Scenario& s) { s.set_capacity(3); }, {}, "C not a power of two");

  // --- Huge strides (host validation must reject what overflows 64-bit offsets).
  const int64_t p62 = int64_t{1} << 62, p58 = int64_t{1} << 58;
  for (bool bounds : {true, false}) {
    const std::string sfx = bounds ? "" : ".no_bounds";
    const auto nb = [bounds](Launch& l) {
      if (!bounds) {
        l.a.ring_layout.num_blocks = -1;
        l.b.record.cache.num_pages = -1;
      }
    };
    add(kA, 2, Kind::kGeneric, "ring_row_stride_2p62" + sfx, {}, [=](Launch& l) {
      l.a.ring_layout.row_stride_elems = p62;
      l.a.ring_layout.page_stride_elems = p62;  // capacity * row stride overflows: the page check wraps
      nb(l);
    }, reject);
    add(kA, 2, Kind::kGeneric, "latent_stride_2p58" + sfx, {}, [=](Launch& l) {
      l.a.latent_stride_elems = p58;
      nb(l);
    }, reject + " (T * stride overflows)");
    add(kA, 2, Kind::kGeneric, "kv_score_stride_2p58" + sfx, {}, [=](Launch& l) {
      l.a.kv_score_stride_elems = p58;
      nb(l);
    }, reject + " (T * stride overflows)");
    add(kF, 2, Kind::kGeneric, "ring_page_stride_2p62" + sfx, {}, [=](Launch& l) {
      l.a.ring_layout.page_stride_elems = p62;
      nb(l);
    }, reject + (bounds ? " (num_blocks * page stride overflows)"
                        : " only if the stride alone is bounded: block 1 is 2^64 bytes away"));
    add(kB, 2, Kind::kGeneric, "cache_page_stride_2p62" + sfx, {}, [=](Launch& l) {
      l.b.record.cache.page_stride_bytes = p62;
      nb(l);
    }, reject + (bounds ? " (num_pages * page stride overflows)"
                        : " only if the stride alone is bounded: page 4 wraps onto page 0"));
  }
  add(kA, 2, Kind::kGeneric, "ring_page_stride_2p62", {}, [=](Launch& l) { l.a.ring_layout.page_stride_elems = p62; },
      reject + " (block 1 wraps onto block 0, a foreign block)");
  add(kA, 2, Kind::kGeneric, "ring_row_stride_2p58", {}, [=](Launch& l) {
    l.a.ring_layout.row_stride_elems = p58;
    l.a.ring_layout.page_stride_elems = int64_t{8} * p58;
  }, reject);
  add(kA, 1, Kind::kGeneric, "latent_stride_2p58", {}, [=](Launch& l) { l.a.latent_stride_elems = p58; }, reject);
  add(kB, 2, Kind::kGeneric, "latent_stride_2p58", {}, [=](Launch& l) { l.b.latent_stride_elems = p58; }, reject);
  add(kF, 2, Kind::kGeneric, "cache_page_stride_2p62", {}, [=](Launch& l) { l.b.record.cache.page_stride_bytes = p62; },
      reject);
  add(kF, 2, Kind::kGeneric, "latent_stride_2p58", {}, [=](Launch& l) { l.a.latent_stride_elems = p58; }, reject);

  // --- Misaligned pointers. The errors cases also skip a token, so the counter is written.
  const auto skip_one_ring = [](Scenario& s) { slot(s.ring_slot, s.t_dec, s.ring_blocks * s.capacity); };
  const auto skip_one_cache = [](Scenario& s) { slot(s.cache_slot, s.t_dec, s.pages * s.block_size); };
  add(kA, 2, Kind::kGeneric, "misaligned.kv_score_plus4", {}, [](Launch& l) { l.a.kv_score = byte_offset(l.a.kv_score, 4); }, reject);
  add(kA, 2, Kind::kGeneric, "misaligned.qsl_plus2", {}, [](Launch& l) { l.a.qsl = byte_offset(l.a.qsl, 2); }, reject);
  add(kA, 2, Kind::kGeneric, "misaligned.req_plus2", {}, [](Launch& l) { l.a.req = byte_offset(l.a.req, 2); }, reject);
  add(kA, 2, Kind::kGeneric, "misaligned.positions_plus4", {}, [](Launch& l) { l.a.positions.data = byte_offset(l.a.positions.data, 4); }, reject);
  add(kA, 2, Kind::kGeneric, "misaligned.slot_plus4", {}, [](Launch& l) { l.a.slot.data = byte_offset(l.a.slot.data, 4); }, reject);
  add(kA, 2, Kind::kGeneric, "misaligned.latent_plus2", {}, [](Launch& l) { l.a.latent = byte_offset(l.a.latent, 2); }, reject);
  add(kA, 2, Kind::kGeneric, "misaligned.ring_plus4", {}, [](Launch& l) { l.a.ring = byte_offset(l.a.ring, 4); }, reject);
  add(kA, 2, Kind::kGeneric, "misaligned.weight_plus2", {}, [](Launch& l) { l.a.weight = byte_offset(l.a.weight, 2); }, reject);
  add(kA, 2, Kind::kGeneric, "misaligned.errors_plus2", skip_one_ring, [](Launch& l) { l.set_errors(byte_offset(l.a.errors, 2)); },
      reject + " (or never write the counters misaligned)");
  add(kB, 2, Kind::kGeneric, "misaligned.latent_plus2", {}, [](Launch& l) { l.b.latent = byte_offset(l.b.latent, 2); }, reject);
  add(kB, 2, Kind::kGeneric, "misaligned.positions_plus4", {}, [](Launch& l) { l.b.positions.data = byte_offset(l.b.positions.data, 4); }, reject);
  add(kB, 2, Kind::kGeneric, "misaligned.cache_slot_plus4", {}, [](Launch& l) {
    l.b.record.cache_slot.data = byte_offset(l.b.record.cache_slot.data, 4);
  }, reject);
  add(kB, 2, Kind::kGeneric, "misaligned.cache_plus8", {}, [](Launch& l) { l.b.record.cache.data = byte_offset(l.b.record.cache.data, 8); }, reject);
  add(kB, 2, Kind::kGeneric, "misaligned.cos_sin_plus2", {}, [](Launch& l) { l.b.record.cos_sin = byte_offset(l.b.record.cos_sin, 2); }, reject);
  add(kB, 2, Kind::kGeneric, "misaligned.errors_plus2", skip_one_cache, [](Launch& l) { l.set_errors(byte_offset(l.b.errors, 2)); },
      reject + " (or never write the counters misaligned)");
  add(kF, 2, Kind::kGeneric, "misaligned.kv_score_plus4", {}, [](Launch& l) { l.a.kv_score = byte_offset(l.a.kv_score, 4); }, reject);
  add(kF, 2, Kind::kGeneric, "misaligned.cache_plus8", {}, [](Launch& l) { l.b.record.cache.data = byte_offset(l.b.record.cache.data, 8); }, reject);
  add(kF, 2, Kind::kGeneric, "misaligned.cache_slot_plus4", {}, [](Launch& l) {
    l.b.record.cache_slot.data = byte_offset(l.b.record.cache_slot.data, 4);
  }, reject);
  add(kF, 2, Kind::kGeneric, "misaligned.errors_plus2", skip_one_ring, [](Launch& l) { l.set_errors(byte_offset(l.a.errors, 2)); },
      reject + " (or never write the counters misaligned)");
  add(kA, 2, Kind::kGeneric, "misaligned.kv_score_plus4.no_bounds", {}, [](Launch& l) {
    l.a.kv_score = byte_offset(l.a.kv_score, 4);
    l.a.ring_layout.num_blocks = -1;
  }, reject);
  add(kB, 2, Kind::kGeneric, "misaligned.cache_plus8.no_bounds", {}, [](Launch& l) {
    l.b.record.cache.data = byte_offset(l.b.record.cache.data, 8);
    l.b.record.cache.num_pages = -1;
  }, reject);

  // --- A stale, non-sticky CUDA error pending before the call (cudaMalloc of 2^50 bytes).
  add(kA, 1, Kind::kStale, "stale_cuda_error", {});
  for (Op op : {kA, kB, kF}) add(op, 2, Kind::kStale, "stale_cuda_error", {});
  return v;
}

}  // namespace adv
