// Expected<T> and Status: recoverable errors as values; nothing in kiln throws across an API.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace kiln {

// A recoverable failure: bad user input or a failing environment (NVRTC, driver, SQLite, disk).
// The message is lower case and carries its context, e.g. "nvrtc: compiling 'mm' for sm_90 failed".
struct Error {
  std::string message;
};

// Either a T or an Error. Accessing the wrong alternative is a bug and asserts.
template <typename T>
class [[nodiscard]] Expected {
public:
  Expected(T value) : m_v(std::move(value)) {}
  Expected(Error error) : m_v(std::move(error)) {}

  bool ok() const { return m_v.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    assert(ok());
    return std::get<0>(m_v);
  }
  const T& value() const& {
    assert(ok());
    return std::get<0>(m_v);
  }
  T&& value() && {
    assert(ok());
    return std::get<0>(std::move(m_v));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    assert(!ok());
    return std::get<1>(m_v);
  }

private:
  std::variant<T, Error> m_v;
};

// Success or an Error, for operations that return nothing.
class [[nodiscard]] Status {
public:
  Status() = default;
  Status(Error error) : m_error(std::move(error)), m_ok(false) {}
  static Status success() { return Status(); }

  bool ok() const { return m_ok; }
  explicit operator bool() const { return m_ok; }
  const Error& error() const {
    assert(!m_ok);
    return m_error;
  }

private:
  Error m_error;
  bool m_ok = true;
};

// Builds an Error from pieces: make_error("nvrtc: ", what).
template <typename... Parts>
Error make_error(Parts&&... parts) {
  std::string message;
  (message.append(std::forward<Parts>(parts)), ...);
  return Error{std::move(message)};
}

}  // namespace kiln
