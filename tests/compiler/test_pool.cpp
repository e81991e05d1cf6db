// The compile pool: every index once, and CPU time (not waiting) counted for the caller.
#include "compiler/pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace kiln::compiler {
namespace {

TEST(Pool, RunsEveryIndexOnce) {
  std::vector<std::atomic<int>> seen(100);
  parallel_for(seen.size(), 4, [&](size_t i) { ++seen[i]; });
  for (const auto& s : seen) EXPECT_EQ(s.load(), 1);
}

// A compile's recorded cost is its CPU time: waiting (for a busy machine, here a sleep) adds
// nothing, work on the pool's threads is counted for the thread that started them.
TEST(Pool, HelperCpuTimeCountsWorkNotWaiting) {
  uint64_t before = helper_cpu_ns();
  parallel_for(2, 2, [](size_t) { std::this_thread::sleep_for(std::chrono::milliseconds(150)); });
  EXPECT_LT(helper_cpu_ns() - before, uint64_t{30'000'000}) << "sleeping is not compiling";

  before = helper_cpu_ns();
  parallel_for(2, 2, [](size_t) {
    uint64_t start = thread_cpu_ns();
    volatile uint64_t sink = 0;
    while (thread_cpu_ns() - start < 50'000'000) sink = sink + 1;
  });
  EXPECT_GE(helper_cpu_ns() - before, uint64_t{45'000'000}) << "the helper's 50 ms of CPU";
}

}  // namespace
}  // namespace kiln::compiler
