// Real processes sharing one cache: one produce per key, herds, and producers killed with -9.
#include "cache/cache.h"
#include "cache/local/sqlite.h"
#include "test_util.h"
#include "worker_util.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

extern char** environ;

namespace kiln::cache {
namespace {

using testing::count_lines;
using testing::lines_of;
using testing::spawn_worker;
using testing::TempDir;
using testing::wait_for_file;
using testing::wait_worker;
using testing::Worker;

std::string integrity_check(const std::string& db_path) {
  auto db = sql::Db::open(db_path);
  if (!db) return db.error().message;
  (*db)->set_busy_timeout(5000);
  auto st = (*db)->prepare("PRAGMA integrity_check");
  if (!st) return st.error().message;
  auto row = st->step();
  if (!row || !*row) return "no result";
  return st->column_text(0);
}

// Counts "hit" and "produced" lines over the workers' outputs.
std::pair<int, int> hits_and_produced(const std::vector<Worker>& workers) {
  int hits = 0, produced = 0;
  for (const Worker& w : workers)
    for (const std::string& line : lines_of(w.out)) {
      if (line.rfind("hit ", 0) == 0) ++hits;
      if (line.rfind("produced ", 0) == 0) ++produced;
    }
  return {hits, produced};
}

class CacheProcesses : public ::testing::Test {
protected:
  std::vector<std::string> common(const std::string& extra_mode = "normal") {
    return {"dir=" + dir, "counter=" + counter, "mode=" + extra_mode};
  }
  void expect_healthy_cache(uint64_t entries) {
    EXPECT_EQ(integrity_check(dir + "/kiln.db"), "ok");
    std::vector<std::string> warnings;
    auto cache = Cache::open(testing::options_in(dir, &warnings));
    auto report = cache->verify(Fix::no);
    ASSERT_TRUE(report.ok());
    EXPECT_TRUE(report->bad.empty());
    EXPECT_EQ(report->checked, entries);
    EXPECT_TRUE(warnings.empty());
  }

  TempDir tmp;
  std::string dir = tmp.sub("cache");
  std::string counter = tmp.sub("produced");
  std::string marker = tmp.sub("marker");
};

TEST_F(CacheProcesses, EightProcessesOnManyKeysProduceEachKeyOnce) {
  constexpr int k_keys = 64;
  std::vector<Worker> workers;
  for (int i = 0; i < 8; ++i) {
    auto args = common();
    args.push_back("keys=" + std::to_string(k_keys));
    args.push_back("rotate=" + std::to_string(i * 5));
    args.push_back("produce_ms=3");
    workers.push_back(spawn_worker(tmp, "w" + std::to_string(i), args));
  }
  for (const Worker& w : workers) EXPECT_EQ(wait_worker(w), 0);
  auto counts = count_lines(counter);
  EXPECT_EQ(counts.size(), static_cast<size_t>(k_keys));
  for (const auto& [key, n] : counts) EXPECT_EQ(n, 1) << key << " produced " << n << " times";
  auto [hits, produced] = hits_and_produced(workers);
  EXPECT_EQ(produced, k_keys);
  EXPECT_EQ(hits, 8 * k_keys - k_keys);
  expect_healthy_cache(k_keys);
}

TEST_F(CacheProcesses, ProcessesCreatingTheDatabaseTogetherAllGetAWorkingCache) {
  // Converting a new database to WAL can report "locked" without waiting; every process must
  // still end up with an enabled cache (a disabled one makes the worker exit 4).
  for (int round = 0; round < 10; ++round) {
    std::string round_dir = dir + std::to_string(round);
    std::vector<Worker> workers;
    for (int i = 0; i < 12; ++i)
      workers.push_back(
          spawn_worker(tmp, "w" + std::to_string(i),
                       {"dir=" + round_dir, "counter=" + counter + "-" + std::to_string(round)}));
    for (const Worker& w : workers) EXPECT_EQ(wait_worker(w), 0) << "round " << round;
  }
}

TEST_F(CacheProcesses, ProcessesFindingAGarbageDatabaseTogetherMoveItAsideOnce) {
  std::filesystem::create_directories(dir);
  {
    std::ofstream garbage(dir + "/kiln.db", std::ios::binary);
    for (int i = 0; i < 5000; ++i) garbage << "not a database " << i << "\n";
  }
  std::vector<Worker> workers;
  for (int i = 0; i < 8; ++i)
    workers.push_back(
        spawn_worker(tmp, "w" + std::to_string(i), {"dir=" + dir, "counter=" + counter, "keys=3"}));
  for (const Worker& w : workers) EXPECT_EQ(wait_worker(w), 0);
  int moved_aside = 0;
  for (const auto& file : std::filesystem::directory_iterator(dir))
    if (file.path().filename().string().rfind("kiln.db.corrupt-", 0) == 0) ++moved_aside;
  EXPECT_EQ(moved_aside, 1);
  EXPECT_EQ(lines_of(counter).size(), 3u);
  expect_healthy_cache(3);
}

TEST_F(CacheProcesses, HerdOnOneColdKeyProducesOnce) {
  std::vector<Worker> workers;
  for (int i = 0; i < 8; ++i) {
    auto args = common();
    args.push_back("produce_ms=300");
    workers.push_back(spawn_worker(tmp, "w" + std::to_string(i), args));
  }
  for (const Worker& w : workers) EXPECT_EQ(wait_worker(w), 0);
  EXPECT_EQ(lines_of(counter).size(), 1u);
  auto [hits, produced] = hits_and_produced(workers);
  EXPECT_EQ(produced, 1);
  EXPECT_EQ(hits, 7);
  expect_healthy_cache(1);
}

// Kills a worker stuck in `mode` while others wait on its key; they must carry on at once
// (well inside their lock wait) with one of them producing the key.
void kill_one_and_check_the_rest(const TempDir& tmp, const std::string& mode,
                                 std::vector<std::string> hung_args,
                                 std::vector<std::string> waiter_args, const std::string& dir,
                                 const std::string& marker, const std::string& counter) {
  hung_args.push_back("marker=" + marker);
  Worker hung = spawn_worker(tmp, "hung", hung_args);
  ASSERT_TRUE(wait_for_file(marker)) << mode << " worker never got going";
  std::vector<Worker> waiters;
  waiter_args.push_back("lock_wait_ms=60000");
  for (int i = 0; i < 4; ++i)
    waiters.push_back(spawn_worker(tmp, "w" + std::to_string(i), waiter_args));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let them queue up on the lock
  if (mode == "hang-write") {
    std::error_code ec;
    EXPECT_GT(std::filesystem::file_size(dir + "/kiln.db-wal", ec), 1u << 20)
        << "the writer should have spilled uncommitted pages before it is killed";
  }
  ASSERT_EQ(::kill(hung.pid, SIGKILL), 0);
  EXPECT_EQ(wait_worker(hung), 128 + SIGKILL);
  // With a 60 s lock wait, finishing inside the 30 s limit means the dead owner was noticed.
  for (const Worker& w : waiters) EXPECT_EQ(wait_worker(w, std::chrono::seconds(30)), 0);
  EXPECT_EQ(lines_of(counter).size(), 2u) << "the killed producer and exactly one waiter";
  auto [hits, produced] = hits_and_produced(waiters);
  EXPECT_EQ(produced, 1);
  EXPECT_EQ(hits, 3);
}

TEST_F(CacheProcesses, ProducerKilledMidProduceDoesNotBlockTheOthers) {
  kill_one_and_check_the_rest(tmp, "hang-produce", common("hang-produce"), common(), dir, marker,
                              counter);
  expect_healthy_cache(1);
}

TEST_F(CacheProcesses, ProducerKilledMidWriteLeavesAConsistentDatabase) {
  // An 8 MiB incompressible payload overflows SQLite's page cache, so the killed writer has
  // already put uncommitted pages into the WAL.
  auto hung = common("hang-write"), waiter = common();
  hung.push_back("payload_kb=8192");
  waiter.push_back("payload_kb=8192");
  kill_one_and_check_the_rest(tmp, "hang-write", hung, waiter, dir, marker, counter);
  expect_healthy_cache(1);
}

}  // namespace
}  // namespace kiln::cache
