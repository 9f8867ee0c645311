// kvcompress — small helpers for can_implement(): the first violated condition wins.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "../core/status.hpp"

namespace kvc {
namespace detail {

inline std::string hex_address(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

/// Collects the first failed condition; later checks are skipped once one failed.
class Validator {
 public:
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  Validator& require(bool condition, const std::string& message) {
    if (ok() && !condition) status_ = Status::invalid(message);
    return *this;
  }
  Validator& not_null(const void* p, const char* name) {
    return require(p != nullptr, std::string(name) + " is null");
  }
  Validator& aligned(const void* p, int bytes, const char* name) {
    return require(reinterpret_cast<std::uintptr_t>(p) % static_cast<std::uintptr_t>(bytes) == 0,
                   std::string(name) + " address " + hex_address(p) + " is not aligned to " +
                       std::to_string(bytes) + " bytes");
  }
  /// A row stride in elements: at least `min_elems`, and a multiple of `multiple`.
  Validator& stride(int64_t value, int64_t min_elems, int64_t multiple, const char* name,
                    const char* min_what) {
    require(value >= min_elems, std::string(name) + " " + std::to_string(value) +
                                    " is smaller than " + min_what + " " +
                                    std::to_string(min_elems));
    return require(value % multiple == 0, std::string(name) + " " + std::to_string(value) +
                                              " is not a multiple of " +
                                              std::to_string(multiple) + " elements");
  }

 private:
  Status status_;
};

}  // namespace detail
}  // namespace kvc
