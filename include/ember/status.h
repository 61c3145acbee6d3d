// Status and StatusOr: the error-reporting types of every fallible Ember API.
//
// User mistakes (bad shapes, malformed IR text, unknown ops) are
// StatusCode::kInvalidArgument; runtime data errors inside a graph (integer
// division by zero, an out-of-range gather index) are kOutOfRange; compiler
// bugs are kInternal and carry the file and line where they were detected.
// Nothing in Ember aborts the process on a user's mistake.
#pragma once

#include <cassert>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace ember {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kOutOfRange,
  kNotFound,
  kUnimplemented,
  kResourceExhausted,
  kInternal,
  kCancelled,  // the caller asked a running operation to stop (ExecuteOptions::cancel)
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: message" (or "OK").
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }

namespace internal {
template <typename... Args>
std::string StrCat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}
}  // namespace internal

template <typename... Args>
Status InvalidArgument(Args&&... args) {
  return Status(StatusCode::kInvalidArgument, internal::StrCat(std::forward<Args>(args)...));
}
template <typename... Args>
Status OutOfRange(Args&&... args) {
  return Status(StatusCode::kOutOfRange, internal::StrCat(std::forward<Args>(args)...));
}
template <typename... Args>
Status NotFound(Args&&... args) {
  return Status(StatusCode::kNotFound, internal::StrCat(std::forward<Args>(args)...));
}
template <typename... Args>
Status Unimplemented(Args&&... args) {
  return Status(StatusCode::kUnimplemented, internal::StrCat(std::forward<Args>(args)...));
}
template <typename... Args>
Status ResourceExhausted(Args&&... args) {
  return Status(StatusCode::kResourceExhausted, internal::StrCat(std::forward<Args>(args)...));
}
// Use through EMBER_INTERNAL_ERROR so the file and line are recorded.
template <typename... Args>
Status InternalError(const char* file, int line, Args&&... args) {
  return Status(
      StatusCode::kInternal,
      internal::StrCat(std::forward<Args>(args)..., " (internal error at ", file, ":", line, ")"));
}
#define EMBER_INTERNAL_ERROR(...) ::ember::InternalError(__FILE__, __LINE__, __VA_ARGS__)

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const T& value) : value_(value) {}
  StatusOr(T&& value) : value_(std::move(value)) {}
  StatusOr(Status status) : status_(std::move(status)) {
    if (status_.ok()) status_ = EMBER_INTERNAL_ERROR("StatusOr constructed from OK status");
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T& value() & {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  Status status_;
  std::optional<T> value_;
};

#define EMBER_CONCAT_INNER(a, b) a##b
#define EMBER_CONCAT(a, b) EMBER_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define EMBER_RETURN_IF_ERROR(expr)        \
  do {                                     \
    ::ember::Status _ember_st = (expr);    \
    if (!_ember_st.ok()) return _ember_st; \
  } while (0)

// `EMBER_ASSIGN_OR_RETURN(auto x, F());` binds x to F()'s value or returns its error.
#define EMBER_ASSIGN_OR_RETURN(lhs, expr) \
  EMBER_ASSIGN_OR_RETURN_IMPL(EMBER_CONCAT(_ember_so_, __LINE__), lhs, expr)
#define EMBER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

}  // namespace ember
