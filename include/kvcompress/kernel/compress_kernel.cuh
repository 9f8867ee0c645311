// SPDX-License-Identifier: Apache-2.0
// kvcompress — the Op A kernel: save, compress, norm (contract §1).
//
// One __global__ template for every ratio; the work mapping is chosen at compile time:
//  - small ratios (R < 16): the threads of one row per window of R tokens (a 128-thread
//    block for decode-sized calls, a warp for large ones: RowThreads, picked by the
//    launch; a warp's window may hold several groups, sized by the launch), two dependent
//    memory round trips at decode (compress_small_ratio.cuh);
//  - large ratios (R >= 16): a block, or on sm_90 a cluster of blocks on as many SMs, pools
//    each group, warps merging their members through shared memory and the blocks through
//    distributed shared memory (compress_split_group.cuh).
// Shared pieces (config, row loads, pooling, RMSNorm, ring ordering, the latent epilogue)
// are in compress_parts.cuh.
#pragma once

#include "../config.hpp"

#include <type_traits>

#include "../arch/cluster.cuh"
#include "../arch/pdl.cuh"
#include "compress_parts.cuh"
#include "compress_small_ratio.cuh"
#include "compress_split_group.cuh"

KVC_NAMESPACE_BEGIN

/// Op A: one launch pools, normalises and stores the latent of every group closed in the
/// batch and refreshes the ring (contract §1). The fused op is this kernel with an epilogue that
/// also writes the cache record (fused_kernel.cuh). Launch with CompressConfig<..., RowThreads>
/// ::kThreads threads, `windows` = CompressConfig::windows(num_tokens, wave_blocks) and
/// CompressConfig::blocks(num_tokens, windows) blocks (block rows ignore the argument:
/// kTokensPerBlock tokens a block; split groups read its `window`); split-group instances (R >= 16) may be
/// launched with clusters of CompressConfig::cluster_blocks(cc_major) blocks (or a divisor
/// of it), that many times the blocks; kvc::compress() does this after
/// validation, with RowThreads = 32 for the calls use_warp_rows picks (compress_params.hpp),
/// else the default. RatioWindowsOnly (an instance with wide windows): ignore `windows` and
/// own Ratio tokens a window, a compile-time constant: fewer registers, but right only for
/// windows that CompressConfig::reads_windows says need no reading (Ratio tokens each);
/// kvc::compress launches it for those. The default reads `windows`: right for any.
template <int Ratio, int HeadDim, typename In, class Epilogue = LatentEpilogue, int RowThreads = 0,
          bool RatioWindowsOnly = false>
__global__ void __launch_bounds__(
    CompressConfig<Ratio, HeadDim, In, RowThreads>::kThreads,
    std::is_same<Epilogue, LatentEpilogue>::value
        ? 0
        : CompressConfig<Ratio, HeadDim, In, RowThreads>::kRecordMinBlocksPerSm)
    compress_kernel(const CompressParams p, const Epilogue epilogue, const detail::WindowSizes windows) {
  using Cfg = CompressConfig<Ratio, HeadDim, In, RowThreads>;
  constexpr bool kReadsWindows = Cfg::kWideWindows && !RatioWindowsOnly;
  // Split groups: the launch's window (at most kTokensPerBlock tokens, detail::split_group_window).
  const detail::WindowSizes sizes = kReadsWindows || Cfg::kSplitGroup
                                        ? windows
                                        : detail::WindowSizes{Cfg::kTokensPerBlock / Cfg::kWindowsPerBlock, 0};
  // Decided before the PDL wait, so the parameters' constant-cache misses come before it
  // (arch/pdl.cuh); every block of a validated launch has tokens and passes. An epilogue's
  // own parameters are read after the wait (reading them before measured slower without PDL).
  // Split groups: the blocks of a cluster share a window (all of them return or none).
  const int64_t first_window = Cfg::kSplitGroup ? static_cast<int64_t>(blockIdx.x / arch::cluster_size())
                                                : static_cast<int64_t>(blockIdx.x) * Cfg::kWindowsPerBlock;
  // Windows this instance cannot run, and calls too large for a compact-index instance's
  // 32-bit indices (a direct launch's; kvc::compress never passes one), write nothing, as a
  // launch without its required pointers.
  if (((kReadsWindows || Cfg::kSplitGroup) && !Cfg::usable_windows(sizes)) ||
      (Cfg::kCompactIndex && !compact_index_fits<Ratio, HeadDim>(p)) ||
      (sizes.first_token(first_window) >= p.num_tokens) | !required_pointers_set<Ratio>(p))
    return;
  // PDL (LaunchOptions::pdl): nothing global is touched before the previous grid is done.
  arch::wait_for_prior_grids();
  arch::allow_dependent_grids();
  if constexpr (CompressConfig<Ratio, HeadDim, In>::kSplitGroup)
    detail::compress_split_group<Ratio, HeadDim, In>(p, epilogue, sizes.window);
  else
    detail::compress_small_ratio<Ratio, HeadDim, In, RowThreads, kReadsWindows>(p, epilogue, sizes);
}

KVC_NAMESPACE_END
