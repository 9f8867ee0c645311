// SPDX-License-Identifier: Apache-2.0
// kvcompress torch package — the instances its ops compile (launch/dispatch.hpp's lists).
//
// Included first by every translation unit that includes kvcompress, so that every TU sees
// the same lists (the dispatch functions are inline). Head dim 512 only (the V4.1 latent);
// every compiled ratio and both kv_score dtypes stay available as extras. KVC_LAYOUTS keeps
// its default, every built-in layout (a new one is in the package without an edit here);
// those of a fixed other head dim drop out at 512 (V3.2's 576: insert_op.cu launches its
// instance directly). 16 kernels for Op A, 48 for Op B (+1 V3.2), 96 for the fused op.
#pragma once

#define KVC_RATIOS 1, 2, 4, 8, 16, 32, 64, 128
#define KVC_HEAD_DIMS 512
#define KVC_DTYPES kFloat32, kBFloat16
