// kvcompress — configuration macros shared by every header.
#pragma once

// KVC_HOST_DEVICE marks functions that run on the host and on the device. Outside nvcc it
// expands to plain `inline`, so codecs, layouts and functors compile with a host compiler
// and run in host tests on a machine without a GPU.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVC_HOST_DEVICE __host__ __device__ __forceinline__
#define KVC_DEVICE __device__ __forceinline__
#define KVC_HOST __host__ inline
#else
#define KVC_HOST_DEVICE inline
#define KVC_DEVICE inline
#define KVC_HOST inline
#endif

// True while compiling device code (the nvcc device pass).
#if defined(__CUDA_ARCH__)
#define KVC_DEVICE_PASS 1
#else
#define KVC_DEVICE_PASS 0
#endif

// Debug-only assertion; compiled out unless KVC_DEBUG is defined.
#if defined(KVC_DEBUG)
#include <cassert>
#define KVC_ASSERT(cond) assert(cond)
#else
#define KVC_ASSERT(cond) ((void)0)
#endif

// Loop unrolling hint for device code; the host compiler (g++, or nvcc's host pass) would
// warn about an unknown pragma.
#if defined(__CUDA_ARCH__)
#define KVC_PRAGMA_UNROLL _Pragma("unroll")
#else
#define KVC_PRAGMA_UNROLL
#endif

namespace kvc {
inline constexpr int kVersionMajor = 0;
inline constexpr int kVersionMinor = 1;
inline constexpr int kVersionPatch = 0;
}  // namespace kvc
