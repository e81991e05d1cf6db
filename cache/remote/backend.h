// The remote tier's storage interface: opaque values by key, with typed failures.
//
// A miss is not an error: get() answers a value, nothing, or a Failure saying whether the backend
// failed outright or timed out. Callers mark a failing backend down and go on without it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace kiln::cache::remote {

struct Failure {
  enum class Kind { error, timeout };
  Kind kind = Kind::error;
  std::string message;  // lower case, with context: "redis 127.0.0.1:6379: GET: connection refused"
};

// A value or a Failure (the remote tier's own Expected: failures are typed).
template <typename T>
class Result {
public:
  Result(T value) : m_v(std::move(value)) {}
  Result(Failure failure) : m_v(std::move(failure)) {}
  bool ok() const { return m_v.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& operator*() { return std::get<0>(m_v); }
  const T& operator*() const { return std::get<0>(m_v); }
  T* operator->() { return &std::get<0>(m_v); }
  const Failure& failure() const { return std::get<1>(m_v); }

private:
  std::variant<T, Failure> m_v;
};

struct Done {};

// One remote store. Keys are the cache's keys (or lock names); the backend adds its own prefix.
// Implementations are not required to be thread-safe: the cache serialises calls.
class Backend {
public:
  virtual ~Backend() = default;

  // The value stored under `key`, or nullopt. With `refresh_ttl_ms` > 0, a present value's time to
  // live is reset to it.
  virtual Result<std::optional<std::string>> get(const std::string& key,
                                                 int64_t refresh_ttl_ms = 0) = 0;
  // Stores `bytes` under `key`, replacing any value, expiring after `ttl_ms` (0: never).
  virtual Result<Done> put(const std::string& key, const std::string& bytes, int64_t ttl_ms) = 0;
  virtual Result<Done> remove(const std::string& key) = 0;
  // True when `key` is present (without reading its value).
  virtual Result<bool> exists(const std::string& key) = 0;

  // Leases for fleet-wide single flight. acquire_lease stores `owner` under `name` only if
  // nothing is there (expiring after `ttl_ms`) and answers whether it did; renew_lease and
  // release_lease act only while `owner` still holds it (answering whether it did).
  virtual Result<bool> acquire_lease(const std::string& name, const std::string& owner,
                                     int64_t ttl_ms) = 0;
  virtual Result<bool> renew_lease(const std::string& name, const std::string& owner,
                                   int64_t ttl_ms) = 0;
  virtual Result<bool> release_lease(const std::string& name, const std::string& owner) = 0;

  // Every key (without the prefix) whose name starts with `key_prefix`, at most `limit`.
  virtual Result<std::vector<std::string>> list(const std::string& key_prefix, size_t limit) = 0;

  // For messages: "redis 127.0.0.1:6379/0 (prefix kiln:)".
  virtual std::string describe() const = 0;
};

}  // namespace kiln::cache::remote
