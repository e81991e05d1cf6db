// Test harness: a private redis-server child on a free 127.0.0.1 port, stopped when destroyed.
//
// Each RedisServer runs its own `redis-server` (from PATH, else /usr/bin/redis-server) with no
// persistence, in a temp dir removed at the end; it never touches a system Redis service. When
// redis-server is missing, installed() is false and tests should GTEST_SKIP(); when it is there
// but fails to start, started() is false and error() says why (with the end of its log).
// The child gets PR_SET_PDEATHSIG, so it dies with the thread that started it (even on a crash):
// construct servers on a thread that outlives them (the test's own thread).
#pragma once

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

namespace kiln::testing {

class RedisServer {
public:
  // `extra_args` go after the defaults, e.g. {"--maxmemory", "1mb"} or {"--requirepass", "pw"}.
  explicit RedisServer(std::vector<std::string> extra_args = {})
      : m_extra_args(std::move(extra_args)) {
    m_binary = find_binary();
    if (m_binary.empty()) {
      m_error = "redis-server is not installed (not on PATH, not /usr/bin/redis-server)";
      return;
    }
    std::error_code ec;
    std::filesystem::path tmp = std::filesystem::temp_directory_path(ec);
    std::string pattern = ((ec ? "/tmp" : tmp) / "kiln-redis-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      m_error = "cannot make a temp dir for redis-server";
      return;
    }
    m_dir = pattern;
    m_debug_option = knows_debug_option(m_binary);
    // Another process may take the port between free_port() and the server's bind: retry then.
    for (int attempt = 0; attempt < 5; ++attempt) {
      m_port = free_port();
      if (m_port <= 0 || launch() != Launch::exited) break;
    }
  }

  ~RedisServer() {
    stop();
    if (!m_dir.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(m_dir, ignored);
    }
  }

  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  bool installed() const { return !m_binary.empty(); }
  // True while the server runs (false when it could not start, or after kill_now()/stop()).
  bool started() const { return m_pid > 0; }
  const std::string& error() const { return m_error; }
  int port() const { return m_port; }
  pid_t pid() const { return m_pid; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(m_port); }

  // SIGKILL, as a crash would; the port is free again once this returns.
  void kill_now() {
    if (m_pid <= 0) return;
    ::kill(m_pid, SIGKILL);
    ::waitpid(m_pid, nullptr, 0);
    m_pid = -1;
  }

  // SIGTERM, then SIGKILL after 2 s.
  void stop() {
    if (m_pid <= 0) return;
    ::kill(m_pid, SIGCONT);  // a paused server cannot act on SIGTERM
    ::kill(m_pid, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (::waitpid(m_pid, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill_now();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    m_pid = -1;
  }

  // A hung server: SIGSTOP keeps its socket open (the kernel still accepts connections) but
  // nothing answers, until resume().
  void pause() {
    if (m_pid > 0) ::kill(m_pid, SIGSTOP);
  }
  void resume() {
    if (m_pid > 0) ::kill(m_pid, SIGCONT);
  }

  // Starts the server again on the same port (stopping it first if it runs). Data is not kept.
  bool restart() {
    stop();
    if (m_binary.empty() || m_dir.empty() || m_port <= 0) return false;
    launch();
    return started();
  }

  // Sends one command over a fresh connection (with AUTH when --requirepass was given) and
  // answers the reply as text: strings and statuses as they are, integers in decimal, nil as
  // "(nil)", arrays as their elements one a line, error replies as their text ("ERR ...");
  // "" when the server cannot be reached. Blocks (up to 10 s) while the server is paused.
  std::string command(std::initializer_list<std::string> args) const {
    return command_with(std::chrono::seconds(10), std::vector<std::string>(args));
  }

private:
  static std::string find_binary() {
    const char* path = std::getenv("PATH");
    std::string dirs = path ? path : "";
    size_t start = 0;
    while (start <= dirs.size()) {
      size_t end = dirs.find(':', start);
      if (end == std::string::npos) end = dirs.size();
      std::string candidate = dirs.substr(start, end - start) + "/redis-server";
      if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
      start = end + 1;
    }
    return ::access("/usr/bin/redis-server", X_OK) == 0 ? "/usr/bin/redis-server" : "";
  }

  // A port nothing listens on right now: bind 127.0.0.1:0, read the port back, close.
  static int free_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    int port = -1;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0)
      port = ntohs(address.sin_port);
    ::close(fd);
    return port;
  }

  // Redis 7 refuses DEBUG unless enabled; older servers do not know the option.
  static bool knows_debug_option(const std::string& binary) {
    static const std::string s_binary = binary;  // asked once per process
    static const bool s_knows = ask_version(binary);
    return binary == s_binary ? s_knows : ask_version(binary);
  }

  static bool ask_version(const std::string& binary) {
    std::string line;
    if (FILE* pipe = ::popen(("'" + binary + "' --version 2>/dev/null").c_str(), "r")) {
      char buffer[256];
      if (std::fgets(buffer, sizeof(buffer), pipe)) line = buffer;
      ::pclose(pipe);
    }
    size_t v = line.find("v=");
    return v != std::string::npos && std::atoi(line.c_str() + v + 2) >= 7;
  }

  std::string command_with(std::chrono::milliseconds timeout,
                           const std::vector<std::string>& args) const {
    redisContext* context = connect(timeout);
    if (context == nullptr) return "";
    std::string password = requirepass();
    std::string auth = password.empty() ? "OK" : send(context, {"AUTH", password});
    std::string text = auth == "OK" ? send(context, args) : auth;
    redisFree(context);
    return text;
  }

  std::string requirepass() const {
    for (size_t i = 0; i + 1 < m_extra_args.size(); ++i)
      if (m_extra_args[i] == "--requirepass") return m_extra_args[i + 1];
    return "";
  }

  enum class Launch { ready, exited, hung };

  Launch launch() {
    // --hz 100: the server acts on SIGTERM within 10 ms instead of 100.
    std::vector<std::string> args = {m_binary,
                                     "--port", std::to_string(m_port),
                                     "--bind", "127.0.0.1",
                                     "--save", "",
                                     "--appendonly", "no",
                                     "--dir", m_dir,
                                     "--logfile", m_dir + "/redis.log",
                                     "--hz", "100"};
    if (m_debug_option) args.insert(args.end(), {"--enable-debug-command", "local"});
    args.insert(args.end(), m_extra_args.begin(), m_extra_args.end());
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);

    std::string log_path = m_dir + "/redis.log";
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) {
      m_error = "fork failed";
      return Launch::exited;
    }
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the test may block signals redis needs
      int null = ::open("/dev/null", O_RDONLY);
      int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);  // config errors
      if (null >= 0) ::dup2(null, 0);
      if (log >= 0) {
        ::dup2(log, 1);
        ::dup2(log, 2);
      }
      ::syscall(SYS_close_range, 3U, ~0U, 0U);  // no inherited sockets held open by the child
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    m_pid = pid;
    Launch outcome = wait_ready();
    if (outcome == Launch::ready) {
      m_error.clear();
      return outcome;
    }
    kill_now();
    m_error = "redis-server did not start on 127.0.0.1:" + std::to_string(m_port) + "; " +
              m_dir + "/redis.log ends: " + log_tail();
    return outcome;
  }

  std::string log_tail() const {
    char buffer[400];
    size_t n = 0;
    if (FILE* log = std::fopen((m_dir + "/redis.log").c_str(), "r")) {
      if (std::fseek(log, -static_cast<long>(sizeof(buffer)), SEEK_END) != 0) std::rewind(log);
      n = std::fread(buffer, 1, sizeof(buffer), log);
      std::fclose(log);
    }
    return std::string(buffer, n);
  }

  // Polls for up to 5 s until our own child (checked by pid, not just any Redis) answers.
  Launch wait_ready() {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    std::string own = "process_id:" + std::to_string(m_pid) + "\r";
    while (std::chrono::steady_clock::now() < deadline) {
      if (::waitpid(m_pid, nullptr, WNOHANG) == m_pid) {
        m_pid = -1;  // exited: most likely the port was taken meanwhile
        return Launch::exited;
      }
      if (command_with(std::chrono::milliseconds(200), {"INFO", "server"}).find(own) !=
          std::string::npos)
        return Launch::ready;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return Launch::hung;
  }

  redisContext* connect(std::chrono::milliseconds timeout) const {
    if (m_pid <= 0) return nullptr;
    timeval tv{static_cast<time_t>(timeout.count() / 1000),
               static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
    redisContext* context = redisConnectWithTimeout("127.0.0.1", m_port, tv);
    if (context == nullptr) return nullptr;
    if (context->err || redisSetTimeout(context, tv) != REDIS_OK) {
      redisFree(context);
      return nullptr;
    }
    return context;
  }

  static std::string send(redisContext* context, const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (const std::string& arg : args) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    auto* reply = static_cast<redisReply*>(
        redisCommandArgv(context, static_cast<int>(argv.size()), argv.data(), lengths.data()));
    if (reply == nullptr) return "";
    std::string text = as_text(*reply);
    freeReplyObject(reply);
    return text;
  }

  static std::string as_text(const redisReply& reply) {
    switch (reply.type) {
      case REDIS_REPLY_INTEGER: return std::to_string(reply.integer);
      case REDIS_REPLY_NIL: return "(nil)";
      case REDIS_REPLY_ARRAY: {
        std::string text;
        for (size_t i = 0; i < reply.elements; ++i)
          text += (i ? "\n" : "") + as_text(*reply.element[i]);
        return text;
      }
      default: return std::string(reply.str ? reply.str : "", reply.len);
    }
  }

  std::vector<std::string> m_extra_args;
  std::string m_binary;
  std::string m_dir;
  std::string m_error;
  bool m_debug_option = false;
  int m_port = -1;
  pid_t m_pid = -1;
};

}  // namespace kiln::testing
