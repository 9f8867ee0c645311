// SPDX-License-Identifier: Apache-2.0
// kvcompress tests — random Op A batches (contract §1) shared by the host and device tiers.
//
// A Batch is plain host data in the reference's conventions: fp32 kv_score rows, int64
// positions and slots, int32 qsl/req, an fp32 ring with element strides, bf16 weight bits.
// It includes nothing from include/ (the library under test), only the float64 reference
// for its bf16 rounding and its CompressInputs.
//
//   std::mt19937_64 rng(42);
//   kvctest::BatchShape shape;
//   shape.ratio = 2; shape.head_dim = 512;
//   shape.requests = {{5, 0}, {0, 17}, {12, 33}};   // (chunk_len, start_pos) per request
//   shape.padding_tokens = 3;
//   kvctest::Batch b = kvctest::make_batch(rng, shape);
//   kvcref::CompressExpected want = kvcref::compress_reference(kvctest::reference_inputs(b));
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "reference/reference.hpp"

namespace kvctest {

/// One request of a batch: `chunk_len` tokens at positions start_pos .. start_pos+chunk_len-1.
struct RequestShape {
  int chunk_len = 0;
  int64_t start_pos = 0;
};

/// What make_batch builds. Zero strides / capacity mean "the natural value".
struct BatchShape {
  int ratio = 2;
  int head_dim = 512;
  int capacity = 0;                  // ring rows per block; 0: max(8, next_pow2(ratio))
  std::vector<RequestShape> requests;
  int padding_tokens = 0;            // trailing tokens with slot -1 (after qsl[num_reqs])
  int64_t kv_score_stride_elems = 0;       // 0: the row width (2 * head_dim, or head_dim at R = 1)
  int64_t ring_row_stride = 0;       // 0: 2 * head_dim
  int64_t ring_page_stride = 0;      // 0: capacity * ring_row_stride
  int extra_ring_blocks = 1;         // blocks owned by no request (must stay untouched)
  // >= 0: give the ring bound (Batch::ring_num_blocks = ring_blocks) and allocate this many
  // more blocks past it, NaN-filled, which nothing may touch (a slot one past the bound
  // lands there). -1: no bound given, no guard blocks.
  int guard_ring_blocks = -1;
  float eps = 1e-6f;
  float kv_range = 2.f;              // kv uniform in [-kv_range, kv_range]
  float score_range = 4.f;           // scores uniform in [-score_range, score_range]
};

struct Batch {
  int ratio = 2, head_dim = 512, capacity = 8;
  std::vector<float> kv_score;       // [T, stride]; columns past the row width are NaN
  int64_t stride = 0;
  std::vector<int64_t> positions, slot;  // [T]
  std::vector<int32_t> qsl, req;     // [num_reqs + 1], [T]
  std::vector<float> ring;           // [(ring_blocks + guard blocks) * ring_page_stride]; empty at R = 1
  int64_t ring_page_stride = 0, ring_row_stride = 0, ring_blocks = 0;
  int64_t ring_num_blocks = -1;      // the ring bound given to the op (-1: not given)
  std::vector<uint16_t> weight;      // [head_dim] bf16 bits
  float eps = 1e-6f;

  int64_t num_tokens() const { return static_cast<int64_t>(positions.size()); }
  int num_reqs() const { return static_cast<int>(qsl.size()) - 1; }
  /// Width of a kv_score row: kv and score (R > 1) or kv only (R == 1).
  int64_t row_width() const { return ratio > 1 ? 2 * int64_t{head_dim} : head_dim; }
};

/// Bits of the quiet NaN written into padding columns and padding between ring rows/pages:
/// a kernel that reads them turns a latent into NaN; one that writes them changes the bits.
inline constexpr uint32_t kPadNaNBits = 0x7fc0deadu;

inline float pad_nan() {
  float f;
  std::memcpy(&f, &kPadNaNBits, sizeof f);
  return f;
}

inline int default_capacity(int ratio) {
  int c = 1;
  while (c < ratio) c *= 2;
  return c < 8 ? 8 : c;
}

/// Builds a batch of `shape`: requests packed in order, each with its own ring block
/// (distinct, shuffled; slot = block * C + position % C), trailing padding tokens (slot -1,
/// positions that would close a group), a random ring with NaN between rows and pages,
/// random bf16 weights.
inline Batch make_batch(std::mt19937_64& rng, const BatchShape& shape) {
  const int R = shape.ratio, D = shape.head_dim;
  if (R < 1 || D < 1) throw std::invalid_argument("kvctest::make_batch: bad ratio / head dim");
  Batch b;
  b.ratio = R;
  b.head_dim = D;
  b.capacity = shape.capacity > 0 ? shape.capacity : default_capacity(R);
  b.eps = shape.eps;
  const int C = b.capacity;
  const int num_reqs = static_cast<int>(shape.requests.size());

  b.stride = shape.kv_score_stride_elems > 0 ? shape.kv_score_stride_elems : b.row_width();
  if (b.stride < b.row_width()) throw std::invalid_argument("kvctest::make_batch: stride");
  if (R > 1) {
    b.ring_row_stride = shape.ring_row_stride > 0 ? shape.ring_row_stride : 2 * int64_t{D};
    b.ring_page_stride =
        shape.ring_page_stride > 0 ? shape.ring_page_stride : C * b.ring_row_stride;
    if (b.ring_row_stride < 2 * D || b.ring_page_stride < C * b.ring_row_stride)
      throw std::invalid_argument("kvctest::make_batch: ring strides");
    b.ring_blocks = num_reqs + std::max(0, shape.extra_ring_blocks);
  }

  // Distinct blocks per request, in a random order.
  std::vector<int64_t> blocks(static_cast<size_t>(num_reqs + std::max(0, shape.extra_ring_blocks)));
  std::iota(blocks.begin(), blocks.end(), int64_t{0});
  std::shuffle(blocks.begin(), blocks.end(), rng);

  b.qsl.push_back(0);
  for (int r = 0; r < num_reqs; ++r) {
    const RequestShape& q = shape.requests[static_cast<size_t>(r)];
    if (q.chunk_len < 0 || q.start_pos < 0)
      throw std::invalid_argument("kvctest::make_batch: request shape");
    for (int i = 0; i < q.chunk_len; ++i) {
      const int64_t pos = q.start_pos + i;
      b.positions.push_back(pos);
      b.slot.push_back(blocks[static_cast<size_t>(r)] * C + pos % C);
      b.req.push_back(r);
    }
    b.qsl.push_back(static_cast<int32_t>(b.positions.size()));
  }
  std::uniform_int_distribution<int64_t> group(0, 7);
  for (int i = 0; i < shape.padding_tokens; ++i) {
    b.positions.push_back(group(rng) * R + R - 1);  // would close a group if it were a token
    b.slot.push_back(-1);
    b.req.push_back(num_reqs > 0 ? num_reqs - 1 : 0);
  }

  const int64_t T = b.num_tokens();
  std::uniform_real_distribution<float> kv(-shape.kv_range, shape.kv_range);
  std::uniform_real_distribution<float> score(-shape.score_range, shape.score_range);
  b.kv_score.assign(static_cast<size_t>(T * b.stride), pad_nan());
  for (int64_t t = 0; t < T; ++t) {
    float* row = b.kv_score.data() + t * b.stride;
    for (int d = 0; d < D; ++d) row[d] = kv(rng);
    if (R > 1)
      for (int d = 0; d < D; ++d) row[D + d] = score(rng);
  }

  if (R > 1) {
    const int64_t guard = std::max(0, shape.guard_ring_blocks);
    if (shape.guard_ring_blocks >= 0) b.ring_num_blocks = b.ring_blocks;
    b.ring.assign(static_cast<size_t>((b.ring_blocks + guard) * b.ring_page_stride), pad_nan());
    for (int64_t blk = 0; blk < b.ring_blocks; ++blk)
      for (int row = 0; row < C; ++row) {
        float* p = b.ring.data() + blk * b.ring_page_stride + row * b.ring_row_stride;
        for (int d = 0; d < D; ++d) p[d] = kv(rng);
        for (int d = 0; d < D; ++d) p[D + d] = score(rng);
      }
  }

  std::uniform_real_distribution<float> w(-1.5f, 1.5f);
  b.weight.resize(static_cast<size_t>(D));
  for (int d = 0; d < D; ++d) b.weight[static_cast<size_t>(d)] = kvcref::bf16_from_float(w(rng));
  return b;
}

/// A random shape: `num_reqs` requests with chunk lengths in [0, max_chunk] (0 included),
/// start positions in [0, max_start] (odd and even), 0..max_padding trailing padding tokens.
inline BatchShape random_shape(std::mt19937_64& rng, int ratio, int head_dim, int num_reqs,
                               int max_chunk, int64_t max_start, int max_padding) {
  BatchShape s;
  s.ratio = ratio;
  s.head_dim = head_dim;
  std::uniform_int_distribution<int> len(0, max_chunk), pad(0, max_padding);
  std::uniform_int_distribution<int64_t> start(0, max_start);
  for (int r = 0; r < num_reqs; ++r) s.requests.push_back({len(rng), start(rng)});
  s.padding_tokens = pad(rng);
  return s;
}

/// The reference's view of a batch (pointers into `b`, which must outlive the result).
inline kvcref::CompressInputs reference_inputs(const Batch& b) {
  kvcref::CompressInputs in;
  in.head_dim = b.head_dim;
  in.ratio = b.ratio;
  in.num_tokens = b.num_tokens();
  in.kv_score = b.kv_score.data();
  in.kv_score_stride_elems = b.stride;
  in.positions = b.positions.data();
  in.slot = b.slot.data();
  in.qsl = b.qsl.data();
  in.num_reqs = b.num_reqs();
  in.req = b.req.data();
  in.ring = b.ratio > 1 ? b.ring.data() : nullptr;
  in.ring_capacity = b.capacity;
  in.ring_page_stride = b.ring_page_stride;
  in.ring_row_stride = b.ring_row_stride;
  in.ring_elems = static_cast<int64_t>(b.ring.size());
  in.ring_num_blocks = b.ring_num_blocks;
  in.weight = b.weight.data();
  in.eps = b.eps;
  return in;
}

}  // namespace kvctest
