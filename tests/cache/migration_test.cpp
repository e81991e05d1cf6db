// A database written by the first schema (tests/cache/data/kiln_v1.db, made by kiln's first
// cache) is migrated in place: every entry, its hit count and last use survive.
#include "cache/cache.h"
#include "test_util.h"

#include <filesystem>

#include <gtest/gtest.h>

namespace kiln::cache {
namespace {

using testing::contents_for;
using testing::fields_for;
using testing::options_in;
using testing::TempDir;

TEST(CacheMigration, FirstSchemaDatabaseKeepsEveryEntry) {
  TempDir tmp;
  std::filesystem::copy_file(KILN_CACHE_TEST_DATA "/kiln_v1.db", tmp.sub("kiln.db"));
  std::vector<std::string> warnings;
  auto cache = Cache::open(options_in(tmp.path(), &warnings));
  ASSERT_TRUE(cache->enabled()) << cache->disabled_reason();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("from schema version 1 to 2: 3 entries kept, 0 bad ones dropped"),
            std::string::npos)
      << warnings[0];
  for (const char* g : {"g1", "g2", "g3"}) {
    auto fields = fields_for(g);
    Lookup found = cache->lookup(make_key(fields), fields);
    ASSERT_TRUE(found.hit()) << g;
    // The fixture was written with contents_for(g, 3000).
    EXPECT_EQ(found.entry.payloads, contents_for(g, 3000).payloads) << g;
    EXPECT_EQ(found.entry.info.created_ms % 1000, 0) << "times survive";
  }
  auto g2 = cache->read(make_key(fields_for("g2")));
  ASSERT_TRUE(g2.hit());
  EXPECT_EQ(g2.entry.info.hits, 3) << "two hits before the migration, one after";
  EXPECT_TRUE(cache->verify(Fix::no)->bad.empty());
  // A second open finds the current schema and says nothing.
  warnings.clear();
  cache.reset();
  cache = Cache::open(options_in(tmp.path(), &warnings));
  EXPECT_TRUE(cache->enabled());
  EXPECT_TRUE(warnings.empty());
}

TEST(CacheMigration, BadFirstSchemaEntryIsLeftBehind) {
  TempDir tmp;
  std::filesystem::copy_file(KILN_CACHE_TEST_DATA "/kiln_v1.db", tmp.sub("kiln.db"));
  {
    auto db = sql::Db::open(tmp.sub("kiln.db"));
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->exec("UPDATE payloads SET checksum = checksum + 1 WHERE key = '" +
                            make_key(fields_for("g1")) + "' AND name = 'source'")
                    .ok());
  }
  std::vector<std::string> warnings;
  auto cache = Cache::open(options_in(tmp.path(), &warnings));
  ASSERT_TRUE(cache->enabled());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("2 entries kept, 1 bad ones dropped"), std::string::npos)
      << warnings[0];
  EXPECT_EQ(cache->stats()->entries, 2u);
  EXPECT_FALSE(cache->read(make_key(fields_for("g1"))).hit());
}

}  // namespace
}  // namespace kiln::cache
