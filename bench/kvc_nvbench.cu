// SPDX-License-Identifier: Apache-2.0
// kvc_nvbench: kvc_bench's measurements on nvbench (issue 15), built beside kvc_bench until
// both have run side by side on a GPU (docs/measuring.md, "kvc_nvbench").
//
// The same problems as bench/kvc_bench.cu: head dim 512, fp32 kv_score, int64 indices, 64
// records per cache page, ring capacity ring_capacity(R, 7), the same shapes (the full list,
// not --quick's), ratios 1, 2, 4, 128, every built-in layout at ratio 2 and fp8_ds_mla at
// the others, the A+B / fused PDL variants at ratio 2, and the same indices: the problems are
// built in kvc_bench's order from its seeds, so a full kvc_bench run and this program time
// the same cache slots. Bytes are counted by count_bytes() (a copy of kvc_bench's, split
// into reads and writes; keep the two equal until kvc_bench is removed).
//
// Benchmarks and axes (nvbench: -b NAME, -a "Axis=value", --list):
//   compress   Ratio (type) x Shape x Launch
//   insert     Ratio (type) x Layout (type) x Shape x Launch
//   fused      Ratio (type) x Layout (type) x Shape x PDL x Launch
//   step       Op A then Op B, fp8_ds_mla: Ratio (type, 2 only) x Shape x PDL x Launch
//   copy       the bandwidth baseline: a 16-byte grid-stride copy moving the bytes of Op
//              (compress, insert, fused, step) at Ratio x Layout x Shape, graph replay
//   copy_peak  the same copy kernel, 256 MiB per launch
//   empty      an empty kernel (the launch floor)
// Combinations kvc_bench does not measure are skipped with state.skip(reason).
//
// What is timed. One nvbench "launch" is a CUDA graph of L = max(sets, 20) op launches,
// launch i using input set i % sets, with 2 to 8 input sets so that one graph's footprint
// is at least twice L2 (Launch=graph; Launch=stream: the same L launches as plain stream
// launches). That is kvc_bench's unit exactly. nvbench then measures it twice:
//   cold   each replay alone: L2 flushed, the stream held by a blocking kernel while the
//          replay is queued, then timed with CUDA events (nv/cold/time/gpu/*);
//   batch  replays queued back to back without flushing, total time / replays
//          (nv/batch/time/gpu/mean).
// kvc_bench times back-to-back replays (a median over replays), so **batch** is the
// comparable number: kvc/batch/time_per_launch = batch time / L is kvc_bench's "graph us"
// (Launch=graph) or "stream us" (Launch=stream). cold / L (kvc/cold/time_per_launch) differs
// where the rotating input sets fit in L2 (decode shapes): the flush makes the first
// launches of each replay read from HBM. The global-memory reads/writes given to nvbench
// are L times one launch's bytes, so its bandwidth columns are per launch as well.
// scripts/bench_report.py reads the --json output (docs/measuring.md).
//
// Run time: each benchmark sets min-time 0.1 s (cold samples' GPU time), max-noise 1 %, a
// batch target time of 0.1 s and a timeout of 5 s per state (nvbench's defaults: 0.5 s,
// 0.5 %, 0.5 s, 15 s); --min-time, --max-noise, --timeout override them.
#include <kvcompress/kvcompress.cuh>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

// nvbench's main with one addition: without a usable CUDA device it prints one line and
// exits 77 (ctest's skip code, as kvc_bench) instead of nvbench's device-manager error.
// (On a machine without the driver the loader stops earlier: libnvbench.so needs the
// driver's libnvidia-ml.so.1.)
static void kvc_nvbench_require_device() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("kvc_nvbench: SKIPPED — no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount: 0");
    std::exit(77);
  }
}
#define NVBENCH_MAIN_INITIALIZE_CUSTOM_PRE(argc, argv) kvc_nvbench_require_device()
#include <nvbench/nvbench.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr int kHeadDim = 512;
constexpr int kBlockSize = 64;  // records per main-cache page
constexpr int kSpecTokens = 7;  // ring capacity ring_capacity(R, 7), as in kvc_bench
constexpr int kMinLaunchesPerGraph = 20;
constexpr double kMinTime = 0.1, kMaxNoise = 0.01, kTimeout = 5.0;  // seconds, fraction, seconds

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(const kvc::Status& s, const char* what) {
  if (!s.ok()) throw std::runtime_error(std::string(what) + ": " + s.message());
}

// ---------------------------------------------------------------------------------------
// Layouts: kvc_bench's page padding (fp8_ds_mla pages to 576 bytes, mxfp8 / nvfp4 to 512),
// unpadded rows for the row-strided formats.

struct LayoutInfo {
  bool holds_head_dim = false;
  const char* name = "?";
  double record_bytes = 0;
  int64_t page_bytes = 0, row_bytes = 0;
};

LayoutInfo layout_info(kvc::CacheLayout l) {
  LayoutInfo info;
  (void)kvc::dispatch_layout<kHeadDim>(l, [&](auto layout) {
    using L = decltype(layout);
    info = {true, L::kName, double(L::kRecordBytes), 0, 0};
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

// ---------------------------------------------------------------------------------------
// Device memory and fill kernels (kvc_bench's)

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

// The bandwidth baseline: kvc_bench's 16-byte grid-stride copy.
__global__ void copy_kernel(const uint4* __restrict__ src, uint4* __restrict__ dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n; i += size_t{gridDim.x} * blockDim.x)
    dst[i] = src[i];
}

// ---------------------------------------------------------------------------------------
// Shapes: kvc_bench's full list, with its seeds

struct Shape {
  std::string name;
  std::vector<std::pair<int, int64_t>> requests;  // (tokens, start position)
};

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> list = [] {
    std::mt19937_64 rng(1);
    auto decode = [&](int reqs, int per) {
      Shape s{"decode " + std::to_string(reqs) + "x" + std::to_string(per), {}};
      for (int r = 0; r < reqs; ++r) s.requests.push_back({per, 1000 + static_cast<int64_t>(rng() % 60000)});
      return s;
    };
    std::vector<Shape> out = {decode(64, 2), decode(256, 2), decode(1024, 4), decode(128, 6)};
    out.push_back({"prefill 1x8192", {{8192, 0}}});
    out.push_back({"prefill 1x32768 @odd", {{32768, 1001}}});
    out.push_back({"prefill 4x16384", {{16384, 0}, {16384, 0}, {16384, 0}, {16384, 0}}});
    Shape mixed{"mixed 2x2048+192x2", {{2048, 7}, {2048, 4096}}};
    for (int r = 0; r < 192; ++r) mixed.requests.push_back({2, 500 + static_cast<int64_t>(rng() % 60000)});
    out.push_back(mixed);
    return out;
  }();
  return list;
}

std::vector<std::string> shape_names() {
  std::vector<std::string> v;
  for (const Shape& s : shapes()) v.push_back(s.name);
  return v;
}

constexpr int kRatios[] = {1, 2, 4, 128};

// ---------------------------------------------------------------------------------------
// One problem: host indices and byte counts (kvc_bench's Problem)

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

  // kvc_bench's count_bytes, split into reads and writes. Op A reads the kv_score rows that
  // a closing group or the ring store needs (once), the ring rows of head groups, the
  // indices (positions, slot, req: 8 + 8 + 4 per token, qsl) and the weight; it writes the
  // ring rows it stores and the latent rows.
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
  Bytes step_bytes() const {  // Op A then Op B (fp8_ds_mla)
    const Bytes b = insert_bytes(layout_info(kvc::CacheLayout::kFp8DsMla));
    return {a.read + b.read, a.write + b.write};
  }
};

/// The problem of (shape, ratio), built once: all of them in kvc_bench's order (shape, then
/// ratio 1, 2, 4, 128) from its generator seed, so the cache slots are those of a full run.
const Problem& problem(const std::string& shape, int ratio) {
  static const std::map<std::pair<std::string, int>, Problem> all = [] {
    std::map<std::pair<std::string, int>, Problem> m;
    std::mt19937_64 rng(2);
    for (const Shape& s : shapes())
      for (int r : kRatios) m[{s.name, r}].build(s, r, rng);
    return m;
  }();
  const auto it = all.find({shape, ratio});
  if (it == all.end()) throw std::runtime_error("no problem for shape '" + shape + "'");
  return it->second;
}

/// kvc_bench's input sets: enough that one graph's footprint (Op A's bytes per set) is at
/// least twice L2, 2 to 8.
int input_sets(const Problem& pr, const nvbench::state& state) {
  const double l2 = static_cast<double>(state.get_device()->get_l2_cache_size());
  return std::max(2, std::min(8, static_cast<int>(std::ceil(2.0 * l2 / pr.a.total()))));
}

/// Device buffers for `sets` independent copies of the inputs and outputs (kvc_bench's
/// DeviceSets; caches only for the layout a benchmark uses).
struct DeviceSets {
  int sets = 1;
  Buffer<int64_t> positions, ring_slot, cache_slot;
  Buffer<int32_t> qsl, req;
  Buffer<uint16_t> weight;
  Buffer<float> cos_sin, scale;
  std::vector<Buffer<float>> kv, ring;
  std::vector<Buffer<uint16_t>> latent;
  std::vector<Buffer<uint8_t>> cache;
  kvc::CacheLayout layout = kvc::CacheLayout::kFp8DsMla;
  LayoutInfo info;
  int64_t cos_rows = 0;

  DeviceSets(const Problem& pr, int num_sets, kvc::CacheLayout l, bool with_cache) {
    sets = num_sets;
    layout = l;
    info = layout_info(l);
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
      if (with_cache) cache.emplace_back(static_cast<size_t>(pr.pages * info.page_bytes));
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
  kvc::RecordArgs record(const Problem& pr, int s) const {
    kvc::RecordArgs r;
    r.layout = layout;
    r.cos_sin = cos_sin.ptr;
    r.cos_sin_stride_elems = 64;
    r.cos_sin_rows = cos_rows;
    r.cache_slot = {cache_slot.ptr, kvc::IndexType::kInt64};
    r.cache.data = cache[s].ptr;
    r.cache.block_size = kBlockSize;
    r.cache.page_stride_bytes = info.page_bytes;
    r.cache.row_stride_bytes = info.row_bytes;
    r.cache.num_pages = pr.pages;
    r.cache.scale = scale.ptr;
    return r;
  }
  kvc::InsertParams insert(const Problem& pr, int s) const {
    kvc::InsertParams p;
    p.ratio = pr.ratio;
    p.head_dim = kHeadDim;
    p.num_tokens = pr.T;
    p.latent = reinterpret_cast<const kvc::bf16_t*>(latent[s].ptr);
    p.latent_stride_elems = kHeadDim;
    p.positions = {positions.ptr, kvc::IndexType::kInt64};
    p.record = record(pr, s);
    return p;
  }
  kvc::FusedParams fused(const Problem& pr, int s) const {
    kvc::FusedParams p;
    p.compress = compress(pr, s);
    p.compress.latent = nullptr;  // the cache record only (the indexer's latent is optional)
    p.record = record(pr, s);
    return p;
  }
};

// ---------------------------------------------------------------------------------------
// Timing: one nvbench launch = `per_graph` op launches (see the top of the file)

void add_value_summary(nvbench::state& state, const std::string& tag, const std::string& name,
                       const std::string& hint, const std::string& description, double value,
                       bool hidden) {
  auto& s = state.add_summary(tag);
  s.set_string("name", name);
  s.set_string("hint", hint);
  s.set_string("description", description);
  s.set_float64("value", value);
  if (hidden) s.set_string("hide", "kvcompress metadata (JSON only)");
}
void add_count_summary(nvbench::state& state, const std::string& tag, const std::string& name,
                       const std::string& description, int64_t value) {
  auto& s = state.add_summary(tag);
  s.set_string("name", name);
  s.set_string("description", description);
  s.set_int64("value", value);
  s.set_string("hide", "kvcompress metadata (JSON only)");
}

/// After state.exec: nvbench's per-replay times divided by the launches of one replay.
void add_per_launch_times(nvbench::state& state, int per_graph) {
  struct Src { const char* from; const char* tag; const char* name; const char* what; };
  const Src srcs[] = {
      {"nv/batch/time/gpu/mean", "kvc/batch/time_per_launch", "Batch GPU/launch",
       "batch replays back to back: mean time per op launch (kvc_bench's graph / stream us)"},
      {"nv/cold/time/gpu/mean", "kvc/cold/time_per_launch", "Cold GPU/launch",
       "isolated replays after an L2 flush: mean time per op launch"},
  };
  std::vector<std::pair<const Src*, double>> found;  // add_summary would invalidate the loop
  for (const Src& src : srcs)
    for (const auto& summ : state.get_summaries())
      if (summ.get_tag() == src.from && summ.has_value("value")) {
        found.push_back({&src, summ.get_float64("value")});
        break;
      }
  // The "duration" hint takes seconds (nvbench prints us / ms); the tag says per launch.
  for (const auto& [src, seconds] : found)
    add_value_summary(state, src->tag, src->name, "duration", src->what, seconds / per_graph, false);
}

/// A CUDA graph of the launches `record(stream)` makes, captured on a stream of its own.
class CapturedGraph {
 public:
  template <class Record>
  explicit CapturedGraph(Record&& record) {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      record(stream_);
    } catch (...) {
      cudaGraph_t partial = nullptr;
      (void)cudaStreamEndCapture(stream_, &partial);
      if (partial) cudaGraphDestroy(partial);
      cudaStreamDestroy(stream_);
      throw;
    }
    check(cudaStreamEndCapture(stream_, &graph_), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec_, graph_, 0), "cudaGraphInstantiate");
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    cudaStreamDestroy(stream_);
  }
  void launch(cudaStream_t s) const { check(cudaGraphLaunch(exec_, s), "cudaGraphLaunch"); }

 private:
  cudaStream_t stream_ = nullptr;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

/// Times a captured graph: cold and batch (exec_tag::gpu: no CPU-only measurement).
void exec_graph(nvbench::state& state, const CapturedGraph& graph, int per_graph) {
  state.exec(nvbench::exec_tag::gpu, [&](nvbench::launch& l) { graph.launch(l.get_stream()); });
  add_per_launch_times(state, per_graph);
}

template <class Launch>
void time_launches(nvbench::state& state, const Problem& pr, int sets, Bytes bytes, Launch&& launch) {
  const int per_graph = std::max(sets, kMinLaunchesPerGraph);
  state.add_global_memory_reads(static_cast<std::size_t>(bytes.read * per_graph), "Read/replay");
  state.add_global_memory_writes(static_cast<std::size_t>(bytes.write * per_graph), "Written/replay");
  add_count_summary(state, "kvc/launches", "Launches", "op launches per nvbench launch (replay)", per_graph);
  add_count_summary(state, "kvc/sets", "Input sets", "input sets the launches rotate through", sets);
  add_count_summary(state, "kvc/tokens", "Tokens", "tokens per op call", pr.T);
  add_value_summary(state, "kvc/bytes", "Bytes/launch", "bytes", "bytes one op launch moves (count_bytes)",
                    bytes.total(), true);
  if (state.get_string("Launch") == "graph") {
    const CapturedGraph graph([&](cudaStream_t s) {
      for (int i = 0; i < per_graph; ++i) launch(s, i % sets);
    });
    exec_graph(state, graph, per_graph);
  } else {
    state.exec(nvbench::exec_tag::gpu, [&](nvbench::launch& l) {
      for (int i = 0; i < per_graph; ++i) launch(l.get_stream(), i % sets);
    });
    add_per_launch_times(state, per_graph);
  }
}

// ---------------------------------------------------------------------------------------
// Axes

using Ratios = nvbench::enum_type_list<1, 2, 4, 128>;

template <class Indices>
struct BuiltinLayoutList;
template <std::size_t... I>
struct BuiltinLayoutList<std::index_sequence<I...>> {
  using type = nvbench::enum_type_list<kvc::kBuiltinLayouts[I]...>;
};
/// Every built-in layout (kvc::kBuiltinLayouts), as nvbench types named like the layouts.
using Layouts = BuiltinLayoutList<std::make_index_sequence<std::size(kvc::kBuiltinLayouts)>>::type;

std::string layout_input_string(kvc::CacheLayout l) { return kvc::cache_layout_name(l); }
std::string layout_description(kvc::CacheLayout) { return "kvc::CacheLayout"; }

/// kvc_bench measures every layout at ratio 2 and fp8_ds_mla at every ratio.
template <int R, kvc::CacheLayout L>
bool skip_layout(nvbench::state& state) {
  if (!kvc::kLayoutHoldsHeadDim<L, kHeadDim>) {
    state.skip("the layout does not hold head dim 512");
    return true;
  }
  if (R != 2 && L != kvc::CacheLayout::kFp8DsMla) {
    state.skip("layouts other than fp8_ds_mla are measured at ratio 2 only");
    return true;
  }
  return false;
}

bool skip_empty(nvbench::state& state, const Problem& pr) {
  if (pr.closing == 0) {
    state.skip("no group closes in this shape at this ratio");
    return true;
  }
  return false;
}

kvc::LaunchOptions launch_options(const nvbench::state& state) {
  kvc::LaunchOptions o;
  o.pdl = state.get_int64("PDL") != 0;
  return o;
}

}  // namespace

NVBENCH_DECLARE_ENUM_TYPE_STRINGS(kvc::CacheLayout, layout_input_string, layout_description)

namespace {

// ---------------------------------------------------------------------------------------
// Benchmarks. The ops are kvc::compress / insert / fused (the runtime API, as kvc_bench
// calls them); the type axes pick runtime values, so no benchmark body instantiates a
// kernel of its own.

template <int R>
void bench_compress(nvbench::state& state, nvbench::type_list<nvbench::enum_type<R>>) {
  const Problem& pr = problem(state.get_string("Shape"), R);
  if (skip_empty(state, pr)) return;
  const int sets = input_sets(pr, state);
  DeviceSets dev(pr, sets, kvc::CacheLayout::kFp8DsMla, false);
  time_launches(state, pr, sets, pr.a, [&](cudaStream_t s, int i) {
    check(kvc::compress(dev.compress(pr, i), s), "kvc::compress");
  });
}

template <int R, kvc::CacheLayout L>
void bench_insert(nvbench::state& state, nvbench::type_list<nvbench::enum_type<R>, nvbench::enum_type<L>>) {
  if (skip_layout<R, L>(state)) return;
  const Problem& pr = problem(state.get_string("Shape"), R);
  if (skip_empty(state, pr)) return;
  const int sets = input_sets(pr, state);
  DeviceSets dev(pr, sets, L, true);
  time_launches(state, pr, sets, pr.insert_bytes(dev.info), [&](cudaStream_t s, int i) {
    check(kvc::insert(dev.insert(pr, i), s), "kvc::insert");
  });
}

template <int R, kvc::CacheLayout L>
void bench_fused(nvbench::state& state, nvbench::type_list<nvbench::enum_type<R>, nvbench::enum_type<L>>) {
  if (skip_layout<R, L>(state)) return;
  const kvc::LaunchOptions opt = launch_options(state);
  if (opt.pdl && (R != 2 || L != kvc::CacheLayout::kFp8DsMla)) {
    state.skip("the fused op with PDL is measured at ratio 2, fp8_ds_mla only");
    return;
  }
  const Problem& pr = problem(state.get_string("Shape"), R);
  if (skip_empty(state, pr)) return;
  const int sets = input_sets(pr, state);
  DeviceSets dev(pr, sets, L, true);
  time_launches(state, pr, sets, pr.fused_bytes(dev.info), [&](cudaStream_t s, int i) {
    check(kvc::fused(dev.fused(pr, i), s, opt), "kvc::fused");
  });
}

// A serving step: Op A then Op B (the latent goes through memory), fp8_ds_mla; with PDL each
// kernel's launch and prologue overlap the previous kernel's tail.
template <int R>
void bench_step(nvbench::state& state, nvbench::type_list<nvbench::enum_type<R>>) {
  const kvc::LaunchOptions opt = launch_options(state);
  const Problem& pr = problem(state.get_string("Shape"), R);
  if (skip_empty(state, pr)) return;
  const int sets = input_sets(pr, state);
  DeviceSets dev(pr, sets, kvc::CacheLayout::kFp8DsMla, true);
  time_launches(state, pr, sets, pr.step_bytes(), [&](cudaStream_t s, int i) {
    check(kvc::compress(dev.compress(pr, i), s, opt), "kvc::compress");
    check(kvc::insert(dev.insert(pr, i), s, opt), "kvc::insert");
  });
}

// The copy baseline: kvc_bench's copy_time(), graph replay, moving the bytes of one op
// launch (read + write, a multiple of 256 bytes), alternating buffer halves.
constexpr size_t kCopyBuffer = size_t{1} << 29;

void time_copy(nvbench::state& state, double traffic) {
  Buffer<uint8_t> src(kCopyBuffer), dst(kCopyBuffer);
  check(cudaMemset(src.ptr, 1, src.n), "cudaMemset");
  const size_t n = std::min(src.n / 2, static_cast<size_t>(traffic / 2)) / 256 * 256;
  const int per_graph = kMinLaunchesPerGraph;
  state.add_global_memory_reads(n * per_graph, "Read/replay");
  state.add_global_memory_writes(n * per_graph, "Written/replay");
  add_count_summary(state, "kvc/launches", "Launches", "copy launches per nvbench launch (replay)", per_graph);
  add_value_summary(state, "kvc/bytes", "Bytes/launch", "bytes", "bytes one copy launch moves (read + write)",
                    2.0 * n, true);
  const CapturedGraph graph([&](cudaStream_t s) {
    for (int i = 0; i < per_graph; ++i) {
      // Alternate halves of the buffers so small copies are not all L2 hits; kvc_bench's grid
      // (at most 132 * 16 blocks).
      const size_t off = (i % 2) * (src.n / 2);
      const size_t vecs = n / 16;
      const unsigned blocks = static_cast<unsigned>(std::min<size_t>((vecs + 255) / 256, 132 * 16));
      copy_kernel<<<std::max(1u, blocks), 256, 0, s>>>(reinterpret_cast<const uint4*>(src.ptr + off),
                                                        reinterpret_cast<uint4*>(dst.ptr + off), vecs);
    }
    check(cudaGetLastError(), "copy_kernel");
  });
  exec_graph(state, graph, per_graph);
}

template <int R, kvc::CacheLayout L>
void bench_copy(nvbench::state& state, nvbench::type_list<nvbench::enum_type<R>, nvbench::enum_type<L>>) {
  const std::string& op = state.get_string("Op");
  const bool fp8 = L == kvc::CacheLayout::kFp8DsMla;
  if (op == "compress" && !fp8) {
    state.skip("Op A's bytes do not depend on the layout (measured with Layout=fp8_ds_mla)");
    return;
  }
  if (op == "step" && (R != 2 || !fp8)) {
    state.skip("the step is measured at ratio 2, fp8_ds_mla only");
    return;
  }
  if ((op == "insert" || op == "fused") && skip_layout<R, L>(state)) return;
  const Problem& pr = problem(state.get_string("Shape"), R);
  if (skip_empty(state, pr)) return;
  const LayoutInfo info = layout_info(L);
  const Bytes bytes = op == "compress" ? pr.a
                      : op == "insert" ? pr.insert_bytes(info)
                      : op == "fused"  ? pr.fused_bytes(info)
                                       : pr.step_bytes();
  add_count_summary(state, "kvc/tokens", "Tokens", "tokens per op call", pr.T);
  time_copy(state, bytes.total());
}

void bench_copy_peak(nvbench::state& state) { time_copy(state, double(kCopyBuffer)); }  // 256 MiB copied

void bench_empty(nvbench::state& state) {
  const int per_graph = kMinLaunchesPerGraph;
  add_count_summary(state, "kvc/launches", "Launches", "empty kernels per nvbench launch (replay)", per_graph);
  const CapturedGraph graph([&](cudaStream_t s) {
    for (int i = 0; i < per_graph; ++i) empty_kernel<<<1, 32, 0, s>>>();
    check(cudaGetLastError(), "empty_kernel");
  });
  exec_graph(state, graph, per_graph);
}

}  // namespace

// Per-state limits (the command line's --min-time, --max-noise, --timeout override them).
#define KVC_NVBENCH_LIMITS                                 \
  set_criterion_param_float64("min-time", kMinTime)        \
      .set_criterion_param_float64("max-noise", kMaxNoise) \
      .set_batch_target_time(kMinTime)                     \
      .set_timeout(kTimeout)

NVBENCH_BENCH_TYPES(bench_compress, NVBENCH_TYPE_AXES(Ratios))
    .set_name("compress")
    .set_type_axes_names({"Ratio"})
    .add_string_axis("Shape", shape_names())
    .add_string_axis("Launch", {"graph", "stream"})
    .KVC_NVBENCH_LIMITS;

NVBENCH_BENCH_TYPES(bench_insert, NVBENCH_TYPE_AXES(Ratios, Layouts))
    .set_name("insert")
    .set_type_axes_names({"Ratio", "Layout"})
    .add_string_axis("Shape", shape_names())
    .add_string_axis("Launch", {"graph", "stream"})
    .KVC_NVBENCH_LIMITS;

NVBENCH_BENCH_TYPES(bench_fused, NVBENCH_TYPE_AXES(Ratios, Layouts))
    .set_name("fused")
    .set_type_axes_names({"Ratio", "Layout"})
    .add_string_axis("Shape", shape_names())
    .add_int64_axis("PDL", {0, 1})
    .add_string_axis("Launch", {"graph", "stream"})
    .KVC_NVBENCH_LIMITS;

NVBENCH_BENCH_TYPES(bench_step, NVBENCH_TYPE_AXES(nvbench::enum_type_list<2>))
    .set_name("step")
    .set_type_axes_names({"Ratio"})
    .add_string_axis("Shape", shape_names())
    .add_int64_axis("PDL", {0, 1})
    .add_string_axis("Launch", {"graph", "stream"})
    .KVC_NVBENCH_LIMITS;

NVBENCH_BENCH_TYPES(bench_copy, NVBENCH_TYPE_AXES(Ratios, Layouts))
    .set_name("copy")
    .set_type_axes_names({"Ratio", "Layout"})
    .add_string_axis("Shape", shape_names())
    .add_string_axis("Op", {"compress", "insert", "fused", "step"})
    .KVC_NVBENCH_LIMITS;

NVBENCH_BENCH(bench_copy_peak).set_name("copy_peak").KVC_NVBENCH_LIMITS;
NVBENCH_BENCH(bench_empty).set_name("empty").KVC_NVBENCH_LIMITS;

NVBENCH_MAIN
