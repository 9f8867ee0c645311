// SPDX-License-Identifier: Apache-2.0
// The two ratio-2 block-row instances that run a decode step (Op A; the fused op with
// fp8_ds_mla records), for reading their SASS without the benchmark (README.md here).
#include <kvcompress/kvcompress.cuh>

namespace kvc {
template __global__ void compress_kernel<2, 512, float, RecordEpilogue<Fp8DsMlaLayout>, 0, false>(
    const CompressParams, const RecordEpilogue<Fp8DsMlaLayout>, const detail::WindowSizes);
template __global__ void compress_kernel<2, 512, float, LatentEpilogue, 0, false>(const CompressParams,
                                                                                  const LatentEpilogue,
                                                                                  const detail::WindowSizes);
}  // namespace kvc
