// Store and lookup round trips, stats, directory resolution and permissions, field queries.
#include "cache/cache.h"
#include "test_util.h"

#include <sys/stat.h>

#include <atomic>
#include <thread>

#include <gtest/gtest.h>

namespace kiln::cache {
namespace {

using testing::contents_for;
using testing::fields_for;
using testing::options_in;
using testing::TempDir;

// A fresh, enabled cache in a scratch directory, its warnings collected.
class CacheStore : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_TRUE(cache->enabled()) << cache->disabled_reason(); }

  TempDir tmp;
  std::vector<std::string> warnings;
  std::unique_ptr<Cache> cache = Cache::open(options_in(tmp.path(), &warnings));
};

TEST_F(CacheStore, LookupOfAnAbsentKeyIsAMissNotAFailure) {
  ASSERT_TRUE(cache->enabled()) << cache->disabled_reason();
  auto fields = fields_for("a");
  EXPECT_EQ(cache->lookup(make_key(fields), fields).status, LookupStatus::miss);
  EXPECT_TRUE(warnings.empty());
}

TEST_F(CacheStore, StoredEntryComesBackByteForByte) {
  auto fields = fields_for("a");
  std::string key = make_key(fields);
  Contents contents = contents_for("a", 100000);
  contents.payloads.push_back({"cubin:mm_0", std::string("\0\1\2\xff", 4)});
  ASSERT_TRUE(cache->store(key, fields, contents).ok());
  Lookup found = cache->lookup(key, fields);
  ASSERT_TRUE(found.hit());
  EXPECT_EQ(found.entry.payloads, contents.payloads);
  EXPECT_EQ(found.entry.info.summary, contents.summary);
  EXPECT_EQ(found.entry.info.compile_ms, 250);
  EXPECT_EQ(found.entry.info.field("arch"), "sm_90");
  EXPECT_LT(found.entry.info.stored_bytes, found.entry.info.raw_bytes);  // compressed
  EXPECT_TRUE(warnings.empty());
}

TEST(CacheReopen, EntriesSurviveReopening) {
  TempDir tmp;
  std::vector<std::string> warnings;
  auto fields = fields_for("a");
  std::string key = make_key(fields);
  ASSERT_TRUE(
      Cache::open(options_in(tmp.path(), &warnings))->store(key, fields, contents_for("a")).ok());
  auto cache = Cache::open(options_in(tmp.path(), &warnings));
  EXPECT_TRUE(cache->lookup(key, fields).hit());
}

TEST_F(CacheStore, StoredFieldsMustMatchTheRequest) {
  auto fields = fields_for("a");
  std::string key = make_key(fields);
  ASSERT_TRUE(cache->store(key, fields, contents_for("a")).ok());
  EXPECT_FALSE(cache->lookup(key, fields_for("a", "sm_80")).hit());
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_FALSE(cache->lookup(key, fields).hit()) << "the mismatching entry is dropped";
}

TEST_F(CacheStore, DuplicateFieldNamesAreRejected) {
  std::vector<KeyField> fields = {{"arch", "sm_90"}, {"arch", "sm_80"}};
  EXPECT_FALSE(cache->store(make_key(fields), fields, contents_for("a")).ok());
}

TEST_F(CacheStore, APayloadNamedTwiceIsRejected) {
  auto fields = fields_for("a");
  Contents contents = contents_for("a");
  ASSERT_FALSE(contents.payloads.empty());
  contents.payloads.push_back({contents.payloads.front().name, "other bytes"});
  auto stored = cache->store(make_key(fields), fields, contents);
  ASSERT_FALSE(stored.ok());
  EXPECT_NE(stored.error().message.find("payload '" + contents.payloads.front().name +
                                        "' appears twice"),
            std::string::npos)
      << stored.error().message;
  EXPECT_EQ(cache->stats()->entries, 0u);
}

TEST_F(CacheStore, AKeyThatIsNotTheHashOfItsFieldsIsRejected) {
  auto fields = fields_for("a");
  auto stored = cache->store(make_key(fields_for("b")), fields, contents_for("a"));
  ASSERT_FALSE(stored.ok());
  EXPECT_NE(stored.error().message.find("is not the hash of its fields"), std::string::npos)
      << stored.error().message;
  EXPECT_EQ(cache->stats()->entries, 0u);
}

TEST_F(CacheStore, StatsCountHitsMissesAndTimeSaved) {
  auto fields = fields_for("a");
  std::string key = make_key(fields);
  EXPECT_FALSE(cache->lookup(key, fields).hit());
  ASSERT_TRUE(cache->store(key, fields, contents_for("a")).ok());
  EXPECT_TRUE(cache->lookup(key, fields).hit());
  EXPECT_TRUE(cache->lookup(key, fields).hit());
  auto stats = cache->stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->entries, 1u);
  EXPECT_EQ(stats->hits, 2u);
  EXPECT_EQ(stats->misses, 1u);
  EXPECT_EQ(stats->errors, 0u);
  EXPECT_EQ(stats->time_saved_ms, 500u);
  EXPECT_GT(stats->bytes, 0u);
  ASSERT_TRUE(cache->zero_stats().ok());
  stats = cache->stats();
  EXPECT_EQ(stats->hits, 0u);
  EXPECT_EQ(stats->misses, 0u);
  EXPECT_EQ(stats->entries, 1u) << "zeroing keeps the entries";
  EXPECT_GT(stats->zeroed_ms, 0);
}

TEST(CacheReopen, BatchedHitCountsAreWrittenWhenTheCacheCloses) {
  TempDir tmp;
  std::vector<std::string> warnings;
  auto fields = fields_for("a");
  std::string key = make_key(fields);
  {
    auto cache = Cache::open(options_in(tmp.path(), &warnings));
    ASSERT_TRUE(cache->store(key, fields, contents_for("a")).ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(cache->lookup(key, fields).hit());
  }
  auto cache = Cache::open(options_in(tmp.path(), &warnings));
  auto entry = cache->read(key);
  ASSERT_TRUE(entry.hit());
  EXPECT_EQ(entry.entry.info.hits, 3);
  EXPECT_EQ(cache->stats()->hits, 3u);
}

TEST(CacheDirectory, IsPrivateAndDatabaseFileIsOwnerOnly) {
  TempDir tmp;
  std::vector<std::string> warnings;
  auto cache = Cache::open(options_in(tmp.sub("new/cache"), &warnings));
  ASSERT_TRUE(cache->enabled());
  struct stat dir_stat, db_stat;
  ASSERT_EQ(::stat(cache->dir().c_str(), &dir_stat), 0);
  ASSERT_EQ(::stat(cache->db_path().c_str(), &db_stat), 0);
  EXPECT_EQ(dir_stat.st_mode & 0777, 0700u);
  EXPECT_EQ(db_stat.st_mode & 0777, 0600u);
}

TEST(CacheDirectory, ComesFromOptionThenEnvironment) {
  const char* home_before = std::getenv("HOME");
  std::string home = home_before ? home_before : "";
  EXPECT_EQ(resolve_cache_dir("/x"), "/x");
  ::setenv("KILN_CACHE_DIR", "/from-env", 1);
  EXPECT_EQ(resolve_cache_dir(""), "/from-env");
  ::unsetenv("KILN_CACHE_DIR");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(resolve_cache_dir(""), "/xdg/kiln");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(resolve_cache_dir(""), "/home/u/.cache/kiln");
  ::setenv("HOME", home.c_str(), 1);
}

TEST_F(CacheStore, KeyPrefixFindsUniqueAndAmbiguousMatches) {
  std::vector<std::string> keys;
  for (int i = 0; i < 40; ++i) {
    auto fields = fields_for(std::string("g").append(std::to_string(i)));
    keys.push_back(make_key(fields));
    ASSERT_TRUE(cache->store(keys.back(), fields, contents_for("g")).ok());
  }
  auto one = cache->keys_with_prefix(keys[0].substr(0, 12));
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0], keys[0]);
  EXPECT_EQ(cache->keys_with_prefix("")->size(), 2u) << "limited to two: enough to say ambiguous";
}

TEST_F(CacheStore, NearestFindsEntriesOfTheSameGraphAndTheirDifferences) {
  for (const char* arch : {"sm_80", "sm_86"}) {
    auto fields = fields_for("a", arch);
    ASSERT_TRUE(cache->store(make_key(fields), fields, contents_for("a")).ok());
  }
  auto other = fields_for("b");
  ASSERT_TRUE(cache->store(make_key(other), other, contents_for("b")).ok());
  auto nearest = cache->nearest(fields_for("a", "sm_90"), "graph_hash");
  ASSERT_TRUE(nearest.ok());
  ASSERT_EQ(nearest->size(), 2u);
  for (const Nearest& n : *nearest) {
    ASSERT_EQ(n.diffs.size(), 1u);
    EXPECT_EQ(n.diffs[0].name, "arch");
    EXPECT_EQ(n.diffs[0].requested, "sm_90");
  }
}

TEST_F(CacheStore, GetOrCreateProducesOnceThenHits) {
  auto fields = fields_for("a");
  std::string key = make_key(fields);
  int runs = 0;
  Producer producer = [&]() -> Expected<Contents> {
    ++runs;
    return contents_for("a");
  };
  auto first = cache->get_or_create(key, fields, producer);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->source, FetchSource::produced);
  auto second = cache->get_or_create(key, fields, producer);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->source, FetchSource::hit);
  EXPECT_EQ(second->entry.payloads, first->entry.payloads);
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(cache->stats()->misses, 1u);
  EXPECT_EQ(cache->stats()->hits, 1u);
}

TEST_F(CacheStore, ThreadsOfOneProcessShareTheSingleFlight) {
  auto fields = fields_for("a");
  std::string key = make_key(fields);
  std::atomic<int> runs = 0;
  Producer producer = [&]() -> Expected<Contents> {
    ++runs;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return contents_for("a");
  };
  std::vector<std::thread> threads;
  std::atomic<int> good = 0;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      auto fetched = cache->get_or_create(key, fields, producer);
      if (fetched && fetched->entry.payloads == contents_for("a").payloads) ++good;
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(good.load(), 4);
}

TEST_F(CacheStore, AFailingProducerIsReportedAndNothingIsStored) {
  auto fields = fields_for("a");
  auto fetched = cache->get_or_create(make_key(fields), fields, []() -> Expected<Contents> {
    return make_error("nvrtc: compiling 'mm' failed");
  });
  ASSERT_FALSE(fetched.ok());
  EXPECT_EQ(fetched.error().message, "nvrtc: compiling 'mm' failed");
  EXPECT_EQ(cache->stats()->entries, 0u);
}

}  // namespace
}  // namespace kiln::cache
