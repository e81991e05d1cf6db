// Size cap with least-recently-used eviction, age pruning and clearing.
#include "cache/cache.h"
#include "test_util.h"
#include "cache/key_lock.h"

#include <chrono>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace kiln::cache {
namespace {

using testing::contents_for;
using testing::fields_for;
using testing::options_in;
using testing::TempDir;

// A cache whose clock the test moves by hand, one second per tick.
class CacheEviction : public ::testing::Test {
protected:
  std::unique_ptr<Cache> open(std::optional<uint64_t> max_size) {
    Options o = options_in(tmp.path(), &warnings);
    o.max_size = max_size;
    o.now_ms = [this] { return clock_ms; };
    return Cache::open(o);
  }
  std::string put(Cache& cache, const std::string& graph) {
    clock_ms += 1000;
    auto fields = fields_for(graph);
    std::string key = make_key(fields);
    EXPECT_TRUE(cache.store(key, fields, contents_for(graph)).ok());
    return key;
  }
  bool touch(Cache& cache, const std::string& graph) {
    clock_ms += 1000;
    auto fields = fields_for(graph);
    return cache.lookup(make_key(fields), fields).hit();
  }
  bool present(Cache& cache, const std::string& graph) {
    return cache.read(make_key(fields_for(graph))).hit();
  }
  uint64_t entry_size(Cache& cache, const std::string& graph) {
    return cache.read(make_key(fields_for(graph))).entry.info.stored_bytes;
  }

  TempDir tmp;
  std::vector<std::string> warnings;
  int64_t clock_ms = 1'700'000'000'000;
};

TEST_F(CacheEviction, InsertCrossingTheCapEvictsLeastRecentlyUsed) {
  uint64_t one;
  {
    auto probe = open(0);
    put(*probe, "probe");
    one = entry_size(*probe, "probe");
    ASSERT_TRUE(probe->clear().ok());
  }
  // Room for three entries of this size.
  auto cache = open(one * 3 + one / 2);
  put(*cache, "a");
  put(*cache, "b");
  put(*cache, "c");
  ASSERT_TRUE(touch(*cache, "a"));  // b is now the least recently used
  put(*cache, "d");
  EXPECT_TRUE(present(*cache, "a"));
  EXPECT_FALSE(present(*cache, "b"));
  EXPECT_TRUE(present(*cache, "c"));
  EXPECT_TRUE(present(*cache, "d"));
  put(*cache, "e");
  EXPECT_FALSE(present(*cache, "c"));
  EXPECT_TRUE(present(*cache, "a"));
  EXPECT_LE(cache->stats()->bytes, cache->max_size());
}

TEST_F(CacheEviction, ZeroCapMeansNoCap) {
  auto cache = open(0);
  for (int i = 0; i < 10; ++i) put(*cache, std::string("g").append(std::to_string(i)));
  EXPECT_EQ(cache->stats()->entries, 10u);
}

TEST_F(CacheEviction, CapComesFromTheEnvironment) {
  ::setenv("KILN_CACHE_MAX_SIZE", "500M", 1);
  auto cache = open(std::nullopt);
  ::unsetenv("KILN_CACHE_MAX_SIZE");
  EXPECT_EQ(cache->max_size(), 500ull << 20);
  EXPECT_EQ(open(std::nullopt)->max_size(), k_default_max_size);
}

TEST_F(CacheEviction, PruneToSizeKeepsTheMostRecentlyUsed) {
  auto cache = open(0);
  for (const char* g : {"a", "b", "c", "d"}) put(*cache, g);
  ASSERT_TRUE(touch(*cache, "a"));
  uint64_t one = entry_size(*cache, "a");
  auto report = cache->prune(one * 2, std::nullopt);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->removed, 2u);
  EXPECT_TRUE(present(*cache, "a"));
  EXPECT_TRUE(present(*cache, "d"));
  EXPECT_FALSE(present(*cache, "b"));
  EXPECT_FALSE(present(*cache, "c"));
}

TEST_F(CacheEviction, PruneByAgeDropsEntriesUnusedForLonger) {
  auto cache = open(0);
  put(*cache, "old");
  clock_ms += 10 * 86400 * 1000LL;
  put(*cache, "new");
  clock_ms += 3600 * 1000LL;
  auto report = cache->prune(std::nullopt, 86400);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->removed, 1u);
  EXPECT_FALSE(present(*cache, "old"));
  EXPECT_TRUE(present(*cache, "new"));
}

TEST_F(CacheEviction, ClearRemovesEverything) {
  auto cache = open(0);
  for (const char* g : {"a", "b", "c"}) put(*cache, g);
  auto report = cache->clear();
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->removed, 3u);
  EXPECT_EQ(cache->stats()->entries, 0u);
  EXPECT_EQ(cache->stats()->bytes, 0u);
}

// A producer killed mid-compile leaves its lock file (a holder removes its own): prune and clear
// remove each that no process holds, and leave one held, and the repair gate, alone.
TEST_F(CacheEviction, PruneAndClearRemoveTheLockFilesNoProcessHolds) {
  auto cache = open(0);
  put(*cache, "a");
  const std::string locks = tmp.path() + "/locks";
  for (bool clear : {false, true}) {
    SCOPED_TRACE(clear ? "clear" : "prune");
    std::string stale = locks + "/0123456789abcdef0123456789abcdef.lock";
    std::ofstream(stale).put('x');
    std::ofstream(locks + "/kiln.db-repair.gate").put('x');
    KeyLock held;
    std::string error;
    ASSERT_EQ(held.acquire(locks, "fedcba9876543210fedcba9876543210", std::chrono::milliseconds(0),
                           error),
              KeyLock::Result::acquired)
        << error;
    auto report = clear ? cache->clear() : cache->prune(std::nullopt, std::nullopt);
    ASSERT_TRUE(report.ok()) << report.error().message;
    EXPECT_FALSE(std::filesystem::exists(stale)) << "a lock nobody holds is removed";
    EXPECT_TRUE(std::filesystem::exists(locks + "/fedcba9876543210fedcba9876543210.lock"))
        << "a lock a process holds stays";
    EXPECT_TRUE(std::filesystem::exists(locks + "/kiln.db-repair.gate"));
  }
}

}  // namespace
}  // namespace kiln::cache
