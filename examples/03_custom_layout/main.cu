// SPDX-License-Identifier: Apache-2.0
// 03_custom_layout — a cache layout written in user code.
//
// A layout is one struct with the members described in <kvcompress/layout/cache.hpp>: the
// insert and fused kernels hand it a warp's fragment of the finished row (bf16 bits, RoPE
// already rotated) and it writes the record. This one stores e4m3 values with one fp32
// scale per record (kvc::Fp8RowsLayout has one scale for the whole tensor instead).
// Op B runs it through kvc::launch_insert<2, 512, E4m3RowScaleLayout>; the same struct works
// with kvc::launch_fused<R, D, In, E4m3RowScaleLayout>. The records are checked on the host.
#include <kvcompress/kvcompress.cuh>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define CUDA_CHECK(expr)                                                                  \
  do {                                                                                    \
    const cudaError_t err_ = (expr);                                                      \
    if (err_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr,                  \
                   cudaGetErrorString(err_));                                             \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

#define KVC_CHECK(expr)                                                                   \
  do {                                                                                    \
    const kvc::Status s_ = (expr);                                                        \
    if (!s_.ok()) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, s_.message());   \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

/// e4m3 rows with one fp32 scale per record. Record of `row` in `page` at
/// page * page_stride_bytes + row * row_stride_bytes (both from kvc::CacheParams):
///   [0, 512)    e4m3 (satfinite, RNE) of x[d] / scale, d = 0..511 (RoPE dims rotated)
///   [512, 516)  fp32 scale = max(amax, 1e-4) / 448, amax = max_d |x[d]|
/// x is the bf16 row the kernel hands over. The 1e-4 floor keeps an all-zero row finite.
/// Assumes finite rows (no NaN/inf handling, unlike the built-in layouts).
struct E4m3RowScaleLayout {
  static constexpr int kHeadDim = 512;
  static constexpr int kRopeDim = 64;
  static constexpr int kScaleOffset = kHeadDim;
  static constexpr int kRecordBytes = kHeadDim + 4;
  static constexpr float kMinAmax = 1e-4f;
  static constexpr const char* kName = "e4m3_row_scale";

  KVC_HOST_DEVICE static int64_t record_offset(const kvc::CacheParams& c, int64_t page,
                                               int64_t row) {
    return page * c.page_stride_bytes + row * c.row_stride_bytes;
  }
  /// Used by the host as well, so the reference computes the very same fp32 scale.
  KVC_HOST_DEVICE static float scale_of(float amax) {
    return (amax > kMinAmax ? amax : kMinAmax) / 448.0f;
  }

  // Host side: validation before launch (the launch returns these statuses).
  static int64_t min_page_bytes(int block_size, int64_t row_stride_bytes) {
    return (int64_t{block_size} - 1) * row_stride_bytes + kRecordBytes;
  }
  static kvc::Status check(const kvc::CacheParams& c) {
    // 16-byte aligned rows keep every vector store and the fp32 scale store aligned.
    if (c.row_stride_bytes < kRecordBytes || c.row_stride_bytes % 16 != 0 ||
        c.page_stride_bytes % 16 != 0)
      return kvc::Status::invalid(std::string(kName) + ": row stride " +
                                  std::to_string(c.row_stride_bytes) + " must be >= " +
                                  std::to_string(kRecordBytes) + " and, like the page stride " +
                                  std::to_string(c.page_stride_bytes) + ", a multiple of 16 bytes");
    return kvc::Status::success();
  }

  // Device side: every thread holding the row (Row::kThreads of them: a warp, or the
  // kernel's whole block) calls store() with its part of the row.
  template <class Row>
  KVC_DEVICE static void store(const kvc::CacheParams& c, int64_t page, int64_t row,
                               const Row& frag) {
    static_assert(Row::kHeadDim == kHeadDim, "row width must match the layout");
    constexpr int E = Row::kVecElems;
    uint8_t* dst = static_cast<uint8_t*>(c.data) + record_offset(c, page, row);

    float amax = 0.f;
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < Row::kVecs * E; ++i)
      amax = fmaxf(amax, fabsf(kvc::bf16_to_float(frag.bits[i])));
    // A reduction over all the row's threads: each gets the row's amax (max is exact, so
    // every thread derives the same scale bits).
    amax = frag.template group_max<Row::kThreads>(amax);
    const float scale = scale_of(amax);
    const float inverse = 1.0f / scale;  // once, then multiply (as kvc::Fp8RowsLayout does)

    KVC_PRAGMA_UNROLL
    for (int v = 0; v < Row::kVecs; ++v) {
      kvc::Array<uint8_t, E> q;
      KVC_PRAGMA_UNROLL
      for (int e = 0; e < E; ++e)
        q[e] = Row::Convert::convert(kvc::bf16_to_float(frag.bits[v * E + e]) * inverse);
      // Run v of this thread starts at channel run_start(lane, v): one vector store per
      // run, coalesced across the threads.
      Row::store_bytes(dst + Row::run_start(frag.lane, v), q);
    }
    if (frag.lane == 0) *reinterpret_cast<float*>(dst + kScaleOffset) = scale;
  }
};

namespace {

constexpr int kRatio = 2;
constexpr int kHeadDim = 512;
constexpr int kRopeDim = 64;
constexpr int kNope = kHeadDim - kRopeDim;
using Rope = kvc::Rotary<kvc::RopeStyle::kGptJ, kRopeDim>;
constexpr int kMaxPos = 32;
constexpr int kBlockSize = 8;
constexpr int64_t kRowStride = 528;  // 516-byte records, rows rounded up to 16 bytes
constexpr int64_t kPageStride = kBlockSize * kRowStride;
constexpr int kNumPages = 2;
constexpr int64_t kCacheBytes = kNumPages * kPageStride;
constexpr uint8_t kPoison = 0xA5;

/// The record the layout must write for a latent row at `pos`, computed on the host with
/// the library's functors and codecs.
std::vector<uint8_t> expected_record(const uint16_t* latent, int64_t pos,
                                     const std::vector<float>& cos_sin) {
  // The row the kernel hands to the layout: NoPE bits unchanged, RoPE rotated at the
  // group's first position and rounded to bf16.
  std::vector<float> x(kHeadDim);
  for (int d = 0; d < kHeadDim; ++d) x[d] = kvc::bf16_to_float(latent[d]);
  kvc::Array<float, kRopeDim> rope;
  for (int j = 0; j < kRopeDim; ++j) rope[j] = x[kNope + j];
  const float* cs = cos_sin.data() + (pos / kRatio * kRatio) * kRopeDim;
  const auto rotated = Rope::apply(rope, cs, cs + kRopeDim / 2);
  for (int j = 0; j < kRopeDim; ++j) x[kNope + j] = kvc::bf16_to_float(kvc::float_to_bf16(rotated[j]));

  float amax = 0.f;
  for (float v : x) amax = std::fmax(amax, std::fabs(v));
  const float scale = E4m3RowScaleLayout::scale_of(amax);
  const float inverse = 1.0f / scale;
  std::vector<uint8_t> record(E4m3RowScaleLayout::kRecordBytes);
  for (int d = 0; d < kHeadDim; ++d) record[d] = kvc::SoftwareE4m3::convert(x[d] * inverse);
  std::memcpy(record.data() + E4m3RowScaleLayout::kScaleOffset, &scale, 4);
  return record;
}

}  // namespace

int main() {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("03_custom_layout: no CUDA device, skipping (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;  // ctest reports this as Skipped (SKIP_RETURN_CODE 77)
  }

  // Op B input: 8 latent rows at positions 10..17 (ratio 2: odd positions close a group).
  // The group closed at 15 has no cache slot (-1), as a padded or dropped token would.
  const int T = 8;
  std::mt19937 rng(5);
  std::normal_distribution<float> value(0.f, 1.f);
  std::vector<uint16_t> latent(size_t(T) * kHeadDim);
  for (auto& v : latent) v = kvc::float_to_bf16(value(rng));
  std::vector<int64_t> positions(T), slots(T);
  const int64_t slot_of_group[] = {9, 2, -1, 14};  // slots of the groups closed at 11, 13, 15, 17
  for (int t = 0; t < T; ++t) {
    positions[t] = 10 + t;
    slots[t] = (positions[t] + 1) % kRatio == 0 ? slot_of_group[t / 2] : -1;
  }
  std::vector<float> cos_sin(size_t(kMaxPos) * kRopeDim);
  for (int p = 0; p < kMaxPos; ++p)
    for (int i = 0; i < kRopeDim / 2; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / kRopeDim);
      cos_sin[size_t(p) * kRopeDim + i] = static_cast<float>(std::cos(angle));
      cos_sin[size_t(p) * kRopeDim + kRopeDim / 2 + i] = static_cast<float>(std::sin(angle));
    }

  uint16_t* d_latent;
  int64_t *d_positions, *d_slots;
  float* d_cos_sin;
  uint8_t* d_cache;
  CUDA_CHECK(cudaMalloc(&d_latent, latent.size() * sizeof(uint16_t)));
  CUDA_CHECK(cudaMalloc(&d_positions, T * sizeof(int64_t)));
  CUDA_CHECK(cudaMalloc(&d_slots, T * sizeof(int64_t)));
  CUDA_CHECK(cudaMalloc(&d_cos_sin, cos_sin.size() * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&d_cache, kCacheBytes));
  CUDA_CHECK(cudaMemcpy(d_latent, latent.data(), latent.size() * 2, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_positions, positions.data(), T * sizeof(int64_t), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_slots, slots.data(), T * sizeof(int64_t), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_cos_sin, cos_sin.data(), cos_sin.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(d_cache, kPoison, kCacheBytes));

  kvc::InsertParams p;
  p.ratio = kRatio;
  p.head_dim = kHeadDim;
  p.num_tokens = T;
  p.latent = reinterpret_cast<const kvc::bf16_t*>(d_latent);
  p.latent_stride_elems = kHeadDim;
  p.positions = kvc::IndexPtr{d_positions, kvc::IndexType::kInt64};
  p.record.rope_dim = kRopeDim;
  p.record.rope_style = kvc::RopeStyle::kGptJ;
  p.record.cos_sin = d_cos_sin;
  p.record.cos_sin_stride_elems = kRopeDim;
  p.record.cos_sin_rows = kMaxPos;
  p.record.cache_slot = kvc::IndexPtr{d_slots, kvc::IndexType::kInt64};
  p.record.cache.data = d_cache;
  p.record.cache.block_size = kBlockSize;
  p.record.cache.page_stride_bytes = kPageStride;
  p.record.cache.row_stride_bytes = kRowStride;
  // p.record.layout is not read: the layout is the template argument.

  // The layout's check() runs before anything is launched: a bad stride is an error status.
  kvc::InsertParams bad = p;
  bad.record.cache.row_stride_bytes = 520;
  const kvc::Status refused = kvc::launch_insert<kRatio, kHeadDim, E4m3RowScaleLayout>(bad, nullptr);
  std::printf("03_custom_layout: row stride 520 -> \"%s\"\n", refused.message());

  KVC_CHECK((kvc::launch_insert<kRatio, kHeadDim, E4m3RowScaleLayout>(p, nullptr)));
  std::vector<uint8_t> cache(kCacheBytes);
  CUDA_CHECK(cudaMemcpy(cache.data(), d_cache, kCacheBytes, cudaMemcpyDeviceToHost));

  int errors = refused.ok() ? 1 : 0, records = 0;
  double max_dequant_error = 0.0;
  std::vector<uint8_t> expected_cache(kCacheBytes, kPoison);
  for (int t = 0; t < T; ++t) {
    if (slots[t] < 0) continue;
    const uint16_t* row = latent.data() + size_t(t) * kHeadDim;
    const std::vector<uint8_t> want = expected_record(row, positions[t], cos_sin);
    const int64_t at = E4m3RowScaleLayout::record_offset(p.record.cache, slots[t] / kBlockSize,
                                                         slots[t] % kBlockSize);
    std::memcpy(expected_cache.data() + at, want.data(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      if (cache[at + i] != want[i]) {
        std::printf("  position %lld: record byte %zu is 0x%02x, host 0x%02x\n",
                    (long long)positions[t], i, cache[at + i], want[i]);
        ++errors;
        break;
      }
    // How close the stored NoPE values are to the latent (RoPE dims were rotated).
    float scale;
    std::memcpy(&scale, cache.data() + at + E4m3RowScaleLayout::kScaleOffset, 4);
    for (int d = 0; d < kNope; ++d) {
      const double back = double(kvc::e4m3_to_float(cache[at + d])) * scale;
      max_dequant_error = std::fmax(max_dequant_error, std::fabs(back - kvc::bf16_to_float(row[d])));
    }
    ++records;
  }
  if (cache != expected_cache) {
    std::printf("  the cache changed outside the %d records\n", records);
    ++errors;
  }

  for (void* ptr : {(void*)d_latent, (void*)d_positions, (void*)d_slots, (void*)d_cos_sin, (void*)d_cache})
    CUDA_CHECK(cudaFree(ptr));

  std::printf("03_custom_layout: layout %s, %d-byte records in %lld-byte rows; %d tokens, "
              "%d records written (1 group without a slot), bytes match the host exactly\n",
              E4m3RowScaleLayout::kName, E4m3RowScaleLayout::kRecordBytes, (long long)kRowStride,
              T, records);
  std::printf("  max |dequantized NoPE - latent| = %.4f (e4m3 keeps 3 mantissa bits)\n",
              max_dequant_error);
  if (errors != 0) {
    std::printf("03_custom_layout: FAILED (%d mismatches)\n", errors);
    return 1;
  }
  std::printf("03_custom_layout: OK\n");
  return 0;
}
