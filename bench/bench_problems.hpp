// SPDX-License-Identifier: Apache-2.0
// The problems kvc_nvbench measures (bench/kvc_nvbench.cu), in one place: the layout table
// (page padding), the shapes, the problem of a (shape, ratio) built from fixed seeds, the
// bytes each op must move (count_bytes), the input-set rotation, the device buffers with
// their fill kernels and op parameters, and the copy baseline's kernel. Timing is in
// bench_timing.cuh, nvbench's axes and main in kvc_nvbench.cu. CUDA: include from .cu only.
// Until issue 15 kvc_bench (bench/kvc_bench.cu) measured the same problems, built in the same
// order from the same seeds, so its recorded results (bench/RESULTS.md) time the same slots.
#pragma once

#include <kvcompress/kvcompress.cuh>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace bench {

constexpr int kHeadDim = 512;
constexpr int kBlockSize = 64;  // records per main-cache page
constexpr int kSpecTokens = 7;  // ring capacity ring_capacity(R, 7)
constexpr int kRatios[] = {1, 2, 4, 128};
constexpr uint64_t kShapeSeed = 1;    // the decode / mixed shapes' start positions
constexpr uint64_t kProblemSeed = 2;  // the cache slots, drawn problem after problem
constexpr int kMinLaunchesPerGraph = 20;
constexpr int kNumLayouts = static_cast<int>(std::size(kvc::kBuiltinLayouts));

/// Throws std::runtime_error("what: reason") on failure.
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
inline void check(const kvc::Status& s, const char* what) {
  if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.message());
}

// ---------------------------------------------------------------------------------------
// Layouts: vLLM's page padding for the page-segregated formats (fp8_ds_mla pages to 576
// bytes, mxfp8 / nvfp4 to 512), unpadded rows for the row-strided formats.

struct LayoutInfo {
  int index = -1;  // position in kvc::kBuiltinLayouts
  kvc::CacheLayout layout = kvc::CacheLayout::kFp8DsMla;
  bool holds_head_dim = false;  // false: the layout does not hold kHeadDim (the rest unset)
  const char* name = "?";
  double record_bytes = 0;
  int64_t page_bytes = 0, row_bytes = 0;
};

inline LayoutInfo layout_info(kvc::CacheLayout l) {
  LayoutInfo info;
  info.layout = l;
  for (int i = 0; i < kNumLayouts; ++i)
    if (kvc::kBuiltinLayouts[i] == l) info.index = i;
  (void)kvc::dispatch_layout<kHeadDim>(l, [&](auto layout) {
    using L = decltype(layout);
    info.holds_head_dim = true;
    info.name = L::kName;
    info.record_bytes = double(L::kRecordBytes);
    if constexpr (L::ByteMap::kUsesRowStride) {
      info.row_bytes = L::kRecordBytes;
      info.page_bytes = int64_t{kBlockSize} * L::kRecordBytes;
    } else {
      const int64_t pad = l == kvc::CacheLayout::kFp8DsMla ? 576 : 512;
      info.page_bytes = (int64_t{kBlockSize} * L::kRecordBytes + pad - 1) / pad * pad;
    }
    return kvc::Status::success();
  });
  return info;
}

/// The layouts measured: every built-in one holding kHeadDim, in kvc::kBuiltinLayouts order
/// (fp8_ds_mla first).
inline const std::vector<LayoutInfo>& bench_layouts() {
  static const std::vector<LayoutInfo> list = [] {
    std::vector<LayoutInfo> v;
    for (kvc::CacheLayout l : kvc::kBuiltinLayouts)
      if (const LayoutInfo info = layout_info(l); info.holds_head_dim) v.push_back(info);
    return v;
  }();
  return list;
}

// ---------------------------------------------------------------------------------------
// Shapes

struct Shape {
  std::string name;
  std::vector<std::pair<int, int64_t>> requests;  // (tokens, start position)
};

/// The shape list; `quick` (kvc_nvbench --quick) leaves out prefill 4x16384.
inline std::vector<Shape> shapes(bool quick) {
  std::mt19937_64 rng(kShapeSeed);
  auto decode = [&](int reqs, int per) {
    Shape s{"decode " + std::to_string(reqs) + "x" + std::to_string(per), {}};
    for (int r = 0; r < reqs; ++r) s.requests.push_back({per, 1000 + static_cast<int64_t>(rng() % 60000)});
    return s;
  };
  std::vector<Shape> out = {decode(64, 2), decode(256, 2), decode(1024, 4), decode(128, 6)};
  out.push_back({"prefill 1x8192", {{8192, 0}}});
  out.push_back({"prefill 1x32768 @odd", {{32768, 1001}}});
  if (!quick) out.push_back({"prefill 4x16384", {{16384, 0}, {16384, 0}, {16384, 0}, {16384, 0}}});
  Shape mixed{"mixed 2x2048+192x2", {{2048, 7}, {2048, 4096}}};
  for (int r = 0; r < 192; ++r) mixed.requests.push_back({2, 500 + static_cast<int64_t>(rng() % 60000)});
  out.push_back(mixed);
  return out;
}

// ---------------------------------------------------------------------------------------
// One problem: host indices and the bytes each op must move

struct Bytes {
  double read = 0, write = 0;
  double total() const { return read + write; }
};

struct Problem {
  int ratio = 2;
  int capacity = 8;
  int64_t T = 0;
  std::vector<int64_t> positions, ring_slot, cache_slot;
  std::vector<int32_t> qsl, req;
  int64_t pages = 0;
  int64_t closing = 0;
  Bytes a;                      // Op A
  double latent_bytes = 0;      // Op A's latent rows (written)
  double ring_write_bytes = 0;  // Op A's ring stores

  void build(const Shape& s, int r, std::mt19937_64& rng) {
    ratio = r;
    capacity = kvc::ring_capacity(r, kSpecTokens);
    positions.clear(); ring_slot.clear(); cache_slot.clear(); qsl.assign(1, 0); req.clear();
    int req_index = 0;
    for (auto [n, start] : s.requests) {
      for (int i = 0; i < n; ++i) {
        positions.push_back(start + i);
        ring_slot.push_back(int64_t{req_index} * capacity + (start + i) % capacity);
        req.push_back(req_index);
      }
      qsl.push_back(static_cast<int32_t>(positions.size()));
      ++req_index;
    }
    T = static_cast<int64_t>(positions.size());
    // Main-cache slots spread over pages: a random permutation of page rows.
    closing = 0;
    for (int64_t t = 0; t < T; ++t) closing += (positions[t] + 1) % r == 0;
    pages = std::max<int64_t>(1, (closing + kBlockSize - 1) / kBlockSize) + 1;
    std::vector<int64_t> perm(static_cast<size_t>(pages * kBlockSize));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    cache_slot.assign(static_cast<size_t>(T), -1);
    int64_t next = 0;
    for (int64_t t = 0; t < T; ++t)
      if ((positions[t] + 1) % r == 0) cache_slot[t] = perm[next++];
    count_bytes();
  }

  // Op A's bytes, each input read once and each output written once, counted from the
  // indices. It reads the kv_score rows that a closing group or the ring store needs, the
  // ring rows of head groups, the indices (positions, slot, req: 8 + 8 + 4 per token, qsl)
  // and the weight; it writes the ring rows it stores and the latent rows.
  void count_bytes() {
    const double row = (ratio > 1 ? 2.0 : 1.0) * kHeadDim * 4;
    std::vector<char> needed(static_cast<size_t>(T), 0);
    double ring_reads = 0, ring_writes = 0;
    for (size_t r = 0; r + 1 < qsl.size(); ++r) {
      const int64_t first = qsl[r], end = qsl[r + 1];
      if (end == first) continue;
      const int64_t start = positions[first];
      for (int64_t t = first; t < end; ++t) {
        const int64_t p = positions[t];
        if ((p + 1) % ratio != 0) continue;
        for (int64_t q = p - ratio + 1; q <= p; ++q) {
          if (q >= start) needed[t - (p - q)] = 1;
          else ring_reads += 1;
        }
      }
      for (int64_t t = std::max(first, end - capacity); t < end; ++t) { needed[t] = 1; ring_writes += 1; }
    }
    const double rows = std::count(needed.begin(), needed.end(), 1);
    const double meta_a = T * (8.0 + 8.0 + 4.0) + qsl.size() * 4.0 + kHeadDim * 2.0;
    const double ring_row = 2.0 * kHeadDim * 4;
    latent_bytes = closing * kHeadDim * 2.0;
    ring_write_bytes = ratio > 1 ? ring_writes * ring_row : 0.0;
    a.read = rows * row + (ratio > 1 ? ring_reads * ring_row : 0.0) + meta_a;
    a.write = ring_write_bytes + latent_bytes;
  }
  // Op B: 16 B of indices per token (positions, cache slot); per record the latent row and
  // 256 B of cos/sin read, the record written.
  Bytes insert_bytes(const LayoutInfo& l) const {
    return {T * (8.0 + 8.0) + closing * (kHeadDim * 2.0 + 64 * 4.0), closing * l.record_bytes};
  }
  // Fused: Op A's bytes without the latent (the benchmark's fused op writes none), plus 8 B
  // of cache slot per token and per record the cos/sin read and the record written.
  Bytes fused_bytes(const LayoutInfo& l) const {
    return {a.read + T * 8.0 + closing * 64 * 4.0, ring_write_bytes + closing * l.record_bytes};
  }
  // A serving step: Op A then Op B.
  Bytes step_bytes(const LayoutInfo& l) const {
    const Bytes b = insert_bytes(l);
    return {a.read + b.read, a.write + b.write};
  }
};

/// Builds the problems in one order (each shape of `list`, then ratio 1, 2, 4, 128) from one
/// generator seeded kProblemSeed and calls visit(shape, ratio, problem) on each: the cache
/// slots of a problem depend on the problems before it.
template <class Visit>
void for_each_problem(const std::vector<Shape>& list, Visit&& visit) {
  std::mt19937_64 rng(kProblemSeed);
  for (const Shape& shape : list)
    for (int ratio : kRatios) {
      Problem pr;
      pr.build(shape, ratio, rng);
      visit(shape, ratio, pr);
    }
}

/// Input sets to rotate through: enough that one graph's footprint (Op A's bytes per set) is
/// at least twice L2, 2 to 8.
inline int input_sets(const Problem& pr, double l2_bytes) {
  return std::max(2, std::min(8, static_cast<int>(std::ceil(2.0 * l2_bytes / pr.a.total()))));
}
/// Op launches per timed graph (launch i uses input set i % sets).
inline int launches_per_graph(int sets) { return std::max(sets, kMinLaunchesPerGraph); }

// ---------------------------------------------------------------------------------------
// Device memory and kernels

template <class T>
struct Buffer {
  T* ptr = nullptr;
  size_t n = 0;
  explicit Buffer(size_t count = 0) { resize(count); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : ptr(o.ptr), n(o.n) { o.ptr = nullptr; o.n = 0; }
  ~Buffer() { if (ptr) cudaFree(ptr); }
  void resize(size_t count) {
    if (ptr) cudaFree(ptr);
    ptr = nullptr;
    n = count;
    if (count) check(cudaMalloc(&ptr, std::max<size_t>(count * sizeof(T), 16)), "cudaMalloc");
  }
  void upload(const std::vector<T>& v) {
    resize(v.size());
    check(cudaMemcpy(ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
};

// The kernels, the copy launch and the device buffers have internal linkage (an unnamed
// namespace): kvc_nvbench's two translation units include this header, and a __global__
// function defined in a header is otherwise defined twice.
namespace {

__device__ inline uint32_t hash32(uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
  return static_cast<uint32_t>(x);
}
__global__ void fill_uniform(float* out, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    out[i] = lo + (hi - lo) * (hash32(seed * 0x9e3779b97f4a7c15ull + i) * (1.0f / 4294967296.0f));
}
__global__ void fill_bf16(uint16_t* out, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    out[i] = kvc::float_to_bf16((hash32(seed + i) * (1.0f / 4294967296.0f)) * 4.f - 2.f);
}
__global__ void empty_kernel() {}

// The bandwidth baseline: a plain 16-byte grid-stride copy (cudaMemcpyAsync between device
// buffers measured only ~2.7 TB/s at 50-150 MB on the H200, against ~4.2 TB/s for this kernel).
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

/// The bytes one copy launch copies for `traffic` bytes of read + write: half of it, a
/// multiple of 256 bytes (odd sizes take a slow path), at most half of the buffers.
inline size_t copy_size(double traffic, size_t buffer_bytes) {
  return std::min(buffer_bytes / 2, static_cast<size_t>(traffic / 2)) / 256 * 256;
}
/// Copy launch i: `n` bytes, in alternate halves of the buffers so small copies are not all
/// L2 hits; at most 132 * 16 blocks.
inline void launch_copy(const uint8_t* src, uint8_t* dst, size_t buffer_bytes, size_t n, int i, cudaStream_t s) {
  const size_t off = (i % 2) * (buffer_bytes / 2);
  const size_t vecs = n / 16;
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>((vecs + 255) / 256, 132 * 16));
  copy_kernel<<<std::max(1u, blocks), 256, 0, s>>>(reinterpret_cast<const uint4*>(src + off),
                                                    reinterpret_cast<uint4*>(dst + off), vecs);
}

/// Device buffers for `sets` independent copies of the inputs and outputs, with a cache per
/// set for each layout of `layouts` (none: Op A only).
struct DeviceSets {
  int sets = 1;
  Buffer<int64_t> positions, ring_slot, cache_slot;
  Buffer<int32_t> qsl, req;
  Buffer<uint16_t> weight;
  Buffer<float> cos_sin, scale;
  std::vector<Buffer<float>> kv, ring;
  std::vector<Buffer<uint16_t>> latent;
  std::vector<Buffer<uint8_t>> cache[kNumLayouts];  // [LayoutInfo::index][set]
  int64_t cos_rows = 0;

  DeviceSets(const Problem& pr, int num_sets, const std::vector<LayoutInfo>& layouts) {
    sets = num_sets;
    positions.upload(pr.positions);
    ring_slot.upload(pr.ring_slot);
    cache_slot.upload(pr.cache_slot);
    qsl.upload(pr.qsl);
    req.upload(pr.req.empty() ? std::vector<int32_t>{0} : pr.req);
    weight.resize(kHeadDim);
    fill_bf16<<<4, 128>>>(weight.ptr, kHeadDim, 3);
    cos_rows = *std::max_element(pr.positions.begin(), pr.positions.end()) + 1;
    cos_sin.resize(static_cast<size_t>(cos_rows * 64));
    fill_uniform<<<1024, 256>>>(cos_sin.ptr, cos_sin.n, 5, -1.f, 1.f);
    scale.upload({0.05f});
    const int64_t width = pr.ratio > 1 ? 2 * kHeadDim : kHeadDim;
    const int64_t ring_rows = int64_t{static_cast<int64_t>(pr.qsl.size())} * pr.capacity;
    for (int s = 0; s < sets; ++s) {
      kv.emplace_back(static_cast<size_t>(pr.T * width));
      fill_uniform<<<2048, 256>>>(kv.back().ptr, kv.back().n, 100 + s, -2.f, 2.f);
      ring.emplace_back(static_cast<size_t>(std::max<int64_t>(1, ring_rows) * 2 * kHeadDim));
      fill_uniform<<<1024, 256>>>(ring.back().ptr, ring.back().n, 200 + s, -2.f, 2.f);
      latent.emplace_back(static_cast<size_t>(pr.T * kHeadDim));
      fill_bf16<<<2048, 256>>>(latent.back().ptr, latent.back().n, 300 + s);
      for (const LayoutInfo& l : layouts) cache[l.index].emplace_back(static_cast<size_t>(pr.pages * l.page_bytes));
    }
    check(cudaGetLastError(), "fill kernels");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  kvc::CompressParams compress(const Problem& pr, int s) const {
    kvc::CompressParams p;
    p.ratio = pr.ratio;
    p.head_dim = kHeadDim;
    p.num_tokens = pr.T;
    p.kv_score = kv[s].ptr;
    p.kv_score_stride_elems = pr.ratio > 1 ? 2 * kHeadDim : kHeadDim;
    p.positions = {positions.ptr, kvc::IndexType::kInt64};
    p.slot = {ring_slot.ptr, kvc::IndexType::kInt64};
    p.qsl = qsl.ptr;
    p.qsl_size = static_cast<int64_t>(pr.qsl.size());
    p.req = req.ptr;
    p.ring = ring[s].ptr;
    p.ring_layout = kvc::RingLayout{pr.capacity, int64_t{pr.capacity} * 2 * kHeadDim, 2 * kHeadDim};
    p.weight = reinterpret_cast<const kvc::bf16_t*>(weight.ptr);
    p.eps = 1e-6f;
    p.latent = reinterpret_cast<kvc::bf16_t*>(latent[s].ptr);
    p.latent_stride_elems = kHeadDim;
    return p;
  }
  kvc::RecordArgs record(const Problem& pr, const LayoutInfo& l, int s) const {
    kvc::RecordArgs r;
    r.layout = l.layout;
    r.cos_sin = cos_sin.ptr;
    r.cos_sin_stride_elems = 64;
    r.cos_sin_rows = cos_rows;
    r.cache_slot = {cache_slot.ptr, kvc::IndexType::kInt64};
    r.cache.data = cache[l.index][s].ptr;
    r.cache.block_size = kBlockSize;
    r.cache.page_stride_bytes = l.page_bytes;
    r.cache.row_stride_bytes = l.row_bytes;
    r.cache.num_pages = pr.pages;
    r.cache.scale = scale.ptr;
    return r;
  }
  kvc::InsertParams insert(const Problem& pr, const LayoutInfo& l, int s) const {
    kvc::InsertParams p;
    p.ratio = pr.ratio;
    p.head_dim = kHeadDim;
    p.num_tokens = pr.T;
    p.latent = reinterpret_cast<const kvc::bf16_t*>(latent[s].ptr);
    p.latent_stride_elems = kHeadDim;
    p.positions = {positions.ptr, kvc::IndexType::kInt64};
    p.record = record(pr, l, s);
    return p;
  }
  kvc::FusedParams fused(const Problem& pr, const LayoutInfo& l, int s) const {
    kvc::FusedParams p;
    p.compress = compress(pr, s);
    p.compress.latent = nullptr;  // the cache record only (the indexer's latent is optional)
    p.record = record(pr, l, s);
    return p;
  }
};

}  // namespace

}  // namespace bench
