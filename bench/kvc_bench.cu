// SPDX-License-Identifier: Apache-2.0
// kvcompress benchmark: Op A, Op B (each layout) and the fused op against the memory
// bandwidth limit, on decode, prefill and mixed shapes.
//
// For every (op, shape) it counts the bytes the op must move (each input read once, each
// output written once, indices included), times the op by CUDA-graph replay (median over
// replays of a graph holding several launches; input sets rotate so shapes larger than L2
// are read from HBM) and by plain stream launches, and times a device-to-device copy of the
// same traffic and an empty kernel the same way. Prints a Markdown table; --out DIR also
// writes DIR/bench.json (scripts/bench_report.py turns it into bench/RESULTS.md + a plot).
//
// At ratio 2 it also times a serving step, Op A then Op B ("A+B") and the fused op, with
// and without programmatic dependent launch ("pdl", kvc::LaunchOptions).
//
//   kvc_bench [--out DIR] [--quick] [--shape TEXT] [--ratio R] [--op NAME]
// --shape/--ratio/--op keep only the matching rows (shape name containing TEXT, op name
// equal to NAME: compress, insert, fused, "A+B", ...); scripts/profile.sh uses them to put
// one kernel under the profiler.
#include <kvcompress/kvcompress.cuh>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#define BENCH_CHECK(expr)                                                              \
  do {                                                                                 \
    const cudaError_t e_ = (expr);                                                     \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

#define BENCH_STATUS(expr)                                                             \
  do {                                                                                 \
    const kvc::Status s_ = (expr);                                                     \
    if (!s_.ok()) {                                                                    \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, s_.message()); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

namespace {

constexpr int kHeadDim = 512;
constexpr int kBlockSize = 64;  // records per main-cache page

/// The built-in layouts the benchmark measures: every one holding head dim kHeadDim, in the
/// order of kvc::kBuiltinLayouts (index = position there), with vLLM's page padding for the
/// page-segregated formats (fp8_ds_mla to 576 bytes, mxfp8 / nvfp4 to 512) and unpadded rows.
constexpr int kNumLayouts = static_cast<int>(std::size(kvc::kBuiltinLayouts));
struct BenchLayout {
  int index;
  const char* name;
  double record_bytes;
  int64_t page_bytes, row_bytes;
};
const std::vector<BenchLayout>& bench_layouts() {
  static const std::vector<BenchLayout> list = [] {
    std::vector<BenchLayout> v;
    for (int i = 0; i < kNumLayouts; ++i) {
      const kvc::CacheLayout l = kvc::kBuiltinLayouts[i];
      (void)kvc::dispatch_layout<kHeadDim>(l, [&](auto layout) {
        using L = decltype(layout);
        BenchLayout b{i, L::kName, double(L::kRecordBytes), 0, 0};
        if constexpr (L::ByteMap::kUsesRowStride) {
          b.row_bytes = L::kRecordBytes;
          b.page_bytes = int64_t{kBlockSize} * L::kRecordBytes;
        } else {
          const int64_t pad = l == kvc::CacheLayout::kFp8DsMla ? 576 : 512;
          b.page_bytes = (int64_t{kBlockSize} * L::kRecordBytes + pad - 1) / pad * pad;
        }
        v.push_back(b);
        return kvc::Status::success();
      });
    }
    return v;
  }();
  return list;
}

// ---------------------------------------------------------------------------------------
// Device memory and random fill

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
    if (count) BENCH_CHECK(cudaMalloc(&ptr, std::max<size_t>(count * sizeof(T), 16)));
  }
  void upload(const std::vector<T>& v) {
    resize(v.size());
    BENCH_CHECK(cudaMemcpy(ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
};

__device__ uint32_t hash32(uint64_t x) {
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
// buffers measured only ~2.7 TB/s at 50-150 MB here, against ~4.2 TB/s for this kernel).
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

// ---------------------------------------------------------------------------------------
// Shapes

struct Shape {
  std::string name;
  std::vector<std::pair<int, int64_t>> requests;  // (tokens, start position)
};

std::vector<Shape> shapes(bool quick) {
  std::mt19937_64 rng(1);
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
// One problem: host indices + byte counts + device buffers (several input sets)

struct Problem {
  int ratio = 2;
  int capacity = 8;
  int64_t T = 0;
  std::vector<int64_t> positions, ring_slot, cache_slot;
  std::vector<int32_t> qsl, req;
  int64_t pages = 0;

  // Bytes each op must move (counted from the indices).
  double bytes_a = 0, bytes_b = 0, bytes_fused = 0;
  int64_t closing = 0;

  void build(const Shape& s, int r, std::mt19937_64& rng) {
    ratio = r;
    capacity = kvc::ring_capacity(r, 7);
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

  // Bytes: kv_score rows that a closing group or the ring store needs (read once), ring
  // rows read by head groups, ring rows stored, latent rows written, indices (positions,
  // slot, req: 8 + 8 + 4 per token, qsl), weight.
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
    const double latent = closing * kHeadDim * 2.0;
    const double ring_rw = (ratio > 1) ? (ring_reads + ring_writes) * 2.0 * kHeadDim * 4 : 0.0;
    bytes_a = rows * row + ring_rw + latent + meta_a;
    const double meta_b = T * (8.0 + 8.0);
    for (const BenchLayout& l : bench_layouts()) {
      bytes_b_by_record[l.index] = meta_b + closing * (kHeadDim * 2.0 + 64 * 4.0 + l.record_bytes);
      bytes_fused_by_record[l.index] = bytes_a - latent + T * 8.0 + closing * (64 * 4.0 + l.record_bytes);
    }
  }
  double bytes_b_by_record[kNumLayouts] = {};
  double bytes_fused_by_record[kNumLayouts] = {};
};

/// Device buffers for `sets` independent copies of the inputs and outputs.
struct DeviceSets {
  int sets = 1;
  Buffer<int64_t> positions, ring_slot, cache_slot;
  Buffer<int32_t> qsl, req;
  Buffer<uint16_t> weight;
  Buffer<float> cos_sin, scale;
  std::vector<Buffer<float>> kv, ring;
  std::vector<Buffer<uint16_t>> latent;
  std::vector<Buffer<uint8_t>> cache[kNumLayouts];
  int64_t cache_page_bytes[kNumLayouts] = {};
  int64_t cache_row_bytes[kNumLayouts] = {};
  int64_t cos_rows = 0;

  void build(const Problem& pr, int num_sets) {
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
    for (const BenchLayout& l : bench_layouts()) {
      cache_page_bytes[l.index] = l.page_bytes;
      cache_row_bytes[l.index] = l.row_bytes;
    }
    kv.clear(); ring.clear(); latent.clear();
    for (auto& c : cache) c.clear();
    for (int s = 0; s < sets; ++s) {
      kv.emplace_back(static_cast<size_t>(pr.T * width));
      fill_uniform<<<2048, 256>>>(kv.back().ptr, kv.back().n, 100 + s, -2.f, 2.f);
      ring.emplace_back(static_cast<size_t>(std::max<int64_t>(1, ring_rows) * 2 * kHeadDim));
      fill_uniform<<<1024, 256>>>(ring.back().ptr, ring.back().n, 200 + s, -2.f, 2.f);
      latent.emplace_back(static_cast<size_t>(pr.T * kHeadDim));
      fill_bf16<<<2048, 256>>>(latent.back().ptr, latent.back().n, 300 + s);
      for (const BenchLayout& l : bench_layouts())
        cache[l.index].emplace_back(static_cast<size_t>(pr.pages * cache_page_bytes[l.index]));
    }
    BENCH_CHECK(cudaDeviceSynchronize());
  }

  kvc::CompressParams compress(const Problem& pr, int s) {
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
  kvc::RecordArgs record(const Problem& pr, int layout, int s) {
    kvc::RecordArgs r;
    r.layout = kvc::kBuiltinLayouts[layout];
    r.cos_sin = cos_sin.ptr;
    r.cos_sin_stride_elems = 64;
    r.cos_sin_rows = cos_rows;
    r.cache_slot = {cache_slot.ptr, kvc::IndexType::kInt64};
    r.cache.data = cache[layout][s].ptr;
    r.cache.block_size = kBlockSize;
    r.cache.page_stride_bytes = cache_page_bytes[layout];
    r.cache.row_stride_bytes = cache_row_bytes[layout];
    r.cache.num_pages = pr.pages;
    r.cache.scale = scale.ptr;
    return r;
  }
  kvc::InsertParams insert(const Problem& pr, int layout, int s) {
    kvc::InsertParams p;
    p.ratio = pr.ratio;
    p.head_dim = kHeadDim;
    p.num_tokens = pr.T;
    p.latent = reinterpret_cast<const kvc::bf16_t*>(latent[s].ptr);
    p.latent_stride_elems = kHeadDim;
    p.positions = {positions.ptr, kvc::IndexType::kInt64};
    p.record = record(pr, layout, s);
    return p;
  }
  kvc::FusedParams fused(const Problem& pr, int layout, int s) {
    kvc::FusedParams p;
    p.compress = compress(pr, s);
    p.compress.latent = nullptr;  // the cache record only (the indexer's latent is optional)
    p.record = record(pr, layout, s);
    return p;
  }
};

// ---------------------------------------------------------------------------------------
// Timing

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Median microseconds per launch: a graph of `per_graph` launches (launch(i) uses input
/// set i % sets), replayed `replays` times, each replay timed with events.
double time_graph(const std::function<void(cudaStream_t, int)>& launch, int per_graph, int replays) {
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  BENCH_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < per_graph; ++i) launch(stream, i);
  BENCH_CHECK(cudaStreamEndCapture(stream, &graph));
  BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int w = 0; w < 3; ++w) BENCH_CHECK(cudaGraphLaunch(exec, stream));
  std::vector<cudaEvent_t> ev(static_cast<size_t>(2 * replays));
  for (auto& e : ev) BENCH_CHECK(cudaEventCreate(&e));
  for (int r = 0; r < replays; ++r) {
    BENCH_CHECK(cudaEventRecord(ev[2 * r], stream));
    BENCH_CHECK(cudaGraphLaunch(exec, stream));
    BENCH_CHECK(cudaEventRecord(ev[2 * r + 1], stream));
  }
  BENCH_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> us;
  for (int r = 0; r < replays; ++r) {
    float ms;
    BENCH_CHECK(cudaEventElapsedTime(&ms, ev[2 * r], ev[2 * r + 1]));
    us.push_back(1000.0 * ms / per_graph);
  }
  for (auto& e : ev) cudaEventDestroy(e);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
  return median(us);
}

/// Median microseconds per launch of plain stream launches (batches of `per_batch`).
double time_stream(const std::function<void(cudaStream_t, int)>& launch, int per_batch, int batches) {
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < per_batch; ++i) launch(stream, i);
  std::vector<double> us;
  for (int k = 0; k < batches; ++k) {
    BENCH_CHECK(cudaEventRecord(a, stream));
    for (int i = 0; i < per_batch; ++i) launch(stream, i);
    BENCH_CHECK(cudaEventRecord(b, stream));
    BENCH_CHECK(cudaEventSynchronize(b));
    float ms;
    BENCH_CHECK(cudaEventElapsedTime(&ms, a, b));
    us.push_back(1000.0 * ms / per_batch);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(stream);
  return median(us);
}

struct Row {
  std::string op, layout, shape;
  int ratio;
  int64_t tokens;
  double bytes, graph_us, stream_us, copy_us;
};

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir;
  bool quick = false;
  std::string only_shape, only_op;
  int only_ratio = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) only_shape = argv[++i];
    else if (!std::strcmp(argv[i], "--ratio") && i + 1 < argc) only_ratio = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--op") && i + 1 < argc) only_op = argv[++i];
    else {
      std::fprintf(stderr, "kvc_bench: unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::printf("kvc_bench: SKIPPED — no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  const double l2 = prop.l2CacheSize;
  const int replays = quick ? 50 : 200;

  // Copy baseline buffers (large enough for the biggest op's traffic / 2) and the floor.
  Buffer<uint8_t> copy_src(size_t{1} << 29), copy_dst(size_t{1} << 29);
  BENCH_CHECK(cudaMemset(copy_src.ptr, 1, copy_src.n));
  const double empty_us = time_graph([](cudaStream_t s, int) { empty_kernel<<<1, 32, 0, s>>>(); }, 20, replays);
  auto copy_time = [&](double traffic) {
    // Copy traffic = read + write, and a multiple of 256 bytes (odd sizes take a slow path).
    const size_t n = std::min(copy_src.n / 2, static_cast<size_t>(traffic / 2)) / 256 * 256;
    return time_graph([&](cudaStream_t s, int i) {
      // Alternate halves of the buffers so small copies are not all L2 hits.
      const size_t off = (i % 2) * (copy_src.n / 2);
      const size_t vecs = n / 16;
      const unsigned blocks = static_cast<unsigned>(std::min<size_t>((vecs + 255) / 256, 132 * 16));
      copy_kernel<<<std::max(1u, blocks), 256, 0, s>>>(reinterpret_cast<const uint4*>(copy_src.ptr + off),
                                                         reinterpret_cast<uint4*>(copy_dst.ptr + off), vecs);
    }, 20, replays);
  };
  const double peak_us = copy_time(double(size_t{1} << 29));  // 256 MiB copied per launch
  std::printf("# kvc_bench on %s (%d SMs, L2 %.0f MB)\n", prop.name, prop.multiProcessorCount, l2 / 1e6);
  std::printf("empty kernel (graph): %.2f us; 512 MiB copy: %.0f GB/s (read + write)\n\n", empty_us,
              double(size_t{1} << 29) / peak_us / 1e3);

  std::printf("| shape | ratio | op | layout | graph us | stream us | GB/s | %% of copy |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::vector<Row> rows;
  std::mt19937_64 rng(2);
  for (const Shape& shape : shapes(quick)) {
    if (shape.name.find(only_shape) == std::string::npos) continue;
    for (int ratio : {1, 2, 4, 128}) {
      if (only_ratio != 0 && ratio != only_ratio) continue;
      Problem pr;
      pr.build(shape, ratio, rng);
      if (pr.closing == 0) continue;
      // Enough input sets that one graph's footprint is at least twice L2.
      const double footprint = pr.bytes_a;
      const int sets = std::max(2, std::min(8, static_cast<int>(std::ceil(2.0 * l2 / footprint))));
      DeviceSets dev;
      dev.build(pr, sets);
      const int per_graph = std::max(sets, 20);
      auto measure = [&](const std::string& op, const std::string& layout, double bytes,
                         const std::function<void(cudaStream_t, int)>& launch) {
        if (!only_op.empty() && op != only_op) return;
        Row r{op, layout, shape.name, ratio, pr.T, bytes, 0, 0, 0};
        r.graph_us = time_graph(launch, per_graph, replays);
        r.stream_us = time_stream(launch, per_graph, quick ? 10 : 30);
        r.copy_us = copy_time(bytes);
        rows.push_back(r);
        std::printf("| %-22s | %-5d | %-10s | %-10s | %8.2f | %8.2f | %7.1f | %5.1f%% |\n", shape.name.c_str(), ratio,
                    op.c_str(), layout.c_str(), r.graph_us, r.stream_us, bytes / r.graph_us / 1e3,
                    100.0 * r.copy_us / r.graph_us);
        std::fflush(stdout);
      };
      measure("compress", "-", pr.bytes_a, [&](cudaStream_t s, int i) {
        BENCH_STATUS(kvc::compress(dev.compress(pr, i % sets), s));
      });
      for (const BenchLayout& bl : bench_layouts()) {
        const int l = bl.index;
        if (ratio != 2 && l != 0) continue;  // layouts at the model's ratio; fp8_ds_mla everywhere
        measure("insert", bl.name, pr.bytes_b_by_record[l], [&](cudaStream_t s, int i) {
          BENCH_STATUS(kvc::insert(dev.insert(pr, l, i % sets), s));
        });
        measure("fused", bl.name, pr.bytes_fused_by_record[l], [&](cudaStream_t s, int i) {
          BENCH_STATUS(kvc::fused(dev.fused(pr, l, i % sets), s));
        });
      }
      if (ratio == 2) {
        // A serving step: Op A then Op B (the latent goes through memory), or the fused op;
        // plain launches against programmatic dependent launch (each kernel's launch and
        // prologue overlap the previous kernel's tail).
        kvc::LaunchOptions pdl;
        pdl.pdl = true;
        const double bytes_step = pr.bytes_a + pr.bytes_b_by_record[0];
        for (bool use_pdl : {false, true}) {
          const kvc::LaunchOptions opt = use_pdl ? pdl : kvc::LaunchOptions{};
          measure(use_pdl ? "A+B pdl" : "A+B", bench_layouts()[0].name, bytes_step, [&](cudaStream_t s, int i) {
            BENCH_STATUS(kvc::compress(dev.compress(pr, i % sets), s, opt));
            BENCH_STATUS(kvc::insert(dev.insert(pr, 0, i % sets), s, opt));
          });
        }
        measure("fused pdl", bench_layouts()[0].name, pr.bytes_fused_by_record[0], [&](cudaStream_t s, int i) {
          BENCH_STATUS(kvc::fused(dev.fused(pr, 0, i % sets), s, pdl));
        });
      }
    }
  }

  if (!out_dir.empty()) {
    const std::string path = out_dir + "/bench.json";
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) { std::perror(path.c_str()); return 1; }
    std::fprintf(f, "{\n  \"gpu\": \"%s\", \"sms\": %d, \"l2_bytes\": %.0f,\n", prop.name, prop.multiProcessorCount, l2);
    std::fprintf(f, "  \"empty_kernel_us\": %.3f, \"copy_512MiB_gbps\": %.1f,\n  \"rows\": [\n", empty_us,
                 double(size_t{1} << 29) / peak_us / 1e3);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f,
                   "    {\"op\": \"%s\", \"layout\": \"%s\", \"shape\": \"%s\", \"ratio\": %d, \"tokens\": %lld, "
                   "\"bytes\": %.0f, \"graph_us\": %.3f, \"stream_us\": %.3f, \"copy_us\": %.3f, "
                   "\"gbps\": %.1f, \"pct_copy\": %.1f}%s\n",
                   r.op.c_str(), r.layout.c_str(), r.shape.c_str(), r.ratio, static_cast<long long>(r.tokens),
                   r.bytes, r.graph_us, r.stream_us, r.copy_us, r.bytes / r.graph_us / 1e3,
                   100.0 * r.copy_us / r.graph_us, i + 1 < rows.size() ? "," : "");
    }
    std::fprintf(f, "  ]\n}\n");
    std::fclose(f);
    std::printf("\nwrote %s\n", path.c_str());
  }
  return 0;
}
