// SPDX-License-Identifier: Apache-2.0
// kvcompress — the fused op: Op A and Op B in one pass (contract §3).
//
// The Op A kernel with an epilogue that, besides the optional latent store, rotates the
// finished row in registers and writes its cache record — the latent is never re-read.
// It runs the very same pooling, norm, rope and layout code as Op A then Op B, so the bytes
// are identical.
#pragma once

#include "../config.hpp"

#include "compress_kernel.cuh"
#include "insert_kernel.cuh"

KVC_NAMESPACE_BEGIN

/// Epilogue of the fused kernel: latent (optional) and the cache record of `Layout`.
template <class Layout>
struct RecordEpilogue {
  RecordArgs record;

  template <class Row>
  struct Pending {
    int64_t slot;  // cache slot of the closing token
    RopeAngles<Row> angles;
  };

  // The cache slot and the angles depend only on the token and its position: they are
  // loaded while the group's rows are in flight, not after the row is finished.
  // `Index`: the kernel's token index type (int32_t in compact-index instances).
  template <int Ratio, class Row, class Index>
  KVC_DEVICE Pending<Row> begin(const CompressParams&, Index t, int64_t pos, int lane) const {
    Pending<Row> pending;
    pending.slot = record.cache_slot.load(t);
    const int64_t rope_pos = (pos / Ratio) * Ratio;  // pos >= 0: Op A skipped negative ones
    pending.angles = {};
    if (rope_pos >= 0 && rope_pos < record.cos_sin_rows)
      pending.angles = load_rope_angles_flat<Layout::kRopeDim, Row>(
          lane, record.rope_style, record.cos_sin, record.cos_sin_dtype,
          record.cos_sin_stride_elems, rope_pos);
    return pending;
  }

  template <int Ratio, class Row, class Index>
  KVC_DEVICE void operator()(const CompressParams& p, Index t, int64_t pos,
                             const Pending<Row>& pending, const Row& row) const {
    LatentEpilogue::store(p, t, row);
    int64_t group_pos;
    if (detail::record_target<Ratio>(record, pos, pending.slot, group_pos,
                                     row.lane == 0 ? p.errors : nullptr)) {
      Row out = row;
      out.sanitize = record.sanitize;
      detail::write_record<Layout>(record, out, pending.slot, pending.angles);
    }
  }
};

/// The fused kernel is compress_kernel<Ratio, HeadDim, In, RecordEpilogue<Layout>>: same
/// grid and block shape as Op A (CompressConfig); kvc::fused() launches it.

KVC_NAMESPACE_END
