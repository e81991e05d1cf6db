// Work-sharing loop over std::thread: each worker takes the next index until none are left.
#include "compiler/pool.h"

#include <algorithm>
#include <time.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <thread>
#include <vector>

namespace kiln::compiler {

namespace {

int core_count() {
  unsigned cores = std::thread::hardware_concurrency();
  return cores > 0 ? static_cast<int>(cores) : 1;
}

// $KILN_COMPILE_THREADS when set to a whole number from 1 to 1024.
std::optional<int> threads_from_env() {
  const char* env = std::getenv("KILN_COMPILE_THREADS");
  if (!env || !*env) return std::nullopt;
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  if (end && *end == '\0' && n > 0 && n <= 1024) return static_cast<int>(n);
  return std::nullopt;
}

}  // namespace

int compile_threads(int requested) {
  if (requested > 0) return requested;
  return threads_from_env().value_or(core_count());
}

std::string compile_threads_env_problem() {
  const char* env = std::getenv("KILN_COMPILE_THREADS");
  if (!env || !*env || threads_from_env()) return "";
  return "KILN_COMPILE_THREADS='" + std::string(env) +
         "': expected a whole number from 1 to 1024; using " + std::to_string(core_count()) +
         " (the core count)";
}

thread_local uint64_t t_helper_cpu_ns = 0;

uint64_t thread_cpu_ns() {
  timespec ts{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t helper_cpu_ns() { return t_helper_cpu_ns; }

void parallel_for(size_t count, int threads, const std::function<void(size_t)>& body) {
  size_t workers = std::min(count, static_cast<size_t>(std::max(threads, 1)));
  if (workers <= 1) {
    for (size_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> helpers_ns{0};
  auto work = [&] {
    for (size_t i = next++; i < count; i = next++) body(i);
  };
  std::vector<std::thread> pool;
  for (size_t w = 1; w < workers; ++w)
    pool.emplace_back([&] {
      work();
      helpers_ns += thread_cpu_ns() + helper_cpu_ns();  // a new thread: all of its CPU time
    });
  work();
  for (std::thread& t : pool) t.join();
  t_helper_cpu_ns += helpers_ns.load();
}

}  // namespace kiln::compiler
