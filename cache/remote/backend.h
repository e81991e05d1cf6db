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
  // error: the backend failed (refused connection, error reply, broken protocol); timeout: the
  // operation ran past its deadline; refused: the backend is healthy but the value under the key
  // is unusable (larger than asked for, not a string, or without the header asked for), so the
  // caller treats it as a bad entry, not as a failing tier.
  enum class Kind { error, timeout, refused };
  Kind kind = Kind::error;
  std::string message;  // lower case, with context: "redis 127.0.0.1:6379: GET: connection refused"
  // With Kind::refused, why: another type than a string, over ValueLimits::max_bytes, or without
  // ValueLimits::required_prefix.
  enum class Refusal { type, size, prefix };
  Refusal refusal = Refusal::type;
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

// What get() accepts. The backend checks both before the value crosses the network: a value over
// `max_bytes` (0: no limit) or one that does not start with `required_prefix` (empty: any) is a
// Failure::Kind::refused, and nothing but its first bytes is read.
struct ValueLimits {
  uint64_t max_bytes = 0;
  std::string required_prefix;
};

// One remote store. Keys are the cache's keys (or lock names); the backend adds its own prefix.
// Implementations are not required to be thread-safe: the cache serialises calls. Every call ends
// within a bounded time whatever the server does (a timeout failure after that), and holds a
// bounded number of bytes of any reply.
class Backend {
public:
  virtual ~Backend() = default;

  // The value stored under `key`, or nullopt. With `refresh_ttl_ms` > 0, a present value's time to
  // live is reset to it (only when it is taken: a refused value's is left alone).
  virtual Result<std::optional<std::string>> get(const std::string& key,
                                                 int64_t refresh_ttl_ms = 0,
                                                 const ValueLimits& limits = {}) = 0;
  // Stores `bytes` under `key`, replacing any value of any type, expiring after `ttl_ms` (0:
  // never); answers true. With `unless_prefix`, a string value already there that starts with it
  // is kept instead (answers false).
  virtual Result<bool> put(const std::string& key, const std::string& bytes, int64_t ttl_ms,
                           const std::string& unless_prefix = {}) = 0;
  // Resets the time to live of `key` to `ttl_ms` (0: none) if it holds a string of `length` bytes,
  // the value the caller verified (answers whether it did: a value put there meanwhile keeps its
  // own); with `marker`, also stores an empty value under `marker` with the same time to live (one
  // round trip; a failure to write the marker is ignored), so a marker lives as long as its key.
  virtual Result<bool> refresh(const std::string& key, uint64_t length, int64_t ttl_ms,
                               const std::string& marker = {}) = 0;
  virtual Result<Done> remove(const std::string& key) = 0;
  // True when `key` is present (without reading its value).
  virtual Result<bool> exists(const std::string& key) = 0;

  // Leases for fleet-wide single flight. acquire_lease stores `owner` under `name` only if
  // nothing is there, or a lease without a time to live (stale: every lease is taken with one),
  // expiring after `ttl_ms`, and answers whether it did; renew_lease and
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
