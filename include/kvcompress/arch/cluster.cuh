// SPDX-License-Identifier: Apache-2.0
// kvcompress — thread-block clusters (sm_90): rank, size, barrier, a peer block's shared memory,
// and the mbarrier / st.async pieces of a one-way hand-over between blocks.
//
// Op A at large ratios splits a closing group's members over the blocks of a cluster, each
// block on its own SM, and merges their partial states through distributed shared memory:
// the peers store theirs into rank 0's with st.async, each store completing a transfer of
// an mbarrier in rank 0 that its warps wait on (kernel/compress_split_group.cuh). Below
// sm_90, or in a launch without a cluster attribute, a block is a cluster of one: size 1,
// rank 0, the barrier a no-op.
#pragma once

#include "../config.hpp"

#include <cstdint>

KVC_NAMESPACE_BEGIN
namespace arch {

/// Blocks in this block's cluster (%cluster_nctarank); 1 without clusters.
KVC_DEVICE int cluster_size() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t n;
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return static_cast<int>(n);
#else
  return 1;
#endif
}

/// This block's rank in its cluster (%cluster_ctarank); 0 without clusters.
KVC_DEVICE int cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t r;
  asm("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return static_cast<int>(r);
#else
  return 0;
#endif
}

/// Waits until every thread of every block of the cluster that has not exited has arrived
/// (cluster_arrive_relaxed), acquiring what they released. After it, every block of the
/// cluster has started, so its shared memory may be written by its peers.
KVC_DEVICE void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
#endif
}

/// Arrives at the cluster barrier without releasing anything (the mbarrier initialisations
/// before it are released by fence_mbarrier_init).
KVC_DEVICE void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}

/// Initialises the mbarrier `bar` (this block's shared memory) for `count` arrivals a phase.
KVC_DEVICE void mbarrier_init(uint64_t* bar, unsigned count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar))),
               "r"(count)
               : "memory");
#endif
}

/// Makes this thread's mbarrier initialisations visible to the cluster (with the barrier after).
KVC_DEVICE void fence_mbarrier_init() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

/// Arrives once at this block's mbarrier `bar` and adds `bytes` to the transfers its phase waits for.
KVC_DEVICE void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(
                   static_cast<uint32_t>(__cvta_generic_to_shared(bar))),
               "r"(bytes)
               : "memory");
#endif
}

/// Waits until the phase of this block's mbarrier `bar` with parity `parity` has completed,
/// acquiring at cluster scope what its arrivals and transfers released.
KVC_DEVICE void mbarrier_wait_parity(uint64_t* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  uint32_t done = 0;
  do {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
#endif
}

/// The shared::cluster address of `local` (a __shared__ object of this block) in the
/// cluster's block `rank` (mapa), for the instructions below that take one.
KVC_DEVICE uint32_t peer_address(const void* local, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;"
               : "=r"(remote)
               : "r"(static_cast<uint32_t>(__cvta_generic_to_shared(local))), "r"(static_cast<uint32_t>(rank)));
  return remote;
#else
  (void)local, (void)rank;
  return 0;
#endif
}

/// Arrives once at the mbarrier at `remote_bar` (a peer_address), releasing this thread's
/// earlier accesses at cluster scope.
KVC_DEVICE void mbarrier_arrive_remote(uint32_t remote_bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote_bar) : "memory");
#endif
}

/// Stores `value` at `remote` (a peer_address of a float) asynchronously; its 4 bytes
/// complete a transfer of the mbarrier at `remote_bar` (a peer_address in the same block).
KVC_DEVICE void store_async(uint32_t remote, float value, uint32_t remote_bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remote),
               "r"(__float_as_uint(value)), "r"(remote_bar)
               : "memory");
#endif
}

}  // namespace arch
KVC_NAMESPACE_END
