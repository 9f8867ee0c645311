// SPDX-License-Identifier: Apache-2.0
// How kvc_nvbench times a launch, shared by its translation units (bench/kvc_nvbench.cu: the
// ops, the copy baseline, the empty kernel; bench/kvc_latency_floor.cu: the latency floor):
// the per-state limits, a captured CUDA graph of several launches, nvbench's measurement of
// one replay, and the summaries that turn nvbench's per-replay times into per-launch times.
//
// One nvbench "launch" is one replay of a graph of `per_graph` launches (or the same launches
// on the stream). nvbench measures it twice:
//   cold   each replay alone: L2 flushed, the stream held by a blocking kernel while the
//          replay is queued, then timed with CUDA events (nv/cold/time/gpu/*);
//   batch  replays queued back to back without flushing, total time / replays
//          (nv/batch/time/gpu/mean).
// add_per_launch_times() divides both by `per_graph`: kvc/batch/time_per_launch ("Batch
// GPU/launch", the benchmark's number, scripts/bench_report.py's `graph us` / `stream us`) and
// kvc/cold/time_per_launch ("Cold GPU/launch", `cold us`).
#pragma once

#include "bench_problems.hpp"

#include <nvbench/nvbench.cuh>

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace bench {

// Per-state limits: min-time 0.1 s (cold samples' GPU time), max-noise 1 %, a batch target
// time of 0.1 s and a timeout of 5 s (nvbench's defaults: 0.5 s, 0.5 %, 0.5 s, 15 s). The
// command line's --min-time, --max-noise, --batch-target-time and --timeout override them.
constexpr double kMinTime = 0.1, kMaxNoise = 0.01, kTimeout = 5.0;  // seconds, fraction, seconds

#define KVC_NVBENCH_LIMITS                                         \
  set_criterion_param_float64("min-time", ::bench::kMinTime)       \
      .set_criterion_param_float64("max-noise", ::bench::kMaxNoise) \
      .set_batch_target_time(::bench::kMinTime)                    \
      .set_timeout(::bench::kTimeout)

inline void add_value_summary(nvbench::state& state, const std::string& tag, const std::string& name,
                              const std::string& hint, const std::string& description, double value,
                              bool hidden) {
  auto& s = state.add_summary(tag);
  s.set_string("name", name);
  s.set_string("hint", hint);
  s.set_string("description", description);
  s.set_float64("value", value);
  if (hidden) s.set_string("hide", "kvcompress metadata (JSON only)");
}
inline void add_count_summary(nvbench::state& state, const std::string& tag, const std::string& name,
                              const std::string& description, int64_t value) {
  auto& s = state.add_summary(tag);
  s.set_string("name", name);
  s.set_string("description", description);
  s.set_int64("value", value);
  s.set_string("hide", "kvcompress metadata (JSON only)");
}

/// After state.exec: nvbench's per-replay times divided by the launches of one replay.
inline void add_per_launch_times(nvbench::state& state, int per_graph) {
  struct Src { const char* from; const char* tag; const char* name; const char* what; };
  static const Src srcs[] = {
      {"nv/batch/time/gpu/mean", "kvc/batch/time_per_launch", "Batch GPU/launch",
       "batch replays back to back: mean time per launch (RESULTS.md's graph / stream us)"},
      {"nv/cold/time/gpu/mean", "kvc/cold/time_per_launch", "Cold GPU/launch",
       "isolated replays after an L2 flush: mean time per launch"},
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

/// Times a captured graph of `per_graph` launches: cold and batch (exec_tag::gpu: no
/// CPU-only measurement), then the per-launch summaries.
inline void exec_graph(nvbench::state& state, const CapturedGraph& graph, int per_graph) {
  state.exec(nvbench::exec_tag::gpu, [&](nvbench::launch& l) { graph.launch(l.get_stream()); });
  add_per_launch_times(state, per_graph);
}

}  // namespace bench
