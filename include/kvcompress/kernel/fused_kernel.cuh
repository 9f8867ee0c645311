// kvcompress — the fused op: Op A and Op B in one pass (SPEC §3).
//
// The Op A kernel with an epilogue that, besides the optional latent store, rotates the
// finished row in registers and writes its cache record — the latent is never re-read.
// It runs the very same pooling, norm, rope and layout code as Op A then Op B, so the bytes
// are identical.
#pragma once

#include "compress_kernel.cuh"
#include "insert_kernel.cuh"

namespace kvc {

/// Epilogue of the fused kernel: latent (optional) and the cache record of `Layout`.
template <class Layout>
struct RecordEpilogue {
  RecordArgs record;

  template <int Ratio, int HeadDim, int E>
  KVC_DEVICE void operator()(const CompressParams& p, int64_t t, const detail::TokenPlan& tp,
                             const RowFragment<HeadDim, E>& row) const {
    LatentEpilogue{}.template operator()<Ratio>(p, t, tp, row);
    // The slot and the angles are loaded together: the angles depend only on the position,
    // so they need not wait for the slot (one memory round trip instead of two).
    const int64_t slot = record.cache_slot.load(t);
    const int64_t rope_pos = (tp.pos / Ratio) * Ratio;
    RopeAngles<HeadDim> angles{};
    if (rope_pos < record.cos_sin_rows)
      angles = detail::record_angles<Layout, RowFragment<HeadDim, E>>(record, row.lane, rope_pos);
    int64_t group_pos;
    if (detail::record_target<Ratio>(record, tp.pos, slot, group_pos)) {
      RowFragment<HeadDim, E> out = row;
      out.sanitize = record.sanitize;
      detail::write_record<Layout>(record, out, slot, angles);
    }
  }
};

/// The fused kernel is compress_kernel<Ratio, HeadDim, In, RecordEpilogue<Layout>>: same
/// grid and block shape as Op A (CompressConfig); kvc::fused() launches it.

}  // namespace kvc
