// SPDX-License-Identifier: Apache-2.0
// kvc_nvbench's tuning benchmarks: the launch shapes the host API chooses from the GPU's
// size, each forced in turn, on the benchmark's problems, so that a rule (its constants, or
// whether it applies at all) can be checked on a GPU — the one measured here or another.
// Each state also reports what kvc::compress / kvc::fused would choose for it on this GPU
// ("Auto ..." columns), so a run shows the rule's pick beside the best measured one.
//
//   tune_clusters  Op A's split groups at ratio 128 (fp32): Shape x Window (tokens a
//                  window; detail::split_group_window picks it) x Cluster (blocks of a
//                  thread-block cluster per window, 1 = none; CompressConfig::cluster_blocks
//                  bounds it, launch_cluster_blocks picks it) x PDL x Data x Launch
//   tune_windows   warp rows at ratios 2 and 4 (fp32): Op (compress, or fused with
//                  fp8_ds_mla) x Shape x Window (tokens a warp) x Split (1: the first
//                  windows twice as long so that the launch is one wave, when that window
//                  needs between one and two waves; detail::window_sizes) x PDL x Data x Launch
//
// They launch the kernels the host API launches (the same instances: compress_kernel with
// LatentEpilogue or RecordEpilogue<Fp8DsMlaLayout>) through detail::launch_kernel_in_clusters,
// with the forced shape instead of the host API's choice; the defaults time what the A/B runs
// in bench/NOTES.md time (Data=hot, PDL=1, graph replay).
#include "bench_states.cuh"  // nvbench, bench_problems.hpp, bench_timing.cuh

#include <kvcompress/kvcompress.cuh>

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

using namespace bench;

namespace {

std::vector<std::string> tune_shapes(bool decode) {
  if (decode)
    return {"decode 64x2", "decode 256x2", "decode 1024x4", "decode 128x6", "prefill 1x8192", "prefill 1x32768 @odd"};
  return {"prefill 1x8192", "prefill 1x32768 @odd", "mixed 2x2048+192x2", "decode 1024x4"};
}

int cc_major() {
  int device = 0, major = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "cudaDeviceGetAttribute");
  return major;
}

void tune_clusters(nvbench::state& state) {
  constexpr int R = 128;
  using Cfg = kvc::CompressConfig<R, kHeadDim, float>;
  constexpr auto kernel = kvc::compress_kernel<R, kHeadDim, float, kvc::LatentEpilogue>;
  const int cluster = static_cast<int>(state.get_int64("Cluster"));
  const int major = cc_major();
  if (cluster > Cfg::cluster_blocks(major)) {
    state.skip("clusters of this size are not launched at this ratio on this GPU (CompressConfig::cluster_blocks)");
    return;
  }
  const kvc::LaunchOptions opt = launch_options(state);
  const Problem& pr = problem(state.get_string("Shape"), R);
  if (skip_empty(state, pr)) return;
  const int sets = input_sets(pr, state);
  DeviceSets dev(pr, sets, {});
  const int window = static_cast<int>(state.get_int64("Window"));
  if (window > Cfg::kTokensPerBlock) {
    state.skip("a split-group window holds at most CompressConfig::kTokensPerBlock tokens");
    return;
  }
  const kvc::detail::WindowSizes windows{window, 0};
  const int64_t blocks = Cfg::blocks(pr.T, windows);
  const int wave = kvc::detail::wave_blocks<kernel>(Cfg::kThreads);
  const kvc::detail::WindowSizes chosen = Cfg::windows(pr.T, wave, major);
  add_count_summary(state, "kvc/windows", "Windows", "windows (clusters) of the launch", blocks);
  add_count_summary(state, "kvc/wave", "Wave", "blocks the GPU runs at once (wave_blocks)", wave);
  add_count_summary(state, "kvc/auto_window", "Auto window",
                    "the window kvc::compress launches this call with (split_group_window)", chosen.window);
  auto& pick = state.add_summary("kvc/auto_cluster");
  pick.set_string("name", "Auto cluster");
  pick.set_string("description", "the cluster kvc::compress launches this call with (launch_cluster_blocks)");
  pick.set_int64("value", Cfg::launch_cluster_blocks(major, Cfg::blocks(pr.T, chosen), wave));
  time_launches(state, pr, sets, pr.a, [&](cudaStream_t s, int i) {
    check(kvc::detail::launch_kernel_in_clusters("compress_kernel", kernel, dim3(static_cast<unsigned>(blocks * cluster)),
                                                 dim3(Cfg::kThreads), static_cast<unsigned>(cluster), s, opt,
                                                 dev.compress(pr, i), kvc::LatentEpilogue{}, windows),
          "compress_kernel in clusters");
  });
}

template <int R>
void tune_windows(nvbench::state& state, nvbench::type_list<nvbench::enum_type<R>>) {
  using Cfg = kvc::CompressConfig<R, kHeadDim, float, 32>;
  using Record = kvc::RecordEpilogue<kvc::Fp8DsMlaLayout>;
  static_assert(Cfg::kWideWindows, "warp rows with wide windows");
  const std::string& op = state.get_string("Op");
  if (op != "compress" && op != "fused") throw std::runtime_error("Op='" + op + "': the values are compress and fused");
  const bool fused = op == "fused";
  const int window = static_cast<int>(state.get_int64("Window"));
  if (window % R != 0 || window > Cfg::kMaxWindow) {
    state.skip("a window is a multiple of the ratio, at most CompressConfig::kMaxWindow tokens");
    return;
  }
  const Problem& pr = problem(state.get_string("Shape"), R);
  if (skip_empty(state, pr)) return;
  // Ratio-token windows: the instance with the window a constant; other windows: the one
  // that reads them (as kvc::compress picks).
  constexpr auto op_a = kvc::compress_kernel<R, kHeadDim, float, kvc::LatentEpilogue, 32, true>;
  constexpr auto op_fused = kvc::compress_kernel<R, kHeadDim, float, Record, 32, true>;
  constexpr auto op_a_any = kvc::compress_kernel<R, kHeadDim, float, kvc::LatentEpilogue, 32>;
  constexpr auto op_fused_any = kvc::compress_kernel<R, kHeadDim, float, Record, 32>;
  // The wave of the instance that runs (a split needs the one that reads its windows).
  const bool split = state.get_int64("Split") != 0;
  const bool any = split || Cfg::reads_windows(kvc::detail::WindowSizes{window, 0});
  const int wave = fused ? kvc::detail::wave_blocks<op_fused_any>(Cfg::kThreads) : kvc::detail::wave_blocks<op_a_any>(Cfg::kThreads);
  const int wave_ratio = fused ? kvc::detail::wave_blocks<op_fused>(Cfg::kThreads) : kvc::detail::wave_blocks<op_a>(Cfg::kThreads);
  kvc::detail::WindowSizes windows{window, 0};
  if (split) {
    const int64_t n = (pr.T + window - 1) / window, wave_windows = int64_t{wave} * Cfg::kWindowsPerBlock;
    if (!(n > wave_windows && n < 2 * wave_windows) || 2 * window > Cfg::kMaxWindow) {
      state.skip("this window needs one wave, or two or more: no one-wave split");
      return;
    }
    windows.wide = static_cast<int>(n - wave_windows);
  }
  const kvc::detail::WindowSizes chosen =
      fused ? kvc::detail::compress_windows<R, kHeadDim, float, 32, Record>(pr.T)
            : kvc::detail::compress_windows<R, kHeadDim, float, 32, kvc::LatentEpilogue>(pr.T);
  add_count_summary(state, "kvc/wave", "Wave", "blocks the GPU runs at once (wave_blocks)", any ? wave : wave_ratio);
  add_count_summary(state, "kvc/blocks", "Blocks", "blocks of the launch", Cfg::blocks(pr.T, windows));
  auto& pick = state.add_summary("kvc/auto_window");
  pick.set_string("name", "Auto window");
  pick.set_string("description", "the window (and wide windows) of CompressConfig::windows for this call");
  pick.set_string("value", std::to_string(chosen.window) + "+" + std::to_string(chosen.wide));
  const int64_t reqs = pr.qsl.empty() ? 0 : static_cast<int64_t>(pr.qsl.size()) - 1;
  add_count_summary(state, "kvc/host_warp_rows", "Host warp rows",
                    "1 when kvc::compress / kvc::fused use warp rows for this call (use_warp_rows)",
                    kvc::use_warp_rows(R, pr.T / R, pr.T, reqs) ? 1 : 0);
  const kvc::LaunchOptions opt = launch_options(state);
  const int sets = input_sets(pr, state);
  const LayoutInfo info = layout_info(kvc::CacheLayout::kFp8DsMla);
  DeviceSets dev(pr, sets, {info});
  const auto blocks = dim3(static_cast<unsigned>(Cfg::blocks(pr.T, windows)));
  time_launches(state, pr, sets, fused ? pr.fused_bytes(info) : pr.a, [&](cudaStream_t s, int i) {
    if (fused) {
      const kvc::FusedParams p = dev.fused(pr, info, i);
      check(kvc::detail::launch_kernel("fused compress_kernel", any ? op_fused_any : op_fused, blocks, dim3(Cfg::kThreads), s, opt,
                                       p.compress, Record{p.record}, windows),
            "fused compress_kernel");
    } else {
      check(kvc::detail::launch_kernel("compress_kernel", any ? op_a_any : op_a, blocks, dim3(Cfg::kThreads), s, opt,
                                       dev.compress(pr, i), kvc::LatentEpilogue{}, windows),
            "compress_kernel");
    }
  });
}

}  // namespace

NVBENCH_BENCH(tune_clusters)
    .set_name("tune_clusters")
    .add_string_axis("Shape", tune_shapes(true))
    .add_int64_axis("Window", {16, 8, 4, 2, 1})
    .add_int64_axis("Cluster", {1, 2, 4})
    .add_int64_axis("PDL", {1})
    .add_string_axis("Data", {"hot"})
    .add_string_axis("Launch", {"graph"})
    .KVC_NVBENCH_LIMITS;

NVBENCH_BENCH_TYPES(tune_windows, NVBENCH_TYPE_AXES(nvbench::enum_type_list<2, 4>))
    .set_name("tune_windows")
    .set_type_axes_names({"Ratio"})
    .add_string_axis("Op", {"compress", "fused"})
    .add_string_axis("Shape", tune_shapes(false))
    .add_int64_axis("Window", {2, 4, 8, 16, 32})
    .add_int64_axis("Split", {0, 1})
    .add_int64_axis("PDL", {1})
    .add_string_axis("Data", {"hot"})
    .add_string_axis("Launch", {"graph"})
    .KVC_NVBENCH_LIMITS;
