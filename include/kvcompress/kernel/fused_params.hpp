// SPDX-License-Identifier: Apache-2.0
// kvcompress — parameters of the fused op, compress and insert in one launch (contract §3).
#pragma once

#include "../config.hpp"
#include "compress_params.hpp"
#include "insert_params.hpp"

KVC_NAMESPACE_BEGIN

/// Fused Op A + Op B: `compress` as for Op A, except `compress.latent` may be null (then no
/// latent is written); records as for Op B from the same registers. A token writes a record
/// when it closes a group with ring slot >= 0 (Op A) and its cache slot is valid (Op B).
/// Skipped tokens of both halves are counted in `compress.errors`.
struct FusedParams {
  CompressParams compress;
  RecordArgs record;
};

KVC_NAMESPACE_END
