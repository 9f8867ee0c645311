// SPDX-License-Identifier: Apache-2.0
// kvc_nvbench: kvc_bench's measurements on nvbench (issue 15), built beside kvc_bench until
// both have run side by side on a GPU (docs/measuring.md, "kvc_nvbench").
//
// The same problems as bench/kvc_bench.cu: head dim 512, fp32 kv_score, int64 indices, 64
// records per cache page, ring capacity ring_capacity(R, 7), the same shapes (the full list,
// not --quick's), ratios 1, 2, 4, 128, every built-in layout at ratio 2 and fp8_ds_mla at
// the others, the A+B / fused PDL variants at ratio 2, and the same indices: the problems are
// built in kvc_bench's order from its seeds, so a full kvc_bench run and this program time
// the same cache slots. The problems, their bytes (count_bytes(), split into reads and
// writes), the input sets and the device buffers are kvc_bench's own: bench_problems.hpp.
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

#include <cstdint>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_problems.hpp"

using namespace bench;

namespace {

constexpr double kMinTime = 0.1, kMaxNoise = 0.01, kTimeout = 5.0;  // seconds, fraction, seconds

// ---------------------------------------------------------------------------------------
// Problems: bench_problems.hpp's, the full shape list (not --quick's)

const std::vector<Shape>& all_shapes() {
  static const std::vector<Shape> list = shapes(false);
  return list;
}

std::vector<std::string> shape_names() {
  std::vector<std::string> v;
  for (const Shape& s : all_shapes()) v.push_back(s.name);
  return v;
}

/// The problem of (shape, ratio), built once: all of them in kvc_bench's order from its
/// seed (for_each_problem), so the cache slots are those of a full kvc_bench run.
const Problem& problem(const std::string& shape, int ratio) {
  static const std::map<std::pair<std::string, int>, Problem> all = [] {
    std::map<std::pair<std::string, int>, Problem> m;
    for_each_problem(
        all_shapes(), [](const Shape&, int) { return true; },
        [&](const Shape& s, int r, const Problem& pr) { m[{s.name, r}] = pr; });
    return m;
  }();
  const auto it = all.find({shape, ratio});
  if (it == all.end()) throw std::runtime_error("no problem for shape '" + shape + "'");
  return it->second;
}

/// kvc_bench's input sets (bench::input_sets) for this state's device's L2.
int input_sets(const Problem& pr, const nvbench::state& state) {
  return bench::input_sets(pr, static_cast<double>(state.get_device()->get_l2_cache_size()));
}

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
  const int per_graph = launches_per_graph(sets);
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
  DeviceSets dev(pr, sets, {});
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
  const LayoutInfo info = layout_info(L);
  DeviceSets dev(pr, sets, {info});
  time_launches(state, pr, sets, pr.insert_bytes(info), [&](cudaStream_t s, int i) {
    check(kvc::insert(dev.insert(pr, info, i), s), "kvc::insert");
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
  const LayoutInfo info = layout_info(L);
  DeviceSets dev(pr, sets, {info});
  time_launches(state, pr, sets, pr.fused_bytes(info), [&](cudaStream_t s, int i) {
    check(kvc::fused(dev.fused(pr, info, i), s, opt), "kvc::fused");
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
  const LayoutInfo info = layout_info(kvc::CacheLayout::kFp8DsMla);
  DeviceSets dev(pr, sets, {info});
  time_launches(state, pr, sets, pr.step_bytes(info), [&](cudaStream_t s, int i) {
    check(kvc::compress(dev.compress(pr, i), s, opt), "kvc::compress");
    check(kvc::insert(dev.insert(pr, info, i), s, opt), "kvc::insert");
  });
}

// The copy baseline: kvc_bench's copy_time(), graph replay, moving the bytes of one op
// launch (read + write, a multiple of 256 bytes), alternating buffer halves.
constexpr size_t kCopyBuffer = size_t{1} << 29;

void time_copy(nvbench::state& state, double traffic) {
  Buffer<uint8_t> src(kCopyBuffer), dst(kCopyBuffer);
  check(cudaMemset(src.ptr, 1, src.n), "cudaMemset");
  const size_t n = copy_size(traffic, src.n);
  const int per_graph = kMinLaunchesPerGraph;
  state.add_global_memory_reads(n * per_graph, "Read/replay");
  state.add_global_memory_writes(n * per_graph, "Written/replay");
  add_count_summary(state, "kvc/launches", "Launches", "copy launches per nvbench launch (replay)", per_graph);
  add_value_summary(state, "kvc/bytes", "Bytes/launch", "bytes", "bytes one copy launch moves (read + write)",
                    2.0 * n, true);
  const CapturedGraph graph([&](cudaStream_t s) {
    for (int i = 0; i < per_graph; ++i) launch_copy(src.ptr, dst.ptr, src.n, n, i, s);
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
                                       : pr.step_bytes(info);
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
