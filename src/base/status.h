// Status / Result: how errors travel through Sampan. Exceptions never cross a
// module boundary; every fallible call returns one of these.
#pragma once

#include <sstream>
#include <string>
#include <utility>
#include <variant>

namespace sampan {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     //!< the caller's input is wrong (bad file, bad shape, bad flag)
  kNotFound,            //!< a named thing (file, tensor, op) does not exist
  kUnsupported,         //!< valid input that Sampan does not implement (yet)
  kIoError,             //!< the OS refused (open/read/write)
  kOutOfRange,          //!< index or shape outside what is allowed
  kFailedPrecondition,  //!< called in the wrong state
  kInternal,            //!< a bug in Sampan
  kUnavailable,         //!< temporarily refused (not ready, shutting down, queue full); retry later
  kCancelled,           //!< the caller gave up (gRPC cancel, client disconnect)
  kDeadlineExceeded,    //!< a timeout expired before the work was done
};

const char* StatusCodeName(StatusCode code);

//! Concatenates anything streamable into a string.
template <class... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  //! "Invalid argument: <message>"
  std::string ToString() const;
  //! Returns a copy whose message is "<context>: <message>".
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

template <class... Args>
Status InvalidArgument(const Args&... args) {
  return Status(StatusCode::kInvalidArgument, StrCat(args...));
}
template <class... Args>
Status NotFound(const Args&... args) {
  return Status(StatusCode::kNotFound, StrCat(args...));
}
template <class... Args>
Status Unsupported(const Args&... args) {
  return Status(StatusCode::kUnsupported, StrCat(args...));
}
template <class... Args>
Status IoError(const Args&... args) {
  return Status(StatusCode::kIoError, StrCat(args...));
}
template <class... Args>
Status OutOfRange(const Args&... args) {
  return Status(StatusCode::kOutOfRange, StrCat(args...));
}
template <class... Args>
Status FailedPrecondition(const Args&... args) {
  return Status(StatusCode::kFailedPrecondition, StrCat(args...));
}
template <class... Args>
Status Internal(const Args&... args) {
  return Status(StatusCode::kInternal, StrCat(args...));
}
template <class... Args>
Status Unavailable(const Args&... args) {
  return Status(StatusCode::kUnavailable, StrCat(args...));
}
template <class... Args>
Status Cancelled(const Args&... args) {
  return Status(StatusCode::kCancelled, StrCat(args...));
}
template <class... Args>
Status DeadlineExceeded(const Args&... args) {
  return Status(StatusCode::kDeadlineExceeded, StrCat(args...));
}

//! A value or the Status that explains why there is none.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace sampan

#define SP_CONCAT_INNER(a, b) a##b
#define SP_CONCAT(a, b) SP_CONCAT_INNER(a, b)

//! Returns the Status from the enclosing function if `expr` is not ok.
#define SP_RETURN_IF_ERROR(expr)               \
  do {                                         \
    ::sampan::Status sp_status__ = (expr);     \
    if (!sp_status__.ok()) return sp_status__; \
  } while (0)

#define SP_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

//! `SP_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a Result or returns its Status.
#define SP_ASSIGN_OR_RETURN(lhs, expr) SP_ASSIGN_OR_RETURN_IMPL(SP_CONCAT(sp_result__, __LINE__), lhs, expr)
