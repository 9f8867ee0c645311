// SPDX-License-Identifier: Apache-2.0
// kvcompress torch package — the instances its ops compile (launch/dispatch.hpp's lists).
//
// Included first by every translation unit that includes kvcompress, so that every TU sees
// the same lists (the dispatch functions are inline). Head dim 512 only (the V4.1 latent);
// every compiled ratio, both kv_score dtypes and the three cache layouts stay available as
// keyword extras: 16 kernels for Op A, 24 for Op B, 48 for the fused op.
#pragma once

#define KVC_RATIOS 1, 2, 4, 8, 16, 32, 64, 128
#define KVC_HEAD_DIMS 512
#define KVC_DTYPES kFloat32, kBFloat16
#define KVC_LAYOUTS kFp8DsMla, kBf16Rows, kFp8Rows, kMxfp8, kNvfp4, kNvfp4Rows
