// SPDX-License-Identifier: Apache-2.0
// The latency floor (benchmark `latency_floor` of kvc_nvbench, linked into it: one binary and
// one JSON per GPU session hold the ops and the floor under them): what a decode-sized kernel
// costs on this GPU before it does any work, the floor under issue 11's decode targets
// (bench/NOTES.md 23). Until issue 15 this was the program kvc_latency_floor.
//
// A decode call of Op A, Op B or the fused op is a chain of dependent memory round trips
// (indices -> rows -> stores) in a few dozen blocks, so its time is launch overhead plus the
// latency of that chain, not bandwidth. These kernels do exactly such a chain and nothing
// else: `Trips` dependent loads through an L2-resident table (each block's first load's
// result indexes the next), the last one a 16-byte load of a row, then one 16-byte store per
// thread, in `Blocks` blocks of 128 threads (64 and 256: decode 64x2 and 256x2 of the ops),
// 20 launches per CUDA graph, without and with PDL (griddepcontrol wait first, then
// launch_dependents: the order every kvcompress kernel uses). Trips=0 is an empty kernel with
// the same PDL instructions: the launch-only floor.
//
// Axes: Trips (0 to 4), Blocks (64, 256), PDL (0, 1). The number: nvbench's batch time per
// launch (kvc/batch/time_per_launch: replays back to back, the table L2-hot as in the old
// program's median over replays); the cold time (L2 flushed before each replay) reads the
// table from HBM. scripts/bench_report.py prints both as RESULTS.md's "Latency floor" table.
#include "bench_timing.cuh"  // nvbench, bench_problems.hpp

#include <kvcompress/arch/pdl.cuh>

#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace {

constexpr int kThreads = 128;
constexpr int kTable = 1 << 16;  // ints: 256 KiB, L2-resident after the first replay
constexpr int kRows = 1024;      // rows of kThreads int4 the chain's last load reads
constexpr int kLaunches = bench::kMinLaunchesPerGraph;

__global__ void floor_empty_kernel() {
  kvc::arch::wait_for_prior_grids();
  kvc::arch::allow_dependent_grids();
}

// `trips` dependent loads (thread 0's chain decides the row every thread then loads), then
// one 16-byte load of that row and one 16-byte store per thread.
__global__ void floor_chain_kernel(const int* __restrict__ table, const int4* __restrict__ rows,
                                   int4* __restrict__ out, int trips) {
  kvc::arch::wait_for_prior_grids();
  kvc::arch::allow_dependent_grids();
  int i = (blockIdx.x * 977) & (kTable - 1);
  for (int k = 0; k < trips - 1; ++k) i = __ldg(table + i);
  int4 v = __ldg(rows + static_cast<size_t>(i & (kRows - 1)) * kThreads + threadIdx.x);
  v.x += 1;
  out[static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x] = v;
}

template <class... Args>
void launch(void (*kernel)(Args...), int blocks, bool pdl, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = pdl ? 1 : 0;
  bench::check(cudaLaunchKernelEx(&config, kernel, args...), "cudaLaunchKernelEx");
}

void bench_latency_floor(nvbench::state& state) {
  const int trips = static_cast<int>(state.get_int64("Trips"));
  const int blocks = static_cast<int>(state.get_int64("Blocks"));
  const bool pdl = state.get_int64("PDL") != 0;
  if (trips < 0 || blocks < 1) throw std::runtime_error("latency_floor: Trips >= 0 and Blocks >= 1");
  std::vector<int> host(kTable);
  for (int i = 0; i < kTable; ++i) host[i] = static_cast<int>((i * 40503u + 12345u) & (kTable - 1));
  bench::Buffer<int> table;
  table.upload(host);
  bench::Buffer<int4> rows(size_t{kRows} * kThreads), out(static_cast<size_t>(blocks) * kThreads);
  bench::check(cudaMemset(rows.ptr, 0, rows.n * sizeof(int4)), "cudaMemset");
  bench::add_count_summary(state, "kvc/launches", "Launches", "kernels per nvbench launch (replay)", kLaunches);
  const bench::CapturedGraph graph([&](cudaStream_t s) {
    for (int k = 0; k < kLaunches; ++k) {
      if (trips == 0)
        launch(floor_empty_kernel, blocks, pdl, s);
      else
        launch(floor_chain_kernel, blocks, pdl, s, static_cast<const int*>(table.ptr),
               static_cast<const int4*>(rows.ptr), out.ptr, trips);
    }
  });
  bench::exec_graph(state, graph, kLaunches);
}

}  // namespace

NVBENCH_BENCH(bench_latency_floor)
    .set_name("latency_floor")
    .add_int64_axis("Trips", {0, 1, 2, 3, 4})
    .add_int64_axis("Blocks", {64, 256})
    .add_int64_axis("PDL", {0, 1})
    .KVC_NVBENCH_LIMITS;
