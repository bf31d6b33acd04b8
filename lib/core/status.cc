#include "core/status.h"

#include <cstring>

namespace ms {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "Invalid argument";
    case StatusCode::kNotFound: return "Not found";
    case StatusCode::kAlreadyExists: return "Already exists";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kIOError: return "I/O error";
    case StatusCode::kOutOfRange: return "Out of range";
    case StatusCode::kFailedPrecondition: return "Failed precondition";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kDeadlineExceeded: return "Deadline exceeded";
    case StatusCode::kCommError: return "Communication error";
    case StatusCode::kInternal: return "Internal error";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) state_ = std::make_shared<State>(State{code, std::move(message)});
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return state_ ? state_->message : kEmpty;
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  std::string out(status_code_name(code()));
  out += ": ";
  out += state_->message;
  return out;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += state_->message;
  return Status(code(), std::move(m));
}

Status ErrnoError(std::string_view what, std::string_view path, int err) {
  std::string m(what);
  m += " '";
  m += path;
  m += "': ";
  m += std::strerror(err);
  return IOError(std::move(m));
}

}  // namespace ms
