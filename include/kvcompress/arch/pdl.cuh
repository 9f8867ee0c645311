// SPDX-License-Identifier: Apache-2.0
// kvcompress — programmatic dependent launch (PDL), the device side.
//
// A kernel launched with the programmatic-stream-serialization attribute (kvc::LaunchOptions
// ::pdl) may start while the previous kernel of its stream is still running. Every
// kvcompress kernel therefore calls wait_for_prior_grids() before its first global memory
// access, read or write: it returns once the previous grid has completed and its writes are
// visible. Without the attribute, or before sm_90, both calls do nothing.
//
// Kernel parameters are not global memory a previous kernel writes: a kernel may read them
// before the wait, and should. They live in a constant bank that every launch fills anew,
// so the first read of each line of them misses the SM's constant cache; left to ptxas,
// those reads sit after the wait, in front of the first index loads, two or three misses
// in sequence (bench/NOTES.md 26). The kernels therefore decide, before the wait, whether
// their block or row group has work and whether the pointers of their first round trip are
// set (`required_pointers_set`, kernel/*_params.hpp): that branch makes ptxas read those
// parameter lines first, and under PDL the misses then overlap the previous kernel. Only
// the first trip's lines: reading every line first measured up to 7 % slower at decode
// without PDL (the misses then all precede the first load) and no faster with it. Test the
// very fields the first trip uses (the index types, not only the pointers beside them): an
// SM fetches a constant line separately for uniform (ULDC) and per-thread (LDC) reads, so a
// line ptxas read one way before the wait can still miss when read the other way after it
// (bench/NOTES.md 26, 30).
#pragma once

#include "../config.hpp"

KVC_NAMESPACE_BEGIN
namespace arch {

/// Blocks until every prerequisite grid has completed and its memory is visible
/// (griddepcontrol.wait). Call before touching global memory a previous kernel may use.
KVC_DEVICE void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Lets the next kernel of the stream, if launched with PDL, start its blocks now
/// (griddepcontrol.launch_dependents). It still waits for this grid's completion before
/// its own memory accesses, so this only moves its launch and prologue earlier.
KVC_DEVICE void allow_dependent_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace arch
KVC_NAMESPACE_END
