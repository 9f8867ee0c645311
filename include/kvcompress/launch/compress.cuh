// SPDX-License-Identifier: Apache-2.0
// kvcompress — Op A host API: validate, dispatch, launch.
#pragma once

#include "../config.hpp"

#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "../kernel/compress_kernel.cuh"
#include "compress.hpp"
#include "launch.cuh"
#include "options.hpp"

#if defined(KVC_DEBUG)
#include "../kernel/contract_check.cuh"
#endif

KVC_NAMESPACE_BEGIN

namespace detail {

/// The params must describe the instance being launched.
template <int Ratio, int HeadDim, typename In>
Status check_instance(const CompressParams& p) {
  const DType dtype = std::is_same<In, float>::value ? DType::kFloat32 : DType::kBFloat16;
  if (p.ratio != Ratio || p.head_dim != HeadDim || p.dtype != dtype)
    return invalid("params (ratio ", p.ratio, ", head dim ", p.head_dim, ", ",
                   dtype_name(p.dtype), ") do not match the kernel instance (ratio ", Ratio,
                   ", head dim ", HeadDim, ", ", dtype_name(dtype), ")");
  return Status::success();
}

/// The windows a launch of `num_tokens` tokens of compress_kernel<Ratio, HeadDim, In,
/// Epilogue, RowThreads> uses on the current device. Wide windows (warp rows, ratios
/// 2 .. 15) are sized to the GPU's waves (CompressConfig::windows); every other instance has
/// kTokensPerBlock tokens a block. Windows other than Ratio tokens run the instance that reads
/// them (CompressConfig::reads_windows), which holds more registers; where it holds fewer
/// blocks an SM, a one-wave split would not be one wave, so the launch keeps Ratio tokens.
template <int Ratio, int HeadDim, typename In, int RowThreads, class Epilogue>
detail::WindowSizes compress_windows(int64_t num_tokens) {
  using Cfg = CompressConfig<Ratio, HeadDim, In, RowThreads>;
  if constexpr (Cfg::kSplitGroup) {
    return Cfg::windows(num_tokens, wave_blocks<compress_kernel<Ratio, HeadDim, In, Epilogue, RowThreads>>(Cfg::kThreads),
                        device_cc_major());
  } else if constexpr (!Cfg::kWideWindows) {
    return Cfg::windows(num_tokens, 0);
  } else {
    constexpr auto kernel = compress_kernel<Ratio, HeadDim, In, Epilogue, RowThreads, true>;
    constexpr auto any_window_kernel = compress_kernel<Ratio, HeadDim, In, Epilogue, RowThreads>;
    const int wave = wave_blocks<kernel>(Cfg::kThreads);
    const detail::WindowSizes windows = Cfg::windows(num_tokens, wave);
    return Cfg::reads_windows(windows) && wave_blocks<any_window_kernel>(Cfg::kThreads) < wave
               ? Cfg::windows(num_tokens, 0)
               : windows;
  }
}

/// The launch of an Op A instance (plain Op A or, with RecordEpilogue, the fused op) for
/// params that were validated already: grid and window from CompressConfig, then
/// launch_kernel. launch_compress / launch_fused validate and call it; kvc::compress and
/// kvc::fused reach it through validate_dispatch_compress / _fused, which validate once.
template <int Ratio, int HeadDim, typename In, int RowThreads, class Epilogue>
Status launch_compress_rows(const char* name, const CompressParams& p, cudaStream_t stream,
                            const LaunchOptions& options, const Epilogue& epilogue) {
  using Cfg = CompressConfig<Ratio, HeadDim, In, RowThreads>;
  // Ratio-token windows: the instance with the window a constant (the same one where the
  // instance has no wide windows).
  constexpr auto kernel = compress_kernel<Ratio, HeadDim, In, Epilogue, RowThreads, Cfg::kWideWindows>;
  constexpr auto any_window_kernel = compress_kernel<Ratio, HeadDim, In, Epilogue, RowThreads>;
  const detail::WindowSizes windows = compress_windows<Ratio, HeadDim, In, RowThreads, Epilogue>(p.num_tokens);
  // Split groups (R >= 16) on sm_90: a cluster of blocks per window where the clusters fit
  // one wave (CompressConfig::launch_cluster_blocks, kernel/compress_split_group.cuh).
  const int64_t blocks = Cfg::blocks(p.num_tokens, windows);
  const int cc_major = Cfg::kSplitGroup ? device_cc_major() : 0;
  const int cluster = Cfg::cluster_blocks(cc_major) > 1
                          ? Cfg::launch_cluster_blocks(cc_major, blocks, wave_blocks<kernel>(Cfg::kThreads))
                          : 1;
  return launch_kernel_in_clusters(
      name, Cfg::reads_windows(windows) ? any_window_kernel : kernel, dim3(static_cast<unsigned>(blocks * cluster)),
      dim3(Cfg::kThreads), static_cast<unsigned>(cluster), stream, options, p, epilogue, windows);
}

/// ... with the row mapping for the call's size: at small ratios, a warp per row for large
/// calls (use_warp_rows: kWarpRowMinWindows windows, or at ratio 2
/// kWarpRowPrefillMinWindows of long requests) and for calls past the block rows' 32-bit
/// indices, the default (a block per row) otherwise (use_block_rows).
template <int Ratio, int HeadDim, typename In, class Epilogue>
Status launch_compress_unchecked(const char* name, const CompressParams& p, cudaStream_t stream,
                                 const LaunchOptions& options, const Epilogue& epilogue) {
#if defined(KVC_DEBUG)
  // The caller's data contract, checked on the device first (kernel/contract_check.cuh).
  if (Status s = launch_status("KVC_DEBUG contract check",
                               launch_contract_check(p, epilogue, stream));
      !s.ok())
    return s;
#endif
  using Cfg = CompressConfig<Ratio, HeadDim, In>;
  if constexpr (!Cfg::kSplitGroup && Cfg::kRowThreads > 32) {
    // Block rows index in 32 bits (CompressConfig::kCompactIndex); a call they cannot
    // address takes warp rows whatever its size (use_block_rows).
    static_assert(Cfg::kCompactIndex, "block rows are the compact-index instances");
    if (!use_block_rows<Ratio, HeadDim>(p))
      return launch_compress_rows<Ratio, HeadDim, In, 32>(name, p, stream, options, epilogue);
  }
  return launch_compress_rows<Ratio, HeadDim, In, 0>(name, p, stream, options, epilogue);
}

}  // namespace detail

/// Launches the Op A instance <Ratio, HeadDim, In> — any ratio and head dim, not only the
/// compiled lists (examples/02_custom_ratio). Validates like kvc::compress.
///
///   kvc::Status s = kvc::launch_compress<3, 384, float>(params, stream);
template <int Ratio, int HeadDim, typename In, class Epilogue = LatentEpilogue>
Status launch_compress(const CompressParams& p, cudaStream_t stream,
                       const LaunchOptions& options = {}, const Epilogue& epilogue = {}) {
  Status s = detail::check_token_count(p.num_tokens);
  if (!s.ok() || p.num_tokens == 0) return s;
  if (p.ratio < 1) return detail::invalid("compress ratio ", p.ratio, " must be >= 1");
  s = detail::check_instance<Ratio, HeadDim, In>(p);
  if (!s.ok()) return s;
  s = detail::compress_check_params(p);
  if (!s.ok()) return s;
  return detail::launch_compress_unchecked<Ratio, HeadDim, In>("compress_kernel", p, stream,
                                                               options, epilogue);
}

/// Runs Op A (contract §1) on `stream`. Validates first (once; the checks of
/// compress_can_implement) and writes nothing when validation fails; returns the CUDA launch
/// error otherwise. No host synchronisation and no allocation, so it can be captured in a
/// CUDA graph. `options.pdl`: programmatic dependent launch (LaunchOptions).
///
///   kvc::CompressParams p;  /* fill in */
///   kvc::Status s = kvc::compress(p, stream);
///   if (!s.ok()) throw std::runtime_error(s.message());
template <class Unused = void>  // a template: only a call compiles the instances
Status compress(const CompressParams& p, cudaStream_t stream, const LaunchOptions& options = {}) {
  return detail::validate_dispatch_compress(p, [&](auto ratio, auto head_dim, auto element) {
    return detail::launch_compress_unchecked<decltype(ratio)::value, decltype(head_dim)::value,
                                             decltype(element)>("compress_kernel", p, stream,
                                                                options, LatentEpilogue{});
  });
}

KVC_NAMESPACE_END
