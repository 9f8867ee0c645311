// SPDX-License-Identifier: Apache-2.0
// kvc_nvbench: what every benchmark state needs (kvc_nvbench.cu, kvc_tune.cu): its problem
// (bench_problems.hpp's shapes, built once for the whole process), its input sets, its
// launch options, and the timed loop of op launches (graph replay or stream launches).
#pragma once

#include "bench_timing.cuh"  // nvbench, bench_problems.hpp

#include <cuda_runtime.h>

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace bench {

// ---------------------------------------------------------------------------------------
// Problems: bench_problems.hpp's, every shape of the full list, built once

inline const std::vector<Shape>& all_shapes() {
  static const std::vector<Shape> list = shapes(false);
  return list;
}

inline std::vector<std::string> shape_names(bool quick) {
  std::vector<std::string> v;
  for (const Shape& s : shapes(quick)) v.push_back(s.name);
  return v;
}

/// The problem of (shape, ratio), built once: all of them in one order from one seed
/// (for_each_problem), so a shape's cache slots do not depend on the filters of a run.
inline const Problem& problem(const std::string& shape, int ratio) {
  static const std::map<std::pair<std::string, int>, Problem> all = [] {
    std::map<std::pair<std::string, int>, Problem> m;
    for_each_problem(all_shapes(), [&](const Shape& s, int r, const Problem& pr) { m[{s.name, r}] = pr; });
    return m;
  }();
  const auto it = all.find({shape, ratio});
  if (it == all.end()) {
    std::string known;
    for (const Shape& s : all_shapes()) known += (known.empty() ? "'" : ", '") + s.name + "'";
    throw std::runtime_error("Shape='" + shape + "' is not a shape of bench::shapes(): " + known);
  }
  return it->second;
}

/// The input sets to rotate through: Data=rotating, bench::input_sets for this state's
/// device's L2 (at least twice L2 per graph); Data=hot, one.
inline int input_sets(const Problem& pr, const nvbench::state& state) {
  const std::string& data = state.get_string("Data");
  if (data == "hot") return 1;
  if (data != "rotating") throw std::runtime_error("Data='" + data + "': the values are rotating and hot");
  return bench::input_sets(pr, static_cast<double>(state.get_device()->get_l2_cache_size()));
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

inline bool skip_empty(nvbench::state& state, const Problem& pr) {
  if (pr.closing == 0) {
    state.skip("no group closes in this shape at this ratio");
    return true;
  }
  return false;
}

inline kvc::LaunchOptions launch_options(const nvbench::state& state) {
  kvc::LaunchOptions o;
  o.pdl = state.get_int64("PDL") != 0;
  return o;
}

}  // namespace bench
