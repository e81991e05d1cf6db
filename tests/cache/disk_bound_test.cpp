// The size cap bounds the files on disk (kiln.db and its WAL), and prune and clear give space back.
#include "cache/cache.h"
#include "cache/codec.h"
#include "cache/local/sqlite.h"
#include "test_util.h"

#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace kiln::cache {
namespace {

using testing::fields_for;
using testing::options_in;
using testing::TempDir;
using testing::file_size;
using testing::k_empty_database;

constexpr uint64_t k_mib = uint64_t{1} << 20;


// kiln.db and kiln.db-wal: the bytes the cache holds on disk.
uint64_t disk_bytes(const std::string& dir) {
  return file_size(dir + "/kiln.db") + file_size(dir + "/kiln.db-wal");
}

// An entry as a bundle carries it: one cubin of `raw_bytes` zeros as a zstd frame of a few dozen
// bytes, which the store keeps raw (cubins are read on every hit).
StoredEntry compressible_entry(const std::string& name, uint64_t raw_bytes) {
  StoredEntry e;
  e.info.fields = fields_for(name);
  sort_fields(e.info.fields);  // as a record holds them
  e.info.key = make_key(e.info.fields);
  e.info.summary = R"({"graph":")" + name + R"("})";
  e.info.compile_ms = 100;
  e.info.created_ms = e.info.last_used_ms = 1000;
  auto encoded = encode(std::string(raw_bytes, '\0'), Encoding::zstd);
  EXPECT_TRUE(encoded.ok());
  EXPECT_LT(encoded->data.size(), 1024u);
  e.payloads.push_back({"cubin:k", std::move(*encoded), false});
  return e;
}

std::vector<StoredEntry> compressible_entries(int count, uint64_t raw_bytes) {
  std::vector<StoredEntry> out;
  for (int i = 0; i < count; ++i)
    out.push_back(compressible_entry("big" + std::to_string(i), raw_bytes));
  return out;
}

class CacheDiskBound : public ::testing::Test {
protected:
  std::unique_ptr<Cache> open_with_cap(uint64_t cap) {
    Options o = options_in(dir, &warnings);
    o.max_size = cap;
    return Cache::open(o);
  }
  void report(const char* when) {
    std::printf("%-28s kiln.db %8llu  kiln.db-wal %8llu\n", when,
                static_cast<unsigned long long>(file_size(dir + "/kiln.db")),
                static_cast<unsigned long long>(file_size(dir + "/kiln.db-wal")));
  }
  TempDir tmp;
  std::string dir = tmp.sub("cache");
  std::vector<std::string> warnings;
};

// The reported case at a small scale: bundles of entries a few hundred bytes long that the store
// keeps as 1 MiB each, imported into a cache capped at 4 MiB.
TEST_F(CacheDiskBound, ImportingEntriesThatCompressHugelyKeepsTheFilesWithinTheCap) {
  const uint64_t cap = 4 * k_mib;
  auto cache = open_with_cap(cap);
  ASSERT_TRUE(cache->enabled());
  for (int bundle = 0; bundle < 3; ++bundle) {
    std::vector<StoredEntry> entries;
    for (int i = 0; i < 8; ++i)
      entries.push_back(compressible_entry("big" + std::to_string(bundle * 8 + i), k_mib));
    auto imported = cache->import_entries(entries);
    ASSERT_TRUE(imported.ok()) << imported.error().message;
    EXPECT_EQ(imported->imported, 8u);
    EXPECT_LE(disk_bytes(dir), cap + k_empty_database)
        << "kiln.db and its WAL stay within the cap, bundle " << bundle;
  }
  report("after importing 24 MiB");
  auto stats = cache->stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_LE(stats->bytes, cap);
  EXPECT_EQ(stats->entries, 3u);
  EXPECT_EQ(stats->database_file_bytes, file_size(dir + "/kiln.db"));
  EXPECT_EQ(stats->wal_file_bytes, file_size(dir + "/kiln.db-wal"));
  auto verified = cache->verify(Fix::no);
  ASSERT_TRUE(verified.ok());
  for (const BadEntry& b : verified->bad) ADD_FAILURE() << b.key << ": " << b.reason;
  EXPECT_TRUE(verified->database.empty()) << verified->database;
}

// The compile path: each store evicts, gives the pages back and empties the WAL.
TEST_F(CacheDiskBound, StoringLargeEntriesKeepsTheFilesWithinTheCap) {
  const uint64_t cap = 3 * k_mib;
  auto cache = open_with_cap(cap);
  for (int i = 0; i < 10; ++i) {
    auto fields = fields_for("s" + std::to_string(i));
    Contents contents;
    contents.summary = "{}";
    contents.payloads = {{"cubin:k", std::string(700 * 1024, static_cast<char>('a' + i))}};
    ASSERT_TRUE(cache->store(make_key(fields), fields, contents).ok()) << i;
    EXPECT_LE(disk_bytes(dir), cap + k_empty_database) << "after store " << i;
  }
  EXPECT_EQ(cache->stats()->entries, 4u);
  EXPECT_TRUE(cache->lookup(make_key(fields_for("s9")), fields_for("s9")).hit());
}

// Small entries take more pages than their stored bytes (their field rows, the indexes, pages
// part full): the cap counts the pages, so the files stay within it all the same.
TEST_F(CacheDiskBound, SmallEntriesAreCountedByThePagesTheyTake) {
  const uint64_t cap = 256 * 1024;
  auto cache = open_with_cap(cap);
  auto imported = cache->import_entries(compressible_entries(600, 256));
  ASSERT_TRUE(imported.ok()) << imported.error().message;
  auto stats = cache->stats();
  ASSERT_TRUE(stats.ok());
  std::printf("%llu entries, %llu stored bytes, %llu on disk\n",
              static_cast<unsigned long long>(stats->entries),
              static_cast<unsigned long long>(stats->bytes),
              static_cast<unsigned long long>(disk_bytes(dir)));
  EXPECT_GT(stats->entries, 10u);
  EXPECT_LT(stats->bytes, cap / 2) << "the pages, not the stored bytes, reached the cap";
  EXPECT_LE(disk_bytes(dir), cap + k_empty_database);
}

TEST_F(CacheDiskBound, AnEntryLargerThanTheCapIsNotStored) {
  auto cache = open_with_cap(k_mib);
  auto fields = fields_for("huge");
  Contents contents;
  contents.payloads = {{"cubin:k", std::string(2 * k_mib, 'x')}};
  Status stored = cache->store(make_key(fields), fields, contents);
  ASSERT_FALSE(stored.ok());
  EXPECT_NE(stored.error().message.find("more than the size cap"), std::string::npos)
      << stored.error().message;
  auto imported = cache->import_entries({compressible_entry("huge2", 2 * k_mib)});
  ASSERT_TRUE(imported.ok()) << imported.error().message;
  EXPECT_EQ(imported->imported, 0u);
  EXPECT_EQ(imported->too_large, 1u);
  EXPECT_EQ(cache->stats()->entries, 0u);
  EXPECT_LE(disk_bytes(dir), k_mib + k_empty_database);
}

TEST_F(CacheDiskBound, PruneAndClearShrinkTheFiles) {
  auto cache = open_with_cap(0);  // no cap: the files grow to what the entries need
  ASSERT_TRUE(cache->import_entries(compressible_entries(16, k_mib)).ok());
  report("after importing 16 MiB");
  EXPECT_GE(disk_bytes(dir), 16 * k_mib);
  auto pruned = cache->prune(4 * k_mib, std::nullopt);
  ASSERT_TRUE(pruned.ok()) << pruned.error().message;
  report("after prune --max-size 4M");
  EXPECT_EQ(pruned->removed, 13u);
  EXPECT_GE(pruned->disk_bytes_before, 16 * k_mib);
  EXPECT_EQ(pruned->disk_bytes_after, disk_bytes(dir));
  EXPECT_LE(disk_bytes(dir), 4 * k_mib + k_empty_database);
  auto cleared = cache->clear();
  ASSERT_TRUE(cleared.ok()) << cleared.error().message;
  report("after clear");
  EXPECT_EQ(cleared->disk_bytes_after, disk_bytes(dir));
  EXPECT_LE(disk_bytes(dir), k_empty_database) << "an empty cache is a few pages";
  auto stats = cache->stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->free_bytes, 0u);
}

// Without a cap, the pages of a replaced large entry go back once they are a large share.
TEST_F(CacheDiskBound, ReplacingALargeEntryGivesItsPagesBack) {
  auto cache = open_with_cap(0);
  auto fields = fields_for("r");
  Contents big;
  big.payloads = {{"cubin:k", std::string(4 * k_mib, 'r')}};
  ASSERT_TRUE(cache->store(make_key(fields), fields, big).ok());
  EXPECT_GE(disk_bytes(dir), 4 * k_mib);
  Contents small;
  small.payloads = {{"cubin:k", "tiny"}};
  ASSERT_TRUE(cache->store(make_key(fields), fields, small).ok());
  EXPECT_LE(disk_bytes(dir), 256u * 1024);
}

// A database made before kiln set auto_vacuum (here the first schema's fixture) is rewritten once
// by the first give-back, incremental from then on; its entries stay.
TEST_F(CacheDiskBound, ADatabaseWithoutAutoVacuumIsConvertedAndShrinks) {
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(KILN_CACHE_TEST_DATA "/kiln_v1.db", dir + "/kiln.db");
  auto auto_vacuum = [&] {
    auto db = sql::Db::open(dir + "/kiln.db");
    EXPECT_TRUE(db.ok());
    auto mode = (*db)->query_int("PRAGMA auto_vacuum");
    return mode.ok() ? *mode : -1;
  };
  ASSERT_EQ(auto_vacuum(), 0);
  auto cache = open_with_cap(0);
  ASSERT_TRUE(cache->enabled());
  ASSERT_TRUE(cache->import_entries(compressible_entries(8, k_mib)).ok());
  EXPECT_GE(disk_bytes(dir), 8 * k_mib);
  ASSERT_TRUE(cache->prune(0, std::nullopt).ok());
  EXPECT_EQ(cache->stats()->entries, 0u);
  EXPECT_LE(disk_bytes(dir), k_empty_database);
  EXPECT_EQ(auto_vacuum(), 2) << "incremental";
}

TEST_F(CacheDiskBound, ANewDatabaseGivesPagesBackWithoutARewrite) {
  auto cache = open_with_cap(0);
  ASSERT_TRUE(cache->enabled());
  auto db = sql::Db::open(dir + "/kiln.db");
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(*(*db)->query_int("PRAGMA auto_vacuum"), 2) << "incremental";
}

}  // namespace
}  // namespace kiln::cache
