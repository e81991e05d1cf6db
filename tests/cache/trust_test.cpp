// What the cache refuses to trust (folders and databases other users can change, symbolic links
// inside its folder) and how it recovers from a database SQLite itself finds malformed.
#include "cache/cache.h"
#include "cache/local/sqlite.h"
#include "test_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace kiln::cache {
namespace {

using testing::root_page;

using testing::contents_for;
using testing::fields_for;
using testing::options_in;
using testing::TempDir;

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

class CacheTrust : public ::testing::Test {
protected:
  // A cache folder holding one entry for graph "a", closed again.
  void make_cache() {
    auto cache = Cache::open(options_in(dir, &warnings));
    ASSERT_TRUE(cache->enabled());
    ASSERT_TRUE(cache->store(key, fields, contents_for("a")).ok());
  }
  // Whether opening the folder again serves the entry; warnings go to `seen`.
  bool hits(std::vector<std::string>& seen) {
    auto cache = Cache::open(options_in(dir, &seen));
    int produced = 0;
    auto got = cache->get_or_create(key, fields, [&]() -> Expected<Contents> {
      ++produced;
      return contents_for("a");
    });
    EXPECT_TRUE(got.ok()) << "a refused cache is bypassed, the work goes on";
    return got.ok() && produced == 0;
  }

  TempDir tmp;
  std::string dir = tmp.sub("cache");
  std::vector<std::string> warnings;
  std::vector<KeyField> fields = fields_for("a");
  std::string key = make_key(fields);
};

TEST_F(CacheTrust, AFolderOthersCanWriteIsBypassedWithAWarningSayingHowToFixIt) {
  make_cache();
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  std::vector<std::string> seen;
  EXPECT_FALSE(hits(seen)) << "an entry anyone could have replaced is never served";
  ASSERT_EQ(seen.size(), 1u) << joined(seen);
  EXPECT_NE(seen[0].find("writable by other users (mode 0777)"), std::string::npos) << seen[0];
  EXPECT_NE(seen[0].find("chmod go-w"), std::string::npos) << seen[0];
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
  std::vector<std::string> again;
  EXPECT_TRUE(hits(again)) << "once private again, the entry is served";
}

// A folder refused is left as found: kiln made its locks folder in it before the check.
TEST_F(CacheTrust, AFolderOthersCanWriteGetsNothingWrittenIntoIt) {
  std::filesystem::create_directories(dir);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  std::vector<std::string> seen;
  EXPECT_FALSE(hits(seen));
  ASSERT_EQ(seen.size(), 1u) << joined(seen);
  EXPECT_NE(seen[0].find("writable by other users (mode 0777)"), std::string::npos) << seen[0];
  EXPECT_TRUE(std::filesystem::is_empty(dir)) << "nothing made in a folder kiln refuses";
}

TEST_F(CacheTrust, ADatabaseOthersCanWriteIsBypassed) {
  make_cache();
  ASSERT_EQ(::chmod((dir + "/kiln.db").c_str(), 0666), 0);
  std::vector<std::string> seen;
  EXPECT_FALSE(hits(seen));
  ASSERT_EQ(seen.size(), 1u) << joined(seen);
  EXPECT_NE(seen[0].find("cache database"), std::string::npos) << seen[0];
  EXPECT_NE(seen[0].find("writable by other users"), std::string::npos) << seen[0];
}

TEST_F(CacheTrust, AFolderOwnedByAnotherUserIsBypassed) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a folder to another user needs root";
  make_cache();
  ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
  std::vector<std::string> seen;
  EXPECT_FALSE(hits(seen));
  ASSERT_EQ(seen.size(), 1u) << joined(seen);
  EXPECT_NE(seen[0].find("belongs to another user (uid 65534)"), std::string::npos) << seen[0];
}

// A shared primary group lists nobody in its member list: group write there is not private.
TEST_F(CacheTrust, AFolderWritableByASharedGroupIsBypassed) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a folder to another group needs root";
  make_cache();
  ASSERT_EQ(::chown(dir.c_str(), 0, 100), 0);  // gid 100: Debian's "users"
  ASSERT_EQ(::chmod(dir.c_str(), 0770), 0);
  std::vector<std::string> seen;
  EXPECT_FALSE(hits(seen));
  ASSERT_EQ(seen.size(), 1u) << joined(seen);
  EXPECT_NE(seen[0].find("writable by other users (mode 0770)"), std::string::npos) << seen[0];
}

// The files SQLite and the usage table read beside the database are checked as it is.
TEST_F(CacheTrust, AWalShmOrUsageFileOthersCanWriteIsBypassed) {
  for (const char* name : {"usage", "kiln.db-wal", "kiln.db-shm"}) {
    make_cache();
    std::string path = dir + "/" + name;
    if (!std::filesystem::exists(path)) std::ofstream(path).put('\0');
    ASSERT_EQ(::chmod(path.c_str(), 0666), 0) << name;
    std::vector<std::string> seen;
    EXPECT_FALSE(hits(seen)) << name;
    ASSERT_EQ(seen.size(), 1u) << name << ": " << joined(seen);
    EXPECT_NE(seen[0].find(std::string(name) + "' is writable by other users"), std::string::npos)
        << seen[0];
    ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  }
}

TEST_F(CacheTrust, ADanglingSymlinkedDatabaseIsNeitherFollowedNorCreated) {
  std::filesystem::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  std::filesystem::create_directories(tmp.sub("victim"));
  std::string target = tmp.sub("victim/newfile");
  std::filesystem::create_symlink(target, dir + "/kiln.db");
  std::vector<std::string> seen;
  EXPECT_FALSE(hits(seen));
  EXPECT_FALSE(std::filesystem::exists(target)) << "nothing is created through the link";
  ASSERT_EQ(seen.size(), 1u) << joined(seen);
  EXPECT_NE(seen[0].find("symbolic link"), std::string::npos) << seen[0];
}

TEST_F(CacheTrust, ASymlinkedLocksFolderIsRefused) {
  std::filesystem::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  std::filesystem::create_directories(tmp.sub("elsewhere"));
  std::filesystem::create_directory_symlink(tmp.sub("elsewhere"), dir + "/locks");
  std::vector<std::string> seen;
  EXPECT_FALSE(hits(seen));
  ASSERT_EQ(seen.size(), 1u) << joined(seen);
  EXPECT_NE(seen[0].find("symbolic link"), std::string::npos) << seen[0];
}

TEST_F(CacheTrust, ASymlinkedLockFileIsNotFollowed) {
  make_cache();
  std::string target = tmp.sub("victim-lock");
  std::vector<KeyField> other = fields_for("b");
  std::filesystem::create_symlink(target, dir + "/locks/" + make_key(other) + ".lock");
  auto cache = Cache::open(options_in(dir, &warnings));
  auto got = cache->get_or_create(make_key(other), other,
                                  []() -> Expected<Contents> { return contents_for("b"); });
  ASSERT_TRUE(got.ok()) << "producing goes on without the lock";
  EXPECT_FALSE(std::filesystem::exists(target));
  EXPECT_NE(joined(warnings).find("symbolic link"), std::string::npos) << joined(warnings);
}

TEST_F(CacheTrust, ReadingAFolderWithoutACacheCreatesNothing) {
  Options options = options_in(tmp.sub("typo"), &warnings);
  options.create = false;
  auto cache = Cache::open(options);
  EXPECT_FALSE(cache->enabled());
  EXPECT_EQ(cache->disabled_reason().rfind(k_no_cache_reason, 0), 0u) << cache->disabled_reason();
  EXPECT_FALSE(std::filesystem::exists(tmp.sub("typo")));
  EXPECT_TRUE(warnings.empty()) << "the caller reports it: " << joined(warnings);
}

// The page of `table_or_index` in the database file, from SQLite's own schema table.

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

constexpr size_t k_page = 4096;  // SQLite's default page size, which kiln keeps

class CacheMalformed : public CacheTrust {
protected:
  void SetUp() override {
    make_cache();
    db_path = dir + "/kiln.db";
  }
  // Overwrites page `page` of the database (1-based) from byte `from` on with `byte`.
  void smash_page(int64_t page, size_t from, char byte) {
    std::string bytes = read_all(db_path);
    size_t start = static_cast<size_t>(page - 1) * k_page;
    ASSERT_LE(start + k_page, bytes.size());
    for (size_t i = start + from; i < start + k_page; ++i) bytes[i] = byte;
    write_all(db_path, bytes);
  }
  size_t moved_aside() {
    size_t n = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      n += e.path().filename().string().rfind("kiln.db.corrupt-", 0) == 0;
    return n;
  }
  std::string db_path;
};

TEST_F(CacheMalformed, AMalformedTableIsMovedAsideAndTheCacheRebuiltOnTheNextCompile) {
  smash_page(root_page(db_path, "entries"), 0, '\xff');
  std::vector<std::string> seen;
  EXPECT_FALSE(hits(seen)) << "its entry cannot be read: produced again";
  EXPECT_EQ(moved_aside(), 1u);
  EXPECT_NE(joined(seen).find("moved it to"), std::string::npos) << joined(seen);
  std::vector<std::string> after;
  EXPECT_TRUE(hits(after)) << "the rebuilt cache stores and serves it";
  EXPECT_TRUE(after.empty()) << joined(after);
}

// Damage only SQLite's own check sees: an index row whose key no longer matches its table row.
TEST_F(CacheMalformed, VerifyRunsSQLitesCheckAndFixMovesTheDatabaseAside) {
  int64_t index_page = root_page(db_path, "sqlite_autoindex_entries_1");
  std::string bytes = read_all(db_path);
  size_t start = static_cast<size_t>(index_page - 1) * k_page;
  size_t at = bytes.find(key, start);
  ASSERT_TRUE(at != std::string::npos && at < start + k_page) << "the key is in its index page";
  bytes[at] = bytes[at] == '0' ? '1' : '0';
  write_all(db_path, bytes);

  auto cache = Cache::open(options_in(dir, &warnings));
  auto report = cache->verify(Fix::no);
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_NE(report->database.find("malformed"), std::string::npos) << report->database;
  EXPECT_FALSE(report->removed);
  auto fixed = cache->verify(Fix::yes);
  ASSERT_TRUE(fixed.ok()) << fixed.error().message;
  EXPECT_TRUE(fixed->removed);
  EXPECT_EQ(moved_aside(), 1u);
  auto clean = cache->verify(Fix::no);
  ASSERT_TRUE(clean.ok());
  EXPECT_TRUE(clean->database.empty()) << clean->database;
  EXPECT_TRUE(cache->store(key, fields, contents_for("a")).ok());
}

// Only a malformed database is moved aside: a busy one makes clear and verify fail, and keeps
// every entry.
TEST_F(CacheMalformed, ABusyHealthyDatabaseIsNeverMovedAside) {
  auto holder = sql::Db::open(db_path);
  ASSERT_TRUE(holder.ok());
  ASSERT_TRUE((*holder)->exec("BEGIN EXCLUSIVE").ok());  // holds every lock
  Options options = options_in(dir, &warnings);
  options.busy_timeout_ms = 100;
  auto cache = Cache::open(options);
  auto cleared = cache->clear();
  EXPECT_FALSE(cleared.ok()) << "clearing a busy database is an error";
  auto verified = cache->verify(Fix::yes);
  EXPECT_TRUE(!verified.ok() || verified->database.empty());
  ASSERT_TRUE((*holder)->exec("ROLLBACK").ok());
  EXPECT_EQ(moved_aside(), 0u);
  std::vector<std::string> seen;
  EXPECT_TRUE(hits(seen)) << "the entry is still there";
}

TEST_F(CacheMalformed, ClearAlwaysWorks) {
  smash_page(root_page(db_path, "entries"), 0, '\xff');
  smash_page(root_page(db_path, "apart"), 0, '\xff');
  auto cache = Cache::open(options_in(dir, &warnings));
  ASSERT_TRUE(cache->enabled());
  auto cleared = cache->clear();
  ASSERT_TRUE(cleared.ok()) << cleared.error().message;
  auto stats = cache->stats();
  ASSERT_TRUE(stats.ok()) << stats.error().message;
  EXPECT_EQ(stats->entries, 0u);
  EXPECT_TRUE(cache->store(key, fields, contents_for("a")).ok());
  EXPECT_EQ(cache->stats()->entries, 1u);
  EXPECT_EQ(moved_aside(), 0u) << "clearing removes the malformed file too";
}

}  // namespace
}  // namespace kiln::cache
