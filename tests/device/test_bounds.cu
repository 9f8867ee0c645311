// SPDX-License-Identifier: Apache-2.0
// Device tier: tokens the ops skip (issue 13) and rows with non-finite inputs, against the
// float64 reference, with the ErrorCounters the kernels return equal to the reference's counts.
//
// Each case builds a fresh random batch (decode-like 64 x 2 or 256 x 4 tokens, or a prefill
// with a chunk longer than the ring and calls big enough for the warp-per-row mappings), runs
// it once valid and once with, on random tokens:
//   - ring slots past RingLayout::num_blocks * C: one past the end (a guard block that exists
//     in memory and must stay untouched), exactly num_blocks * C, 2^61, INT64_MAX (INT32_MAX
//     with int32 indices); ratio 1 has no ring and must ignore them;
//   - negative positions, on one-token chunks and on trailing tokens (positions stay
//     consecutive inside every chunk, as the caller's contract asks);
//   - cache slots past num_pages * block_size (one page past the bound exists in memory),
//     huge ones, and group positions past cos_sin_rows (the tail of the chunks: the table
//     given is shorter than the one in memory);
//   - NaN / inf kv values and scores, rows whose squares overflow fp32, a NaN in ring rows.
// Op A, then Op B on Op A's latent, then the fused op from the same state, each with
// ErrorCounters and again with errors == nullptr (the same bytes). Outputs are checked as in
// test_compress / test_insert: latents within their bound where a group closes and poison
// elsewhere, ring bit-exact (guard block included), every cache byte against the reference.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "compress_case.hpp"
#include "insert_case.hpp"
#include "test_instances.hpp"

namespace {

// The ratios and layouts run_shape() uses, compiled as explicit instances (test_instances.hpp)
// instead of every instance of the default lists.
using Ops = kvctest::Instances<
    kvctest::Layouts<kvctest::LayoutIs<kvc::CacheLayout::kFp8DsMla, kvc::Fp8DsMlaLayout>,
                     kvctest::LayoutIs<kvc::CacheLayout::kBf16Rows, kvc::Bf16RowsLayout<512, 64>>,
                     kvctest::LayoutIs<kvc::CacheLayout::kFp8Rows, kvc::Fp8RowsLayout<512, 64>>>,
    1, 2, 4, 16, 128>;

using kvctest::Batch;
using kvctest::BatchShape;
using kvctest::DeviceArray;

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t k2Pow61 = int64_t{1} << 61;
constexpr int kHeadDim = 512;
constexpr int kBlockSize = 64;
constexpr int kNegativeChunks = 3;  // one-token requests at negative positions, last in the request list

enum class Shape { kDecode64x2, kDecode256x4, kPrefill };

const char* shape_name(Shape s) {
  switch (s) {
    case Shape::kDecode64x2: return "decode 64x2";
    case Shape::kDecode256x4: return "decode 256x4";
    case Shape::kPrefill: return "prefill";
  }
  return "?";
}

struct Case {
  int ratio = 2;
  Shape shape = Shape::kDecode64x2;
  bool bf16 = false;  // kv_score and ring dtype
  bool table_bf16 = false;
  bool index32 = false;
  kvc::CacheLayout layout = kvc::CacheLayout::kFp8DsMla;
  kvc::RopeStyle style = kvc::RopeStyle::kGptJ;
  bool fused_latent = true;  // the fused op also writes the latent
  unsigned base = 0;         // every counter starts here (the kernels add to it)

  std::string name() const {
    return std::string(shape_name(shape)) + " R=" + std::to_string(ratio) + (bf16 ? " bf16" : " fp32") +
           (index32 ? " int32" : " int64") + " " + kvc::cache_layout_name(layout) +
           (style == kvc::RopeStyle::kGptJ ? " gptj" : " neox") + (table_bf16 ? " bf16-table" : "") +
           (fused_latent ? "" : " fused-no-latent") + " base " + std::to_string(base);
  }
};

/// One kvc::ErrorCounters in device memory, every field starting at `base`.
struct Counters {
  DeviceArray<kvc::ErrorCounters> d;
  explicit Counters(unsigned base) {
    kvc::ErrorCounters c;
    c.ring_slot_out_of_range = c.cache_slot_out_of_range = c.position_out_of_range = c.non_finite_rows = base;
    d.upload({c});
  }
  kvc::ErrorCounters* ptr() { return d.ptr(); }
  kvc::ErrorCounters get() const { return d.download()[0]; }
};

void check_counts(const kvc::ErrorCounters& got, const kvcref::ErrorCounts& want, unsigned base,
                  const std::string& what) {
  auto field = [&](const char* name, unsigned g, uint64_t w) {
    if (uint64_t{g} != w + base)
      FAIL_CHECK(what, ": ErrorCounters::", name, " is ", g, ", expected ", base, " + ", w, " (reference)");
  };
  field("ring_slot_out_of_range", got.ring_slot_out_of_range, want.ring_slot_out_of_range);
  field("cache_slot_out_of_range", got.cache_slot_out_of_range, want.cache_slot_out_of_range);
  field("position_out_of_range", got.position_out_of_range, want.position_out_of_range);
  field("non_finite_rows", got.non_finite_rows, want.non_finite_rows);
}

/// A chunk start such that a chunk of `len` tokens holds a closing position (every decode
/// step then closes a group, also at ratio 128), below about `max_pos`.
int64_t closing_start(std::mt19937_64& rng, int ratio, int len, int64_t max_pos) {
  const int64_t groups = std::max<int64_t>(1, max_pos / ratio);
  const int64_t g = static_cast<int64_t>(rng() % static_cast<uint64_t>(groups));
  const int64_t into = static_cast<int64_t>(rng() % static_cast<uint64_t>(std::min(len, ratio)));
  return g * ratio + (ratio - 1) - into;
}

BatchShape make_shape(const Case& c, std::mt19937_64& rng) {
  const int R = c.ratio;
  BatchShape s;
  s.ratio = R;
  s.head_dim = kHeadDim;
  s.guard_ring_blocks = R > 1 ? 1 : -1;  // the ring bound, and one block past it in memory
  s.padding_tokens = 3;
  switch (c.shape) {
    case Shape::kDecode64x2:
      s.capacity = kvc::ring_capacity(R, 1);
      for (int i = 0; i < 64; ++i) s.requests.push_back({2, closing_start(rng, R, 2, 6000)});
      break;
    case Shape::kDecode256x4:
      s.capacity = kvc::ring_capacity(R, 3);
      for (int i = 0; i < 256; ++i) s.requests.push_back({4, closing_start(rng, R, 4, 6000)});
      break;
    case Shape::kPrefill: {
      s.capacity = kvc::ring_capacity(R, 0);
      const int C = s.capacity;
      // Small ratios: past kWarpRowMinWindows windows (a row per warp); R >= 16: >= 16 R tokens.
      const int big = R < 16 ? static_cast<int>(kvc::kWarpRowMinWindows) * R + 3 : 16 * R + 3;
      s.requests.push_back({3 * C + 5, 2 * int64_t{R} + 1});  // longer than the ring, odd start
      s.requests.push_back({big, 7 * int64_t{R} - 1});
      for (int i = 0; i < 8; ++i) s.requests.push_back({2, closing_start(rng, R, 2, 6000)});
      break;
    }
  }
  for (int i = 0; i < kNegativeChunks; ++i) s.requests.push_back({1, 0});  // positions set later
  return s;
}

/// Ring slots past the bound and negative positions (see the file comment).
void inject_slots_and_positions(Batch& b, const Case& c, std::mt19937_64& rng) {
  const int R = b.ratio, C = b.capacity;
  const int64_t T = b.num_tokens();
  const int num_reqs = b.num_reqs();
  const int64_t end = R > 1 ? b.ring_num_blocks * C : 0;  // the first slot past the ring
  auto past = [&](int64_t t) -> int64_t {
    switch (rng() % 5) {
      case 0:
      case 1: return end + b.positions[static_cast<size_t>(t)] % C;  // one past the end: the guard block
      case 2: return end;
      case 3: return c.index32 ? kInt32Max : kInt64Max;
      default: return c.index32 ? kInt32Max - 7 : k2Pow61;
    }
  };
  // One-token chunks at negative positions; the second one's slot also lies past the ring
  // (counted once, as a ring slot; ratio 1 ignores the ring and counts the position).
  const int first_negative = num_reqs - kNegativeChunks;
  const int64_t negatives[] = {-1, -2, -int64_t{R}, -int64_t{R} - 1, -12345, c.index32 ? kInt32Min : kInt64Min};
  for (int i = 0; i < kNegativeChunks; ++i) {
    const size_t t = static_cast<size_t>(b.qsl[first_negative + i]);
    b.positions[t] = negatives[rng() % 6];
    if (i == 1) b.slot[t] = past(static_cast<int64_t>(t));
  }
  // Slots past the ring on random chunk tokens, and on a third of the chunks' last tokens
  // (stored to the ring when in range, closing in most decode steps).
  for (int r = 0; r < first_negative; ++r)
    for (int64_t t = b.qsl[r]; t < b.qsl[r + 1]; ++t)
      if (rng() % 7 == 0 || (t == b.qsl[r + 1] - 1 && rng() % 3 == 0)) b.slot[static_cast<size_t>(t)] = past(t);
  // Trailing tokens: one with a slot at a negative position, one with a slot past the ring
  // at a closing position (at ratio 1 an ordinary token: it closes).
  b.slot[static_cast<size_t>(T - 1)] = 0;
  b.positions[static_cast<size_t>(T - 1)] = -1 - static_cast<int64_t>(rng() % 5);
  b.slot[static_cast<size_t>(T - 2)] = past(T - 2);
}

/// NaN / inf values in random kv and score elements, rows whose squares overflow fp32, and
/// NaNs in a few ring rows.
void inject_non_finite(Batch& b, std::mt19937_64& rng) {
  const int R = b.ratio, D = b.head_dim;
  const int64_t T = b.num_tokens();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const int64_t n = std::max<int64_t>(6, T / 48);
  for (int64_t i = 0; i < n; ++i) {
    float* row = b.kv_score.data() + static_cast<int64_t>(rng() % static_cast<uint64_t>(T)) * b.stride;
    const int d = static_cast<int>(rng() % static_cast<uint64_t>(D));
    switch (rng() % (R > 1 ? 7 : 4)) {
      case 0: row[d] = nan; break;
      case 1: row[d] = inf; break;
      case 2: row[d] = -inf; break;
      case 3:  // finite, far past the fp32 overflow of the sum of squares (the latent is 0)
        for (int k = 0; k < D; ++k) row[k] = (k % 2) ? 1e30f : -1e30f;
        break;
      case 4: row[D + d] = inf; break;
      case 5: row[D + d] = -inf; break;  // weighs 0: finite unless the whole channel is -inf
      default: row[D + d] = nan; break;
    }
  }
  // At least one row that certainly counts: a NaN kv in the first token that closes a group.
  for (int64_t t = 0; t < b.qsl[static_cast<size_t>(b.num_reqs())]; ++t) {
    const int64_t p = b.positions[static_cast<size_t>(t)], s = b.slot[static_cast<size_t>(t)];
    const bool in_ring = R == 1 || (s >= 0 && s / b.capacity < b.ring_num_blocks);
    if (s >= 0 && in_ring && p >= 0 && (p + 1) % R == 0) {
      b.kv_score[static_cast<size_t>(t * b.stride + 1)] = nan;
      break;
    }
  }
  if (R > 1)
    for (int i = 0; i < 3; ++i) {
      const int64_t blk = static_cast<int64_t>(rng() % static_cast<uint64_t>(b.ring_num_blocks));
      const int64_t row = static_cast<int64_t>(rng() % static_cast<uint64_t>(b.capacity));
      b.ring[static_cast<size_t>(blk * b.ring_page_stride + row * b.ring_row_stride + rng() % D)] = nan;
    }
}

/// The record half: cache slots, the rotary table, the cache image, their device copies.
struct Records {
  kvctest::CacheShape shape;
  int64_t num_pages = -1;    // given to the ops; valid batches: every page
  int64_t table_rows = 0;    // cos_sin_rows given to the ops (<= table.rows, the rows in memory)
  std::vector<int64_t> slot;
  kvctest::RopeTable table;
  std::vector<uint8_t> cache_init;
  float scale = 0.0371f;

  DeviceArray<int64_t> slot64;
  DeviceArray<int32_t> slot32;
  DeviceArray<float> table32, scale_d;
  DeviceArray<uint16_t> table16;

  Records(const Batch& b, const Case& c, bool inject, std::mt19937_64& rng) {
    const int64_t T = b.num_tokens();
    const int R = b.ratio;
    shape = kvctest::cache_shape(c.layout, kHeadDim, kBlockSize, T / kBlockSize + 3, true);
    // With injection the last page lies past num_pages: it exists, nothing may write it.
    num_pages = inject ? shape.pages - 1 : shape.pages;
    std::vector<int64_t> all(static_cast<size_t>(shape.pages * kBlockSize));
    std::iota(all.begin(), all.end(), int64_t{0});
    std::shuffle(all.begin(), all.end(), rng);
    slot.assign(all.begin(), all.begin() + T);
    for (auto& s : slot) {
      const uint64_t k = rng() % 12;
      if (k == 0) s = -1 - static_cast<int64_t>(rng() % 3);  // no record
      if (!inject || k < 9) continue;
      if (k == 9) s = num_pages * kBlockSize;
      if (k == 10) s = c.index32 ? kInt32Max : kInt64Max;
      if (k == 11) s = c.index32 ? kInt32Max - 1 : k2Pow61;
    }
    // The table in memory covers every group position; with injection the ops are given the
    // rows up to the 80th percentile of the closing tokens' group positions.
    std::vector<int64_t> groups;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p = b.positions[static_cast<size_t>(t)];
      if (p >= 0 && (p + 1) % R == 0) groups.push_back((p / R) * R);
    }
    std::sort(groups.begin(), groups.end());
    const int64_t max_group = groups.empty() ? 0 : groups.back();
    table = kvctest::rope_table(max_group + 1, c.table_bf16);
    table_rows = table.rows;
    if (inject && !groups.empty()) table_rows = std::max<int64_t>(1, groups[groups.size() * 4 / 5]);
    cache_init = kvctest::random_bytes(rng, static_cast<size_t>(shape.pages * shape.page_stride));

    slot64.upload(slot);
    slot32.upload(std::vector<int32_t>(slot.begin(), slot.end()));
    table32.upload(table.values);
    if (c.table_bf16) table16.upload(table.bf16);
    scale_d.upload({scale});
  }

  kvc::RecordArgs args(const Case& c, uint8_t* cache) {
    kvc::RecordArgs r;
    r.rope_dim = 64;
    r.rope_style = c.style;
    r.layout = c.layout;
    r.cos_sin = c.table_bf16 ? static_cast<const void*>(table16.ptr()) : table32.ptr();
    r.cos_sin_dtype = c.table_bf16 ? kvc::DType::kBFloat16 : kvc::DType::kFloat32;
    r.cos_sin_stride_elems = table.stride;
    r.cos_sin_rows = table_rows;
    r.cache_slot = c.index32 ? kvc::IndexPtr{slot32.ptr(), kvc::IndexType::kInt32}
                             : kvc::IndexPtr{slot64.ptr(), kvc::IndexType::kInt64};
    r.cache.data = cache;
    r.cache.block_size = kBlockSize;
    r.cache.page_stride_bytes = shape.page_stride;
    r.cache.row_stride_bytes = shape.row_stride;
    r.cache.num_pages = num_pages;
    r.cache.scale = scale_d.ptr();
    return r;
  }

  /// The reference's Op B inputs for the latent rows `latent` (stride in elements).
  kvcref::InsertInputs inputs(const Batch& b, const Case& c, const uint16_t* latent, int64_t latent_stride_elems) const {
    kvcref::InsertInputs in;
    in.head_dim = kHeadDim;
    in.rope_dim = 64;
    in.ratio = b.ratio;
    in.rope_style = c.style == kvc::RopeStyle::kGptJ ? kvcref::RopeStyle::GptJ : kvcref::RopeStyle::NeoX;
    in.num_tokens = b.num_tokens();
    in.latent = latent;
    in.latent_stride_elems = latent_stride_elems;
    in.positions = b.positions.data();
    in.slot = slot.data();
    in.cos_sin = table.values.data();
    in.cos_sin_stride_elems = table.stride;
    in.cos_sin_rows = table_rows;
    in.layout = kvctest::ref_layout(c.layout);
    in.block_size = kBlockSize;
    in.page_stride_bytes = shape.page_stride;
    in.row_stride_bytes = shape.row_stride;
    in.num_pages = num_pages;
    in.fp8_scale = scale;
    return in;
  }
};

bool same_floats(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

/// Op A, Op B on Op A's latent, and the fused op on batch `b`, each checked against the
/// reference with counters, and run again without counters (the same bytes). `injected`:
/// the batch must exercise every kind of skip (the test would otherwise prove nothing).
void run_ops(const Case& c, const Batch& b, Records& rec, bool injected, std::mt19937_64& rng,
             const std::string& what) {
  INFO(what, " T=", b.num_tokens());
  const int64_t T = b.num_tokens();
  const kvcref::CompressInputs ref_in = kvctest::reference_inputs(b);
  const auto want_a = kvcref::compress_reference(ref_in);
  auto compress_params = [&](kvctest::CompressDevice& dev) {
    kvc::CompressParams p = dev.params(b);
    if (b.ratio == 1) p.ring_layout.num_blocks = 1;  // ratio 1 has no ring: ignored
    return p;
  };

  // Op A.
  kvctest::CompressDevice dev(b, c.bf16, c.index32, rng);
  Counters count_a(c.base);
  kvc::CompressParams pa = compress_params(dev);
  pa.errors = count_a.ptr();
  KVC_CHECK_STATUS(Ops::compress(pa, nullptr));
  kvctest::sync();
  kvctest::check_compress(b, want_a, dev, dev.latent_init, what + ", Op A");
  check_counts(count_a.get(), want_a.errors, c.base, what + ", Op A");
  const std::vector<uint16_t> latent = dev.latent.download();
  const std::vector<float> ring = b.ratio > 1 ? dev.ring_values() : std::vector<float>{};
  {
    kvctest::CompressDevice again(b, c.bf16, c.index32, rng);
    again.latent_init = dev.latent_init;
    again.latent.upload(again.latent_init);
    kvc::CompressParams p = compress_params(again);
    p.errors = nullptr;
    KVC_CHECK_STATUS(Ops::compress(p, nullptr));
    kvctest::sync();
    CHECK_MESSAGE(again.latent.download() == latent, what, ", Op A without counters: other latent bytes");
    if (b.ratio > 1) CHECK_MESSAGE(same_floats(again.ring_values(), ring), what, ", Op A without counters: other ring bytes");
  }

  // Op B on the latent Op A wrote (rows Op A left alone are the poison, read as they are).
  const auto want_b = kvcref::insert_reference(rec.inputs(b, c, latent.data(), dev.latent_stride_elems), rec.cache_init);
  auto insert_params = [&](uint8_t* cache, kvc::ErrorCounters* errors) {
    kvc::InsertParams p;
    p.ratio = b.ratio;
    p.head_dim = kHeadDim;
    p.num_tokens = T;
    p.latent = pa.latent;
    p.latent_stride_elems = pa.latent_stride_elems;
    p.positions = pa.positions;
    p.record = rec.args(c, cache);
    p.errors = errors;
    return p;
  };
  DeviceArray<uint8_t> cache_b(rec.cache_init), cache_b0(rec.cache_init);
  Counters count_b(c.base);
  KVC_CHECK_STATUS(Ops::insert(insert_params(cache_b.ptr(), count_b.ptr()), nullptr));
  KVC_CHECK_STATUS(Ops::insert(insert_params(cache_b0.ptr(), nullptr), nullptr));
  kvctest::sync();
  const std::vector<uint8_t> bytes_b = cache_b.download();
  kvctest::check_cache(bytes_b, want_b, true, (what + ", Op B").c_str());
  check_counts(count_b.get(), want_b.errors, c.base, what + ", Op B");
  CHECK_MESSAGE(cache_b0.download() == bytes_b, what, ", Op B without counters: other cache bytes");

  // The fused op from the same ring, latent poison and cache.
  const auto want_f = kvcref::fused_reference(ref_in, rec.inputs(b, c, latent.data(), dev.latent_stride_elems), rec.cache_init);
  std::vector<uint8_t> bytes_f;
  for (bool counted : {true, false}) {
    kvctest::CompressDevice fu(b, c.bf16, c.index32, rng);
    fu.latent_init = dev.latent_init;
    fu.latent.upload(fu.latent_init);
    DeviceArray<uint8_t> cache_f(rec.cache_init);
    Counters count_f(c.base);
    kvc::FusedParams pf;
    pf.compress = compress_params(fu);
    if (!c.fused_latent) pf.compress.latent = nullptr;
    pf.compress.errors = counted ? count_f.ptr() : nullptr;
    pf.record = rec.args(c, cache_f.ptr());
    KVC_CHECK_STATUS(Ops::fused(pf, nullptr));
    kvctest::sync();
    const std::string name = what + (counted ? ", fused" : ", fused without counters");
    if (counted) {
      bytes_f = cache_f.download();
      kvctest::check_cache(bytes_f, want_f.insert, true, name.c_str());
      check_counts(count_f.get(), want_f.errors, c.base, name);
    } else {
      CHECK_MESSAGE(cache_f.download() == bytes_f, name, ": other cache bytes");
    }
    CHECK_MESSAGE(fu.latent.download() == (c.fused_latent ? latent : dev.latent_init), name,
                  c.fused_latent ? ": latent differs from Op A's" : ": latent written although null");
    if (b.ratio > 1) CHECK_MESSAGE(same_floats(fu.ring_values(), ring), name, ": ring differs from Op A's");
  }

  int64_t records = 0;
  for (auto w : want_f.insert.written) records += w;
  CHECK_MESSAGE(records > 0, what, ": the fused op writes no record at all");
  if (injected) {
    // Every kind of skip occurs, in every op that has it.
    if (b.ratio > 1) CHECK(want_a.errors.ring_slot_out_of_range > 0);
    CHECK(want_a.errors.position_out_of_range > 0);
    CHECK(want_a.errors.non_finite_rows > 0);
    CHECK(want_b.errors.cache_slot_out_of_range > 0);
    CHECK(want_b.errors.position_out_of_range > 0);
    CHECK(want_f.errors.cache_slot_out_of_range > 0);
    CHECK(want_f.errors.position_out_of_range > want_a.errors.position_out_of_range);  // the table bound
  } else {
    REQUIRE_MESSAGE(want_f.errors.total() == 0, what, ": the valid batch is not valid");
    REQUIRE(want_b.errors.total() == 0);
  }
}

void run_case(const Case& c, uint64_t seed) {
  INFO(c.name(), " seed ", seed);
  std::mt19937_64 rng(seed);
  Batch valid = kvctest::make_batch(rng, make_shape(c, rng));
  Batch bad = valid;
  inject_slots_and_positions(bad, c, rng);
  inject_non_finite(bad, rng);
  if (c.bf16) {
    kvctest::round_batch_to_bf16(valid);
    kvctest::round_batch_to_bf16(bad);
  }
  {
    Records rec(valid, c, false, rng);
    run_ops(c, valid, rec, false, rng, "valid batch");
  }
  Records rec(bad, c, true, rng);
  run_ops(c, bad, rec, true, rng, "skips");
}

void run_shape(Shape shape, uint64_t seed) {
  const kvc::CacheLayout layouts[] = {kvc::CacheLayout::kFp8DsMla, kvc::CacheLayout::kBf16Rows,
                                      kvc::CacheLayout::kFp8Rows};
  uint64_t n = 0;
  for (int ratio : {1, 2, 4, 16, 128})
    for (bool bf16 : {false, true}) {
      Case c;
      c.ratio = ratio;
      c.shape = shape;
      c.bf16 = bf16;
      c.table_bf16 = (n % 2) == 1;
      c.index32 = (n % 3) == 1;
      c.layout = layouts[n % 3];
      c.style = (n % 4) < 2 ? kvc::RopeStyle::kGptJ : kvc::RopeStyle::kNeoX;
      c.fused_latent = (n % 5) != 2;
      c.base = (n % 2) == 0 ? 0u : 1000u;
      run_case(c, seed + n);
      ++n;
    }
}

}  // namespace

TEST_CASE("bounds: decode 64x2 steps with skipped tokens and non-finite rows, counts exact") {
  run_shape(Shape::kDecode64x2, 13000);
}

TEST_CASE("bounds: decode 256x4 steps with skipped tokens and non-finite rows, counts exact") {
  run_shape(Shape::kDecode256x4, 13100);
}

TEST_CASE("bounds: prefill chunks longer than the ring with skipped tokens and non-finite rows, counts exact") {
  run_shape(Shape::kPrefill, 13200);
}
