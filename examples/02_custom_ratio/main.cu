// SPDX-License-Identifier: Apache-2.0
// 02_custom_ratio — a compress ratio and head dim outside the compiled lists.
//
// kvc::compress / kvc::insert dispatch at run time over closed lists (ratios 1..128 in
// powers of two, head dims 128/256/512) and answer kNotSupported for anything else. The
// kernels themselves are templates, so user code can instantiate any (ratio, head dim)
// whose head dim is a multiple of 64: here ratio 3, head dim 384, fp32 input, records as
// plain bf16 rows of 384 values (320 NoPE + 64 rotated RoPE).
//
// One batch of two requests and a padding token runs Op A then Op B; every latent and
// record is checked against the library's functors evaluated on the host.
#include <kvcompress/kvcompress.cuh>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
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

namespace {

constexpr int kRatio = 3;
constexpr int kHeadDim = 384;
constexpr int kRopeDim = 64;
constexpr int kNope = kHeadDim - kRopeDim;
using Layout = kvc::Bf16RowsLayout<kHeadDim, kRopeDim>;
using Rope = kvc::Rotary<kvc::RopeStyle::kGptJ, kRopeDim>;
constexpr float kEps = 1e-6f;
constexpr int kMaxPos = 32;

// No speculation here: the ring holds the open group (R - 1 rows), rounded up to 8.
constexpr int kCapacity = kvc::ring_capacity(kRatio, /*num_speculative_tokens=*/0);
constexpr int64_t kRingRowStride = 2 * kHeadDim;
constexpr int64_t kRingPageStride = kCapacity * kRingRowStride;
constexpr int kRingBlocks = 2;  // request r uses ring block r

// Cache: pages of 4 records; each 768-byte record padded to a 784-byte row.
constexpr int kBlockSize = 4;
constexpr int64_t kRowStride = Layout::kRecordBytes + 16;
constexpr int64_t kPageStride = kBlockSize * kRowStride;
constexpr int kNumPages = 4;
constexpr int64_t kCacheBytes = kNumPages * kPageStride;
constexpr uint8_t kPoison = 0xA5;

float bf16_ulp(float v) {
  int e = 0;
  std::frexp(v, &e);
  return v == 0.f ? std::ldexp(1.f, -133) : std::ldexp(1.f, e - 8);
}

struct Batch {
  // Request r: positions 0 .. length[r]-1, compressed entries in cache page page[r].
  std::vector<int> length = {9, 7};
  std::vector<int> page = {1, 3};
  std::vector<float> kv_score;  // [T, 2D]
  std::vector<int64_t> positions, ring_slot, cache_slot;
  std::vector<int32_t> qsl, req;
  int64_t num_tokens = 0;
};

Batch make_batch(std::mt19937& rng) {
  Batch b;
  b.qsl.push_back(0);
  for (int r = 0; r < int(b.length.size()); ++r) {
    for (int p = 0; p < b.length[r]; ++p) {
      b.positions.push_back(p);
      b.ring_slot.push_back(int64_t{r} * kCapacity + p % kCapacity);
      const bool closes = (p + 1) % kRatio == 0;
      b.cache_slot.push_back(closes ? int64_t{b.page[r]} * kBlockSize + p / kRatio : -1);
      b.req.push_back(r);
    }
    b.qsl.push_back(static_cast<int32_t>(b.positions.size()));
  }
  // A padding token after the last request (CUDA-graph batches are padded): slot -1 in
  // both the ring and the cache, so it closes no group and stores nothing.
  b.positions.push_back(0);
  b.ring_slot.push_back(-1);
  b.cache_slot.push_back(-1);
  b.req.push_back(0);
  b.num_tokens = static_cast<int64_t>(b.positions.size());
  std::uniform_real_distribution<float> kv(-2.f, 2.f), score(-3.f, 3.f);
  b.kv_score.resize(size_t(b.num_tokens) * 2 * kHeadDim);
  for (size_t i = 0; i < b.kv_score.size(); ++i)
    b.kv_score[i] = (i / kHeadDim) % 2 == 0 ? kv(rng) : score(rng);
  return b;
}

template <class T>
T* to_device(const std::vector<T>& v) {
  T* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, v.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

}  // namespace

int main() {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("02_custom_ratio: no CUDA device, skipping (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;  // ctest reports this as Skipped (SKIP_RETURN_CODE 77)
  }

  std::mt19937 rng(3);
  const Batch b = make_batch(rng);
  const int64_t T = b.num_tokens;
  std::vector<uint16_t> weight(kHeadDim);
  std::uniform_real_distribution<float> wd(0.5f, 1.5f);
  for (auto& w : weight) w = kvc::float_to_bf16(wd(rng));
  std::vector<float> cos_sin(size_t(kMaxPos) * kRopeDim);
  for (int p = 0; p < kMaxPos; ++p)
    for (int i = 0; i < kRopeDim / 2; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / kRopeDim);
      cos_sin[size_t(p) * kRopeDim + i] = static_cast<float>(std::cos(angle));
      cos_sin[size_t(p) * kRopeDim + kRopeDim / 2 + i] = static_cast<float>(std::sin(angle));
    }

  float* d_kv_score = to_device(b.kv_score);
  int64_t* d_positions = to_device(b.positions);
  int64_t* d_ring_slot = to_device(b.ring_slot);
  int64_t* d_cache_slot = to_device(b.cache_slot);
  int32_t* d_qsl = to_device(b.qsl);
  int32_t* d_req = to_device(b.req);
  uint16_t* d_weight = to_device(weight);
  float* d_cos_sin = to_device(cos_sin);
  float* d_ring = nullptr;
  uint16_t* d_latent = nullptr;
  uint8_t* d_cache = nullptr;
  CUDA_CHECK(cudaMalloc(&d_ring, kRingBlocks * kRingPageStride * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&d_latent, size_t(T) * kHeadDim * sizeof(uint16_t)));
  CUDA_CHECK(cudaMalloc(&d_cache, kCacheBytes));
  // Poison the outputs: rows that must not be written keep these bytes.
  CUDA_CHECK(cudaMemset(d_latent, kPoison, size_t(T) * kHeadDim * sizeof(uint16_t)));
  CUDA_CHECK(cudaMemset(d_cache, kPoison, kCacheBytes));
  CUDA_CHECK(cudaMemset(d_ring, 0, kRingBlocks * kRingPageStride * sizeof(float)));

  kvc::CompressParams a;
  a.ratio = kRatio;
  a.head_dim = kHeadDim;
  a.dtype = kvc::DType::kFloat32;
  a.num_tokens = T;
  a.kv_score = d_kv_score;
  a.kv_score_stride_elems = 2 * kHeadDim;
  a.positions = kvc::IndexPtr{d_positions, kvc::IndexType::kInt64};
  a.slot = kvc::IndexPtr{d_ring_slot, kvc::IndexType::kInt64};
  a.qsl = d_qsl;
  a.qsl_size = static_cast<int64_t>(b.qsl.size());
  a.req = d_req;
  a.ring = d_ring;
  a.ring_layout = kvc::RingLayout{kCapacity, kRingPageStride, kRingRowStride};
  a.weight = reinterpret_cast<const kvc::bf16_t*>(d_weight);
  a.eps = kEps;
  a.latent = reinterpret_cast<kvc::bf16_t*>(d_latent);
  a.latent_stride_elems = kHeadDim;

  kvc::InsertParams ins;
  ins.ratio = kRatio;
  ins.head_dim = kHeadDim;
  ins.num_tokens = T;
  ins.latent = a.latent;
  ins.latent_stride_elems = a.latent_stride_elems;
  ins.positions = a.positions;
  ins.record.rope_dim = kRopeDim;
  ins.record.rope_style = kvc::RopeStyle::kGptJ;
  ins.record.layout = kvc::CacheLayout::kBf16Rows;
  ins.record.cos_sin = d_cos_sin;
  ins.record.cos_sin_stride_elems = kRopeDim;
  ins.record.cos_sin_rows = kMaxPos;
  ins.record.cache_slot = kvc::IndexPtr{d_cache_slot, kvc::IndexType::kInt64};
  ins.record.cache.data = d_cache;
  ins.record.cache.block_size = kBlockSize;
  ins.record.cache.page_stride_bytes = kPageStride;
  ins.record.cache.row_stride_bytes = kRowStride;
  ins.record.cache.num_pages = kNumPages;

  // The runtime dispatch refuses ratio 3 and names the way out.
  const kvc::Status refused = kvc::compress_can_implement(a);
  std::printf("02_custom_ratio: kvc::compress_can_implement: %s\n", refused.message());

  // The instances this program compiles itself: the template arguments must match the
  // params (checked: a mismatch returns an error status, not a wrong kernel).
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  KVC_CHECK((kvc::launch_compress<kRatio, kHeadDim, float>(a, stream)));
  KVC_CHECK((kvc::launch_insert<kRatio, kHeadDim, Layout>(ins, stream)));
  std::vector<uint16_t> latent(size_t(T) * kHeadDim);
  std::vector<uint8_t> cache(kCacheBytes);
  CUDA_CHECK(cudaMemcpyAsync(latent.data(), d_latent, latent.size() * 2, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(cache.data(), d_cache, cache.size(), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));

  // Host check with the same functors, one host "thread" per row.
  int errors = 0, groups = 0;
  float max_latent_ulps = 0.f, max_rope_ulps = 0.f;
  std::vector<uint8_t> expected_cache(kCacheBytes, kPoison);
  static kvc::Array<float, kHeadDim> kv[kRatio], score[kRatio];
  kvc::Array<uint16_t, kHeadDim> w;
  std::copy(weight.begin(), weight.end(), w.data);
  for (int64_t t = 0; t < T; ++t) {
    const uint16_t* row = latent.data() + t * kHeadDim;
    const bool closes = b.ring_slot[t] >= 0 && (b.positions[t] + 1) % kRatio == 0;
    if (!closes) {
      for (int c = 0; c < kHeadDim; ++c)
        if (row[c] != (kPoison << 8 | kPoison)) {
          std::printf("  token %lld closes no group, but its latent was written\n", (long long)t);
          ++errors;
          break;
        }
      continue;
    }
    ++groups;
    // Every request starts at position 0 here, so all members are rows of this batch.
    for (int q = 0; q < kRatio; ++q)
      for (int c = 0; c < kHeadDim; ++c) {
        const size_t src = size_t(t - (kRatio - 1) + q) * 2 * kHeadDim;
        kv[q][c] = b.kv_score[src + c];
        score[q][c] = b.kv_score[src + kHeadDim + c];
      }
    using Norm = kvc::RmsNorm<kHeadDim>;
    const auto pooled = kvc::GatedPool<kRatio>::pool(kv, score);
    const float inv_rms = Norm::inv_rms(Norm::sum_squares(pooled), kEps);
    const auto normed = Norm::apply(pooled, inv_rms, w);
    for (int c = 0; c < kHeadDim; ++c) {
      const float hv = kvc::bf16_to_float(kvc::float_to_bf16(normed[c]));
      const float dv = kvc::bf16_to_float(row[c]);
      float largest = 0.f;
      for (int q = 0; q < kRatio; ++q) largest = std::max(largest, std::fabs(kv[q][c]));
      const float slack = 1e-6f * largest * inv_rms * std::fabs(kvc::bf16_to_float(w[c]));
      max_latent_ulps = std::max(max_latent_ulps, std::fabs(dv - hv) / bf16_ulp(hv));
      if (!(std::fabs(dv - hv) <= bf16_ulp(hv) + slack)) {
        std::printf("  token %lld: latent dim %d is %g, host %g\n", (long long)t, c, dv, hv);
        ++errors;
        break;
      }
    }

    // Record: NoPE = the latent bits, RoPE = bf16(rotation of the device latent at the
    // group's first position).
    const int64_t slot = b.cache_slot[t];
    const int64_t at = Layout::record_offset(ins.record.cache, slot / kBlockSize, slot % kBlockSize);
    const uint8_t* rec = cache.data() + at;
    if (std::memcmp(rec, row, kNope * 2) != 0) {
      std::printf("  token %lld: NoPE part of the record differs from the latent\n", (long long)t);
      ++errors;
    }
    kvc::Array<float, kRopeDim> rope;
    for (int j = 0; j < kRopeDim; ++j) rope[j] = kvc::bf16_to_float(row[kNope + j]);
    const int64_t group_pos = b.positions[t] / kRatio * kRatio;
    const float* cs = cos_sin.data() + group_pos * kRopeDim;
    const auto rotated = Rope::apply(rope, cs, cs + kRopeDim / 2);
    for (int j = 0; j < kRopeDim; ++j) {
      uint16_t bits;
      std::memcpy(&bits, rec + 2 * (kNope + j), 2);
      const float want = kvc::bf16_to_float(kvc::float_to_bf16(rotated[j]));
      const float ulps = std::fabs(kvc::bf16_to_float(bits) - want) / bf16_ulp(want);
      max_rope_ulps = std::max(max_rope_ulps, ulps);
      if (!(ulps <= 1.f)) {
        std::printf("  token %lld: RoPE dim %d differs by %g ulp\n", (long long)t, j, ulps);
        ++errors;
        break;
      }
    }
    std::memcpy(expected_cache.data() + at, rec, Layout::kRecordBytes);
  }
  // The 16 padding bytes of each row and every record not written keep the poison.
  if (cache != expected_cache) {
    std::printf("  the cache changed outside the %d records written\n", groups);
    ++errors;
  }

  CUDA_CHECK(cudaStreamDestroy(stream));
  for (void* p : {(void*)d_kv_score, (void*)d_positions, (void*)d_ring_slot, (void*)d_cache_slot,
                  (void*)d_qsl, (void*)d_req, (void*)d_weight, (void*)d_cos_sin, (void*)d_ring,
                  (void*)d_latent, (void*)d_cache})
    CUDA_CHECK(cudaFree(p));

  std::printf("02_custom_ratio: ratio %d, head dim %d, %s records of %d B (row stride %lld); "
              "%lld tokens (requests of %d and %d + 1 padding), %d groups closed\n",
              kRatio, kHeadDim, Layout::kName, Layout::kRecordBytes, (long long)kRowStride,
              (long long)T, b.length[0], b.length[1], groups);
  std::printf("  max latent error %.2f bf16 ulp, max RoPE error %.2f bf16 ulp, NoPE bits exact\n",
              max_latent_ulps, max_rope_ulps);
  if (errors != 0) {
    std::printf("02_custom_ratio: FAILED (%d mismatches)\n", errors);
    return 1;
  }
  std::printf("02_custom_ratio: OK\n");
  return 0;
}
