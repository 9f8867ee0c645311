// kvcompress — vector loads and stores (the only place that reinterprets global memory).
#pragma once

#include <cstdint>

#include "../core/array.hpp"

namespace kvc {
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

}  // namespace arch
}  // namespace kvc
