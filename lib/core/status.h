// Status and Result<T>: how lib/ reports anything a user or the environment can cause (bad
// config, missing file, corrupt data, I/O or MPI failure). Programming errors assert instead.
// An OK Status holds no allocation, so the success path costs one pointer test.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ms {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // the caller or user asked for something malformed
  kNotFound,           // a file, key, tensor or rank that should exist does not
  kAlreadyExists,
  kCorruption,         // data failed validation: bad magic, crc mismatch, truncated file
  kIOError,            // the operating system refused a read, write, sync or rename
  kOutOfRange,
  kFailedPrecondition, // the environment is not in the state the call needs
  kUnavailable,        // a device, driver or peer is not there
  kDeadlineExceeded,   // a timeout fired
  kCommError,          // MPI or NCCL reported a failure
  kInternal,
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message);

  static Status OK() { return Status(); }

  bool ok() const { return state_ == nullptr; }
  StatusCode code() const { return state_ ? state_->code : StatusCode::kOk; }
  const std::string& message() const;
  // "Corruption: <message>", or "OK".
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context: `, for adding the file or field
  // that an inner error concerns.
  Status with_context(std::string_view context) const;

 private:
  struct State {
    StatusCode code;
    std::string message;
  };
  std::shared_ptr<const State> state_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status AlreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
inline Status Corruption(std::string m) { return {StatusCode::kCorruption, std::move(m)}; }
inline Status IOError(std::string m) { return {StatusCode::kIOError, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status CommError(std::string m) { return {StatusCode::kCommError, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// IOError for a failed system call: "<what> '<path>': <strerror(err)>".
Status ErrnoError(std::string_view what, std::string_view path, int err);

// Result<T> holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Internal("Result constructed from an OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace ms

#define MS_STATUS_CONCAT_INNER(a, b) a##b
#define MS_STATUS_CONCAT(a, b) MS_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when `expr` is not OK.
#define MS_RETURN_IF_ERROR(expr)                   \
  do {                                             \
    ::ms::Status ms_status_tmp_ = (expr);          \
    if (!ms_status_tmp_.ok()) return ms_status_tmp_; \
  } while (0)

// MS_ASSIGN_OR_RETURN(auto x, f()): evaluates f(); returns its Status on failure, otherwise
// moves the value into the declaration.
#define MS_ASSIGN_OR_RETURN(decl, expr) \
  MS_ASSIGN_OR_RETURN_IMPL(MS_STATUS_CONCAT(ms_result_, __LINE__), decl, expr)
#define MS_ASSIGN_OR_RETURN_IMPL(tmp, decl, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  decl = std::move(tmp).value()
