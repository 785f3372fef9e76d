// The core's error type: an empty message means success. The core never throws and never
// aborts on bad input; `validate()` functions return a Status whose message names the argument,
// what was expected and what was given, and the binding turns it into InvalidArgument.
#ifndef OPFORGE_COMMON_STATUS_H_
#define OPFORGE_COMMON_STATUS_H_

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace opforge {

class Status {
 public:
  enum class Code { kOk, kInvalidArgument, kInternal };

  Status() = default;
  static Status Ok() { return Status(); }
  // Bad input: the message names the argument, what was expected and what was given.
  static Status Invalid(std::string message) {
    return Status(Code::kInvalidArgument, std::move(message));
  }
  // A failure that is not the caller's fault (a failed CUDA launch, say).
  static Status Internal(std::string message) {
    return Status(Code::kInternal, std::move(message));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

// Formats a shape as "[2, 3, 4]".
inline std::string ShapeString(const std::vector<int64_t>& dims) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < dims.size(); ++i) s << (i ? ", " : "") << dims[i];
  s << "]";
  return s.str();
}

// Builds "<op>: <argument> must be <expected>, got <given>".
template <typename Given>
Status InvalidArgument(const char* op, const char* argument, const std::string& expected,
                       const Given& given) {
  std::ostringstream s;
  s << op << ": " << argument << " must be " << expected << ", got " << given;
  return Status::Invalid(s.str());
}

#define OPFORGE_RETURN_IF_ERROR(expr)          \
  do {                                         \
    ::opforge::Status _opf_status = (expr);    \
    if (!_opf_status.ok()) return _opf_status; \
  } while (0)

}  // namespace opforge

#endif  // OPFORGE_COMMON_STATUS_H_
