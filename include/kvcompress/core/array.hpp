// SPDX-License-Identifier: Apache-2.0
// kvcompress — Array<T, N>: a thread's register fragment.
//
// Not cuda::std::array: core/ must compile with a plain host compiler where the CUDA toolkit
// (and CCCL) may be absent, and this needs only an aggregate with an int index and fill().
#pragma once

#include "../config.hpp"

KVC_NAMESPACE_BEGIN

/// A fixed-size array that lives in registers when indexed with compile-time constants
/// (unrolled loops). It is an aggregate, so `Array<float, 4> a{};` zero-fills it.
///
///   Array<float, 16> frag{};
///   KVC_PRAGMA_UNROLL
///   for (int i = 0; i < 16; ++i) frag[i] = 1.f;
template <typename T, int N>
struct Array {
  static_assert(N > 0, "Array needs at least one element");
  using value_type = T;
  static constexpr int kSize = N;

  T data[N];

  KVC_HOST_DEVICE constexpr T& operator[](int i) { return data[i]; }
  KVC_HOST_DEVICE constexpr const T& operator[](int i) const { return data[i]; }
  KVC_HOST_DEVICE static constexpr int size() { return N; }

  KVC_HOST_DEVICE constexpr void fill(T v) {
    KVC_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) data[i] = v;
  }
};

KVC_NAMESPACE_END
