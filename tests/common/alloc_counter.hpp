// SPDX-License-Identifier: Apache-2.0
// kvcompress tests — counts every heap allocation of the program (replaces the global
// operator new/delete). Include it in exactly one translation unit of a program; read the
// count with kvc_test::allocations(). Used by the host validation tests and kvc_host_cost:
// validating and launching valid params must allocate nothing.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

namespace kvc_test {
inline std::atomic<long long> g_allocations{0};
/// Heap allocations made so far by the program.
inline long long allocations() { return g_allocations.load(std::memory_order_relaxed); }
}  // namespace kvc_test

// Out of line, so that g++ does not see free() of operator new's pointer (a false
// -Wmismatched-new-delete once the replacements are inlined).
#if defined(__GNUC__) || defined(__clang__)
#define KVC_REPLACED_NEW __attribute__((noinline))
#else
#define KVC_REPLACED_NEW
#endif
KVC_REPLACED_NEW void* operator new(std::size_t size) {
  kvc_test::g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
KVC_REPLACED_NEW void* operator new[](std::size_t size) { return operator new(size); }
KVC_REPLACED_NEW void operator delete(void* p) noexcept { std::free(p); }
KVC_REPLACED_NEW void operator delete[](void* p) noexcept { std::free(p); }
KVC_REPLACED_NEW void operator delete(void* p, std::size_t) noexcept { std::free(p); }
KVC_REPLACED_NEW void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#undef KVC_REPLACED_NEW
