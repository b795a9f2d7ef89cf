// Result<T>: the return type of everything a file, a database or a user can make fail
// (STYLE.md section 7). Shaped like std::expected; the Error is one line that names the thing
// (path, tensor, flag) and the problem, expected vs. actual where it helps.
#pragma once
#include <string>
#include <utility>
#include <variant>

#include "kernels/common.h"

namespace ftx {

struct Error {
  std::string message;  // one line: "<thing>: <problem>"
};

inline Error make_error(std::string msg) { return Error{std::move(msg)}; }

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error e) : v_(std::move(e)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() {
    FT_ASSERT(ok(), "value() on error: %s", std::get<1>(v_).message.c_str());
    return std::get<0>(v_);
  }
  const T& value() const {
    FT_ASSERT(ok(), "value() on error: %s", std::get<1>(v_).message.c_str());
    return std::get<0>(v_);
  }
  T& operator*() { return value(); }
  T* operator->() { return &value(); }
  const Error& error() const {
    FT_ASSERT(!ok(), "error() on success");
    return std::get<1>(v_);
  }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error e) : err_(std::move(e)), ok_(false) {}
  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    FT_ASSERT(!ok_, "error() on success");
    return err_;
  }

 private:
  Error err_;
  bool ok_ = true;
};

using Status = Result<void>;

}  // namespace ftx

// Propagate an error from an expression returning Result<...>.
#define FTX_TRY(expr)                                   \
  do {                                                  \
    auto ftx_try_r_ = (expr);                           \
    if (!ftx_try_r_.ok()) return ftx_try_r_.error();    \
  } while (0)
