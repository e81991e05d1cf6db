// posix_spawn-based runner: output captured through a temporary file per process.
#include "process.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

extern char** environ;

namespace kiln::bench {

std::vector<ProcessResult> run_together(const std::vector<std::vector<std::string>>& commands) {
  using clock = std::chrono::steady_clock;
  std::vector<ProcessResult> results(commands.size());
  std::vector<pid_t> pids(commands.size(), -1);
  std::vector<std::string> out_files(commands.size());
  std::vector<clock::time_point> started(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    char name[] = "/tmp/kiln-bench-out-XXXXXX";
    int fd = mkstemp(name);
    if (fd < 0) continue;
    out_files[i] = name;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fd, 1);
    posix_spawn_file_actions_addclose(&actions, fd);
    std::vector<std::string> args = commands[i];
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    started[i] = clock::now();
    if (posix_spawn(&pids[i], argv[0], &actions, nullptr, argv.data(), environ) != 0) {
      pids[i] = -1;
    }
    posix_spawn_file_actions_destroy(&actions);
    close(fd);
  }
  for (size_t i = 0; i < commands.size(); ++i) {
    if (pids[i] < 0) continue;
    int status = 0;
    waitpid(pids[i], &status, 0);
    results[i].wall_ms =
        std::chrono::duration<double, std::milli>(clock::now() - started[i]).count();
    results[i].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  for (size_t i = 0; i < commands.size(); ++i) {
    if (out_files[i].empty()) continue;
    std::ifstream in(out_files[i]);
    std::ostringstream text;
    text << in.rdbuf();
    results[i].out = text.str();
    std::remove(out_files[i].c_str());
  }
  return results;
}

}  // namespace kiln::bench
