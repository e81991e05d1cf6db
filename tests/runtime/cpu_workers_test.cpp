// The CPU target's worker pool: every part runs once, callers share it, and it does not grow
// with each run.
#include "runtime/cpu_workers.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kiln::runtime {
namespace {

TEST(CpuWorkers, EveryPartRunsExactlyOnce) {
  for (size_t parts : {1u, 2u, 3u, 7u, 100u}) {
    for (int threads : {1, 2, 4}) {
      std::vector<std::atomic<int>> seen(parts);
      run_parts(parts, threads, [&](size_t i) { ++seen[i]; });
      for (size_t i = 0; i < parts; ++i)
        EXPECT_EQ(seen[i].load(), 1) << "part " << i << " of " << parts << " on " << threads;
    }
  }
}

TEST(CpuWorkers, RunsPartsOnSeveralThreadsAndReusesThem) {
  std::mutex mutex;
  std::set<std::thread::id> ids;
  // Parts that wait for each other can only finish if they run at once.
  std::atomic<int> arrived{0};
  run_parts(3, 3, [&](size_t) {
    {
      std::lock_guard lock(mutex);
      ids.insert(std::this_thread::get_id());
    }
    ++arrived;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (arrived.load() < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  });
  EXPECT_EQ(arrived.load(), 3);
  EXPECT_EQ(ids.size(), 3u);
  int started = cpu_workers();
  EXPECT_GE(started, 2);
  for (int i = 0; i < 50; ++i) run_parts(3, 3, [](size_t) {});
  EXPECT_EQ(cpu_workers(), started) << "the pool grew although no more threads were asked for";
}

TEST(CpuWorkers, CallersOnManyThreadsShareThePool) {
  std::atomic<long> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 6; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 200; ++r) run_parts(5, 3, [&](size_t i) { total += static_cast<long>(i) + 1; });
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 6L * 200 * 15);
}

// A part throwing on the calling thread: the exception reaches the caller only once the workers
// have left the run (the run's state lives on the caller's stack), and the pool still works.
TEST(CpuWorkers, APartThatThrowsOnTheCallerEndsTheRunAndThePoolGoesOn) {
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> worker_parts{0};
  bool caught = false;
  try {
    run_parts(8, 3, [&](size_t) {
      if (std::this_thread::get_id() == caller) throw std::runtime_error("part failed");
      ++worker_parts;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    });
  } catch (const std::runtime_error& e) {
    caught = std::string(e.what()) == "part failed";
  }
  EXPECT_TRUE(caught);
  EXPECT_LT(worker_parts.load(), 8);
  std::atomic<int> seen{0};
  run_parts(6, 3, [&](size_t) { ++seen; });
  EXPECT_EQ(seen.load(), 6);
}

}  // namespace
}  // namespace kiln::runtime
