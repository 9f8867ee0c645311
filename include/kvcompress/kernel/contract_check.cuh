// SPDX-License-Identifier: Apache-2.0
// kvcompress — KVC_DEBUG: the caller's data contract checked on the device before each op.
//
// For users chasing corrupted rings, latents or cache records. The kernels trust the data in
// device memory (docs/contract.md §0, "The caller's data contract"); host validation cannot see
// it. Built with KVC_DEBUG defined, every kvc::compress / insert / fused call and every
// launch_compress / launch_insert / launch_fused first launches the checking kernels of this
// file on the same stream; the first broken rule prints one line and traps:
//
//   kvcompress KVC_DEBUG: caller contract broken [ring_row]: token 5 at position 13 has ring
//   slot 26 (row 2), expected row 13 % C = 5 (C = 8) (docs/contract.md §0)
//
// The trap ends the kernel: the next synchronising CUDA call returns an error
// (cudaErrorLaunchFailure) and the context is unusable, as after a device-side assert.
//
// Enable it on the whole target, not in one source file: the launch templates differ with
// and without it, so two translation units of one program that disagree are an ODR
// violation (the linker may keep either version).
//
//   nvcc -DKVC_DEBUG ...                                    or, in CMake,
//   target_compile_definitions(my_app PRIVATE KVC_DEBUG)
//
// Off by default; without KVC_DEBUG nothing of this file is compiled into the ops.
//
// What it checks ([name] as printed):
//   Op A and the fused op, ratio > 1:
//     [qsl_start] qsl[0] == 0;  [qsl_monotone] qsl non-decreasing over its qsl_size entries;
//     [qsl_end] qsl[num_reqs] <= num_tokens;
//     [req_range] 0 <= req[t] < num_reqs for every token (trailing padding included);
//     [req_qsl] qsl[req[t]] <= t < qsl[req[t] + 1] for real tokens t < qsl[num_reqs];
//     [positions_consecutive] positions[t] == positions[t-1] + 1 inside a chunk (padding
//       tokens included: their rows are still members of other tokens' groups);
//     [ring_slot_bound] a slot >= 0 lies inside the ring when RingLayout::num_blocks is given;
//     [ring_row] a real token's slot row is positions[t] % C (slot = block * C + pos % C);
//     [ring_block_shared] tokens of two requests never use the same ring block;
//     [ring_block_split] the tokens of one request use one ring block.
//   Op A at every ratio, and the fused op:
//     [position_negative] a token with a ring slot >= 0 has a position >= 0.
//   Op B:
//     [position_negative] a token with a cache slot >= 0 has a position >= 0.
//   Op B and the fused op:
//     [cache_slot_shared] no two record-writing tokens (cache slot >= 0, (pos + 1) % R == 0,
//       and what else contract §2 / §3 require for a record) have the same cache slot.
// Some of these the kernels also survive on their own (an unknown request, a ring slot past
// num_blocks and a negative position make a token padding, counted in ErrorCounters); they are
// still broken contracts and trap here. What the contract defines is not trapped: padding
// (slot < 0), trailing tokens with a slot, cache slots past num_pages (when given) and group
// positions past cos_sin_rows (no record). Not checkable here: slots past the ring or the
// cache when their bounds are not given, and the capacity rule of §1.6 (it depends on the
// steps before this one).
//
// Cost: two to four extra kernel launches per op (a few microseconds each at decode), one
// pass over the tokens, and pair checks: per request (more exactly, per run of tokens with
// ring slots inside a request) one pass over the call's tokens, and per record-writing token
// one pass over the tokens after it, i.e. about T^2 / (2R) index comparisons (T = 32768 at
// R = 2: about 2.7e8; measured on an H200: 0.4 ms for Op A's checks and 0.3 ms for the
// records' at T = 32768, next to 0.07 ms for Op A itself). The checks are launched without PDL, so an op
// launched with LaunchOptions::pdl no longer overlaps the kernel before it. Debugging only.
#pragma once

#include "../config.hpp"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "../core/types.hpp"
#include "../layout/ring.hpp"
#include "compress_params.hpp"
#include "fused_kernel.cuh"
#include "insert_params.hpp"

KVC_NAMESPACE_BEGIN
namespace detail {

/// Set by the first thread that finds a broken rule in this process (function-local static:
/// one per translation unit under nvcc's whole-program mode, no symbol clash between TUs).
__device__ __forceinline__ unsigned int* contract_violation_flag() {
  static unsigned int flag = 0;
  return &flag;
}

__device__ __forceinline__ bool contract_first_violation() {
  return atomicAdd(contract_violation_flag(), 1u) == 0u;
}

// One line naming the check and the values, then a trap, by the first finder only; a later
// finder leaves its kernel (the first one's trap ends the grid). Later finders must not trap:
// a lane of the printing thread's warp that traps first can end the warp before the printf.
// A macro for the literal format; used in the __global__ bodies only (it returns).
#define KVC_CONTRACT_FAIL(check, format, ...)                                                  \
  do {                                                                                         \
    if (::kvc::detail::contract_first_violation()) {                                           \
      printf("kvcompress KVC_DEBUG: caller contract broken [" check "]: " format                \
             " (docs/contract.md \xC2\xA7" "0)\n",                                             \
             __VA_ARGS__);                                                                     \
      __trap();                                                                                \
    }                                                                                          \
    return;                                                                                    \
  } while (0)

constexpr int kContractThreads = 256;

__device__ __forceinline__ int64_t contract_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t contract_threads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

/// Op A, R > 1: qsl[0] == 0, non-decreasing, qsl[num_reqs] <= T. Runs first, so the later
/// checks report the token rules of a well-formed qsl.
template <class Unused = void>
__global__ void __launch_bounds__(kContractThreads) contract_qsl_kernel(const CompressParams p) {
  const int64_t n = p.qsl_size;
  for (int64_t i = contract_thread(); i < n; i += contract_threads()) {
    const long long v = p.qsl[i];
    if (i == 0 && v != 0) KVC_CONTRACT_FAIL("qsl_start", "qsl[0] = %lld, expected 0", v);
    if (i > 0) {
      const long long prev = p.qsl[i - 1];
      if (prev > v)
        KVC_CONTRACT_FAIL("qsl_monotone", "qsl[%lld] = %lld > qsl[%lld] = %lld (qsl_size %lld)",
                          static_cast<long long>(i - 1), prev, static_cast<long long>(i), v,
                          static_cast<long long>(n));
    }
    if (i == n - 1 && v > p.num_tokens)
      KVC_CONTRACT_FAIL("qsl_end", "qsl[num_reqs = %lld] = %lld > num_tokens %lld",
                        static_cast<long long>(i), v, static_cast<long long>(p.num_tokens));
  }
}

/// Op A, every token on its own: request index and range, consecutive positions, ring slot
/// bound and row, non-negative positions of tokens with a slot. Indexes qsl only with a
/// request index it has checked.
template <class Unused = void>
__global__ void __launch_bounds__(kContractThreads) contract_tokens_kernel(const CompressParams p) {
  const int64_t T = p.num_tokens;
  const bool ring = p.ratio > 1;
  const int64_t num_reqs = ring ? p.qsl_size - 1 : 0;
  const int64_t real_end = ring ? p.qsl[p.qsl_size - 1] : 0;
  for (int64_t t = contract_thread(); t < T; t += contract_threads()) {
    const long long pos = p.positions.load(t);
    const long long slot = p.slot.load(t);
    const long long tok = t;
    if (ring) {
      const long long r = p.req[t];
      if (r < 0 || r >= num_reqs)
        KVC_CONTRACT_FAIL("req_range", "token %lld has req %lld, outside 0 .. num_reqs - 1 = %lld",
                          tok, r, static_cast<long long>(num_reqs - 1));
      if (t < real_end) {
        const long long first = p.qsl[r], end = p.qsl[r + 1];
        if (t < first || t >= end)
          KVC_CONTRACT_FAIL("req_qsl", "token %lld has req %lld, but request %lld owns tokens "
                            "qsl[%lld] = %lld .. qsl[%lld] - 1 = %lld",
                            tok, r, r, r, first, r + 1, end - 1);
        if (t > first && t > 0) {
          const long long prev = p.positions.load(t - 1);
          if (pos != prev + 1)
            KVC_CONTRACT_FAIL("positions_consecutive", "request %lld: token %lld at position %lld "
                              "follows token %lld at position %lld",
                              r, tok, pos, tok - 1, prev);
        }
      }
    }
    if (slot < 0) continue;
    if (pos < 0)
      KVC_CONTRACT_FAIL("position_negative", "token %lld has ring slot %lld and position %lld",
                        tok, slot, pos);
    if (!ring) continue;
    const RingLayout& ring_layout = p.ring_layout;
    if (!ring_layout.holds_slot(slot))
      KVC_CONTRACT_FAIL("ring_slot_bound", "token %lld has ring slot %lld, past num_blocks %lld "
                        "* C %d", tok, slot, static_cast<long long>(ring_layout.num_blocks),
                        ring_layout.capacity);
    if (t < real_end) {
      const long long row = ring_layout.row_of(slot), want = ring_layout.row_of(pos);
      if (row != want)
        KVC_CONTRACT_FAIL("ring_row", "token %lld at position %lld has ring slot %lld (row %lld), "
                          "expected row %lld %% C = %lld (C = %d)",
                          tok, pos, slot, row, pos, want, ring_layout.capacity);
    }
  }
}

/// A real token's ring slot as Op A uses it: >= 0, inside the ring, position >= 0.
__device__ __forceinline__ bool contract_usable_slot(const CompressParams& p, int64_t t,
                                                     int64_t slot) {
  return slot >= 0 && p.ring_layout.holds_slot(slot) && p.positions.load(t) >= 0;
}

/// Op A, R > 1: one ring block per request, distinct requests distinct blocks. A warp per
/// token i that starts a run of slotted tokens of its request (the token before it is of
/// another request or has no usable slot) compares i's block and request with every real
/// token; inside a run, each token has its predecessor's block. Reads only indices < T.
template <class Unused = void>
__global__ void __launch_bounds__(kContractThreads) contract_ring_blocks_kernel(const CompressParams p) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps = contract_threads() / 32;
  int64_t real_end = p.qsl[p.qsl_size - 1];
  real_end = real_end < 0 ? 0 : real_end > p.num_tokens ? p.num_tokens : real_end;
  const RingLayout& ring_layout = p.ring_layout;
  for (int64_t i = contract_thread() / 32; i < real_end; i += warps) {
    const int64_t si = p.slot.load(i);
    if (!contract_usable_slot(p, i, si)) continue;
    const int32_t ri = p.req[i];
    const int64_t bi = ring_layout.block_of(si);
    if (i > 0 && p.req[i - 1] == ri) {
      const int64_t sp = p.slot.load(i - 1);
      if (contract_usable_slot(p, i - 1, sp)) {
        const int64_t bp = ring_layout.block_of(sp);
        if (bp != bi)
          KVC_CONTRACT_FAIL("ring_block_split", "request %d: token %lld has ring slot %lld "
                            "(block %lld), token %lld ring slot %lld (block %lld)",
                            ri, static_cast<long long>(i - 1), static_cast<long long>(sp),
                            static_cast<long long>(bp), static_cast<long long>(i),
                            static_cast<long long>(si), static_cast<long long>(bi));
        continue;  // not the start of a run: the run's first token compares the block
      }
    }
    for (int64_t j = lane; j < real_end; j += 32) {
      if (j == i) continue;
      const int64_t sj = p.slot.load(j);
      if (sj < 0) continue;
      const int64_t bj = ring_layout.block_of(sj);
      const int32_t rj = p.req[j];
      if ((rj == ri) == (bj == bi) || !contract_usable_slot(p, j, sj)) continue;
      if (rj != ri)
        KVC_CONTRACT_FAIL("ring_block_shared", "token %lld of request %d and token %lld of request "
                          "%d both use ring block %lld (slots %lld, %lld)",
                          static_cast<long long>(i), ri, static_cast<long long>(j), rj,
                          static_cast<long long>(bi), static_cast<long long>(si),
                          static_cast<long long>(sj));
      else
        KVC_CONTRACT_FAIL("ring_block_split", "request %d: token %lld has ring slot %lld "
                          "(block %lld), token %lld ring slot %lld (block %lld)",
                          ri, static_cast<long long>(i), static_cast<long long>(si),
                          static_cast<long long>(bi), static_cast<long long>(j),
                          static_cast<long long>(sj), static_cast<long long>(bj));
    }
  }
}

/// What decides whether a token writes a cache record (Op B: InsertParams; the fused op:
/// Op A's params and the RecordArgs).
struct RecordContract {
  int ratio = 1;
  int64_t num_tokens = 0;
  IndexPtr positions;
  IndexPtr cache_slot;
  int64_t num_pages = -1;
  int block_size = 1;
  int64_t cos_sin_rows = 0;
  IndexPtr ring_slot;  // fused: a record needs a closing token with a ring slot; Op B: null
};

/// Whether token t writes a record at cache slot `slot` (contract §2, §3: record_target, and
/// for the fused op a ring slot >= 0; the Op A checks before this one trapped on ring slots
/// the kernel would skip).
__device__ __forceinline__ bool contract_writes_record(const RecordContract& c, int64_t t,
                                                       int64_t slot) {
  if (slot < 0) return false;
  const int64_t pos = c.positions.load(t);
  if (pos < 0 || (pos + 1) % c.ratio != 0) return false;
  if (c.num_pages >= 0 && slot >= c.num_pages * c.block_size) return false;
  if ((pos / c.ratio) * c.ratio >= c.cos_sin_rows) return false;
  return c.ring_slot.data == nullptr || c.ring_slot.load(t) >= 0;
}

/// Op B and the fused op: no two record-writing tokens share a cache slot (their stores would
/// race). A warp per writing token i compares it with the tokens after it; Op B also checks
/// positions of tokens with a cache slot.
template <class Unused = void>
__global__ void __launch_bounds__(kContractThreads) contract_records_kernel(const RecordContract c) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps = contract_threads() / 32;
  const int64_t T = c.num_tokens;
  for (int64_t i = contract_thread() / 32; i < T; i += warps) {
    const int64_t si = c.cache_slot.load(i);
    if (c.ring_slot.data == nullptr && si >= 0 && c.positions.load(i) < 0)
      KVC_CONTRACT_FAIL("position_negative", "token %lld has cache slot %lld and position %lld",
                        static_cast<long long>(i), static_cast<long long>(si),
                        static_cast<long long>(c.positions.load(i)));
    if (!contract_writes_record(c, i, si)) continue;
    for (int64_t j = i + 1 + lane; j < T; j += 32) {
      if (c.cache_slot.load(j) != si || !contract_writes_record(c, j, si)) continue;
      KVC_CONTRACT_FAIL("cache_slot_shared", "tokens %lld (position %lld) and %lld (position %lld) "
                        "both write a record to cache slot %lld",
                        static_cast<long long>(i), static_cast<long long>(c.positions.load(i)),
                        static_cast<long long>(j), static_cast<long long>(c.positions.load(j)),
                        static_cast<long long>(si));
    }
  }
}

#undef KVC_CONTRACT_FAIL

/// Grid of a check over `items` (threads, or warps when `per_warp`): grid-stride loops cover
/// any count, 4096 blocks at most.
inline unsigned contract_blocks(int64_t items, bool per_warp) {
  const int64_t per_block = per_warp ? kContractThreads / 32 : kContractThreads;
  int64_t blocks = (items + per_block - 1) / per_block;
  blocks = blocks < 1 ? 1 : blocks > 4096 ? 4096 : blocks;
  return static_cast<unsigned>(blocks);
}

/// Launches one check on `stream` (no PDL attribute: the check waits for the kernel before
/// it) and returns the launch call's own result.
template <class Arg>
cudaError_t launch_contract_kernel(void (*kernel)(Arg), unsigned blocks, cudaStream_t stream,
                                   const Arg& arg) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kContractThreads);
  config.stream = stream;
  return cudaLaunchKernelEx(&config, kernel, arg);
}

/// Op A's checks (validated params, num_tokens > 0), in order: qsl, tokens, ring blocks.
inline cudaError_t launch_compress_contract_check(const CompressParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  cudaError_t e = cudaSuccess;
  if (p.ratio > 1)
    e = launch_contract_kernel(contract_qsl_kernel<>, contract_blocks(p.qsl_size, false), stream, p);
  if (e == cudaSuccess)
    e = launch_contract_kernel(contract_tokens_kernel<>, contract_blocks(p.num_tokens, false),
                               stream, p);
  if (e == cudaSuccess && p.ratio > 1)
    e = launch_contract_kernel(contract_ring_blocks_kernel<>, contract_blocks(p.num_tokens, true),
                               stream, p);
  return e;
}

inline cudaError_t launch_record_contract_check(const RecordContract& c, cudaStream_t stream) {
  if (c.num_tokens <= 0) return cudaSuccess;
  return launch_contract_kernel(contract_records_kernel<>, contract_blocks(c.num_tokens, true),
                                stream, c);
}

inline RecordContract record_contract(int ratio, int64_t num_tokens, IndexPtr positions,
                                      const RecordArgs& r, IndexPtr ring_slot) {
  RecordContract c;
  c.ratio = ratio;
  c.num_tokens = num_tokens;
  c.positions = positions;
  c.cache_slot = r.cache_slot;
  c.num_pages = r.cache.num_pages;
  c.block_size = r.cache.block_size;
  c.cos_sin_rows = r.cos_sin_rows;
  c.ring_slot = ring_slot;
  return c;
}

/// The checks before an Op A instance with `Epilogue`: Op A's; with RecordEpilogue (the fused
/// op) also the records'. Called by launch_compress_unchecked under KVC_DEBUG.
template <class Epilogue>
cudaError_t launch_contract_check(const CompressParams& p, const Epilogue&, cudaStream_t stream) {
  return launch_compress_contract_check(p, stream);
}

template <class Layout>
cudaError_t launch_contract_check(const CompressParams& p, const RecordEpilogue<Layout>& epilogue,
                                  cudaStream_t stream) {
  if (cudaError_t e = launch_compress_contract_check(p, stream); e != cudaSuccess) return e;
  return launch_record_contract_check(
      record_contract(p.ratio, p.num_tokens, p.positions, epilogue.record, p.slot), stream);
}

/// The checks before an Op B instance. Called by launch_insert_unchecked under KVC_DEBUG.
inline cudaError_t launch_contract_check(const InsertParams& p, cudaStream_t stream) {
  return launch_record_contract_check(
      record_contract(p.ratio, p.num_tokens, p.positions, p.record, IndexPtr{}), stream);
}

}  // namespace detail
KVC_NAMESPACE_END
