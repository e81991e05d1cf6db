// The Redis backend against real redis-server children, dead ports, hung servers and garbage.
#include "cache/remote/redis.h"
#include "tests/support/redis_server.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include <gtest/gtest.h>

namespace kiln::cache::remote {
namespace {

using kiln::testing::RedisServer;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Skips when redis-server is not installed; fails when it is but did not start.
#define SKIP_WITHOUT(server)                                                         \
  if (!(server).installed()) GTEST_SKIP() << "no redis-server: " << (server).error(); \
  ASSERT_TRUE((server).started()) << (server).error()

std::unique_ptr<Backend> backend_at(const std::string& url, RedisOptions options = {}) {
  Expected<RedisUrl> parsed = parse_redis_url(url);
  EXPECT_TRUE(parsed.ok()) << (parsed.ok() ? "" : parsed.error().message);
  return make_redis_backend(parsed.ok() ? *parsed : RedisUrl{}, options);
}

milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

std::string random_bytes(size_t size, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; i += sizeof(uint64_t)) {
    uint64_t word = rng();
    std::memcpy(bytes.data() + i, &word, std::min(sizeof(word), size - i));
  }
  return bytes;
}

// A 127.0.0.1 socket bound to an ephemeral port; listening (with `backlog`) or not.
class LoopbackSocket {
public:
  explicit LoopbackSocket(int backlog = -1) {
    m_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    EXPECT_EQ(::bind(m_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(::getsockname(m_fd, reinterpret_cast<sockaddr*>(&address), &length), 0);
    m_port = ntohs(address.sin_port);
    if (backlog >= 0) {
      EXPECT_EQ(::listen(m_fd, backlog), 0);
    }
  }
  ~LoopbackSocket() { ::close(m_fd); }
  int fd() const { return m_fd; }
  int port() const { return m_port; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(m_port); }

private:
  int m_fd = -1;
  int m_port = 0;
};

bool readable(int fd, int timeout_ms) {
  pollfd entry{fd, POLLIN, 0};
  return ::poll(&entry, 1, timeout_ms) > 0;
}

// drip: a long bulk header, then one byte every 40 ms (a server, or a path, that stalls without
// ever going silent).
// string_array: 100 strings of 20,000 bytes in one array; scan_forever: a SCAN page with an empty
// list and cursor 1 to every request, on one connection; extra_reply: two replies to a request.
enum class Garbage {
  not_resp, wrong_type, truncated, huge_array, fuzz, hang_up, drip, string_array, scan_forever,
  extra_reply
};

// A fake Redis on 127.0.0.1: on each connection it reads one request, answers with `mode`'s
// bytes and closes its side (or, for hang_up, hangs up without answering).
class GarbageServer {
public:
  explicit GarbageServer(Garbage mode) : m_listener(16), m_mode(mode) {
    m_thread = std::thread([this] { serve(); });
  }
  ~GarbageServer() {
    m_stop = true;
    m_thread.join();
  }
  std::string url() const { return m_listener.url(); }

private:
  void serve() {
    std::mt19937 rng(42);
    while (!m_stop) {
      if (!readable(m_listener.fd(), 10)) continue;
      int client = ::accept4(m_listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      char buffer[1 << 16];
      bool asked = readable(client, 1000) && ::read(client, buffer, sizeof(buffer)) > 0;
      if (asked && m_mode == Garbage::drip) {
        std::string header = "$100000\r\n";
        bool open = ::send(client, header.data(), header.size(), MSG_NOSIGNAL) > 0;
        for (int i = 0; open && !m_stop && i < 100; ++i) {
          std::this_thread::sleep_for(milliseconds(40));
          open = ::send(client, "x", 1, MSG_NOSIGNAL) > 0;
        }
      } else if (asked && m_mode == Garbage::scan_forever) {
        // Keeps the connection, answering each request with another page.
        std::string page = garbage(rng);
        do {
          ::send(client, page.data(), page.size(), MSG_NOSIGNAL);
        } while (!m_stop && readable(client, 1000) && ::read(client, buffer, sizeof(buffer)) > 0);
      } else if (asked && m_mode == Garbage::hang_up) {
        // FIN first, then RST (closing with the request unread): the client's socket moves to
        // CLOSE_WAIT, so its next write fails with EPIPE, which raises SIGPIPE.
        ::shutdown(client, SHUT_WR);
        std::this_thread::sleep_for(milliseconds(5));
      } else if (asked) {
        std::string reply = garbage(rng);
        ::send(client, reply.data(), reply.size(), MSG_NOSIGNAL);
        ::shutdown(client, SHUT_WR);
        while (readable(client, 1000) && ::read(client, buffer, sizeof(buffer)) > 0) {
        }
      }
      ::close(client);
    }
  }

  std::string garbage(std::mt19937& rng) const {
    switch (m_mode) {
      case Garbage::not_resp: return "\x01\x02\xff not redis at all\r\n";
      case Garbage::wrong_type: return "*1\r\n:7\r\n";  // every call sends one command
      case Garbage::truncated: return "$100\r\nonly a few bytes";
      case Garbage::huge_array: return "*2000000000\r\n:1\r\n";
      case Garbage::string_array: {
        std::string reply = "*100\r\n";
        for (int i = 0; i < 100; ++i) reply += "$20000\r\n" + std::string(20000, 'x') + "\r\n";
        return reply;
      }
      case Garbage::scan_forever: return "*2\r\n$1\r\n1\r\n*0\r\n";
      case Garbage::extra_reply: return "+OK\r\n+OK\r\n";
      case Garbage::hang_up:
      case Garbage::drip:
      case Garbage::fuzz: break;
    }
    // Mostly well-formed pieces in random order (deep reader paths), some raw bytes between.
    static const char* const pieces[] = {"+OK\r\n", ":1\r\n", "$3\r\nabc\r\n", "$-1\r\n",
                                         "*-1\r\n", "*2\r\n", "*0\r\n", "-ERR no\r\n",
                                         "$2\r\n", "*3\r\n$1\r\n0\r\n", "\r\n", "$",
                                         "*", ":", "-", "+", "12", "-7", "x"};
    std::string bytes;
    for (size_t n = 1 + rng() % 8; n > 0; --n) {
      if (rng() % 5 == 0)
        bytes += static_cast<char>(rng());
      else
        bytes += pieces[rng() % std::size(pieces)];
    }
    return bytes;
  }

  LoopbackSocket m_listener;
  Garbage m_mode;
  std::atomic<bool> m_stop{false};
  std::thread m_thread;
};

// Runs every Backend operation once; collects the failures.
std::vector<Failure> failures_of_every_call(Backend& backend) {
  std::vector<Failure> failures;
  auto note = [&](const auto& result) {
    if (!result.ok()) failures.push_back(result.failure());
  };
  note(backend.get("k"));
  note(backend.get("k", 1000));
  note(backend.put("k", "v", 1000));
  note(backend.refresh("k", 1, 1000));
  note(backend.remove("k"));
  note(backend.exists("k"));
  note(backend.acquire_lease("l", "me", 1000));
  note(backend.renew_lease("l", "me", 1000));
  note(backend.release_lease("l", "me"));
  note(backend.list("", 10));
  return failures;
}

TEST(RedisUrlTest, ParsesHostPortPasswordDbAndPrefix) {
  Expected<RedisUrl> url = parse_redis_url("redis://:s3cret@cache.example:6380/2?prefix=team-a:");
  ASSERT_TRUE(url.ok()) << url.error().message;
  EXPECT_EQ(url->host, "cache.example");
  EXPECT_EQ(url->port, 6380);
  EXPECT_EQ(url->password, "s3cret");
  EXPECT_EQ(url->user, "");
  EXPECT_EQ(url->db, 2);
  EXPECT_EQ(url->prefix, "team-a:");

  url = parse_redis_url("redis://127.0.0.1");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, 6379);
  EXPECT_EQ(url->password, "");
  EXPECT_EQ(url->db, 0);
  EXPECT_EQ(url->prefix, "kiln:");
}

TEST(RedisUrlTest, AcceptsUsersEscapesIpv6AndEmptyParts) {
  Expected<RedisUrl> url = parse_redis_url("redis://alice:p%40ss%3Aw@h:1/0");
  ASSERT_TRUE(url.ok()) << url.error().message;
  EXPECT_EQ(url->user, "alice");
  EXPECT_EQ(url->password, "p@ss:w");

  url = parse_redis_url("redis://:pa/ss?w:d@h:2/3?prefix=p%40");  // credentials end at the last @
  ASSERT_TRUE(url.ok()) << url.error().message;
  EXPECT_EQ(url->password, "pa/ss?w:d");
  EXPECT_EQ(url->host, "h");
  EXPECT_EQ(url->port, 2);
  EXPECT_EQ(url->db, 3);
  EXPECT_EQ(url->prefix, "p@");

  url = parse_redis_url("redis://default:pw@h");  // "default" is the no-user AUTH
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->user, "");
  EXPECT_EQ(url->password, "pw");

  url = parse_redis_url("redis://[::1]:7000/15");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->port, 7000);
  EXPECT_EQ(url->db, 15);

  url = parse_redis_url("REDIS://h/?prefix=");
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->db, 0);
  EXPECT_EQ(url->prefix, "");

  url = parse_redis_url("redis://h/40?prefix=a%2Fb");  // any non-negative db; Redis checks range
  ASSERT_TRUE(url.ok());
  EXPECT_EQ(url->db, 40);
  EXPECT_EQ(url->prefix, "a/b");
}

TEST(RedisUrlTest, RejectsBadFormsWithTheirReason) {
  const std::pair<std::string, std::string> cases[] = {
      {"rediss://h:6379", "TLS (rediss://) is not supported yet"},
      {"http://h:6379", "expected redis://[:password@]host:port[/db]"},
      {"h:6379", "expected redis://[:password@]host:port[/db]"},
      {"redis://user@h", "expected redis://[:password@]host:port[/db]"},
      {"redis://", "the host is empty"},
      {"redis://:6379", "the host is empty"},
      {"redis://:pw@/0", "the host is empty"},
      {"redis://h:0", "port '0' is not a number in 1..65535"},
      {"redis://h:65536", "port '65536' is not a number in 1..65535"},
      {"redis://h:abc", "port 'abc' is not a number in 1..65535"},
      {"redis://h:", "port '' is not a number in 1..65535"},
      {"redis://h:6379x", "port '6379x' is not a number in 1..65535"},
      {"redis://h:6379/-1", "db '-1' is not a non-negative integer"},
      {"redis://h:6379/x", "db 'x' is not a non-negative integer"},
      {"redis://h:6379/0/extra", "db '0/extra' is not a non-negative integer"},
      {"redis://h/99999999999", "db '99999999999' is not a non-negative integer"},
      {"redis://h?db=1", "unknown query key 'db'"},
      {"redis://h?prefix=a&prefix=b", "prefix is given twice"},
      {"redis://h?prefix", "prefix needs a value"},
      {"redis://h?prefix=%zz", "bad %-escape in the prefix"},
      {"redis://ho st:1", "bad host 'ho st'"},
      {"redis://[::1", "unterminated '['"},
      {"redis://[::1]x", "unexpected 'x' after the host"},
      {"redis://:@h", "the password is empty"},
  };
  for (const auto& [text, reason] : cases) {
    Expected<RedisUrl> url = parse_redis_url(text);
    ASSERT_FALSE(url.ok()) << text;
    EXPECT_EQ(url.error().message.rfind("remote cache url '", 0), 0u) << url.error().message;
    if (text.find('@') == std::string::npos) {  // (with a password the URL shows "***")
      EXPECT_EQ(url.error().message.rfind("remote cache url '" + text + "': ", 0), 0u);
    }
    EXPECT_NE(url.error().message.find(reason), std::string::npos) << url.error().message;
  }
}

TEST(RedisUrlTest, ErrorsAndDescriptionsNeverShowThePassword) {
  Expected<RedisUrl> bad = parse_redis_url("redis://:hunter2@h:99999");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message.find("hunter2"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("redis://:***@h:99999"), std::string::npos);

  // A password written without its ':' is refused, and hidden whole.
  for (const char* text : {"redis://s3cretpw@127.0.0.1:6411", "s3cretpw@127.0.0.1:6411",
                           "s3cretpw@127.0.0.1:6411/0?prefix=a://b"}) {
    bad = parse_redis_url(text);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_EQ(bad.error().message.find("s3cretpw"), std::string::npos) << bad.error().message;
    EXPECT_NE(bad.error().message.find("***@127.0.0.1:6411"), std::string::npos)
        << bad.error().message;
  }

  bad = parse_redis_url("redis://u:pa:ss/x?y@h:0/9");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message.find("pa:ss"), std::string::npos) << bad.error().message;
  EXPECT_EQ(bad.error().message.find("x?y"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().message.find("port '0'"), std::string::npos) << bad.error().message;

  Expected<RedisUrl> good = parse_redis_url("redis://:hunter2@10.0.0.5:6380/3?prefix=p:");
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(make_redis_backend(*good)->describe(), "redis 10.0.0.5:6380/3 (prefix p:)");
  EXPECT_EQ(make_redis_backend(*parse_redis_url("redis://[::1]"))->describe(),
            "redis [::1]:6379/0 (prefix kiln:)");
  // A prefix's control bytes are shown escaped: it cannot colour the terminal or forge a line.
  auto escapes = parse_redis_url("redis://h?prefix=%1b%5b31mk%0afake%5c");
  ASSERT_TRUE(escapes.ok());
  EXPECT_EQ(make_redis_backend(*escapes)->describe(),
            "redis h:6379/0 (prefix \\x1b[31mk\\x0afake\\x5c)");
}

TEST(RedisServerTest, RunsAPrivateServerAndAnswersCommands) {
  RedisServer server;
  SKIP_WITHOUT(server);
  EXPECT_GT(server.pid(), 0);
  EXPECT_EQ(server.url(), "redis://127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(server.command({"PING"}), "PONG");
  EXPECT_EQ(server.command({"DEBUG", "SLEEP", "0"}), "OK");
  EXPECT_EQ(server.command({"SET", "a", "1"}), "OK");
  EXPECT_EQ(server.command({"DBSIZE"}), "1");
  EXPECT_EQ(server.command({"GET", "missing"}), "(nil)");
  EXPECT_EQ(server.command({"CONFIG", "GET", "save"}), "save\n");
  EXPECT_EQ(server.command({"NOSUCHCOMMAND"}).rfind("ERR unknown command", 0), 0u);
  EXPECT_EQ(server.command({"FLUSHALL"}), "OK");
  EXPECT_EQ(server.command({"DBSIZE"}), "0");

  int port = server.port();
  server.kill_now();
  EXPECT_FALSE(server.started());
  EXPECT_EQ(server.command({"PING"}), "");
  ASSERT_TRUE(server.restart()) << server.error();
  EXPECT_EQ(server.port(), port);
  EXPECT_EQ(server.command({"PING"}), "PONG");
}

TEST(RedisBackendTest, RoundTripsBinaryAndLargeValues) {
  RedisServer server;
  SKIP_WITHOUT(server);
  // What comes back is checked here, not how fast: 24 MiB under ThreadSanitizer on a busy
  // machine can take more than the default 1 s a command.
  RedisOptions options;
  options.op_timeout = std::chrono::seconds(30);
  auto backend = backend_at(server.url(), options);

  auto missing = backend->get("absent");
  ASSERT_TRUE(missing.ok()) << missing.failure().message;
  EXPECT_FALSE(missing->has_value());

  const std::string binary("a\0b\r\n\0\xff$*", 10);
  const std::string binary_key("k\0\r\n*", 5);
  for (const auto& [key, value] : {std::pair{binary_key, binary},
                                   std::pair{std::string("big"), random_bytes(4 << 20, 1)},
                                   std::pair{std::string("huge"), random_bytes(24 << 20, 2)}}) {
    ASSERT_TRUE(backend->put(key, value, 0).ok());
    auto got = backend->get(key);
    ASSERT_TRUE(got.ok()) << got.failure().message;
    ASSERT_TRUE(got->has_value());
    EXPECT_TRUE(**got == value) << "value of " << value.size() << " bytes differs";
    auto present = backend->exists(key);
    ASSERT_TRUE(present.ok());
    EXPECT_TRUE(*present);
    ASSERT_TRUE(backend->remove(key).ok());
    EXPECT_FALSE(backend->get(key)->has_value());
    EXPECT_FALSE(*backend->exists(key));
  }
  EXPECT_TRUE(backend->remove("never-there").ok());
}

TEST(RedisBackendTest, PrefixesIsolateBackendsOnOneServer) {
  RedisServer server;
  SKIP_WITHOUT(server);
  auto a = backend_at(server.url() + "?prefix=a:");
  auto b = backend_at(server.url() + "?prefix=b:");
  ASSERT_TRUE(a->put("k", "from a", 0).ok());
  ASSERT_TRUE(b->put("k", "from b", 0).ok());
  EXPECT_EQ(**a->get("k"), "from a");
  EXPECT_EQ(**b->get("k"), "from b");
  EXPECT_EQ(server.command({"GET", "a:k"}), "from a");
  ASSERT_TRUE(a->remove("k").ok());
  EXPECT_FALSE(a->get("k")->has_value());
  EXPECT_EQ(**b->get("k"), "from b");
  EXPECT_EQ(server.command({"KEYS", "*"}), "b:k");
}

TEST(RedisBackendTest, PutSetsTheTtlAndGetRefreshesIt) {
  RedisServer server;
  SKIP_WITHOUT(server);
  auto backend = backend_at(server.url());
  ASSERT_TRUE(backend->put("k", "v", 60000).ok());
  int64_t ttl = std::stoll(server.command({"PTTL", "kiln:k"}));
  EXPECT_GT(ttl, 55000);
  EXPECT_LE(ttl, 60000);

  auto got = backend->get("k", 3600000);
  ASSERT_TRUE(got.ok()) << got.failure().message;
  EXPECT_EQ(**got, "v");
  EXPECT_GT(std::stoll(server.command({"PTTL", "kiln:k"})), 3500000);

  ASSERT_TRUE(backend->get("absent", 3600000).ok());
  EXPECT_EQ(server.command({"EXISTS", "kiln:absent"}), "0");

  ASSERT_TRUE(backend->put("k", "forever", 0).ok());
  EXPECT_EQ(server.command({"PTTL", "kiln:k"}), "-1");

  ASSERT_TRUE(backend->put("short", "v", 30).ok());
  std::this_thread::sleep_for(milliseconds(80));
  EXPECT_FALSE(backend->get("short")->has_value());
}

TEST(RedisBackendTest, SelectsTheDbFromTheUrl) {
  RedisServer server;
  SKIP_WITHOUT(server);
  auto db3 = backend_at(server.url() + "/3");
  auto db0 = backend_at(server.url());
  ASSERT_TRUE(db3->put("k", "in 3", 0).ok());
  EXPECT_FALSE(db0->get("k")->has_value());
  EXPECT_EQ(**db3->get("k"), "in 3");
  EXPECT_EQ(server.command({"DBSIZE"}), "0");
  EXPECT_NE(server.command({"INFO", "keyspace"}).find("db3:keys=1"), std::string::npos);

  auto db99 = backend_at(server.url() + "/99");  // default servers have 16
  auto failed = db99->get("k");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.failure().kind, Failure::Kind::error);
  EXPECT_NE(failed.failure().message.find("GET: SELECT: ERR DB index is out of range"),
            std::string::npos)
      << failed.failure().message;
}

TEST(RedisBackendTest, AuthenticatesWithThePassword) {
  RedisServer server({"--requirepass", "s3cret"});
  SKIP_WITHOUT(server);
  auto right = backend_at("redis://:s3cret@127.0.0.1:" + std::to_string(server.port()));
  ASSERT_TRUE(right->put("k", "v", 0).ok());
  EXPECT_EQ(**right->get("k"), "v");

  auto wrong = backend_at("redis://:wrong-pw@127.0.0.1:" + std::to_string(server.port()));
  auto failed = wrong->get("k");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.failure().kind, Failure::Kind::error);
  EXPECT_NE(failed.failure().message.find("GET: AUTH: WRONGPASS"), std::string::npos)
      << failed.failure().message;
  EXPECT_EQ(failed.failure().message.find("wrong-pw"), std::string::npos);

  auto none = backend_at(server.url());
  failed = none->get("k");
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.failure().message.find("NOAUTH"), std::string::npos) << failed.failure().message;
}

TEST(RedisBackendTest, AuthenticatesAnAclUser) {
  RedisServer server({"--user", "alice", "on", ">alice-pw", "~*", "+@all"});
  SKIP_WITHOUT(server);
  std::string host = "@127.0.0.1:" + std::to_string(server.port());
  auto alice = backend_at("redis://alice:alice-pw" + host);
  ASSERT_TRUE(alice->put("k", "v", 0).ok());
  auto failed = backend_at("redis://alice:nope" + host)->get("k");
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.failure().message.find("WRONGPASS"), std::string::npos);
}

TEST(RedisBackendTest, LeasesAreHeldByTheirOwnerUntilReleasedOrExpired) {
  RedisServer server;
  SKIP_WITHOUT(server);
  auto backend = backend_at(server.url());
  EXPECT_TRUE(*backend->acquire_lease("lock", "alice", 5000));
  EXPECT_FALSE(*backend->acquire_lease("lock", "bob", 5000));
  EXPECT_FALSE(*backend->renew_lease("lock", "bob", 60000));
  EXPECT_FALSE(*backend->release_lease("lock", "bob"));
  EXPECT_EQ(server.command({"GET", "kiln:lock"}), "alice");
  EXPECT_LE(std::stoll(server.command({"PTTL", "kiln:lock"})), 5000);

  EXPECT_TRUE(*backend->renew_lease("lock", "alice", 60000));
  EXPECT_GT(std::stoll(server.command({"PTTL", "kiln:lock"})), 55000);
  EXPECT_TRUE(*backend->release_lease("lock", "alice"));
  EXPECT_EQ(server.command({"EXISTS", "kiln:lock"}), "0");
  EXPECT_FALSE(*backend->release_lease("lock", "alice"));
  EXPECT_FALSE(*backend->renew_lease("lock", "alice", 1000));
  EXPECT_TRUE(*backend->acquire_lease("lock", "bob", 5000));

  EXPECT_TRUE(*backend->acquire_lease("brief", "alice", 40));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_TRUE(*backend->acquire_lease("brief", "bob", 5000));
  EXPECT_FALSE(*backend->renew_lease("brief", "alice", 5000));
  EXPECT_EQ(server.command({"GET", "kiln:brief"}), "bob");
}

TEST(RedisBackendTest, ListsKeysByPrefixWithinTheLimit) {
  RedisServer server;
  SKIP_WITHOUT(server);
  auto backend = backend_at(server.url());
  auto other = backend_at(server.url() + "?prefix=other:");
  for (const char* key : {"ab1", "ab2", "ac", "q*1", "q*2", "qz", "q[x]"})
    ASSERT_TRUE(backend->put(key, "v", 0).ok());
  ASSERT_TRUE(other->put("ab3", "v", 0).ok());
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(backend->put("many:" + std::to_string(i), "", 0).ok());

  using Names = std::vector<std::string>;
  EXPECT_EQ(*backend->list("ab", 100), (Names{"ab1", "ab2"}));
  EXPECT_EQ(*backend->list("q*", 100), (Names{"q*1", "q*2"}));  // '*' is not a glob here
  EXPECT_EQ(*backend->list("q[", 100), (Names{"q[x]"}));
  EXPECT_EQ(backend->list("ab", 1)->size(), 1u);
  EXPECT_TRUE(backend->list("ab", 0)->empty());
  EXPECT_TRUE(backend->list("nothing", 100)->empty());
  EXPECT_EQ(backend->list("many:", 1000)->size(), 300u);
  EXPECT_EQ(backend->list("many:", 250)->size(), 250u);
  EXPECT_EQ(backend->list("", 1000)->size(), 307u);
  EXPECT_EQ(*other->list("", 100), (Names{"ab3"}));
}

TEST(RedisBackendTest, AbsentServerFailsFastWithAnError) {
  LoopbackSocket unused;  // bound, not listening: connections are refused
  auto start = Clock::now();
  auto backend = backend_at(unused.url());
  EXPECT_LT(since(start), milliseconds(50));  // constructing never connects

  start = Clock::now();
  auto got = backend->get("k");
  EXPECT_LT(since(start), milliseconds(1000));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.failure().kind, Failure::Kind::error);
  EXPECT_EQ(got.failure().message,
            "redis 127.0.0.1:" + std::to_string(unused.port()) + ": GET: connection refused");
  for (const Failure& failure : failures_of_every_call(*backend))
    EXPECT_EQ(failure.kind, Failure::Kind::error) << failure.message;
  EXPECT_EQ(failures_of_every_call(*backend).size(), 10u);
}

TEST(RedisBackendTest, ConnectThatNeverCompletesTimesOut) {
  // A listener whose accept queue is full: the kernel drops further SYNs, so connect hangs.
  LoopbackSocket full(0);
  std::vector<int> fillers;
  for (int i = 0; i < 3; ++i) {
    fillers.push_back(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(static_cast<uint16_t>(full.port()));
    ::connect(fillers.back(), reinterpret_cast<sockaddr*>(&address), sizeof(address));
  }
  std::this_thread::sleep_for(milliseconds(20));

  RedisOptions options;
  options.connect_timeout = milliseconds(150);
  auto backend = backend_at(full.url(), options);
  auto start = Clock::now();
  auto got = backend->get("k");
  milliseconds elapsed = since(start);
  for (int fd : fillers) ::close(fd);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.failure().kind, Failure::Kind::timeout) << got.failure().message;
  EXPECT_NE(got.failure().message.find("GET: connect timed out after 150 ms"), std::string::npos)
      << got.failure().message;
  EXPECT_GE(elapsed, milliseconds(100));
  EXPECT_LT(elapsed, milliseconds(450));
}

TEST(RedisBackendTest, HungServerTimesOutThenRecovers) {
  RedisServer server;
  SKIP_WITHOUT(server);
  RedisOptions options;
  options.op_timeout = milliseconds(200);
  auto connected = backend_at(server.url(), options);
  ASSERT_TRUE(connected->put("k", "v", 0).ok());

  server.pause();
  auto start = Clock::now();
  auto fresh = backend_at(server.url(), options);  // constructing does not wait for the server
  EXPECT_LT(since(start), milliseconds(50));
  for (Backend* backend : {connected.get(), fresh.get()}) {
    start = Clock::now();
    auto got = backend->get("k");
    milliseconds elapsed = since(start);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.failure().kind, Failure::Kind::timeout) << got.failure().message;
    EXPECT_NE(got.failure().message.find(": GET: timed out after 200 ms"), std::string::npos)
        << got.failure().message;
    EXPECT_GE(elapsed, milliseconds(150));
    EXPECT_LT(elapsed, milliseconds(600));
  }
  server.resume();
  EXPECT_EQ(**connected->get("k"), "v");
  EXPECT_EQ(**fresh->get("k"), "v");
}

TEST(RedisBackendTest, KilledServerFailsThenTheSameBackendReconnects) {
  RedisServer server;
  SKIP_WITHOUT(server);
  auto backend = backend_at(server.url());
  ASSERT_TRUE(backend->put("k", "v", 0).ok());
  server.kill_now();

  auto got = backend->get("k");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.failure().kind, Failure::Kind::error) << got.failure().message;
  // Writing a large value to the dead peer raises SIGPIPE, which must not kill the process.
  auto put = backend->put("big", random_bytes(8 << 20, 3), 0);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.failure().kind, Failure::Kind::error) << put.failure().message;

  ASSERT_TRUE(server.restart()) << server.error();
  got = backend->get("k");
  ASSERT_TRUE(got.ok()) << got.failure().message;
  EXPECT_FALSE(got->has_value());  // no persistence: the restarted server is empty
  ASSERT_TRUE(backend->put("k", "again", 0).ok());
  EXPECT_EQ(**backend->get("k"), "again");

}

TEST(RedisBackendTest, ConnectionClosedWhileIdleIsReplacedWithoutAFailure) {
  RedisServer server;
  SKIP_WITHOUT(server);
  auto backend = backend_at(server.url());
  ASSERT_TRUE(backend->put("k", "v", 0).ok());
  ASSERT_TRUE(server.restart()) << server.error();  // closes every client connection
  auto got = backend->get("k");
  ASSERT_TRUE(got.ok()) << got.failure().message;
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(server.command({"CLIENT", "KILL", "TYPE", "normal"}), "1");
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_TRUE(backend->put("k", "v", 0).ok());
}

TEST(RedisBackendTest, OutOfMemoryServerRejectsPutsWithItsError) {
  RedisServer server({"--maxmemory", "1mb", "--maxmemory-policy", "noeviction"});
  SKIP_WITHOUT(server);
  auto backend = backend_at(server.url());
  auto put = backend->put("big", random_bytes(4 << 20, 4), 0);
  ASSERT_FALSE(put.ok());
  EXPECT_EQ(put.failure().kind, Failure::Kind::error);
  EXPECT_NE(put.failure().message.find("SET: OOM command not allowed"), std::string::npos)
      << put.failure().message;
  EXPECT_NE(put.failure().message.find("maxmemory"), std::string::npos);
  auto got = backend->get("big");  // the connection is still good
  ASSERT_TRUE(got.ok()) << got.failure().message;
  EXPECT_FALSE(got->has_value());
}

TEST(RedisBackendTest, GarbageRepliesAreErrorsNotCrashes) {
  const std::pair<Garbage, std::string> cases[] = {
      {Garbage::not_resp, "protocol error, got \"\\x01\" as reply type byte"},
      {Garbage::wrong_type, "unexpected array reply"},
      {Garbage::truncated, "server closed the connection"},
      {Garbage::huge_array, "reply array longer than"},
  };
  for (const auto& [mode, reason] : cases) {
    GarbageServer server(mode);
    auto backend = backend_at(server.url());
    auto start = Clock::now();
    std::vector<Failure> failures = failures_of_every_call(*backend);
    EXPECT_LT(since(start), milliseconds(2000));
    ASSERT_EQ(failures.size(), 10u) << reason;
    for (const Failure& failure : failures) {
      EXPECT_EQ(failure.kind, Failure::Kind::error) << failure.message;
      EXPECT_NE(failure.message.find(reason), std::string::npos) << failure.message;
    }
  }
}

TEST(RedisBackendTest, ServerHangingUpDuringALargeWriteIsAnError) {
  // The server hangs up with the request unread, so the write fails with EPIPE: the SIGPIPE
  // that comes with it must not kill the process.
  GarbageServer server(Garbage::hang_up);
  auto backend = backend_at(server.url());
  const std::string big = random_bytes(8 << 20, 5);
  for (int i = 0; i < 3; ++i) {
    auto put = backend->put("big", big, 0);
    ASSERT_FALSE(put.ok());
    EXPECT_EQ(put.failure().kind, Failure::Kind::error) << put.failure().message;
    EXPECT_EQ(put.failure().message.rfind("redis 127.0.0.1:", 0), 0u) << put.failure().message;
  }
}

TEST(RedisBackendTest, FuzzedRepliesNeverCrashOrHang) {
  GarbageServer server(Garbage::fuzz);
  auto backend = backend_at(server.url());
  std::string context = "redis 127.0.0.1:";
  auto start = Clock::now();
  size_t failed = 0;
  for (int round = 0; round < 100; ++round) {
    for (const Failure& failure : failures_of_every_call(*backend)) {
      ++failed;
      EXPECT_EQ(failure.kind, Failure::Kind::error) << failure.message;
      EXPECT_EQ(failure.message.rfind(context, 0), 0u) << failure.message;
    }
  }
  EXPECT_GT(failed, 880u);  // of 1000: nearly every random reply is broken or of the wrong type
  EXPECT_LT(since(start), milliseconds(5000));
}

TEST(RedisBackendTest, AServerThatDripsBytesTimesOutWithinTheOperationTimeout) {
  GarbageServer server(Garbage::drip);
  RedisOptions options;
  options.op_timeout = milliseconds(300);
  auto backend = backend_at(server.url(), options);
  auto start = Clock::now();
  auto got = backend->get("k");
  milliseconds elapsed = since(start);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.failure().kind, Failure::Kind::timeout) << got.failure().message;
  EXPECT_NE(got.failure().message.find("GET: timed out after 300 ms"), std::string::npos)
      << got.failure().message;
  EXPECT_GE(elapsed, milliseconds(250));
  EXPECT_LT(elapsed, milliseconds(700)) << "each byte came within the old per-read timeout";
}

TEST(RedisBackendTest, AnArrayOfStringsCountsWholeAgainstTheReplyLimit) {
  GarbageServer server(Garbage::string_array);  // 2 MB in all, no string over 20 KB
  RedisOptions options;
  options.max_reply_bytes = 256 << 10;
  auto got = backend_at(server.url(), options)->get("k");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.failure().kind, Failure::Kind::error);
  EXPECT_NE(got.failure().message.find("reply longer than 262144 bytes"), std::string::npos)
      << got.failure().message;
}

TEST(RedisBackendTest, AListingThatNeverEndsTimesOut) {
  GarbageServer server(Garbage::scan_forever);
  RedisOptions options;
  // Each page comes at once, so no page times out on its own; the margin of 300 ms per page
  // holds under a thread sanitizer on a loaded machine.
  options.op_timeout = milliseconds(300);
  auto start = Clock::now();
  auto listed = backend_at(server.url(), options)->list("", 1000);
  ASSERT_FALSE(listed.ok());
  EXPECT_EQ(listed.failure().kind, Failure::Kind::timeout);
  EXPECT_NE(listed.failure().message.find("SCAN: listing timed out after 3000 ms"),
            std::string::npos)
      << listed.failure().message;
  EXPECT_LT(since(start), milliseconds(8000));
}

TEST(RedisBackendTest, MoreRepliesThanRequestsFailTheCall) {
  GarbageServer server(Garbage::extra_reply);
  auto put = backend_at(server.url())->put("k", "v", 0);
  ASSERT_FALSE(put.ok());
  EXPECT_NE(put.failure().message.find("SET: protocol error: more replies than requests"),
            std::string::npos)
      << put.failure().message;
}

TEST(RedisBackendTest, AReplyLongerThanTheLimitFailsWithoutBeingHeld) {
  RedisServer server;
  SKIP_WITHOUT(server);
  RedisOptions options;
  options.max_reply_bytes = 1 << 20;
  auto backend = backend_at(server.url(), options);
  ASSERT_TRUE(backend->put("big", random_bytes(4 << 20, 6), 0).ok());
  // The server is told no limit, so it sends the value; the client stops reading past its own.
  auto got = backend->get("big");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.failure().kind, Failure::Kind::error);
  EXPECT_NE(got.failure().message.find("reply longer than 1048576 bytes"), std::string::npos)
      << got.failure().message;
  ASSERT_TRUE(backend->put("small", "v", 0).ok());  // a new connection serves the next call
  EXPECT_EQ(**backend->get("small"), "v");
}

TEST(RedisBackendTest, ValuesThatDoNotPassTheLimitsAreRefusedByTheServer) {
  RedisServer server;
  SKIP_WITHOUT(server);
  auto backend = backend_at(server.url());
  const std::string big = random_bytes(256 << 10, 7);
  ASSERT_TRUE(backend->put("big", big, 0).ok());
  ASSERT_TRUE(backend->put("plain", "PLAIN value", 0).ok());
  EXPECT_EQ(server.command({"HSET", "kiln:hash", "f", "v"}), "1");

  auto too_big = backend->get("big", 0, {1000, ""});
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.failure().kind, Failure::Kind::refused);
  EXPECT_NE(too_big.failure().message.find("GET: the value's 262144 bytes are over the limit of 1000"),
            std::string::npos)
      << too_big.failure().message;
  auto wrong_type = backend->get("hash", 60000);
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_EQ(wrong_type.failure().kind, Failure::Kind::refused);
  EXPECT_NE(wrong_type.failure().message.find("the key holds a hash, not a string"),
            std::string::npos);
  EXPECT_EQ(server.command({"PTTL", "kiln:hash"}), "-1") << "a refused value is not refreshed";
  auto no_header = backend->get("plain", 0, {0, "SIGNED"});
  ASSERT_FALSE(no_header.ok());
  EXPECT_EQ(no_header.failure().kind, Failure::Kind::refused);

  EXPECT_EQ(**backend->get("big", 0, {big.size(), ""}), big) << "a value at the limit passes";
  EXPECT_EQ(**backend->get("plain", 0, {0, "PLAIN"}), "PLAIN value");
  EXPECT_FALSE(backend->get("absent", 0, {10, "PLAIN"})->has_value());
}

TEST(RedisBackendTest, PutUnlessPrefixKeepsAValueThatStartsWithIt) {
  RedisServer server;
  SKIP_WITHOUT(server);
  auto backend = backend_at(server.url());
  ASSERT_TRUE(backend->put("k", "SIGNED one", 0).ok());
  auto kept = backend->put("k", "plain two", 60000, "SIGNED");
  ASSERT_TRUE(kept.ok()) << kept.failure().message;
  EXPECT_FALSE(*kept);
  EXPECT_EQ(**backend->get("k"), "SIGNED one");
  ASSERT_TRUE(backend->put("k", "plain three", 0).ok());
  auto stored = backend->put("k", "plain four", 60000, "SIGNED");
  ASSERT_TRUE(stored.ok());
  EXPECT_TRUE(*stored);
  EXPECT_EQ(**backend->get("k"), "plain four");
  EXPECT_GT(std::stoll(server.command({"PTTL", "kiln:k"})), 50000);
  EXPECT_EQ(server.command({"HSET", "kiln:h", "f", "v"}), "1");
  EXPECT_TRUE(*backend->put("h", "replaces a hash", 0, "SIGNED"));
  EXPECT_EQ(**backend->get("h"), "replaces a hash");
}

TEST(RedisBackendTest, ALeaseWithoutATimeToLiveIsTakenOver) {
  RedisServer server;
  SKIP_WITHOUT(server);
  auto backend = backend_at(server.url());
  EXPECT_EQ(server.command({"SET", "kiln:lock", "ghost"}), "OK");
  EXPECT_TRUE(*backend->acquire_lease("lock", "alice", 5000));
  EXPECT_EQ(server.command({"GET", "kiln:lock"}), "alice");
  EXPECT_GT(std::stoll(server.command({"PTTL", "kiln:lock"})), 0);
  EXPECT_FALSE(*backend->acquire_lease("lock", "bob", 5000)) << "a live lease is kept";
}

TEST(RedisBackendTest, RefreshResetsTheTimeToLiveOfTheValueVerifiedAndItsMarker) {
  RedisServer server;
  SKIP_WITHOUT(server);
  auto backend = backend_at(server.url());
  ASSERT_TRUE(backend->put("k", "v", 1000).ok());
  // Another length: a value put there since the caller verified it keeps its own time to live.
  EXPECT_FALSE(*backend->refresh("k", 2, 600000, "graph:h:k"));
  EXPECT_LE(std::stoll(server.command({"PTTL", "kiln:k"})), 1000);
  EXPECT_EQ(server.command({"EXISTS", "kiln:graph:h:k"}), "0");
  EXPECT_TRUE(*backend->refresh("k", 1, 600000, "graph:h:k"));
  EXPECT_GT(std::stoll(server.command({"PTTL", "kiln:k"})), 500000);
  EXPECT_GT(std::stoll(server.command({"PTTL", "kiln:graph:h:k"})), 500000);
  EXPECT_FALSE(*backend->refresh("absent", 1, 600000));
  // A time to live of 0 is none, as for put.
  EXPECT_TRUE(*backend->refresh("k", 1, 0, "graph:h:k"));
  EXPECT_EQ(server.command({"PTTL", "kiln:k"}), "-1");
  EXPECT_EQ(server.command({"PTTL", "kiln:graph:h:k"}), "-1");
}

}  // namespace
}  // namespace kiln::cache::remote
