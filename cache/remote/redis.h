// The Redis remote backend: a redis:// URL parser and a Backend over one lazy hiredis connection.
#pragma once

#include "cache/remote/backend.h"
#include "support/expected.h"

#include <chrono>
#include <memory>
#include <string>

namespace kiln::cache::remote {

// Where a Redis store lives and how keys are named there.
struct RedisUrl {
  std::string host;
  int port = 6379;
  std::string password;  // empty: no AUTH
  int db = 0;            // SELECTed after connecting when not 0
  std::string prefix = "kiln:";  // prepended to every key and lease name
  std::string user;  // ACL user (Redis 6+); empty: the default user (AUTH with the password only)
};

// Parses redis://[[user]:password@]host[:port][/db][?prefix=P]. The host may be a bracketed IPv6
// address; user, password and prefix may be percent-encoded, and an '@' in the prefix must be
// (%40): the credentials run to the last '@'. User "default" means no user. Fails, with a message
// naming the URL (password hidden), on rediss:// (TLS is not supported yet), an empty host, a port
// outside 1..65535, a db that is not a non-negative integer, a query key other than prefix, and
// anything left over.
Expected<RedisUrl> parse_redis_url(const std::string& url);

struct RedisOptions {
  // Bounds the TCP connect (not a DNS lookup of a host name: use an address where that matters).
  std::chrono::milliseconds connect_timeout{100};
  // Bounds each operation as a whole, from sending the first byte to reading the last one (for
  // list(), each SCAN page, and the whole listing to ten times this): a server that answers one
  // byte at a time times out like one that does not answer at all.
  std::chrono::milliseconds op_timeout{1000};
  // The most bytes one reply may hold, counted as it is read and as hiredis builds its objects
  // (so an array of many strings counts whole), and the most bytes of names a listing keeps; past
  // it the call fails (a protocol error: kiln's own get() refuses larger values before sending
  // them). A reply followed by data nobody asked for fails the call too. 0: no limit.
  uint64_t max_reply_bytes = uint64_t{64} << 20;
};

// A Backend talking to `url`. Construction never connects: the first operation does, and every
// operation after an I/O or protocol failure reconnects (once; callers decide when to retry); a
// connection the server closed while idle is replaced before use instead of failing a call.
// A failure is Failure::Kind::timeout when the connect or a read/write ran out of time, otherwise
// Failure::Kind::error (refused, error reply, unexpected reply, broken protocol). get is two round
// trips within one deadline: a Lua script that checks the value's type, length and prefix on the
// server (refreshing its time to live when they pass), then GETRANGE of at most that length; so a
// key of another type, a value over ValueLimits::max_bytes or without the required prefix is
// Failure::Kind::refused and its body never crosses the network. A put with unless_prefix is a script too. Leases need
// ttl_ms > 0 (Redis refuses PX 0); list answers sorted names. Not thread-safe. SIGPIPE is blocked on the calling thread
// during I/O, so a server that vanishes mid-write cannot kill the process.
std::unique_ptr<Backend> make_redis_backend(RedisUrl url, RedisOptions options = {});

}  // namespace kiln::cache::remote
