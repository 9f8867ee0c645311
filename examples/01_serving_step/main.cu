// SPDX-License-Identifier: Apache-2.0
// 01_serving_step — one request's life in a DeepSeek V4.1-style compressed KV cache.
//
// Ratio 2, head dim 512, fp32 kv_score, fp8_ds_mla cache records, on raw cudaMalloc buffers:
//   * chunked prefill: chunk 1 at positions 0..8, chunk 2 starting at the ODD position 9,
//     so its first group pools position 8 from the ring (stored by chunk 1) with position 9
//     from the chunk. Prefill runs Op A (compress: latent) then Op B (insert: cache record).
//   * decode with speculation: each step feeds 1 + k tokens (k = 3 drafts) to the fused op
//     (latent and record in one launch). The verifier accepts some drafts; the next step
//     starts right after the last accepted token and simply overwrites what the rejected
//     drafts left in the ring and the cache. The ring is sized with kvc::ring_capacity so
//     that rolled-back rows never clobber the open group's row.
// Every call is checked against a host evaluation with the library's own functors (one
// host "thread" owns the whole row), and the cache outside the records written must not
// change. Run with --unfused to do the decode steps with Op A + Op B as well (same bytes).
//
// The launches name the kernel instance: kvc::launch_compress<2, 512, float>(params, s).
// kvc::compress(params, s) / kvc::insert / kvc::fused take the same params and pick the
// instance at run time from params.ratio, head_dim, dtype and record.layout, but compiling
// them instantiates every kernel of the supported lists (minutes of nvcc per file).
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

// kvcompress returns a Status instead of throwing; a failed validation names the condition.
#define KVC_CHECK(expr)                                                                   \
  do {                                                                                    \
    const kvc::Status s_ = (expr);                                                        \
    if (!s_.ok()) {                                                                       \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, s_.message());   \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

namespace {

constexpr int kRatio = 2;
constexpr int kHeadDim = 512;
constexpr int kRopeDim = 64;
constexpr int kNope = kHeadDim - kRopeDim;
constexpr int kDrafts = 3;  // speculative tokens per decode step
constexpr int kCapacity = kvc::ring_capacity(kRatio, kDrafts);
static_assert(kvc::ring_capacity_sufficient(kCapacity, kRatio, 1 + kDrafts),
              "the ring must hold the open group plus a whole rolled-back step");
using Layout = kvc::Fp8DsMlaLayout;
using Quantizer = kvc::Ue8m0TileQuantizer<Layout::kTile>;  // the NoPE tiles' quantizer
using Rope = kvc::Rotary<kvc::RopeStyle::kGptJ, kRopeDim>;

constexpr int kMaxTokens = 16;  // tokens per call (buffers are sized once, like a server's)
constexpr int kMaxPos = 64;     // rows of the cos/sin table
constexpr float kEps = 1e-6f;

// Ring: 2 blocks of kCapacity rows; our request owns block 1 (block 0 is someone else's).
// Pages padded like vLLM's (8208 floats for C = 8): strides are parameters, not assumed.
constexpr int kRingBlock = 1;
constexpr int64_t kRingRowStride = 2 * kHeadDim;
constexpr int64_t kRingPageStride = kCapacity * kRingRowStride + 16;
constexpr int64_t kRingElems = 2 * kRingPageStride;

// Compressed cache: 4 pages of 16 records, page stride rounded up to a multiple of 576.
constexpr int kBlockSize = 16;
constexpr int64_t kPageStride = (kBlockSize * Layout::kRecordBytes + 575) / 576 * 576;
constexpr int kNumPages = 4;
constexpr int64_t kCacheBytes = kNumPages * kPageStride;
constexpr int kPageTable[] = {2, 0, 3};  // the request's compressed entries, page by page

constexpr uint8_t kLatentPoison = 0xA5;  // unwritten latent rows keep bits 0xA5A5
constexpr uint8_t kCachePoison = 0xCD;

int64_t ring_slot(int64_t pos) { return int64_t{kRingBlock} * kCapacity + pos % kCapacity; }
int64_t cache_slot(int64_t pos) {
  const int64_t entry = pos / kRatio;  // the request's compressed entry (group index)
  return int64_t{kPageTable[entry / kBlockSize]} * kBlockSize + entry % kBlockSize;
}
bool closes_group(int64_t pos) { return (pos + 1) % kRatio == 0; }

// bf16 ulp of a value: bf16 keeps 8 significant bits.
float bf16_ulp(float v) {
  int e = 0;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  return v == 0.f ? std::ldexp(1.f, -133) : std::ldexp(1.f, e - 8);
}

struct DeviceBuffers {
  float* kv_score;     // [kMaxTokens, 2D]
  int64_t* positions;  // [kMaxTokens]
  int64_t* ring_slot;  // [kMaxTokens]
  int32_t* qsl;        // [2]: one request per call
  int32_t* req;        // [kMaxTokens]
  float* ring;         // [2 blocks, kCapacity, 2D], padded pages
  uint16_t* weight;    // [D] bf16
  uint16_t* latent;    // [kMaxTokens, D] bf16
  float* cos_sin;      // [kMaxPos, 64]
  int64_t* cache_slot; // [kMaxTokens]
  uint8_t* cache;      // [kNumPages, kPageStride]
};

// What the example keeps on the host: the inputs it sent and a mirror of the cache.
struct HostState {
  std::vector<std::vector<float>> row_at;  // last kv_score row sent for each position
  std::vector<uint16_t> weight;
  std::vector<float> cos_sin;
  std::vector<uint8_t> cache;  // expected device cache bytes
  float max_latent_ulps = 0.f, max_rope_ulps = 0.f;
  int groups = 0, records = 0, calls = 0;  // totals over all calls
};

// Op A for one group on the host with the library's functors. One "thread" owns the whole
// row, so the cross-lane reduction the kernel does with shuffles is a plain sum here.
// Also returns, per element, the largest term of the evaluation (for the fp32 slack).
void host_latent(const HostState& h, const std::vector<float>* members[kRatio],
                 std::vector<float>& out, std::vector<float>& magnitude) {
  static kvc::Array<float, kHeadDim> kv[kRatio], score[kRatio];  // 16 KB: keep off the stack
  for (int q = 0; q < kRatio; ++q)
    for (int d = 0; d < kHeadDim; ++d) {
      kv[q][d] = (*members[q])[d];
      score[q][d] = (*members[q])[kHeadDim + d];
    }
  const kvc::Array<float, kHeadDim> pooled = kvc::GatedPool<kRatio>::pool(kv, score);
  using Norm = kvc::RmsNorm<kHeadDim>;
  const float inv_rms = Norm::inv_rms(Norm::sum_squares(pooled), kEps);
  kvc::Array<uint16_t, kHeadDim> weight;
  std::copy(h.weight.begin(), h.weight.end(), weight.data);
  const kvc::Array<float, kHeadDim> normed = Norm::apply(pooled, inv_rms, weight);
  for (int d = 0; d < kHeadDim; ++d) {
    out[d] = normed[d];
    float largest = 0.f;
    for (int q = 0; q < kRatio; ++q) largest = std::max(largest, std::fabs(kv[q][d]));
    magnitude[d] = largest * inv_rms * std::fabs(kvc::bf16_to_float(weight[d]));
  }
}

// Op B for one record on the host, from the latent the device wrote (so that a 1-ulp
// latent difference cannot turn into an fp8 byte difference). Returns false on mismatch.
bool check_record(HostState& h, const uint16_t* latent, int64_t pos, int64_t slot,
                  const std::vector<uint8_t>& device_cache) {
  kvc::CacheParams c;
  c.block_size = kBlockSize;
  c.page_stride_bytes = kPageStride;
  const int64_t page = slot / kBlockSize, row = slot % kBlockSize;
  const int64_t value_at = Layout::value_offset(c, page, row);
  const int64_t scale_at = Layout::scale_offset(c, page, row);
  const uint8_t* values = device_cache.data() + value_at;
  const uint8_t* scales = device_cache.data() + scale_at;

  kvc::Array<float, kNope> nope;
  kvc::Array<float, kRopeDim> rope;
  for (int d = 0; d < kNope; ++d) nope[d] = kvc::bf16_to_float(latent[d]);
  for (int j = 0; j < kRopeDim; ++j) rope[j] = kvc::bf16_to_float(latent[kNope + j]);

  // NoPE: 7 tiles of 64, each with a power-of-two (UE8M0) scale; byte-exact.
  for (int k = 0; k < Layout::kTiles; ++k) {
    const int b = k * Layout::kTile;
    const float amax = Quantizer::abs_max(nope, b, Layout::kTile);
    const bool bad = Quantizer::has_nonfinite(nope, b, Layout::kTile);
    const int e = Quantizer::exponent(amax, bad, /*sanitize=*/false);
    if (scales[k] != Quantizer::scale_code(e)) {
      std::printf("  pos %lld: scale %d is 0x%02x, host 0x%02x\n", (long long)pos, k, scales[k],
                  Quantizer::scale_code(e));
      return false;
    }
    for (int d = b; d < b + Layout::kTile; ++d) {
      const uint8_t want = Quantizer::quantize<kvc::SoftwareE4m3>(nope[d], e);
      if (values[d] != want) {
        std::printf("  pos %lld: NoPE byte %d is 0x%02x, host 0x%02x\n", (long long)pos, d,
                    values[d], want);
        return false;
      }
    }
  }
  if (scales[Layout::kTiles] != 0) {
    std::printf("  pos %lld: scale padding byte is 0x%02x\n", (long long)pos, scales[7]);
    return false;
  }

  // RoPE at the group's first position, stored as bf16: within 1 bf16 ulp.
  const int64_t group_pos = pos / kRatio * kRatio;
  const float* cs = h.cos_sin.data() + group_pos * kRopeDim;
  const kvc::Array<float, kRopeDim> rotated = Rope::apply(rope, cs, cs + kRopeDim / 2);
  for (int j = 0; j < kRopeDim; ++j) {
    uint16_t bits;
    std::memcpy(&bits, values + kNope + 2 * j, 2);  // little-endian bf16
    const float want = kvc::bf16_to_float(kvc::float_to_bf16(rotated[j]));
    const float got = kvc::bf16_to_float(bits);
    const float ulps = std::fabs(got - want) / bf16_ulp(want);
    h.max_rope_ulps = std::max(h.max_rope_ulps, ulps);
    if (!(ulps <= 1.f)) {
      std::printf("  pos %lld: RoPE dim %d is %g, host %g\n", (long long)pos, j, got, want);
      return false;
    }
  }
  // The record is right: it is now part of the expected cache.
  std::memcpy(h.cache.data() + value_at, values, Layout::kValueBytes);
  std::memcpy(h.cache.data() + scale_at, scales, Layout::kScaleBytes);
  return true;
}

enum class Mode { kTwoOps, kFused };

struct CallResult {
  int groups = 0, records = 0, errors = 0;
};

// One call for our request: tokens at positions first .. first+n-1.
CallResult run_call(const DeviceBuffers& d, HostState& h, std::mt19937& rng, int64_t first, int n,
             Mode mode, cudaStream_t stream) {
  // Inputs of this call: fresh kv/score rows (new tokens, or re-sent drafts), indices.
  std::uniform_real_distribution<float> kv_dist(-2.f, 2.f), score_dist(-3.f, 3.f);
  std::vector<float> kv_score(size_t(n) * 2 * kHeadDim);
  for (int t = 0; t < n; ++t)
    for (int c = 0; c < 2 * kHeadDim; ++c)
      kv_score[size_t(t) * 2 * kHeadDim + c] = c < kHeadDim ? kv_dist(rng) : score_dist(rng);
  std::vector<int64_t> positions(n), rslots(n), cslots(n);
  std::vector<int32_t> req(n, 0), qsl = {0, n};
  for (int t = 0; t < n; ++t) {
    positions[t] = first + t;
    rslots[t] = ring_slot(first + t);
    // Only closing tokens write a record (the kernels skip the others themselves too).
    cslots[t] = closes_group(first + t) ? cache_slot(first + t) : -1;
  }
  CUDA_CHECK(cudaMemcpyAsync(d.kv_score, kv_score.data(), kv_score.size() * sizeof(float),
                             cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(d.positions, positions.data(), n * sizeof(int64_t),
                             cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(d.ring_slot, rslots.data(), n * sizeof(int64_t),
                             cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(d.cache_slot, cslots.data(), n * sizeof(int64_t),
                             cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(d.qsl, qsl.data(), 2 * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(d.req, req.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  // Poison the latent so a row written that should not be (or not written) shows up.
  CUDA_CHECK(cudaMemsetAsync(d.latent, kLatentPoison, size_t(kMaxTokens) * kHeadDim * 2, stream));

  kvc::CompressParams a;
  a.ratio = kRatio;
  a.head_dim = kHeadDim;
  a.dtype = kvc::DType::kFloat32;
  a.num_tokens = n;
  a.kv_score = d.kv_score;
  a.kv_score_stride_elems = 2 * kHeadDim;
  a.positions = kvc::IndexPtr{d.positions, kvc::IndexType::kInt64};
  a.slot = kvc::IndexPtr{d.ring_slot, kvc::IndexType::kInt64};
  a.qsl = d.qsl;
  a.qsl_size = 2;
  a.req = d.req;
  a.ring = d.ring;
  a.ring_layout = kvc::RingLayout{kCapacity, kRingPageStride, kRingRowStride};
  a.weight = reinterpret_cast<const kvc::bf16_t*>(d.weight);
  a.eps = kEps;
  a.latent = reinterpret_cast<kvc::bf16_t*>(d.latent);
  a.latent_stride_elems = kHeadDim;

  kvc::RecordArgs record;
  record.rope_dim = kRopeDim;
  record.rope_style = kvc::RopeStyle::kGptJ;
  record.layout = kvc::CacheLayout::kFp8DsMla;  // read by kvc::insert/fused; launch_* use the type
  record.cos_sin = d.cos_sin;
  record.cos_sin_dtype = kvc::DType::kFloat32;
  record.cos_sin_stride_elems = kRopeDim;
  record.cos_sin_rows = kMaxPos;
  record.cache_slot = kvc::IndexPtr{d.cache_slot, kvc::IndexType::kInt64};
  record.cache.data = d.cache;
  record.cache.block_size = kBlockSize;
  record.cache.page_stride_bytes = kPageStride;
  record.cache.num_pages = kNumPages;  // slots past the cache are skipped, never written

  if (mode == Mode::kTwoOps) {
    // Op A writes the latent (and refreshes the ring); Op B reads it back. vLLM runs the two
    // on separate streams, since the indexer also consumes the latent.
    KVC_CHECK((kvc::launch_compress<kRatio, kHeadDim, float>(a, stream)));
    kvc::InsertParams b;
    b.ratio = kRatio;
    b.head_dim = kHeadDim;
    b.num_tokens = n;
    b.latent = a.latent;
    b.latent_stride_elems = a.latent_stride_elems;
    b.positions = a.positions;
    b.record = record;
    KVC_CHECK((kvc::launch_insert<kRatio, kHeadDim, Layout>(b, stream)));
  } else {
    // One launch: the record is written from registers. The latent is optional here
    // (a.latent = nullptr skips it); we keep it to check the record against it.
    kvc::FusedParams f;
    f.compress = a;
    f.record = record;
    KVC_CHECK((kvc::launch_fused<kRatio, kHeadDim, float, Layout>(f, stream)));
  }

  std::vector<uint16_t> latent(size_t(n) * kHeadDim);
  std::vector<uint8_t> cache(kCacheBytes);
  CUDA_CHECK(cudaMemcpyAsync(latent.data(), d.latent, latent.size() * 2, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(cache.data(), d.cache, cache.size(), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));

  // Check: latents and records of the groups this call closes.
  CallResult r;
  int& errors = r.errors;
  std::vector<float> want(kHeadDim), magnitude(kHeadDim);
  for (int t = 0; t < n; ++t) {
    const int64_t pos = first + t;
    const uint16_t* row = latent.data() + size_t(t) * kHeadDim;
    if (!closes_group(pos)) {
      for (int c = 0; c < kHeadDim; ++c)
        if (row[c] != (kLatentPoison << 8 | kLatentPoison)) {
          std::printf("  pos %lld closes no group, but latent dim %d was written\n", (long long)pos, c);
          ++errors;
          break;
        }
      continue;
    }
    // Members inside the chunk come from this call's rows; earlier ones from what we sent
    // before (the device reads those from the ring).
    const std::vector<float>* members[kRatio];
    std::vector<float> chunk_rows[kRatio];
    for (int q = 0; q < kRatio; ++q) {
      const int64_t mpos = pos - (kRatio - 1) + q;
      if (mpos >= first) {
        const float* src = kv_score.data() + size_t(mpos - first) * 2 * kHeadDim;
        chunk_rows[q].assign(src, src + 2 * kHeadDim);
        members[q] = &chunk_rows[q];
      } else {
        members[q] = &h.row_at[size_t(mpos)];
      }
    }
    host_latent(h, members, want, magnitude);
    for (int c = 0; c < kHeadDim; ++c) {
      const float hv = kvc::bf16_to_float(kvc::float_to_bf16(want[c]));
      const float dv = kvc::bf16_to_float(row[c]);
      // 1 bf16 ulp, plus a tiny slack for fp32 summation order (warp tree vs. serial sum).
      const float bound = bf16_ulp(hv) + 1e-6f * magnitude[c];
      h.max_latent_ulps = std::max(h.max_latent_ulps, std::fabs(dv - hv) / bf16_ulp(hv));
      if (!(std::fabs(dv - hv) <= bound)) {
        std::printf("  pos %lld: latent dim %d is %g, host %g\n", (long long)pos, c, dv, hv);
        ++errors;
        break;
      }
    }
    ++r.groups;
    if (cslots[t] >= 0) {
      if (!check_record(h, row, pos, cslots[t], cache)) ++errors;
      ++r.records;
    }
  }
  // Nothing else in the cache may have changed.
  for (int64_t i = 0; i < kCacheBytes; ++i)
    if (cache[size_t(i)] != h.cache[size_t(i)]) {
      std::printf("  cache byte %lld (page %lld) changed outside the records written\n",
                  (long long)i, (long long)(i / kPageStride));
      ++errors;
      break;
    }

  // What the host remembers for later calls: the ring now holds these rows.
  for (int t = 0; t < n; ++t) {
    const float* src = kv_score.data() + size_t(t) * 2 * kHeadDim;
    h.row_at[size_t(first + t)].assign(src, src + 2 * kHeadDim);
  }
  ++h.calls;
  h.groups += r.groups;
  h.records += r.records;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("01_serving_step: no CUDA device, skipping (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;  // ctest reports this as Skipped (SKIP_RETURN_CODE 77)
  }
  const bool unfused = argc > 1 && std::strcmp(argv[1], "--unfused") == 0;

  std::mt19937 rng(2024);
  HostState h;
  h.row_at.resize(kMaxPos);
  h.weight.resize(kHeadDim);
  std::uniform_real_distribution<float> weight_dist(0.5f, 1.5f);
  for (auto& w : h.weight) w = kvc::float_to_bf16(weight_dist(rng));
  // RoPE table, DeepSeek style: P/2 cosines then P/2 sines per position, base 10000.
  h.cos_sin.resize(size_t(kMaxPos) * kRopeDim);
  for (int p = 0; p < kMaxPos; ++p)
    for (int i = 0; i < kRopeDim / 2; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / kRopeDim);
      h.cos_sin[size_t(p) * kRopeDim + i] = static_cast<float>(std::cos(angle));
      h.cos_sin[size_t(p) * kRopeDim + kRopeDim / 2 + i] = static_cast<float>(std::sin(angle));
    }
  h.cache.assign(size_t(kCacheBytes), kCachePoison);

  DeviceBuffers d;
  CUDA_CHECK(cudaMalloc(&d.kv_score, size_t(kMaxTokens) * 2 * kHeadDim * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&d.positions, kMaxTokens * sizeof(int64_t)));
  CUDA_CHECK(cudaMalloc(&d.ring_slot, kMaxTokens * sizeof(int64_t)));
  CUDA_CHECK(cudaMalloc(&d.qsl, 2 * sizeof(int32_t)));
  CUDA_CHECK(cudaMalloc(&d.req, kMaxTokens * sizeof(int32_t)));
  CUDA_CHECK(cudaMalloc(&d.ring, kRingElems * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&d.weight, kHeadDim * sizeof(uint16_t)));
  CUDA_CHECK(cudaMalloc(&d.latent, size_t(kMaxTokens) * kHeadDim * sizeof(uint16_t)));
  CUDA_CHECK(cudaMalloc(&d.cos_sin, h.cos_sin.size() * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&d.cache_slot, kMaxTokens * sizeof(int64_t)));
  CUDA_CHECK(cudaMalloc(&d.cache, size_t(kCacheBytes)));
  CUDA_CHECK(cudaMemcpy(d.weight, h.weight.data(), kHeadDim * sizeof(uint16_t), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d.cos_sin, h.cos_sin.data(), h.cos_sin.size() * sizeof(float), cudaMemcpyHostToDevice));
  // Ring starts as NaN: a read of a row nobody stored would make the latent NaN (caught).
  CUDA_CHECK(cudaMemset(d.ring, 0xFF, kRingElems * sizeof(float)));
  CUDA_CHECK(cudaMemset(d.cache, kCachePoison, size_t(kCacheBytes)));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));

  std::printf("01_serving_step: ratio %d, head dim %d, %s records (%d B), ring %d rows "
              "(kvc::ring_capacity(%d, %d)), decode steps %s\n",
              kRatio, kHeadDim, Layout::kName, Layout::kRecordBytes, kCapacity, kRatio, kDrafts,
              unfused ? "Op A + Op B" : "fused");
  std::printf("  %-9s %-10s %6s %7s %8s  %s\n", "call", "positions", "tokens", "groups",
              "records", "");
  int errors = 0;
  auto call = [&](const char* name, int64_t first, int n, Mode mode, const char* note) {
    const CallResult r = run_call(d, h, rng, first, n, mode, stream);
    std::printf("  %-9s %3lld..%-5lld %6d %7d %8d  %s\n", name, (long long)first,
                (long long)(first + n - 1), n, r.groups, r.records, note);
    errors += r.errors;
  };

  // Chunked prefill with the two ops. Chunk 2 starts at the odd position 9: its first
  // group is {8, 9}, and row 8 comes from the ring where chunk 1 stored it.
  call("prefill 1", 0, 9, Mode::kTwoOps, "Op A + Op B; position 8 stays open in the ring");
  call("prefill 2", 9, 12, Mode::kTwoOps, "Op A + Op B; starts at an odd position");

  // Decode: 1 + kDrafts tokens per step; accepted[i] drafts survive verification. The next
  // step starts after the last accepted token and rewrites whatever the rejected drafts
  // left behind (ring rows and a record of a group they closed): no explicit rollback.
  const int accepted[] = {2, 0, 3, 1, 3};
  int64_t pos = 21;
  for (int step = 0; step < int(sizeof accepted / sizeof accepted[0]); ++step) {
    char name[16], note[96];
    std::snprintf(name, sizeof name, "decode %d", step + 1);
    std::snprintf(note, sizeof note, "%s; accepted %d of %d drafts -> next step at %lld",
                  unfused ? "Op A + Op B" : "fused", accepted[step], kDrafts,
                  (long long)(pos + accepted[step] + 1));
    call(name, pos, 1 + kDrafts, unfused ? Mode::kTwoOps : Mode::kFused, note);
    pos += accepted[step] + 1;
  }

  CUDA_CHECK(cudaStreamDestroy(stream));
  for (void* p : {(void*)d.kv_score, (void*)d.positions, (void*)d.ring_slot, (void*)d.qsl,
                  (void*)d.req, (void*)d.ring, (void*)d.weight, (void*)d.latent,
                  (void*)d.cos_sin, (void*)d.cache_slot, (void*)d.cache})
    CUDA_CHECK(cudaFree(p));

  std::printf("  %d calls, %d groups closed, %d records checked; request length %lld tokens\n",
              h.calls, h.groups, h.records, (long long)pos);
  std::printf("  max latent error %.2f bf16 ulp, max RoPE error %.2f bf16 ulp; "
              "NoPE/scale bytes exact; cache untouched elsewhere\n",
              h.max_latent_ulps, h.max_rope_ulps);
  if (errors != 0) {
    std::printf("01_serving_step: FAILED (%d mismatches)\n", errors);
    return 1;
  }
  std::printf("01_serving_step: OK\n");
  return 0;
}
