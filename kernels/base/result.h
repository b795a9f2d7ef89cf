// Result<T>: the return type of everything a file, a database, a device or a user can make fail
// (docs/design.md, "Errors"). Shaped like std::expected; the Error is one line that names the
// thing (path, tensor, device) and the problem, expected vs. actual where it helps. It lives in
// kernels/, the lowest layer, so that kernels, core, views and the app share one convention.
// Not here: bugs (FT_ASSERT, kernels/base/assert.h) and CUDA faults after initialization
// (FTX_CUDA_CHECK), which abort; exceptions, which no layer uses for bad input.
#pragma once
#include <string>
#include <utility>
#include <variant>

#include "kernels/base/assert.h"

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
  // The value, or `fallback` when this is an error (whose message the caller then replaces).
  template <class U>
  T value_or(U&& fallback) const& {
    return ok() ? std::get<0>(v_) : static_cast<T>(std::forward<U>(fallback));
  }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
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
#define FTX_TRY(expr)                                \
  do {                                               \
    auto ftx_try_r_ = (expr);                        \
    if (!ftx_try_r_.ok()) return ftx_try_r_.error(); \
  } while (0)
