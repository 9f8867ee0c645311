// SPDX-License-Identifier: Apache-2.0
// kvcompress — Status: what every host API call returns.
#pragma once

#include "../config.hpp"

#include <string>
#include <utility>

KVC_NAMESPACE_BEGIN

enum class StatusCode {
  kSuccess = 0,
  kInvalidArgument,  // a parameter violates the op's contract (message says which)
  kNotSupported,     // a valid combination this build has no instance for
  kCudaError,        // the CUDA runtime reported an error (cuda_error() holds it)
};

/// Result of a host API call: a code, a message naming the first violated condition, and
/// the CUDA error code when there is one. Never thrown; check `ok()`.
///
///   kvc::Status s = kvc::compress(params, stream);
///   if (!s.ok()) std::fprintf(stderr, "kvcompress: %s\n", s.message());
class Status {
 public:
  Status() = default;
  static Status success() { return Status(); }
  static Status invalid(std::string message) {
    return Status(StatusCode::kInvalidArgument, std::move(message));
  }
  static Status not_supported(std::string message) {
    return Status(StatusCode::kNotSupported, std::move(message));
  }
  static Status cuda(int error, std::string message) {
    Status s(StatusCode::kCudaError, std::move(message));
    s.cuda_error_ = error;
    return s;
  }

  bool ok() const { return code_ == StatusCode::kSuccess; }
  explicit operator bool() const { return ok(); }
  StatusCode code() const { return code_; }
  const char* message() const { return message_.c_str(); }
  int cuda_error() const { return cuda_error_; }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::kSuccess;
  std::string message_ = "success";
  int cuda_error_ = 0;
};

KVC_NAMESPACE_END
