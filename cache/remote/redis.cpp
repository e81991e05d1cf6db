// The Redis remote backend over hiredis's blocking API, and the redis:// URL parser.
#include "cache/remote/redis.h"

#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <charconv>
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

// The URL with its password replaced by "***", so messages never carry a secret.
std::string redacted(const std::string& url) {
  size_t start = url.find("://");
  size_t at = url.rfind('@');
  if (start == std::string::npos || at == std::string::npos || at < start) return url;
  size_t colon = url.find(':', start + 3);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "***" + url.substr(at);
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
const redisReplyObjectFunctions* g_hiredis_functions = nullptr;  // hiredis's own, set once
thread_local bool t_array_refused = false;

void* create_bounded_array(const redisReadTask* task, int elements) {
  if (elements > k_max_reply_elements) {
    t_array_refused = true;
    return nullptr;  // the reader reports an out-of-memory error
  }
  return g_hiredis_functions->createArray(task, elements);
}

void bound_reply_arrays(redisContext& context) {
  if (context.reader == nullptr || context.reader->fn == nullptr) return;
  static redisReplyObjectFunctions bounded = [&] {
    g_hiredis_functions = context.reader->fn;
    redisReplyObjectFunctions functions = *context.reader->fn;
    functions.createArray = create_bounded_array;
    return functions;
  }();
  context.reader->fn = &bounded;
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

  Result<std::optional<std::string>> get(const std::string& key, int64_t refresh_ttl_ms) override {
    std::string name = m_url.prefix + key, ttl = std::to_string(refresh_ttl_ms);
    std::vector<Command> commands{{"GET", name}};
    if (refresh_ttl_ms > 0) commands.push_back({"PEXPIRE", name, ttl});
    auto replies = exchange("GET", commands);
    if (!replies) return replies.failure();
    if (refresh_ttl_ms > 0 && (*replies)[1]->type != REDIS_REPLY_INTEGER)
      return unexpected("GET: PEXPIRE", *(*replies)[1]);
    const redisReply& value = *(*replies)[0];
    if (value.type == REDIS_REPLY_NIL) return std::optional<std::string>();
    if (value.type != REDIS_REPLY_STRING) return unexpected("GET", value);
    return std::optional<std::string>(std::string(value.str, value.len));
  }

  Result<Done> put(const std::string& key, const std::string& bytes, int64_t ttl_ms) override {
    std::string name = m_url.prefix + key, ttl = std::to_string(ttl_ms);
    Command set{"SET", name, bytes};
    if (ttl_ms > 0) set.insert(set.end(), {"PX", ttl});
    auto reply = call("SET", set);
    if (!reply) return reply.failure();
    if (!is_ok_status(**reply)) return unexpected("SET", **reply);
    return Done{};
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
    std::string ttl = std::to_string(ttl_ms);
    auto reply = call("SET NX", {"SET", m_url.prefix + name, owner, "NX", "PX", ttl});
    if (!reply) return reply.failure();
    if ((*reply)->type == REDIS_REPLY_NIL) return false;
    if (!is_ok_status(**reply)) return unexpected("SET NX", **reply);
    return true;
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
    while (found.size() < limit) {
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
        if (text.starts_with(m_url.prefix)) found.emplace(text.substr(m_url.prefix.size()));
      }
      cursor.assign(page.element[0]->str, page.element[0]->len);
      if (cursor == "0") break;
    }
    return std::vector<std::string>(found.begin(), found.end());
  }

  std::string describe() const override {
    return m_where + "/" + std::to_string(m_url.db) +
           (m_url.prefix.empty() ? " (no prefix)" : " (prefix " + m_url.prefix + ")");
  }

private:
  // Sends `commands` as one pipeline (one round trip), connecting first when not connected.
  Result<std::vector<Reply>> exchange(const char* op, const std::vector<Command>& commands) {
    SigpipeGuard guard;
    if (m_context && peer_closed(*m_context)) m_context.reset();
    if (!m_context)
      if (std::optional<Failure> failed = connect(op)) return *failed;
    return send(op, commands);
  }

  Result<Reply> call(const char* op, const Command& command) {
    auto replies = exchange(op, {command});
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
    std::vector<Reply> replies;
    for (size_t i = 0; i < commands.size(); ++i) {
      void* raw = nullptr;
      errno = 0;
      t_array_refused = false;
      int status = redisGetReply(m_context.get(), &raw);
      int saved_errno = errno;
      if (status != REDIS_OK || raw == nullptr)
        return io_failure(op, saved_errno);
      replies.emplace_back(static_cast<redisReply*>(raw));
    }
    return Result<std::vector<Reply>>(std::move(replies));
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
};

}  // namespace

std::unique_ptr<Backend> make_redis_backend(RedisUrl url, RedisOptions options) {
  return std::make_unique<RedisBackend>(std::move(url), options);
}

}  // namespace kiln::cache::remote
