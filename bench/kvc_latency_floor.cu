// SPDX-License-Identifier: Apache-2.0
// kvc_latency_floor: what a decode-sized kernel costs on this GPU before it does any work —
// the floor under issue 11's decode targets (bench/NOTES.md 23).
//
// A decode call of Op A, Op B or the fused op is a chain of dependent memory round trips
// (indices -> rows -> stores) in a few dozen blocks, so its time is launch overhead plus the
// latency of that chain, not bandwidth. This program times kernels that do exactly such a
// chain and nothing else: `trips` dependent loads through an L2-resident table (each
// block's first load's result indexes the next), then one 16-byte store per thread, in 64
// or 256 blocks of 128 threads (decode 64x2 and 256x2 of the ops), replayed in a CUDA graph
// of 20 launches (median per launch, like kvc_bench), without and with PDL (griddepcontrol
// wait first, then launch_dependents: the order every kvcompress kernel uses). An empty
// kernel gives the launch-only floor.
//
//   kvc_latency_floor        (prints a Markdown table; exits 77 without a GPU)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <kvcompress/arch/pdl.cuh>

namespace {

#define FLOOR_CHECK(x)                                                                  \
  do {                                                                                  \
    const cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

constexpr int kThreads = 128;
constexpr int kTable = 1 << 16;  // ints: 256 KiB, L2-resident after the first replay
constexpr int kLaunches = 20;

__global__ void empty_kernel() {
  kvc::arch::wait_for_prior_grids();
  kvc::arch::allow_dependent_grids();
}

// `trips` dependent loads (thread 0's chain decides the row every thread then loads), then
// one 16-byte load of that row and one 16-byte store per thread.
__global__ void chain_kernel(const int* __restrict__ table, const int4* __restrict__ rows,
                             int4* __restrict__ out, int trips) {
  kvc::arch::wait_for_prior_grids();
  kvc::arch::allow_dependent_grids();
  int i = (blockIdx.x * 977) & (kTable - 1);
  for (int k = 0; k < trips - 1; ++k) i = __ldg(table + i);
  int4 v = __ldg(rows + static_cast<size_t>(i & 1023) * kThreads + threadIdx.x);
  v.x += 1;
  out[static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x] = v;
}

template <class Launch>
double graph_us(cudaStream_t stream, const Launch& launch) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  FLOOR_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < kLaunches; ++k) launch();
  FLOOR_CHECK(cudaStreamEndCapture(stream, &graph));
  FLOOR_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t e0, e1;
  FLOOR_CHECK(cudaEventCreate(&e0));
  FLOOR_CHECK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int r = 0; r < 41; ++r) {
    FLOOR_CHECK(cudaEventRecord(e0, stream));
    FLOOR_CHECK(cudaGraphLaunch(exec, stream));
    FLOOR_CHECK(cudaEventRecord(e1, stream));
    FLOOR_CHECK(cudaEventSynchronize(e1));
    float ms = 0.f;
    FLOOR_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (r > 0) t.push_back(ms * 1000.f / kLaunches);  // the first replay warms L2
  }
  std::sort(t.begin(), t.end());
  FLOOR_CHECK(cudaEventDestroy(e0));
  FLOOR_CHECK(cudaEventDestroy(e1));
  FLOOR_CHECK(cudaGraphExecDestroy(exec));
  FLOOR_CHECK(cudaGraphDestroy(graph));
  return t[t.size() / 2];
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
  FLOOR_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("kvc_latency_floor: no CUDA device, nothing measured\n");
    return 77;
  }
  cudaDeviceProp prop;
  FLOOR_CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  FLOOR_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::vector<int> host(kTable);
  for (int i = 0; i < kTable; ++i) host[i] = static_cast<int>((i * 40503u + 12345u) & (kTable - 1));
  int* table = nullptr;
  int4 *rows = nullptr, *out = nullptr;
  FLOOR_CHECK(cudaMalloc(&table, kTable * sizeof(int)));
  FLOOR_CHECK(cudaMalloc(&rows, 1024 * kThreads * sizeof(int4)));
  FLOOR_CHECK(cudaMalloc(&out, 256 * kThreads * sizeof(int4)));
  FLOOR_CHECK(cudaMemcpy(table, host.data(), kTable * sizeof(int), cudaMemcpyHostToDevice));
  FLOOR_CHECK(cudaMemset(rows, 0, 1024 * kThreads * sizeof(int4)));

  std::printf("# kvc_latency_floor on %s (%d SMs): us per launch, graph of %d launches, median\n\n",
              prop.name, prop.multiProcessorCount, kLaunches);
  std::printf("| kernel | blocks | plain | PDL |\n|---|---|---|---|\n");
  for (int blocks : {64, 256}) {
    const double plain = graph_us(stream, [&] { launch(empty_kernel, blocks, false, stream); });
    const double pdl = graph_us(stream, [&] { launch(empty_kernel, blocks, true, stream); });
    std::printf("| empty | %d | %.2f | %.2f |\n", blocks, plain, pdl);
    for (int trips : {1, 2, 3, 4}) {
      const auto run = [&](bool with_pdl) {
        return graph_us(stream, [&] {
          launch(chain_kernel, blocks, with_pdl, stream, static_cast<const int*>(table),
                 static_cast<const int4*>(rows), out, trips);
        });
      };
      std::printf("| %d dependent load%s + store | %d | %.2f | %.2f |\n", trips, trips > 1 ? "s" : "",
                  blocks, run(false), run(true));
    }
  }
  FLOOR_CHECK(cudaFree(table));
  FLOOR_CHECK(cudaFree(rows));
  FLOOR_CHECK(cudaFree(out));
  FLOOR_CHECK(cudaStreamDestroy(stream));
  return 0;
}
