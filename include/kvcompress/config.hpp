// SPDX-License-Identifier: Apache-2.0
// kvcompress — configuration macros shared by every header.
#pragma once

// KVC_HOST_DEVICE marks functions that run on the host and on the device. Outside nvcc it
// expands to plain `inline`, so codecs, layouts and functors compile with a host compiler
// and run in host tests on a machine without a GPU.
#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVC_HOST_DEVICE __host__ __device__ __forceinline__
#define KVC_DEVICE __device__ __forceinline__
#else
#define KVC_HOST_DEVICE inline
#define KVC_DEVICE inline
#endif

// True while compiling device code (the nvcc device pass).
#if defined(__CUDA_ARCH__)
#define KVC_DEVICE_PASS 1
#else
#define KVC_DEVICE_PASS 0
#endif

// KVC_DEBUG (define it yourself, e.g. -DKVC_DEBUG; off by default): every op first checks
// the caller's data contract in device memory (qsl / req, positions, ring slots, shared
// cache slots) and traps with a one-line message on the first broken rule. For debugging
// corruption only: extra launches and O(T^2) pair checks (kernel/contract_check.cuh).

// Loop unrolling hint for device code; the host compiler (g++, or nvcc's host pass) would
// warn about an unknown pragma.
#if defined(__CUDA_ARCH__)
#define KVC_PRAGMA_UNROLL _Pragma("unroll")
#else
#define KVC_PRAGMA_UNROLL
#endif

// Library version, usable in #if (e.g. `#if KVC_VERSION >= 200`). The one source of truth:
// the top-level CMakeLists.txt reads these three lines for project(VERSION), so keep them
// in this form. CHANGELOG.md says what changed.
#define KVC_VERSION_MAJOR 0
#define KVC_VERSION_MINOR 2
#define KVC_VERSION_PATCH 0
#define KVC_VERSION (KVC_VERSION_MAJOR * 10000 + KVC_VERSION_MINOR * 100 + KVC_VERSION_PATCH)

// Every symbol of the library lives in an inline namespace named after the version
// (kvc::v0_2_0::...; user code still writes kvc::X). Two shared objects that embed different
// kvcompress versions then never interpose each other's inline functions or kernels.
// Headers open and close it with KVC_NAMESPACE_BEGIN / KVC_NAMESPACE_END.
#define KVC_ABI_NAME_(major, minor, patch) v##major##_##minor##_##patch
#define KVC_ABI_NAME(major, minor, patch) KVC_ABI_NAME_(major, minor, patch)
#define KVC_ABI_NAMESPACE KVC_ABI_NAME(KVC_VERSION_MAJOR, KVC_VERSION_MINOR, KVC_VERSION_PATCH)
#define KVC_NAMESPACE_BEGIN \
  namespace kvc {           \
  inline namespace KVC_ABI_NAMESPACE {
#define KVC_NAMESPACE_END \
  }                       \
  }

KVC_NAMESPACE_BEGIN
inline constexpr int kVersionMajor = KVC_VERSION_MAJOR;
inline constexpr int kVersionMinor = KVC_VERSION_MINOR;
inline constexpr int kVersionPatch = KVC_VERSION_PATCH;
inline constexpr int kVersion = KVC_VERSION;
KVC_NAMESPACE_END
