// SPDX-License-Identifier: Apache-2.0
// The split-group round, phase by phase (bench/NOTES.md 48): with
// bench/experiments/split_group_trace.patch applied, thread 0 of every block of Op A's
// split-group kernel stamps %globaltimer and clock64 at the phase boundaries of a group's
// round; this program launches kvc::compress on one of kvc_nvbench's problems (default:
// ratio 128, decode 64x2) many times, one launch at a time, and prints per phase the median
// over the launches, for the rank-0 blocks of the clusters that pool a group and for the
// copy-only blocks, in clock cycles of the block's SM and in ns since the launch's first
// block ran. An experiment, not a product: not built by CMake.
//   git worktree add --detach /tmp/tr <commit> && git -C /tmp/tr apply $PWD/bench/experiments/split_group_trace.patch
//   nvcc -std=c++17 -O3 -arch=sm_90 -I /tmp/tr/include -I /tmp/tr/bench \
//     /tmp/tr/bench/experiments/split_group_trace.cu -o split_group_trace
//   ./split_group_trace ["decode 64x2"] [ratio 128] [launches 200] [pdl 0|1]
#include "bench_problems.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

const char* kPhase[kTracePoints] = {"block runs",         "after PDL wait",       "plan in smem",
                                    "warp 0 pooled",      "block tree merged",    "cluster barrier 1",
                                    "peers merged",       "epilogue issued",      "cluster barrier 2",
                                    "block done"};

double median(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const std::string shape = argc > 1 ? argv[1] : "decode 64x2";
  const int ratio = argc > 2 ? std::atoi(argv[2]) : 128;
  const int launches = argc > 3 ? std::atoi(argv[3]) : 200;
  const bool pdl = argc > 4 && std::atoi(argv[4]) != 0;
  bench::Problem pr;
  bool found = false;
  bench::for_each_problem(bench::shapes(false), [&](const bench::Shape& s, int r, const bench::Problem& p) {
    if (s.name == shape && r == ratio) pr = p, found = true;
  });
  if (!found || ratio < 16) {
    std::fprintf(stderr, "no problem '%s' at ratio %d (a kvc_nvbench shape, ratio >= 16)\n", shape.c_str(), ratio);
    return 2;
  }
  bench::DeviceSets sets(pr, 1, {});
  const kvc::CompressParams p = sets.compress(pr, 0);
  // [launch][block][point]
  std::vector<std::vector<unsigned long long>> ns(launches);
  std::vector<std::vector<long long>> clk(launches);
  std::vector<unsigned long long> zero_ns(kTraceBlocks * kTracePoints, 0);
  std::vector<long long> zero_clk(kTraceBlocks * kTracePoints, 0);
  std::vector<int> rank(kTraceBlocks, 0);
  for (int l = 0; l < launches; ++l) {
    bench::check(cudaMemcpyToSymbol(kvc_trace_ns, zero_ns.data(), zero_ns.size() * 8), "clear");
    bench::check(cudaMemcpyToSymbol(kvc_trace_clk, zero_clk.data(), zero_clk.size() * 8), "clear");
    bench::check(kvc::compress(p, nullptr, kvc::LaunchOptions{pdl}), "kvc::compress");
    bench::check(cudaDeviceSynchronize(), "sync");
    ns[l].resize(zero_ns.size());
    clk[l].resize(zero_clk.size());
    bench::check(cudaMemcpyFromSymbol(ns[l].data(), kvc_trace_ns, ns[l].size() * 8), "read");
    bench::check(cudaMemcpyFromSymbol(clk[l].data(), kvc_trace_clk, clk[l].size() * 8), "read");
  }
  bench::check(cudaMemcpyFromSymbol(rank.data(), kvc_trace_rank, rank.size() * 4), "read");
  // A block pooled a group if it stamped point 3 (every block of its cluster does).
  std::vector<double> group_clk[kTracePoints], group_ns[kTracePoints], copy_clk[kTracePoints], span;
  int group_blocks = 0, copy_blocks = 0, blocks = 0;
  for (int l = 0; l < launches; ++l) {
    unsigned long long first = ~0ull, last = 0;
    int n = 0;
    for (int b = 0; b < kTraceBlocks; ++b) {
      const unsigned long long* t = &ns[l][b * kTracePoints];
      if (t[0] == 0) continue;
      ++n;
      first = std::min(first, t[0]);
      last = std::max(last, t[9]);
    }
    if (n == 0) continue;
    blocks = n;
    span.push_back(double(last - first));
    for (int b = 0; b < kTraceBlocks; ++b) {
      const unsigned long long* t = &ns[l][b * kTracePoints];
      const long long* c = &clk[l][b * kTracePoints];
      if (t[0] == 0) continue;
      const bool rank0_group = t[3] != 0 && rank[b] == 0;
      const bool copy_only = t[3] == 0;
      for (int i = 1; i < kTracePoints; ++i) {
        if (t[i] == 0) continue;
        int prev = i - 1;
        while (prev > 0 && t[prev] == 0) --prev;
        if (rank0_group) {
          group_clk[i].push_back(double(c[i] - c[prev]));
          group_ns[i].push_back(double(t[i] - first));
        } else if (copy_only) {
          copy_clk[i].push_back(double(c[i] - c[prev]));
        }
      }
      if (l == 0) group_blocks += rank0_group, copy_blocks += copy_only;
    }
  }
  std::printf("%s, ratio %d: %d blocks a launch (%d rank-0 group blocks, %d copy-only), %d launches%s\n",
              shape.c_str(), ratio, blocks, group_blocks, copy_blocks, launches, pdl ? ", PDL" : "");
  std::printf("first block run -> last block done: median %.0f ns\n", median(span));
  std::printf("| point | phase (from the previous point) | group rank 0: cycles | group rank 0: ns since first block | copy-only: cycles |\n");
  std::printf("|---|---|---|---|---|\n");
  for (int i = 1; i < kTracePoints; ++i)
    std::printf("| %d | %s | %.0f | %.0f | %.0f |\n", i, kPhase[i], median(group_clk[i]), median(group_ns[i]),
                median(copy_clk[i]));
  return 0;
}
