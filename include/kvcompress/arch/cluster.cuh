// SPDX-License-Identifier: Apache-2.0
// kvcompress — thread-block clusters (sm_90): rank, size, barrier, a peer block's shared memory.
//
// Op A at large ratios splits a closing group's members over the blocks of a cluster, each
// block on its own SM, and merges their partial states through distributed shared memory:
// the peers store theirs into rank 0's (kernel/compress_split_group.cuh). Below sm_90, or in a launch without a cluster
// attribute, a block is a cluster of one: size 1, rank 0, the barrier a no-op.
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

/// Arrives at the cluster barrier: this thread's earlier shared-memory writes (its own
/// block's, read by peers) are released to the threads that wait on it.
KVC_DEVICE void cluster_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
#endif
}

/// Waits until every thread of every block of the cluster that has not exited has arrived,
/// acquiring their released writes. A block's shared memory is readable by its peers from
/// the barrier it arrives at until the next one it waits on.
KVC_DEVICE void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
#endif
}

/// The address of `local` (a __shared__ object of this block) in the shared memory of the
/// cluster's block `rank`, as a generic pointer (mapa); `local` itself without clusters.
template <typename T>
KVC_DEVICE const T* peer_shared(const T* local, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint64_t remote;
  asm volatile("mapa.u64 %0, %1, %2;"
               : "=l"(remote)
               : "l"(reinterpret_cast<uint64_t>(local)), "r"(static_cast<uint32_t>(rank)));
  return reinterpret_cast<const T*>(remote);
#else
  (void)rank;
  return local;
#endif
}

/// The same for a __shared__ object this block may write into a peer's copy of (a
/// shared::cluster store through the generic pointer).
template <typename T>
KVC_DEVICE T* peer_shared(T* local, int rank) {
  return const_cast<T*>(peer_shared(static_cast<const T*>(local), rank));
}

}  // namespace arch
KVC_NAMESPACE_END
