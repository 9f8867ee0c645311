// SPDX-License-Identifier: Apache-2.0
// kvcompress — small helpers for can_implement(): the first violated condition wins.
//
// A check costs a comparison when it holds: its message is given as pieces (strings,
// numbers, Hex addresses) that are only formatted when the condition fails, so validating
// valid arguments formats nothing and allocates nothing.
#pragma once

#include "../config.hpp"

#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>

#include "../core/status.hpp"
#include "../core/types.hpp"

// Marks the functions that build failure messages: kept out of line and off the hot path.
#if defined(__GNUC__) || defined(__clang__)
#define KVC_COLD_NOINLINE __attribute__((cold, noinline))
#elif defined(_MSC_VER)
#define KVC_COLD_NOINLINE __declspec(noinline)
#else
#define KVC_COLD_NOINLINE
#endif

KVC_NAMESPACE_BEGIN
namespace detail {

/// The largest byte extent a buffer may have: 2^48 bytes (256 TiB, far beyond any GPU's
/// memory). Every stride and size is checked against it before it is multiplied, so the
/// products the checks (and the kernels' offsets) compute stay far inside int64 (contract
/// §4.3). Messages write it as kMaxBufferBytesText.
constexpr int64_t kMaxBufferBytes = int64_t{1} << 48;
constexpr const char* kMaxBufferBytesText = "2^48 bytes";

/// Whether a * b <= limit (limit >= 0), for a, b >= 0, without forming a product that
/// overflows; false for a negative factor.
constexpr bool mul_fits(int64_t a, int64_t b, int64_t limit) {
  if (a < 0 || b < 0) return false;
  if (((a | b) >> 31) == 0) return a * b <= limit;  // both < 2^31: the product fits (no division)
  return a == 0 || b <= limit / a;
}

/// kMaxBufferBytes in units of `unit_bytes` (> 0) bytes; the usual sizes need no division.
constexpr int64_t buffer_bound(int unit_bytes) {
  switch (unit_bytes) {
    case 1: return kMaxBufferBytes;
    case 2: return kMaxBufferBytes >> 1;
    case 4: return kMaxBufferBytes >> 2;
    case 8: return kMaxBufferBytes >> 3;
    default: return kMaxBufferBytes / unit_bytes;
  }
}

inline std::string hex_address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

/// A message piece: the address `p` as printf's %p writes it.
struct Hex {
  const void* p;
};

/// A message piece: " exceeds the buffer bound of 2^48 bytes", plus the bound in `units` of
/// `unit_bytes` bytes when those are wider than a byte.
struct BoundNote {
  int unit_bytes;
  const char* units;
};

inline void append_piece(std::string& s, const char* piece) { s += piece; }
inline void append_piece(std::string& s, const std::string& piece) { s += piece; }
inline void append_piece(std::string& s, Hex piece) { s += hex_address(piece.p); }
inline void append_piece(std::string& s, BoundNote piece) {
  s += " exceeds the buffer bound of ";
  s += kMaxBufferBytesText;
  if (piece.unit_bytes > 1) {
    s += " (" + std::to_string(buffer_bound(piece.unit_bytes)) + " " + piece.units + " of " +
         std::to_string(piece.unit_bytes) + " bytes)";
  }
}
/// Numbers as std::to_string writes them (integers in decimal, floats with "%f").
template <class T, std::enable_if_t<std::is_arithmetic<T>::value && !std::is_same<T, bool>::value &&
                                        !std::is_same<T, char>::value,
                                    int> = 0>
void append_piece(std::string& s, T piece) {
  s += std::to_string(piece);
}

/// Concatenates message pieces: message("stride ", 1026, " is odd") == "stride 1026 is odd".
/// Call it only on a failure path; Validator::require does.
template <class... Pieces>
KVC_COLD_NOINLINE std::string message(const Pieces&... pieces) {
  std::string s;
  (append_piece(s, pieces), ...);
  return s;
}

/// Status::invalid(message(pieces...)), built out of line.
template <class... Pieces>
KVC_COLD_NOINLINE Status invalid(const Pieces&... pieces) {
  return Status::invalid(message(pieces...));
}

/// Collects the first failed condition; later checks are skipped once one failed.
///
///   Validator v;
///   v.not_null(p.weight, "weight").require(p.eps > 0.f, "eps ", p.eps, " must be > 0");
///   return v.status();
class Validator {
 public:
  bool ok() const { return status_.ok(); }
  const Status& status() const& { return status_; }
  Status status() && { return static_cast<Status&&>(status_); }

  /// Fails with the concatenation of `pieces` (see message()) unless `condition` holds.
  template <class... Pieces>
  Validator& require(bool condition, const Pieces&... pieces) {
    if (!condition && ok()) status_ = invalid(pieces...);
    return *this;
  }
  Validator& not_null(const void* p, const char* name) {
    return require(p != nullptr, name, " is null");
  }
  Validator& aligned(const void* p, int bytes, const char* name) {
    return require(reinterpret_cast<std::uintptr_t>(p) % static_cast<std::uintptr_t>(bytes) == 0,
                   name, " address ", Hex{p}, " is not aligned to ", bytes, " bytes");
  }
  /// `type` is one of the IndexType enumerators (an out-of-range value would be read as
  /// int32 by IndexPtr::load but sized as int64 by index_size). Check it before aligned().
  Validator& index_type(IndexType type, const char* name) {
    return require(type == IndexType::kInt32 || type == IndexType::kInt64, name, " index type ",
                   static_cast<int>(type),
                   " is not a valid IndexType: it must be kInt32 (int32) or kInt64 (int64)");
  }
  /// A row stride in elements: at least `min_elems`, and a multiple of `multiple`.
  Validator& stride(int64_t value, int64_t min_elems, int64_t multiple, const char* name,
                    const char* min_what) {
    require(value >= min_elems, name, " ", value, " is smaller than ", min_what, " ", min_elems);
    return require(value % multiple == 0, name, " ", value, " is not a multiple of ", multiple,
                   " elements");
  }
  /// `value` `units` of `unit_bytes` bytes lie within kMaxBufferBytes. Check a stride or size
  /// this way before it is multiplied.
  Validator& within_bound(int64_t value, int unit_bytes, const char* name, const char* units) {
    return require(value <= buffer_bound(unit_bytes), name, " ", value, " ", units,
                   BoundNote{unit_bytes, units});
  }
  /// `a * b` `units` of `unit_bytes` bytes lie within kMaxBufferBytes, checked without
  /// overflow; `what` names the product ("ring capacity * row stride"). Check a and b >= 0 first.
  Validator& product_within_bound(int64_t a, int64_t b, int unit_bytes, const char* what,
                                  const char* units) {
    return require(mul_fits(a, b, buffer_bound(unit_bytes)), what, " = ", a, " * ", b, " ", units,
                   BoundNote{unit_bytes, units});
  }

 private:
  Status status_;
};

}  // namespace detail
KVC_NAMESPACE_END
