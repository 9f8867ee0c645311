// SPDX-License-Identifier: Apache-2.0
// kvc_nvbench: the kvcompress benchmark, on nvbench (the harness of CCCL's own benchmarks).
// Op A, Op B (each layout) and the fused op against a copy of the same bytes, on decode,
// prefill and mixed shapes; docs/measuring.md has how to build, run and read it.
//
// Problems (bench_problems.hpp): head dim 512, fp32 kv_score, int64 indices, 64 records per
// cache page, ring capacity ring_capacity(R, 7), the shapes of bench::shapes(), ratios
// bench::kRatios (1, 2, 4, 128), every built-in layout at ratio 2 and fp8_ds_mla at the
// others. The problems, their bytes (count_bytes(), split into reads and writes), the input
// sets and the device buffers are built there; timing helpers are in bench_timing.cuh.
//
// Benchmarks and axes (nvbench: -b NAME, -a "Axis=value", --list):
//   compress   Ratio (type) x Shape x PDL x Data x Launch
//   insert     Ratio (type) x Layout (type) x Shape x PDL x Data x Launch
//   fused      Ratio (type) x Layout (type) x Shape x PDL x Data x Launch
//   step       Op A then Op B, fp8_ds_mla: Ratio (type, 2 only) x Shape x PDL x Data x Launch
//   copy       the bandwidth baseline: a 16-byte grid-stride copy moving the bytes of Op
//              (compress, insert, fused, step) at Ratio x Layout x Shape, graph replay
//   copy_peak  the same copy kernel, 256 MiB per launch
//   empty      an empty kernel (the launch floor)
//   latency_floor  bench/kvc_latency_floor.cu: kernels that only do a decode call's chain
//              of dependent round trips
//   tune_clusters, tune_windows  bench/kvc_tune.cu: the launch shapes kvc::compress and
//              kvc::fused choose from the GPU's size, each forced in turn
// PDL=1 chains each launch to the previous one with programmatic dependent launch
// (kvc::LaunchOptions::pdl, as the torch package launches): compress at every ratio, insert
// with fp8_ds_mla at every ratio, fused at ratio 2 with fp8_ds_mla, the step. Data=rotating
// (the default) rotates through 2 to 8 input sets so that one graph's footprint is at least
// twice L2 (large shapes read from HBM); Data=hot uses one input set (L2-hot where the op's
// bytes fit, as the peer comparison peer_bench.py times). Combinations not measured are
// skipped with state.skip(reason).
//
// kvcompress's own options, taken out before nvbench parses the rest (kvc_nvbench --help):
//   --quick   every benchmark whose Shape axis has its default values (no -a Shape=...) gets
//             the short shape list (bench::shapes(true): without prefill 4x16384)
//   --hot     every benchmark whose Data axis has its default value (rotating) gets Data=hot
// The process exits 1 when a state failed (an exception: a CUDA error, a kvc::Status, an
// unknown Shape or Data value; nvbench itself reports it and goes on), 77 without a device.
//
// What is timed. One nvbench "launch" is a CUDA graph of L = max(sets, 20) op launches,
// launch i using input set i % sets (Launch=graph; Launch=stream: the same L launches as
// plain stream launches). nvbench measures it cold and batch (bench_timing.cuh); batch / L
// (kvc/batch/time_per_launch) is the benchmark's time per launch. The global-memory
// reads/writes given to nvbench are L times one launch's bytes, so its bandwidth columns are
// per launch as well. scripts/bench_report.py turns the --json output into bench/RESULTS.md.
#include <kvcompress/kvcompress.cuh>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace nvbench { struct option_parser; }

// nvbench's main (NVBENCH_MAIN) with kvcompress's customizations, defined before nvbench is
// included (its main.cuh takes them from these macros):
// - without a usable CUDA device: one line and exit 77 (ctest's skip code) instead of
//   nvbench's device-manager error. (On a machine without the driver the loader stops
//   earlier: libnvbench.so needs the driver's libnvidia-ml.so.1.)
// - --quick and --hot taken out of the arguments, applied to the parsed benchmarks;
// - exit 1 after the results when a state failed.
namespace kvc_main {
void require_device();
void take_own_options(std::vector<std::string>& args);
void apply_own_options(nvbench::option_parser& parser);
void count_failed_states(nvbench::option_parser& parser);
void exit_if_failed();
}  // namespace kvc_main
#define NVBENCH_MAIN_INITIALIZE_CUSTOM_PRE(argc, argv) kvc_main::require_device()
#define NVBENCH_MAIN_CUSTOM_ARGS_HANDLER(args) kvc_main::take_own_options(args)
#define NVBENCH_MAIN_PARSE_CUSTOM_POST(parser) kvc_main::apply_own_options(parser)
#define NVBENCH_MAIN_PRINT_RESULTS(parser)          \
  nvbench::detail::main_print_results(parser);      \
  kvc_main::count_failed_states(parser)
#define NVBENCH_MAIN_FINALIZE_CUSTOM_POST() kvc_main::exit_if_failed()

#include "bench_states.cuh"  // nvbench, bench_problems.hpp, bench_timing.cuh

#include <cstdint>
#include <iterator>
#include <map>
#include <stdexcept>
#include <utility>

using namespace bench;

namespace {

// ---------------------------------------------------------------------------------------
// Axes

template <class Indices>
struct RatioList;
template <std::size_t... I>
struct RatioList<std::index_sequence<I...>> {
  using type = nvbench::enum_type_list<kRatios[I]...>;
};
/// bench::kRatios as nvbench types (add a ratio there and to kvc_nvbench's instance lists).
using Ratios = RatioList<std::make_index_sequence<std::size(kRatios)>>::type;

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

/// Every layout is measured at ratio 2, fp8_ds_mla at every ratio.
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

}  // namespace

NVBENCH_DECLARE_ENUM_TYPE_STRINGS(kvc::CacheLayout, layout_input_string, layout_description)

namespace {

// ---------------------------------------------------------------------------------------
// Benchmarks. The ops are kvc::compress / insert / fused (the runtime API); the type axes
// pick runtime values, so no benchmark body instantiates a kernel of its own.

template <int R>
void bench_compress(nvbench::state& state, nvbench::type_list<nvbench::enum_type<R>>) {
  const kvc::LaunchOptions opt = launch_options(state);
  const Problem& pr = problem(state.get_string("Shape"), R);
  if (skip_empty(state, pr)) return;
  const int sets = input_sets(pr, state);
  DeviceSets dev(pr, sets, {});
  time_launches(state, pr, sets, pr.a, [&](cudaStream_t s, int i) {
    check(kvc::compress(dev.compress(pr, i), s, opt), "kvc::compress");
  });
}

template <int R, kvc::CacheLayout L>
void bench_insert(nvbench::state& state, nvbench::type_list<nvbench::enum_type<R>, nvbench::enum_type<L>>) {
  if (skip_layout<R, L>(state)) return;
  const kvc::LaunchOptions opt = launch_options(state);
  if (opt.pdl && L != kvc::CacheLayout::kFp8DsMla) {
    state.skip("Op B with PDL is measured with fp8_ds_mla only");
    return;
  }
  const Problem& pr = problem(state.get_string("Shape"), R);
  if (skip_empty(state, pr)) return;
  const int sets = input_sets(pr, state);
  const LayoutInfo info = layout_info(L);
  DeviceSets dev(pr, sets, {info});
  time_launches(state, pr, sets, pr.insert_bytes(info), [&](cudaStream_t s, int i) {
    check(kvc::insert(dev.insert(pr, info, i), s, opt), "kvc::insert");
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

// The copy baseline: graph replay of kMinLaunchesPerGraph copies, each moving the bytes of
// one op launch (read + write, a multiple of 256 bytes), alternating buffer halves.
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

NVBENCH_BENCH_TYPES(bench_compress, NVBENCH_TYPE_AXES(Ratios))
    .set_name("compress")
    .set_type_axes_names({"Ratio"})
    .add_string_axis("Shape", shape_names(false))
    .add_int64_axis("PDL", {0, 1})
    .add_string_axis("Data", {"rotating"})
    .add_string_axis("Launch", {"graph", "stream"})
    .KVC_NVBENCH_LIMITS;

NVBENCH_BENCH_TYPES(bench_insert, NVBENCH_TYPE_AXES(Ratios, Layouts))
    .set_name("insert")
    .set_type_axes_names({"Ratio", "Layout"})
    .add_string_axis("Shape", shape_names(false))
    .add_int64_axis("PDL", {0, 1})
    .add_string_axis("Data", {"rotating"})
    .add_string_axis("Launch", {"graph", "stream"})
    .KVC_NVBENCH_LIMITS;

NVBENCH_BENCH_TYPES(bench_fused, NVBENCH_TYPE_AXES(Ratios, Layouts))
    .set_name("fused")
    .set_type_axes_names({"Ratio", "Layout"})
    .add_string_axis("Shape", shape_names(false))
    .add_int64_axis("PDL", {0, 1})
    .add_string_axis("Data", {"rotating"})
    .add_string_axis("Launch", {"graph", "stream"})
    .KVC_NVBENCH_LIMITS;

NVBENCH_BENCH_TYPES(bench_step, NVBENCH_TYPE_AXES(nvbench::enum_type_list<2>))
    .set_name("step")
    .set_type_axes_names({"Ratio"})
    .add_string_axis("Shape", shape_names(false))
    .add_int64_axis("PDL", {0, 1})
    .add_string_axis("Data", {"rotating"})
    .add_string_axis("Launch", {"graph", "stream"})
    .KVC_NVBENCH_LIMITS;

NVBENCH_BENCH_TYPES(bench_copy, NVBENCH_TYPE_AXES(Ratios, Layouts))
    .set_name("copy")
    .set_type_axes_names({"Ratio", "Layout"})
    .add_string_axis("Shape", shape_names(false))
    .add_string_axis("Op", {"compress", "insert", "fused", "step"})
    .KVC_NVBENCH_LIMITS;

NVBENCH_BENCH(bench_copy_peak).set_name("copy_peak").KVC_NVBENCH_LIMITS;
NVBENCH_BENCH(bench_empty).set_name("empty").KVC_NVBENCH_LIMITS;

// ---------------------------------------------------------------------------------------
// main's customizations (declared at the top)

namespace kvc_main {
namespace {
bool quick = false, hot = false;
int failed_states = 0;
std::string first_failure;

std::vector<std::string> values(const nvbench::axis_base& axis) {
  std::vector<std::string> v;
  for (std::size_t i = 0; i < axis.get_size(); ++i) v.push_back(axis.get_input_string(i));
  return v;
}
}  // namespace

void require_device() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("kvc_nvbench: SKIPPED — no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount: 0");
    std::exit(77);
  }
}

void take_own_options(std::vector<std::string>& args) {
  std::vector<std::string> rest;
  for (const std::string& a : args) {
    if (a == "--quick") {
      quick = true;
    } else if (a == "--hot") {
      hot = true;
    } else {
      if (a == "--help" || a == "-h")
        std::printf(
            "kvc_nvbench (kvcompress's benchmark; docs/measuring.md). Its own options:\n"
            "  --quick   benchmarks whose Shape axis has its default values (no -a Shape=...):\n"
            "            the short shape list (without prefill 4x16384)\n"
            "  --hot     benchmarks whose Data axis has its default value (rotating): Data=hot\n"
            "            (one input set, L2-hot where it fits)\n"
            "Exit status: 0, 1 when a state failed, 77 without a CUDA device. nvbench's options:\n\n");
      rest.push_back(a);
    }
  }
  args = std::move(rest);
}

void apply_own_options(nvbench::option_parser& parser) {
  const std::vector<std::string> full = shape_names(false), short_list = shape_names(true);
  for (auto& bench_ptr : parser.get_benchmarks())
    for (auto& axis : bench_ptr->get_axes().get_axes()) {
      if (axis->get_type() != nvbench::axis_type::string) continue;
      auto& s = static_cast<nvbench::string_axis&>(*axis);
      if (quick && s.get_name() == "Shape" && values(s) == full) s.set_inputs(short_list);
      if (hot && s.get_name() == "Data" && values(s) == std::vector<std::string>{"rotating"}) s.set_inputs({"hot"});
    }
}

// nvbench catches an exception of a state, logs it and marks the state skipped with the
// reason "Unexpected error: ..." (nvbench 0.3.0's runner), then goes on with the next state.
void count_failed_states(nvbench::option_parser& parser) {
  for (const auto& bench_ptr : parser.get_benchmarks())
    for (const nvbench::state& st : bench_ptr->get_states())
      if (st.is_skipped() && st.get_skip_reason().rfind("Unexpected error", 0) == 0) {
        if (failed_states++ == 0)
          first_failure = bench_ptr->get_name() + " " + st.get_axis_values_as_string() + ": " + st.get_skip_reason();
      }
}

void exit_if_failed() {
  if (failed_states == 0) return;
  std::fprintf(stderr, "kvc_nvbench: %d state(s) failed; the first: %s\n", failed_states, first_failure.c_str());
  std::exit(1);
}
}  // namespace kvc_main

NVBENCH_MAIN
