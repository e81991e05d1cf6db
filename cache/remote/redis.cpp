// The Redis remote backend over hiredis's blocking API, and the redis:// URL parser.
#include "cache/remote/redis.h"

// hiredis 0.14 declares sds (which hiredis.h includes) without C linkage: include it first.
extern "C" {
#include <hiredis/sds.h>
}
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <set>
#include <string_view>
#include <vector>

namespace kiln::cache::remote {
namespace {

constexpr std::string_view k_url_shape = "expected redis://[:password@]host:port[/db]";

// Leases: act only while `owner` (ARGV[1]) still holds KEYS[1].
constexpr std::string_view k_renew_script =
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0";
constexpr std::string_view k_release_script =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";
// Takes a lease that is free or has no time to live (every lease is taken with one, so a lease
// without is stale: planted, or left by a broken client) and would otherwise be waited on.
constexpr std::string_view k_acquire_script =
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end "
    "if redis.call('pttl', KEYS[1]) == -1 then "
    "redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end return 0";

// get, first round trip: the value's length when it is a string of at most ARGV[2] bytes (0: any)
// that starts with ARGV[3], its time to live reset to ARGV[1] ms (0: left); nil when absent;
// {"kiln-refused", why, detail} otherwise. The value itself is fetched by a second command only
// then: returning it from Lua would copy it through the script (a 200 KB value took 250 us that
// way against 39 us for GET).
constexpr std::string_view k_refused = "kiln-refused";
constexpr std::string_view k_check_script =
    "local t = redis.call('type', KEYS[1])['ok'] "
    "if t == 'none' then return false end "
    "if t ~= 'string' then return {'kiln-refused', 'type', t} end "
    "local n = redis.call('strlen', KEYS[1]) "
    "local cap = tonumber(ARGV[2]) "
    "if cap > 0 and n > cap then return {'kiln-refused', 'size', n} end "
    "local want = ARGV[3] "
    "if #want > 0 and redis.call('getrange', KEYS[1], 0, #want - 1) ~= want then "
    "return {'kiln-refused', 'prefix', n} end "
    "if tonumber(ARGV[1]) > 0 then redis.call('pexpire', KEYS[1], ARGV[1]) end "
    "return n";
// put with unless_prefix: keeps a string value that starts with ARGV[3] (answers 0), else sets
// ARGV[1] with a time to live of ARGV[2] ms (0: none) and answers 1.
constexpr std::string_view k_put_unless_script =
    "local p = ARGV[3] "
    "if redis.call('type', KEYS[1])['ok'] == 'string' and "
    "redis.call('getrange', KEYS[1], 0, #p - 1) == p then return 0 end "
    "if tonumber(ARGV[2]) > 0 then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) "
    "else redis.call('set', KEYS[1], ARGV[1]) end return 1";

// refresh: when KEYS[1] is a string of ARGV[2] bytes (the value just verified, not one put there
// since), resets its time to live to ARGV[1] ms (0: removes it) and, with KEYS[2], stores "" there
// with the same time to live; answers whether it did. A failed marker write (a full server) is not
// an error: the marker is a hint.
constexpr std::string_view k_refresh_script =
    "if redis.call('type', KEYS[1])['ok'] ~= 'string' or "
    "redis.call('strlen', KEYS[1]) ~= tonumber(ARGV[2]) then return 0 end "
    "local ttl = tonumber(ARGV[1]) "
    "if ttl > 0 then redis.call('pexpire', KEYS[1], ttl) else redis.call('persist', KEYS[1]) end "
    "if #KEYS > 1 then "
    "if ttl > 0 then pcall(redis.call, 'set', KEYS[2], '', 'PX', ttl) "
    "else pcall(redis.call, 'set', KEYS[2], '') end end "
    "return 1";

// The URL with its password replaced by "***", so messages never carry a secret: everything up
// to the last '@' but the scheme and the user (userinfo without a ':' may be a password written
// without its ':', and is hidden whole).
std::string redacted(const std::string& url) {
  size_t at = url.rfind('@');
  if (at == std::string::npos) return url;
  size_t start = url.find("://");
  size_t from = start == std::string::npos || start > at ? 0 : start + 3;
  size_t colon = url.find(':', from);
  size_t keep = colon != std::string::npos && colon < at ? colon + 1 : from;
  return url.substr(0, keep) + "***" + url.substr(at);
}

// `text` for a message: a control byte, DEL or a non-ASCII byte (a %-escaped prefix may hold any)
// as \xNN, so a prefix cannot move the cursor, colour the terminal or start a line of its own.
std::string printable(const std::string& text) {
  std::string out;
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f && c != '\\') {
      out += c;
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", byte);
      out += hex;
    }
  }
  return out;
}

bool all_digits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<int> to_int(std::string_view text) {
  int value = 0;
  if (!all_digits(text)) return std::nullopt;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Undoes %XX escapes; nullopt on a malformed one.
std::optional<std::string> percent_decoded(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    int high = hex_value(text[i + 1]), low = hex_value(text[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

}  // namespace

Expected<RedisUrl> parse_redis_url(const std::string& url) {
  auto fail = [&](std::string_view why) {
    return make_error("remote cache url '", redacted(url), "': ", std::string(why));
  };
  RedisUrl out;
  std::string_view rest = url;
  size_t scheme_end = rest.find("://");
  if (scheme_end == std::string_view::npos) return fail(k_url_shape);
  std::string scheme(rest.substr(0, scheme_end));
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](char c) {
    return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  });
  if (scheme == "rediss") return fail("TLS (rediss://) is not supported yet; use redis://");
  if (scheme != "redis") return fail(k_url_shape);
  rest.remove_prefix(scheme_end + 3);

  // The credentials end at the last '@', so a password may hold '/', '?' or ':' unescaped and
  // no part of it is ever quoted in a message (redacted() hides the same span).
  if (size_t at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    size_t colon = userinfo.find(':');
    if (colon == std::string_view::npos) return fail(k_url_shape);
    auto user = percent_decoded(userinfo.substr(0, colon));
    auto password = percent_decoded(userinfo.substr(colon + 1));
    if (!user || !password) return fail("bad %-escape in the user or password");
    if (password->empty()) return fail("the password is empty");
    out.user = *user == "default" ? "" : *user;
    out.password = *password;
  }

  std::optional<std::string_view> query, path;
  if (size_t q = rest.find('?'); q != std::string_view::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  if (size_t slash = rest.find('/'); slash != std::string_view::npos) {
    path = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
  }

  bool bracketed = !rest.empty() && rest.front() == '[';
  std::string_view host;
  if (bracketed) {
    size_t close = rest.find(']');
    if (close == std::string_view::npos) return fail("unterminated '[' in the host");
    host = rest.substr(1, close - 1);
    rest.remove_prefix(close + 1);
    if (!rest.empty() && rest.front() != ':')
      return fail("unexpected '" + std::string(rest) + "' after the host");
  } else {
    host = rest.substr(0, rest.find(':'));
    rest.remove_prefix(host.size());
  }
  out.host = std::string(host);
  if (out.host.empty()) return fail("the host is empty; " + std::string(k_url_shape));
  auto host_char = [bracketed](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' ||
           (bracketed ? c == ':' : c == '-' || c == '_');
  };
  if (!std::all_of(out.host.begin(), out.host.end(), host_char))
    return fail("bad host '" + out.host + "'");
  if (!rest.empty()) {  // ":port"
    std::string_view port = rest.substr(1);
    std::optional<int> number = to_int(port);
    if (!number || *number < 1 || *number > 65535)
      return fail("port '" + std::string(port) + "' is not a number in 1..65535");
    out.port = *number;
  }

  if (path && !path->empty()) {
    std::optional<int> db = to_int(*path);
    if (!db) return fail("db '" + std::string(*path) + "' is not a non-negative integer");
    out.db = *db;
  }

  if (query) {
    bool seen_prefix = false;
    std::string_view params = *query;
    for (;;) {
      size_t amp = params.find('&');
      std::string_view param = params.substr(0, amp);
      size_t eq = param.find('=');
      std::string_view key = param.substr(0, eq);
      if (key != "prefix")
        return fail("unknown query key '" + std::string(key) + "' (only prefix= is known)");
      if (eq == std::string_view::npos) return fail("prefix needs a value: ?prefix=P");
      if (seen_prefix) return fail("prefix is given twice");
      std::optional<std::string> prefix = percent_decoded(param.substr(eq + 1));
      if (!prefix) return fail("bad %-escape in the prefix");
      out.prefix = *prefix;
      seen_prefix = true;
      if (amp == std::string_view::npos) break;
      params.remove_prefix(amp + 1);
    }
  }
  return out;
}

namespace {

struct ReplyFree {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
struct ContextFree {
  void operator()(redisContext* context) const { redisFree(context); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;
using Context = std::unique_ptr<redisContext, ContextFree>;
using Command = std::vector<std::string_view>;  // binary-safe arguments

// Blocks SIGPIPE on this thread while alive and swallows one raised meanwhile: hiredis writes
// with write(2), and a server that went away must not kill the process.
class SigpipeGuard {
public:
  SigpipeGuard() {
    sigemptyset(&m_pipe);
    sigaddset(&m_pipe, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    m_was_pending = sigismember(&pending, SIGPIPE) == 1;
    m_blocked = pthread_sigmask(SIG_BLOCK, &m_pipe, &m_old) == 0;
  }
  ~SigpipeGuard() {
    if (!m_blocked) return;
    int saved_errno = errno;
    sigset_t pending;
    sigpending(&pending);
    if (!m_was_pending && sigismember(&pending, SIGPIPE) == 1) {
      timespec zero{};
      sigtimedwait(&m_pipe, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &m_old, nullptr);
    errno = saved_errno;
  }
  SigpipeGuard(const SigpipeGuard&) = delete;
  SigpipeGuard& operator=(const SigpipeGuard&) = delete;

private:
  sigset_t m_pipe, m_old;
  bool m_was_pending = false, m_blocked = false;
};

// hiredis 0.14 allocates a declared array up front and walks every slot when freeing it, so one
// "*2000000000" line from a broken server would stall a call for seconds. Arrays are refused
// past this many elements (SCAN pages, the longest reply here, hold about COUNT names).
constexpr int k_max_reply_elements = 1 << 20;
// A listing (SCAN page after page) may take this many operation timeouts in all.
constexpr int k_listing_operations = 10;
const redisReplyObjectFunctions* g_hiredis_functions = nullptr;  // hiredis's own, set once
thread_local bool t_array_refused = false;
// Bytes of reply objects built during the current call, against its limit (0: none). hiredis
// hands each finished array element over and drops it from its buffer, so the buffer alone does
// not bound a reply: an array of a million large strings never sits there whole.
thread_local uint64_t t_reply_bytes = 0;
thread_local uint64_t t_reply_limit = 0;
thread_local bool t_reply_refused = false;
constexpr uint64_t k_reply_object_bytes = 64;  // a redisReply and its slot in an array

// Counts `bytes` against the call's limit; false (the reader then reports an out-of-memory
// error) once past it.
bool count_reply_bytes(uint64_t bytes) {
  t_reply_bytes += bytes;
  if (t_reply_limit == 0 || t_reply_bytes <= t_reply_limit) return true;
  t_reply_refused = true;
  return false;
}

void* create_bounded_array(const redisReadTask* task, int elements) {
  if (elements > k_max_reply_elements) {
    t_array_refused = true;
    return nullptr;  // the reader reports an out-of-memory error
  }
  if (!count_reply_bytes(k_reply_object_bytes * (1 + static_cast<uint64_t>(std::max(elements, 0)))))
    return nullptr;
  return g_hiredis_functions->createArray(task, elements);
}

// A string reply this long at the top level goes straight into *t_capture (when set) and the
// reply object holds none of it, so a value is held once by the caller, not twice.
constexpr size_t k_capture_bytes = 64 << 10;
thread_local std::string* t_capture = nullptr;
thread_local bool t_captured = false;

void* create_string(const redisReadTask* task, char* str, size_t len) {
  if (!count_reply_bytes(k_reply_object_bytes + len)) return nullptr;
  if (t_capture && task->parent == nullptr && task->type == REDIS_REPLY_STRING &&
      len >= k_capture_bytes) {
    t_capture->assign(str, len);
    t_captured = true;
    return g_hiredis_functions->createString(task, str, 0);
  }
  return g_hiredis_functions->createString(task, str, len);
}

void bound_reply_arrays(redisContext& context) {
  if (context.reader == nullptr || context.reader->fn == nullptr) return;
  static redisReplyObjectFunctions bounded = [&] {
    g_hiredis_functions = context.reader->fn;
    redisReplyObjectFunctions functions = *context.reader->fn;
    functions.createArray = create_bounded_array;
    functions.createString = create_string;
    return functions;
  }();
  context.reader->fn = &bounded;
}

// Gives back the reader's buffer once it holds nothing unread (hiredis keeps its largest size
// until the next read).
void release_reader_buffer(redisContext& context) {
  redisReader* reader = context.reader;
  if (reader == nullptr || reader->pos != reader->len) return;
  sdsfree(reader->buf);
  reader->buf = sdsempty();
  reader->pos = reader->len = 0;
}

using Clock = std::chrono::steady_clock;

// Milliseconds left until `deadline`, rounded up; 0 once it has passed.
int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// Waits until `fd` is ready for `events` or `deadline` passes (false).
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    int left = ms_left(deadline);
    if (left == 0) return false;
    pollfd entry{fd, events, 0};
    int ready = ::poll(&entry, 1, left);
    if (ready > 0) return true;
    if (ready == 0) return false;
    if (errno != EINTR) return true;  // let the read or write report the error
  }
}

timeval to_timeval(std::chrono::milliseconds ms) {
  int64_t count = std::max<int64_t>(ms.count(), 1);  // 0 would mean "wait forever" to hiredis
  return timeval{static_cast<time_t>(count / 1000), static_cast<suseconds_t>(count % 1000 * 1000)};
}

bool is_timeout(const redisContext& context, int saved_errno) {
  if (context.err != REDIS_ERR_IO) return false;
  for (int code : {EAGAIN, EWOULDBLOCK, ETIMEDOUT})
    if (saved_errno == code || std::strcmp(context.errstr, std::strerror(code)) == 0) return true;
  return false;
}

// An idle connection never has anything to read: readable means the server closed it (it
// restarted, or dropped us for idling), so sending on it would fail for no good reason.
bool peer_closed(const redisContext& context) {
  pollfd entry{context.fd, POLLIN, 0};
  return ::poll(&entry, 1, 0) != 0;
}

const char* type_name(int type) {
  switch (type) {
    case REDIS_REPLY_STRING: return "string";
    case REDIS_REPLY_ARRAY: return "array";
    case REDIS_REPLY_INTEGER: return "integer";
    case REDIS_REPLY_NIL: return "nil";
    case REDIS_REPLY_STATUS: return "status";
    case REDIS_REPLY_ERROR: return "error";
  }
  return "unknown";
}

bool is_ok_status(const redisReply& reply) {
  return reply.type == REDIS_REPLY_STATUS && std::string_view(reply.str, reply.len) == "OK";
}

// Escapes Redis glob metacharacters so `text` matches only itself in SCAN MATCH.
std::string glob_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

class RedisBackend final : public Backend {
public:
  RedisBackend(RedisUrl url, RedisOptions options)
      : m_url(std::move(url)), m_options(options),
        m_where("redis " + (m_url.host.find(':') == std::string::npos ? m_url.host
                                                                       : "[" + m_url.host + "]") +
                ":" + std::to_string(m_url.port)) {}

  Result<std::optional<std::string>> get(const std::string& key, int64_t refresh_ttl_ms,
                                         const ValueLimits& limits) override {
    std::string name = m_url.prefix + key;
    std::string ttl = std::to_string(std::max<int64_t>(refresh_ttl_ms, 0));
    std::string cap = std::to_string(limits.max_bytes);
    auto checked = call("GET", {"EVAL", k_check_script, "1", name, ttl, cap, limits.required_prefix});
    if (!checked) return checked.failure();
    const redisReply& check = **checked;
    if (check.type == REDIS_REPLY_NIL) return std::optional<std::string>();
    if (std::optional<Failure> refused = refusal("GET", check, limits)) return *refused;
    // A length past the limit can only come from a server that did not run the script as sent.
    if (check.type != REDIS_REPLY_INTEGER || check.integer < 0 ||
        (limits.max_bytes != 0 && static_cast<uint64_t>(check.integer) > limits.max_bytes))
      return unexpected("GET", check);
    if (check.integer == 0) return std::optional<std::string>(std::string());
    // At most the bytes checked, within the same deadline: a value replaced meanwhile comes back
    // cut to that length (and fails its checks) or empty (a miss), never longer.
    std::string last = std::to_string(check.integer - 1);
    std::string captured;
    t_capture = &captured;
    t_captured = false;
    auto reply = call("GET", {"GETRANGE", name, "0", last}, Deadline::keep);
    t_capture = nullptr;
    if (m_context && t_captured) release_reader_buffer(*m_context);
    if (!reply) return reply.failure();
    const redisReply& value = **reply;
    if (value.type != REDIS_REPLY_STRING) return unexpected("GET", value);
    if (value.len == 0 && !t_captured) return std::optional<std::string>();
    if (t_captured) return std::optional<std::string>(std::move(captured));
    return std::optional<std::string>(std::string(value.str, value.len));
  }

  Result<bool> put(const std::string& key, const std::string& bytes, int64_t ttl_ms,
                   const std::string& unless_prefix) override {
    std::string name = m_url.prefix + key, ttl = std::to_string(std::max<int64_t>(ttl_ms, 0));
    if (!unless_prefix.empty())
      return integer_answer("SET", {"EVAL", k_put_unless_script, "1", name, bytes, ttl,
                                    unless_prefix});
    Command set{"SET", name, bytes};
    if (ttl_ms > 0) set.insert(set.end(), {"PX", ttl});
    auto reply = call("SET", set);
    if (!reply) return reply.failure();
    if (!is_ok_status(**reply)) return unexpected("SET", **reply);
    return true;
  }

  Result<bool> refresh(const std::string& key, uint64_t length, int64_t ttl_ms,
                       const std::string& marker) override {
    std::string name = m_url.prefix + key, marker_name = m_url.prefix + marker;
    std::string ttl = std::to_string(std::max<int64_t>(ttl_ms, 0));
    std::string bytes = std::to_string(length);
    if (marker.empty())
      return integer_answer("EVAL refresh", {"EVAL", k_refresh_script, "1", name, ttl, bytes});
    return integer_answer("EVAL refresh",
                          {"EVAL", k_refresh_script, "2", name, marker_name, ttl, bytes});
  }

  Result<Done> remove(const std::string& key) override {
    auto reply = call("DEL", {"DEL", m_url.prefix + key});
    if (!reply) return reply.failure();
    if ((*reply)->type != REDIS_REPLY_INTEGER) return unexpected("DEL", **reply);
    return Done{};
  }

  Result<bool> exists(const std::string& key) override {
    return integer_answer("EXISTS", {"EXISTS", m_url.prefix + key});
  }

  Result<bool> acquire_lease(const std::string& name, const std::string& owner,
                             int64_t ttl_ms) override {
    return integer_answer("SET NX", {"EVAL", k_acquire_script, "1", m_url.prefix + name, owner,
                                     std::to_string(ttl_ms)});
  }

  Result<bool> renew_lease(const std::string& name, const std::string& owner,
                           int64_t ttl_ms) override {
    std::string ttl = std::to_string(ttl_ms);
    return integer_answer("EVAL renew",
                          {"EVAL", k_renew_script, "1", m_url.prefix + name, owner, ttl});
  }

  Result<bool> release_lease(const std::string& name, const std::string& owner) override {
    return integer_answer("EVAL release",
                          {"EVAL", k_release_script, "1", m_url.prefix + name, owner});
  }

  Result<std::vector<std::string>> list(const std::string& key_prefix, size_t limit) override {
    std::set<std::string> found;  // SCAN may answer a key more than once
    std::string pattern = glob_escaped(m_url.prefix + key_prefix) + "*";
    std::string count = std::to_string(std::clamp<size_t>(limit, 100, 1000));
    std::string cursor = "0";
    // The whole listing is bounded too: in time (each page is an operation of its own) and in the
    // bytes of names kept, so a server answering pages forever cannot hold a pull.
    auto listing_deadline = Clock::now() + k_listing_operations * m_options.op_timeout;
    uint64_t name_bytes = 0;
    while (found.size() < limit) {
      if (Clock::now() >= listing_deadline) {
        m_context.reset();
        return Failure{Failure::Kind::timeout,
                       where("SCAN") + "listing timed out after " +
                           std::to_string(k_listing_operations * m_options.op_timeout.count()) +
                           " ms"};
      }
      auto reply = call("SCAN", {"SCAN", cursor, "MATCH", pattern, "COUNT", count});
      if (!reply) return reply.failure();
      const redisReply& page = **reply;
      if (page.type != REDIS_REPLY_ARRAY || page.elements != 2 ||
          page.element[0]->type != REDIS_REPLY_STRING || page.element[1]->type != REDIS_REPLY_ARRAY)
        return unexpected("SCAN", page);
      for (size_t i = 0; i < page.element[1]->elements && found.size() < limit; ++i) {
        const redisReply& name = *page.element[1]->element[i];
        if (name.type != REDIS_REPLY_STRING) return unexpected("SCAN", page);
        std::string_view text(name.str, name.len);
        if (!text.starts_with(m_url.prefix)) continue;
        name_bytes += text.size();
        if (m_options.max_reply_bytes != 0 && name_bytes > m_options.max_reply_bytes)
          return too_long("SCAN");
        found.emplace(text.substr(m_url.prefix.size()));
      }
      cursor.assign(page.element[0]->str, page.element[0]->len);
      if (cursor == "0") break;
    }
    return std::vector<std::string>(found.begin(), found.end());
  }

  std::string describe() const override {
    return m_where + "/" + std::to_string(m_url.db) +
           (m_url.prefix.empty() ? " (no prefix)" : " (prefix " + printable(m_url.prefix) + ")");
  }

private:
  // Sends `commands` as one pipeline (one round trip), connecting first when not connected.
  // Whether a call starts an operation (a deadline of its own) or goes on with the one under way.
  enum class Deadline { start, keep };

  Result<std::vector<Reply>> exchange(const char* op, const std::vector<Command>& commands,
                                      Deadline deadline = Deadline::start) {
    SigpipeGuard guard;
    if (deadline == Deadline::start) m_deadline = Clock::now() + m_options.op_timeout;
    if (m_context && peer_closed(*m_context)) m_context.reset();
    if (!m_context)
      if (std::optional<Failure> failed = connect(op)) return *failed;
    return send(op, commands);
  }

  Result<Reply> call(const char* op, const Command& command,
                     Deadline deadline = Deadline::start) {
    auto replies = exchange(op, {command}, deadline);
    if (!replies) return replies.failure();
    return std::move((*replies)[0]);
  }

  // A command answering 0 or 1 (EXISTS, the lease scripts), as a bool.
  Result<bool> integer_answer(const char* op, const Command& command) {
    auto reply = call(op, command);
    if (!reply) return reply.failure();
    if ((*reply)->type != REDIS_REPLY_INTEGER) return unexpected(op, **reply);
    return (*reply)->integer > 0;
  }

  // Writes the commands and reads their replies by m_deadline, holding at most
  // max_reply_bytes (and one read's worth more) of a reply.
  Result<std::vector<Reply>> send(const char* op, const std::vector<Command>& commands) {
    for (const Command& command : commands) {
      std::vector<const char*> argv;
      std::vector<size_t> lengths;
      for (std::string_view arg : command) {
        argv.push_back(arg.data());
        lengths.push_back(arg.size());
      }
      errno = 0;
      if (redisAppendCommandArgv(m_context.get(), static_cast<int>(argv.size()), argv.data(),
                                 lengths.data()) != REDIS_OK)
        return io_failure(op, errno);
    }
    // A blocking write returns once all its bytes are sent: bound it by the time left too.
    timeval left = to_timeval(std::chrono::milliseconds(std::max(ms_left(m_deadline), 1)));
    ::setsockopt(m_context->fd, SOL_SOCKET, SO_SNDTIMEO, &left, sizeof left);
    for (int done = 0; !done;) {
      if (!wait_ready(m_context->fd, POLLOUT, m_deadline)) return timed_out(op);
      errno = 0;
      if (redisBufferWrite(m_context.get(), &done) != REDIS_OK) return io_failure(op, errno);
    }
    std::vector<Reply> replies;
    t_reply_bytes = 0;
    t_reply_limit = m_options.max_reply_bytes;
    for (size_t i = 0; i < commands.size(); ++i) {
      void* raw = nullptr;
      for (;;) {
        errno = 0;
        t_array_refused = false;
        t_reply_refused = false;
        if (redisGetReplyFromReader(m_context.get(), &raw) != REDIS_OK)
          return io_failure(op, errno);
        if (raw != nullptr) break;
        const redisReader& reader = *m_context->reader;
        if (m_options.max_reply_bytes != 0 && reader.len - reader.pos > m_options.max_reply_bytes)
          return too_long(op);
        if (!wait_ready(m_context->fd, POLLIN, m_deadline)) return timed_out(op);
        errno = 0;
        if (redisBufferRead(m_context.get()) != REDIS_OK) return io_failure(op, errno);
      }
      replies.emplace_back(static_cast<redisReply*>(raw));
    }
    // Anything after the replies asked for is a server out of step with its requests: each of
    // these replies may answer an earlier request, so none is used.
    if (m_context->reader->pos != m_context->reader->len) {
      m_context.reset();
      return Failure{Failure::Kind::error,
                     where(op) + "protocol error: more replies than requests"};
    }
    return Result<std::vector<Reply>>(std::move(replies));
  }

  Failure timed_out(const char* op) {
    m_context.reset();  // a request or reply cut short: never reuse
    return Failure{Failure::Kind::timeout, where(op) + "timed out after " +
                                               std::to_string(m_options.op_timeout.count()) +
                                               " ms"};
  }

  Failure too_long(const char* op) {
    m_context.reset();
    return Failure{Failure::Kind::error,
                   where(op) + "protocol error: reply longer than " +
                       std::to_string(m_options.max_reply_bytes) + " bytes"};
  }

  // kiln's get script's {"kiln-refused", why, detail} as a Failure::Kind::refused; nullopt for
  // any other reply.
  std::optional<Failure> refusal(const char* op, const redisReply& reply,
                                 const ValueLimits& limits) const {
    if (reply.type != REDIS_REPLY_ARRAY || reply.elements != 3) return std::nullopt;
    const redisReply& tag = *reply.element[0];
    const redisReply& why = *reply.element[1];
    const redisReply& detail = *reply.element[2];
    if (tag.type != REDIS_REPLY_STRING || std::string_view(tag.str, tag.len) != k_refused ||
        why.type != REDIS_REPLY_STRING)
      return std::nullopt;
    std::string_view reason(why.str, why.len);
    Failure refused{Failure::Kind::refused, where(op)};
    if (reason == "type" && detail.type == REDIS_REPLY_STRING) {
      refused.refusal = Failure::Refusal::type;
      refused.message += "the key holds a " + std::string(detail.str, detail.len) + ", not a string";
    } else if (reason == "size" && detail.type == REDIS_REPLY_INTEGER) {
      refused.refusal = Failure::Refusal::size;
      refused.message += "the value's " + std::to_string(detail.integer) +
                         " bytes are over the limit of " + std::to_string(limits.max_bytes);
    } else if (reason == "prefix" && detail.type == REDIS_REPLY_INTEGER) {
      refused.refusal = Failure::Refusal::prefix;
      refused.message += "the value does not start with the header asked for";
    } else {
      return std::nullopt;
    }
    return refused;
  }

  // Connects, sets the op timeout, and AUTHs and SELECTs as the URL asks.
  std::optional<Failure> connect(const char* op) {
    errno = 0;
    m_context.reset(redisConnectWithTimeout(m_url.host.c_str(), m_url.port,
                                            to_timeval(m_options.connect_timeout)));
    int saved_errno = errno;
    if (!m_context) return Failure{Failure::Kind::error, where(op) + "out of memory"};
    if (m_context->err)
      return io_failure(op, saved_errno, "connect timed out", m_options.connect_timeout);
    bound_reply_arrays(*m_context);
    if (redisSetTimeout(m_context.get(), to_timeval(m_options.op_timeout)) != REDIS_OK)
      return io_failure(op, errno);

    std::string db = std::to_string(m_url.db);
    std::vector<Command> setup;
    if (!m_url.password.empty() && m_url.user.empty()) setup.push_back({"AUTH", m_url.password});
    if (!m_url.password.empty() && !m_url.user.empty())
      setup.push_back({"AUTH", m_url.user, m_url.password});
    if (m_url.db != 0) setup.push_back({"SELECT", db});
    if (setup.empty()) return std::nullopt;
    auto replies = send(op, setup);
    if (!replies) return replies.failure();
    for (size_t i = 0; i < setup.size(); ++i) {
      if (is_ok_status(*(*replies)[i])) continue;
      std::string step = std::string(op) + ": " + std::string(setup[i][0]);
      Failure failure = unexpected(step.c_str(), *(*replies)[i]);
      m_context.reset();  // not authenticated or on the wrong db: never reuse
      return failure;
    }
    return std::nullopt;
  }

  std::string where(std::string_view op) const {
    return m_where + ": " + std::string(op) + ": ";
  }

  // The context's I/O or protocol error as a Failure; drops the connection so the next call
  // reconnects.
  Failure io_failure(const char* op, int saved_errno, const char* timed_out = "timed out",
                     std::optional<std::chrono::milliseconds> limit = std::nullopt) {
    Failure failure;
    if (is_timeout(*m_context, saved_errno)) {
      failure.kind = Failure::Kind::timeout;
      failure.message = where(op) + timed_out + " after " +
                        std::to_string(limit.value_or(m_options.op_timeout).count()) + " ms";
    } else if (m_context->err == REDIS_ERR_OOM && t_reply_refused) {
      failure.message = where(op) + "protocol error: reply longer than " +
                        std::to_string(m_options.max_reply_bytes) + " bytes";
    } else if (m_context->err == REDIS_ERR_OOM && t_array_refused) {
      failure.message = where(op) + "protocol error: reply array longer than " +
                        std::to_string(k_max_reply_elements) + " elements";
    } else {
      std::string reason = m_context->errstr[0] ? m_context->errstr : "i/o error";
      if (reason[0] >= 'A' && reason[0] <= 'Z' && reason.size() > 1 && reason[1] >= 'a')
        reason[0] = static_cast<char>(reason[0] - 'A' + 'a');
      failure.message = where(op) + reason;
    }
    m_context.reset();
    return failure;
  }

  // An error reply keeps the connection; a reply of the wrong type drops it (not a sane server).
  Failure unexpected(const char* op, const redisReply& reply) {
    if (reply.type == REDIS_REPLY_ERROR)
      return Failure{Failure::Kind::error, where(op) + std::string(reply.str, reply.len)};
    m_context.reset();
    return Failure{Failure::Kind::error,
                   where(op) + "unexpected " + type_name(reply.type) + " reply"};
  }

  RedisUrl m_url;
  RedisOptions m_options;
  std::string m_where;  // "redis HOST:PORT", for messages
  Context m_context;    // null until connected, and after a failure
  Clock::time_point m_deadline;  // of the operation under way
};

}  // namespace

std::unique_ptr<Backend> make_redis_backend(RedisUrl url, RedisOptions options) {
  return std::make_unique<RedisBackend>(std::move(url), options);
}

}  // namespace kiln::cache::remote
