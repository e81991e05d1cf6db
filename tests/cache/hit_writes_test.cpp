// A hit writes nothing: a new process that hits a warm cache makes no write or sync to the
// database, its WAL or the usage file, renames and removes nothing, and never syncs. Counted with
// strace on a real process (kiln_cache_worker).
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>

namespace kiln::cache {
namespace {

using testing::TempDir;

int run(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()); }

struct Traced {
  int status = -1;
  std::vector<std::string> writes;  // write-like calls on a file in the cache directory
  std::vector<std::string> syncs;   // fsync/fdatasync/sync_file_range on anything
  int shm_writes = 0;               // SQLite's shared-memory index (rebuilt by a first opener)
};

Traced trace_worker(const TempDir& tmp, const std::string& dir) {
  Traced out;
  std::string log = tmp.sub("strace.log");
  out.status = run("strace -f -y -o " + log +
                   " -e trace=write,pwrite64,writev,pwritev,pwritev2,ftruncate,fsync,fdatasync,"
                   "sync_file_range,rename,renameat,renameat2,unlink,unlinkat " KILN_CACHE_WORKER
                   " dir=" + dir + " counter=" + tmp.sub("count") + " keys=3");
  std::ifstream in(log);
  std::regex sync_call(R"(\b(fsync|fdatasync|sync_file_range)\()");
  for (std::string line; std::getline(in, line);) {
    if (std::regex_search(line, sync_call)) out.syncs.push_back(line);
    if (line.find(dir) == std::string::npos) continue;
    if (line.find("kiln.db-shm>") != std::string::npos) {
      ++out.shm_writes;
      continue;
    }
    out.writes.push_back(line);
  }
  return out;
}

TEST(CacheHitWrites, ANewProcessHittingAWarmCacheWritesNothing) {
  if (run("strace -V") != 0) GTEST_SKIP() << "strace is not installed (scripts/install_deps.sh)";
  TempDir tmp;
  std::string dir = tmp.sub("cache");
  ASSERT_EQ(run(std::string(KILN_CACHE_WORKER) + " dir=" + dir + " counter=" + tmp.sub("count") +
                " keys=3"),
            0);
  Traced hit = trace_worker(tmp, dir);
  ASSERT_EQ(hit.status, 0);
  std::string writes, syncs;
  for (const std::string& w : hit.writes) writes += w + "\n";
  for (const std::string& s : hit.syncs) syncs += s + "\n";
  EXPECT_TRUE(hit.writes.empty()) << writes;
  EXPECT_TRUE(hit.syncs.empty()) << syncs;
  std::printf("shared-memory index writes by the first opener: %d\n", hit.shm_writes);

  // The hits were recorded all the same (in the usage file's shared memory).
  std::vector<std::string> warnings;
  auto cache = Cache::open(testing::options_in(dir, &warnings));
  auto stats = cache->stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->hits, 3u);
  EXPECT_EQ(stats->misses, 3u);
}

}  // namespace
}  // namespace kiln::cache
