// Damaged entries and databases: flipped bytes, truncated blobs, missing rows, garbage files.
#include "cache/cache.h"
#include "cache/sqlite.h"
#include "test_util.h"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

namespace kiln::cache {
namespace {

using testing::contents_for;
using testing::fields_for;
using testing::options_in;
using testing::TempDir;

// A cache holding one entry for graph "a", and direct SQL access to its database.
class CacheCorruption : public ::testing::Test {
protected:
  void SetUp() override {
    cache = Cache::open(options_in(tmp.path(), &warnings));
    ASSERT_TRUE(cache->enabled());
    ASSERT_TRUE(cache->store(key, fields, contents_for("a", 5000)).ok());
    auto opened = sql::Db::open(cache->db_path());
    ASSERT_TRUE(opened.ok());
    db = std::move(*opened);
    db->set_busy_timeout(5000);
  }
  void run_sql(const std::string& text) { ASSERT_TRUE(db->exec(text).ok()) << text; }

  // Flips the bits of one byte in the middle of a payload's compressed bytes.
  void flip_payload_byte(const std::string& name) {
    std::string data;
    {
      auto st = db->prepare("SELECT data FROM payloads WHERE name = ?");
      ASSERT_TRUE(st.ok());
      st->bind_text(1, name);
      ASSERT_TRUE(*st->step());
      data = st->column_blob(0);
    }
    ASSERT_GT(data.size(), 20u);
    data[data.size() / 2] = static_cast<char>(~data[data.size() / 2]);
    auto st = db->prepare("UPDATE payloads SET data = ? WHERE name = ?");
    ASSERT_TRUE(st.ok());
    st->bind_blob(1, data).bind_text(2, name);
    ASSERT_TRUE(st->run().ok());
  }

  TempDir tmp;
  std::vector<std::string> warnings;
  std::unique_ptr<Cache> cache;
  std::unique_ptr<sql::Db> db;
  std::vector<KeyField> fields = fields_for("a");
  std::string key = make_key(fields);
};

TEST_F(CacheCorruption, FlippedByteInACompressedPayloadIsDroppedAndReported) {
  flip_payload_byte("ptx:mm_0");
  EXPECT_FALSE(cache->lookup(key, fields).hit());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("dropped bad entry " + key), std::string::npos) << warnings[0];
  EXPECT_EQ(cache->stats()->entries, 0u);
  EXPECT_EQ(cache->stats()->errors, 1u);
}

TEST_F(CacheCorruption, ChangedChecksumIsDropped) {
  run_sql("UPDATE payloads SET checksum = checksum + 1 WHERE name = 'source'");
  EXPECT_FALSE(cache->lookup(key, fields).hit());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("checksum mismatch"), std::string::npos) << warnings[0];
}

TEST_F(CacheCorruption, TruncatedBlobIsDropped) {
  run_sql("UPDATE payloads SET data = substr(data, 1, length(data) - 7) WHERE name = 'ptx:mm_0'");
  EXPECT_FALSE(cache->lookup(key, fields).hit());
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_EQ(cache->stats()->entries, 0u);
}

TEST_F(CacheCorruption, EmptiedBlobIsDropped) {
  run_sql("UPDATE payloads SET data = x'' WHERE name = 'source'");
  EXPECT_FALSE(cache->read(key).hit());
  EXPECT_EQ(warnings.size(), 1u);
}

TEST_F(CacheCorruption, MissingPayloadRowIsDropped) {
  run_sql("DELETE FROM payloads WHERE name = 'log'");
  EXPECT_FALSE(cache->lookup(key, fields).hit());
  EXPECT_EQ(warnings.size(), 1u);
}

TEST_F(CacheCorruption, AlteredStoredFieldIsDropped) {
  run_sql("UPDATE fields SET value = 'sm_80' WHERE name = 'arch'");
  EXPECT_FALSE(cache->read(key).hit());
  EXPECT_EQ(warnings.size(), 1u);
}

TEST_F(CacheCorruption, VerifyListsBadEntriesAndFixRemovesThem) {
  auto other = fields_for("b");
  ASSERT_TRUE(cache->store(make_key(other), other, contents_for("b")).ok());
  run_sql("UPDATE payloads SET checksum = checksum + 1 WHERE name = 'source' AND key = '" + key +
          "'");
  auto report = cache->verify(Fix::no);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->checked, 2u);
  ASSERT_EQ(report->bad.size(), 1u);
  EXPECT_EQ(report->bad[0].key, key);
  EXPECT_EQ(cache->stats()->entries, 2u) << "verify without fix changes nothing";
  report = cache->verify(Fix::yes);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->removed);
  EXPECT_EQ(cache->stats()->entries, 1u);
  EXPECT_TRUE(cache->verify(Fix::no)->bad.empty());
}

TEST(CacheCorruptDatabase, GarbageFileIsMovedAsideAndRecreated) {
  TempDir tmp;
  {
    std::ofstream garbage(tmp.sub("kiln.db"), std::ios::binary);
    for (int i = 0; i < 1000; ++i) garbage << "this is not an sqlite database " << i << "\n";
  }
  std::vector<std::string> warnings;
  auto cache = Cache::open(options_in(tmp.path(), &warnings));
  ASSERT_TRUE(cache->enabled()) << cache->disabled_reason();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("moved it to"), std::string::npos) << warnings[0];
  bool found_aside = false;
  for (const auto& file : std::filesystem::directory_iterator(tmp.path()))
    if (file.path().filename().string().rfind("kiln.db.corrupt-", 0) == 0) found_aside = true;
  EXPECT_TRUE(found_aside);
  auto fields = fields_for("a");
  ASSERT_TRUE(cache->store(make_key(fields), fields, contents_for("a")).ok());
  EXPECT_TRUE(cache->lookup(make_key(fields), fields).hit());
}

TEST(CacheCorruptDatabase, NewerSchemaDisablesTheCacheWithAClearReason) {
  TempDir tmp;
  std::vector<std::string> warnings;
  Cache::open(options_in(tmp.path(), &warnings));
  {
    auto db = sql::Db::open(tmp.sub("kiln.db"));
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE((*db)->exec("PRAGMA user_version=999").ok());
  }
  auto cache = Cache::open(options_in(tmp.path(), &warnings));
  EXPECT_FALSE(cache->enabled());
  EXPECT_NE(cache->disabled_reason().find("newer"), std::string::npos) << cache->disabled_reason();
}

}  // namespace
}  // namespace kiln::cache
