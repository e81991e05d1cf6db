// Native code in an entry (the CPU target's `object` payload) is checked against its own checksum
// on every read, the hit path included: a record rewritten with its record checksum recomputed
// must not hand damaged code to the linker.
#include "cache/cache.h"
#include "cache/local/sqlite.h"
#include "test_util.h"

#include <gtest/gtest.h>

namespace kiln::cache {
namespace {

using testing::fields_for;
using testing::options_in;
using testing::TempDir;

class CacheNativeCode : public ::testing::TestWithParam<const char*> {
protected:
  void SetUp() override {
    cache = Cache::open(options_in(tmp.path(), &warnings));
    ASSERT_TRUE(cache->enabled());
    Contents contents;
    contents.summary = "{}";
    contents.payloads = {{"artifact", "{\"kernels\":[]}"}, {GetParam(), std::string(4096, '\x90')}};
    ASSERT_TRUE(cache->store(key, fields, contents).ok());
    auto opened = sql::Db::open(cache->db_path());
    ASSERT_TRUE(opened.ok());
    db = std::move(*opened);
    db->set_busy_timeout(5000);
  }
  // Flips a byte of payload `name` in the record and writes the record back with its record
  // checksum recomputed: only the payload's own checksum can tell.
  void damage_keeping_the_record_checksum(const std::string& name) {
    auto entry = decode_entry(testing::read_record(*db, key));
    ASSERT_TRUE(entry.ok()) << entry.error().message;
    bool found = false;
    for (StoredPayload& p : entry->payloads) {
      if (p.name != name) continue;
      ASSERT_EQ(p.encoded.encoding, Encoding::raw) << "stored raw: read on every hit";
      testing::flip(p.encoded.data, 100);
      found = true;
    }
    ASSERT_TRUE(found) << name;
    testing::write_record(*db, key, encode_entry(*entry));
  }

  TempDir tmp;
  std::vector<std::string> warnings;
  std::unique_ptr<Cache> cache;
  std::unique_ptr<sql::Db> db;
  std::vector<KeyField> fields = fields_for("cpu-graph", "cpu:x86-64");
  std::string key = make_key(fields);
};

TEST_P(CacheNativeCode, ADamagedObjectWithARecomputedRecordChecksumIsDroppedOnTheHitPath) {
  damage_keeping_the_record_checksum(GetParam());
  Lookup found = cache->lookup(key, fields, PayloadSelection::only({"artifact"}, {"object"}));
  EXPECT_EQ(found.status, LookupStatus::miss);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("dropped bad entry " + key), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(std::string("payload '") + GetParam() + "'"), std::string::npos)
      << warnings[0];
  EXPECT_EQ(cache->stats()->entries, 0u);
  EXPECT_EQ(cache->stats()->errors, 1u);
}

TEST_P(CacheNativeCode, AnIntactObjectIsAHit) {
  Lookup found = cache->lookup(key, fields, PayloadSelection::only({"artifact"}, {"object"}));
  ASSERT_TRUE(found.hit());
  const Payload* object = found.entry.find_payload(GetParam());
  ASSERT_NE(object, nullptr);
  EXPECT_EQ(object->bytes, std::string(4096, '\x90'));
  EXPECT_TRUE(warnings.empty());
}

INSTANTIATE_TEST_SUITE_P(Names, CacheNativeCode, ::testing::Values("object", "object:mlp"));

}  // namespace
}  // namespace kiln::cache
