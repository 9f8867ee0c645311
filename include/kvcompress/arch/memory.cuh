// SPDX-License-Identifier: Apache-2.0
// kvcompress — vector loads and stores (the only place that reinterprets global memory).
#pragma once

#include "../config.hpp"

#include <cstdint>

#include "../core/array.hpp"

KVC_NAMESPACE_BEGIN
namespace arch {

template <int Bytes>
struct VecStorage;
template <>
struct VecStorage<16> { using type = uint4; };
template <>
struct VecStorage<8> { using type = uint2; };
template <>
struct VecStorage<4> { using type = uint32_t; };
template <>
struct VecStorage<2> { using type = uint16_t; };
template <>
struct VecStorage<1> { using type = uint8_t; };

/// Loads N consecutive elements (N * sizeof(T) in {2, 4, 8, 16} bytes, naturally aligned)
/// through the read-only path: every kvcompress input is read once per launch.
template <int N, typename T>
KVC_DEVICE Array<T, N> load_readonly(const T* ptr) {
  using V = typename VecStorage<N * int(sizeof(T))>::type;
  static_assert(sizeof(Array<T, N>) == sizeof(V), "fragment must be one vector");
  const V v = __ldg(reinterpret_cast<const V*>(ptr));
  Array<T, N> out;
  memcpy(&out, &v, sizeof v);
  return out;
}

/// Plain vector load (for data this launch may also write, e.g. the ring).
template <int N, typename T>
KVC_DEVICE Array<T, N> load(const T* ptr) {
  using V = typename VecStorage<N * int(sizeof(T))>::type;
  const V v = *reinterpret_cast<const V*>(ptr);
  Array<T, N> out;
  memcpy(&out, &v, sizeof v);
  return out;
}

template <int N, typename T>
KVC_DEVICE void store(T* ptr, const Array<T, N>& a) {
  using V = typename VecStorage<N * int(sizeof(T))>::type;
  V v;
  memcpy(&v, &a, sizeof v);
  *reinterpret_cast<V*>(ptr) = v;
}

/// Starts a copy of Bytes (4, 8 or 16; both addresses aligned to it) from global to shared
/// memory that completes asynchronously (cp.async, sm_80+; a plain load and store before).
/// Wait with async_copy_wait_all() and a barrier before reading the shared copy.
template <int Bytes>
KVC_DEVICE void async_copy(void* smem_dst, const void* gmem_src) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async moves 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  if constexpr (Bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem_src) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(dst), "l"(gmem_src), "n"(Bytes)
                 : "memory");
#else
  using V = typename VecStorage<Bytes>::type;
  *static_cast<V*>(smem_dst) = *static_cast<const V*>(gmem_src);
#endif
}

/// Waits until this thread's async_copy copies have landed.
KVC_DEVICE void async_copy_wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

}  // namespace arch
KVC_NAMESPACE_END
