// Helpers for tests that drive kiln_cache_worker as real processes.
#pragma once

#include "test_util.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace kiln::cache::testing {

// One worker process; its stdout and stderr go to files.
struct Worker {
  pid_t pid = -1;
  std::string out;
  std::string err;
};

inline Worker spawn_worker(const TempDir& tmp, const std::string& name, std::vector<std::string> args) {
  Worker w;
  w.out = tmp.sub(name + ".out");
  w.err = tmp.sub(name + ".err");
  args.insert(args.begin(), KILN_CACHE_WORKER);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, w.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&actions, 2, w.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int rc = posix_spawn(&w.pid, KILN_CACHE_WORKER, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0);
  return w;
}

// The worker's exit code; kills it and fails after `limit` (a hang is a failure, not a wait).
inline int wait_worker(const Worker& w, std::chrono::seconds limit = std::chrono::seconds(60)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    pid_t done = ::waitpid(w.pid, &status, WNOHANG);
    if (done == w.pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(w.pid, SIGKILL);
      ::waitpid(w.pid, &status, 0);
      ADD_FAILURE() << "worker " << w.pid << " hung";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

inline std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline std::map<std::string, int> count_lines(const std::string& path) {
  std::map<std::string, int> counts;
  for (const std::string& line : lines_of(path)) ++counts[line];
  return counts;
}

inline bool wait_for_file(const std::string& path) {
  for (int i = 0; i < 4000; ++i) {
    if (!lines_of(path).empty()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

}  // namespace kiln::cache::testing
