// SPDX-License-Identifier: Apache-2.0
// Adversarial tier: the three runtime entry points, each compiled in a translation unit of
// its own (op_*.cu) so the instances build in parallel.
#pragma once

#include <kvcompress/kernel/insert_params.hpp>
#include <kvcompress/kernel/fused_params.hpp>
#include <kvcompress/core/status.hpp>

#include <cuda_runtime.h>

namespace adv {

kvc::Status call_compress(const kvc::CompressParams& p, cudaStream_t stream);  // kvc::compress
kvc::Status call_insert(const kvc::InsertParams& p, cudaStream_t stream);      // kvc::insert
kvc::Status call_fused(const kvc::FusedParams& p, cudaStream_t stream);        // kvc::fused

}  // namespace adv
