// kvcompress — small helpers for can_implement(): the first violated condition wins.
//
// A check costs a comparison when it holds: its message is given as pieces (strings,
// numbers, Hex addresses) that are only formatted when the condition fails, so validating
// valid arguments formats nothing and allocates nothing.
#pragma once

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

namespace kvc {
namespace detail {

inline std::string hex_address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

/// A message piece: the address `p` as printf's %p writes it.
struct Hex {
  const void* p;
};

inline void append_piece(std::string& s, const char* piece) { s += piece; }
inline void append_piece(std::string& s, const std::string& piece) { s += piece; }
inline void append_piece(std::string& s, Hex piece) { s += hex_address(piece.p); }
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
///   v.not_null(p.weight, "weight").require(p.eps >= 0.f, "eps ", p.eps, " must be >= 0");
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

 private:
  Status status_;
};

}  // namespace detail
}  // namespace kvc
