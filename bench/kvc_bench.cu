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
//   kvc_bench [--out DIR] [--quick] [--hot] [--shape TEXT] [--ratio R] [--op NAME]
// --hot times every launch on one input set (L2-hot where the op's bytes fit in L2, as
// vLLM's comparison script peer_bench.py times both implementations) instead of rotating
// through enough sets to read from HBM.
// --shape/--ratio/--op keep only the matching rows (shape name containing TEXT, op name
// equal to NAME: compress, insert, fused, "A+B", ...); scripts/profile.sh uses them to put
// one kernel under the profiler.
//
// The problems (shapes, seeds, indices), their byte counts, the input sets and the device
// buffers come from bench_problems.hpp, shared with kvc_nvbench; timing and output are here.
#include "bench_problems.hpp"

#include <kvcompress/kvcompress.cuh>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
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

using namespace bench;

namespace {

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

int main(int argc, char** argv) try {
  std::string out_dir;
  bool quick = false, hot = false;
  std::string only_shape, only_op;
  int only_ratio = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) out_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--hot")) hot = true;
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
    const size_t n = copy_size(traffic, copy_src.n);
    return time_graph([&](cudaStream_t s, int i) { launch_copy(copy_src.ptr, copy_dst.ptr, copy_src.n, n, i, s); },
                      kMinLaunchesPerGraph, replays);
  };
  const double peak_us = copy_time(double(size_t{1} << 29));  // 256 MiB copied per launch
  std::printf("# kvc_bench on %s (%d SMs, L2 %.0f MB)\n", prop.name, prop.multiProcessorCount, l2 / 1e6);
  std::printf("empty kernel (graph): %.2f us; 512 MiB copy: %.0f GB/s (read + write)%s\n\n", empty_us,
              double(size_t{1} << 29) / peak_us / 1e3,
              hot ? "; --hot: one input set per op (L2-hot where it fits)" : "");

  std::printf("| shape | ratio | op | layout | graph us | stream us | GB/s | %% of copy |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  std::vector<Row> rows;
  for_each_problem(
      shapes(quick),
      [&](const Shape& shape, int ratio) {
        return shape.name.find(only_shape) != std::string::npos && (only_ratio == 0 || ratio == only_ratio);
      },
      [&](const Shape& shape, int ratio, const Problem& pr) {
        if (pr.closing == 0) return;
        // Enough input sets that one graph's footprint is at least twice L2 (--hot: one).
        const int sets = hot ? 1 : input_sets(pr, l2);
        DeviceSets dev(pr, sets, bench_layouts());
        const int per_graph = launches_per_graph(sets);
        auto measure = [&](const std::string& op, const std::string& layout, double bytes,
                           const std::function<void(cudaStream_t, int)>& launch) {
          if (!only_op.empty() && op != only_op) return;
          Row r{op, layout, shape.name, ratio, pr.T, bytes, 0, 0, 0};
          r.graph_us = time_graph(launch, per_graph, replays);
          r.stream_us = time_stream(launch, per_graph, quick ? 10 : 30);
          r.copy_us = copy_time(bytes);
          rows.push_back(r);
          std::printf("| %-22s | %-5d | %-10s | %-10s | %8.2f | %8.2f | %7.1f | %5.1f%% |\n", shape.name.c_str(),
                      ratio, op.c_str(), layout.c_str(), r.graph_us, r.stream_us, bytes / r.graph_us / 1e3,
                      100.0 * r.copy_us / r.graph_us);
          std::fflush(stdout);
        };
        // Programmatic dependent launch: each kernel's launch and prologue overlap the
        // previous kernel's tail (the torch package launches this way by default).
        kvc::LaunchOptions pdl;
        pdl.pdl = true;
        const LayoutInfo& l0 = bench_layouts()[0];
        measure("compress", "-", pr.a.total(), [&](cudaStream_t s, int i) {
          BENCH_STATUS(kvc::compress(dev.compress(pr, i % sets), s));
        });
        measure("compress pdl", "-", pr.a.total(), [&](cudaStream_t s, int i) {
          BENCH_STATUS(kvc::compress(dev.compress(pr, i % sets), s, pdl));
        });
        for (const LayoutInfo& bl : bench_layouts()) {
          if (ratio != 2 && bl.index != 0) continue;  // layouts at the model's ratio; fp8_ds_mla everywhere
          measure("insert", bl.name, pr.insert_bytes(bl).total(), [&](cudaStream_t s, int i) {
            BENCH_STATUS(kvc::insert(dev.insert(pr, bl, i % sets), s));
          });
          measure("fused", bl.name, pr.fused_bytes(bl).total(), [&](cudaStream_t s, int i) {
            BENCH_STATUS(kvc::fused(dev.fused(pr, bl, i % sets), s));
          });
        }
        measure("insert pdl", l0.name, pr.insert_bytes(l0).total(), [&](cudaStream_t s, int i) {
          BENCH_STATUS(kvc::insert(dev.insert(pr, l0, i % sets), s, pdl));
        });
        if (ratio == 2) {
          // A serving step: Op A then Op B (the latent goes through memory), or the fused op,
          // plain launches against PDL.
          for (bool use_pdl : {false, true}) {
            const kvc::LaunchOptions opt = use_pdl ? pdl : kvc::LaunchOptions{};
            measure(use_pdl ? "A+B pdl" : "A+B", l0.name, pr.step_bytes(l0).total(), [&](cudaStream_t s, int i) {
              BENCH_STATUS(kvc::compress(dev.compress(pr, i % sets), s, opt));
              BENCH_STATUS(kvc::insert(dev.insert(pr, l0, i % sets), s, opt));
            });
          }
          measure("fused pdl", l0.name, pr.fused_bytes(l0).total(), [&](cudaStream_t s, int i) {
            BENCH_STATUS(kvc::fused(dev.fused(pr, l0, i % sets), s, pdl));
          });
        }
      });

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
} catch (const std::exception& e) {  // bench_problems.hpp's check(): a CUDA call failed
  std::fprintf(stderr, "kvc_bench: %s\n", e.what());
  return 1;
}
