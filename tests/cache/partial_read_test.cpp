// Reads of selected payloads: only those come back and are checked; a hit reads one row.
#include "cache/cache.h"
#include "cache/local/sqlite.h"
#include "test_util.h"

#include <gtest/gtest.h>

namespace kiln::cache {
namespace {

using testing::contents_for;
using testing::fields_for;
using testing::options_in;
using testing::TempDir;

std::vector<std::string> names_of(const std::vector<Payload>& payloads) {
  std::vector<std::string> out;
  for (const Payload& p : payloads) out.push_back(p.name);
  return out;
}

// "source", "ptx:mm_0", "log", then "cubin:mm_0" and "cubin:mm_1".
Contents four_kinds() {
  Contents c = contents_for("a", 5000);
  c.payloads.push_back({"cubin:mm_0", std::string(3000, '\x7f')});
  c.payloads.push_back({"cubin:mm_1", "elf"});
  return c;
}

// A cache holding one entry with payloads of every kind, and direct SQL access to it.
class CachePartialRead : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_TRUE(cache->enabled()) << cache->disabled_reason();
    ASSERT_TRUE(cache->store(key, fields, four_kinds()).ok());
    auto opened = sql::Db::open(cache->db_path());
    ASSERT_TRUE(opened.ok());
    db = std::move(*opened);
    db->set_busy_timeout(5000);
  }
  void run_sql(const std::string& text) { ASSERT_TRUE(db->exec(text).ok()) << text; }

  TempDir tmp;
  std::vector<std::string> warnings;
  std::unique_ptr<Cache> cache = Cache::open(options_in(tmp.path(), &warnings));
  std::unique_ptr<sql::Db> db;
  std::vector<KeyField> fields = fields_for("a");
  std::string key = make_key(fields);
  PayloadSelection cubins_and_log = PayloadSelection::only({"log"}, {"cubin:"});
};

TEST(PayloadSelection, DefaultWantsEverythingAndOnlyMatchesNamesOrPrefixes) {
  EXPECT_TRUE(PayloadSelection().wants("anything"));
  PayloadSelection some = PayloadSelection::only({"artifact"}, {"cubin:"});
  EXPECT_TRUE(some.wants("artifact"));
  EXPECT_TRUE(some.wants("cubin:k0"));
  EXPECT_FALSE(some.wants("artifact2")) << "a name matches exactly";
  EXPECT_FALSE(some.wants("ptx:k0"));
  EXPECT_FALSE(PayloadSelection::only({}).wants("source"));
}

TEST_F(CachePartialRead, LookupReturnsOnlyTheSelectedPayloadsInStoredOrder) {
  Lookup found = cache->lookup(key, fields, cubins_and_log);
  ASSERT_TRUE(found.hit());
  EXPECT_EQ(names_of(found.entry.payloads),
            (std::vector<std::string>{"log", "cubin:mm_0", "cubin:mm_1"}));
  Contents expected = four_kinds();
  EXPECT_EQ(*found.entry.find_payload("cubin:mm_0"), expected.payloads[3]);
  EXPECT_EQ(*found.entry.find_payload("cubin:mm_1"), expected.payloads[4]);
  EXPECT_EQ(cache->stats()->hits, 1u);
  EXPECT_TRUE(warnings.empty());
}

TEST_F(CachePartialRead, CorruptedSelectedPayloadIsDroppedAndReported) {
  // A cubin lives in the record: any damage to it fails the record's checksum.
  std::string bytes = testing::read_record(*db, key);
  testing::flip(bytes, static_cast<long>(testing::find_in(bytes, std::string(3000, '\x7f')) + 10));
  testing::write_record(*db, key, bytes);
  EXPECT_FALSE(cache->lookup(key, fields, cubins_and_log).hit());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("checksum mismatch"), std::string::npos) << warnings[0];
  EXPECT_EQ(cache->stats()->entries, 0u);
}

TEST_F(CachePartialRead, TruncatedSelectedApartBlobIsDropped) {
  run_sql("UPDATE apart SET data = substr(data, 1, length(data) - 5) WHERE name = 'log'");
  EXPECT_FALSE(cache->lookup(key, fields, cubins_and_log).hit());
  EXPECT_EQ(warnings.size(), 1u);
}

TEST_F(CachePartialRead, CorruptedUnselectedPayloadLeavesThePartialHitButVerifyCatchesIt) {
  run_sql("UPDATE apart SET data = substr(data, 1, length(data) - 3) WHERE name = 'ptx:mm_0'");
  EXPECT_TRUE(cache->lookup(key, fields, cubins_and_log).hit());
  EXPECT_TRUE(warnings.empty());
  auto report = cache->verify(Fix::no);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->bad.size(), 1u);
  EXPECT_NE(report->bad[0].reason.find("ptx:mm_0"), std::string::npos) << report->bad[0].reason;
  EXPECT_FALSE(cache->lookup(key, fields).hit()) << "a full read checks every payload";
  EXPECT_EQ(warnings.size(), 1u);
}

TEST_F(CachePartialRead, MissingUnselectedRowIsFoundByAFullReadAndVerify) {
  run_sql("DELETE FROM apart WHERE name = 'source'");
  EXPECT_TRUE(cache->lookup(key, fields, cubins_and_log).hit()) << "a hit reads one row";
  auto report = cache->verify(Fix::no);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->bad.size(), 1u);
  EXPECT_NE(report->bad[0].reason.find("payload 'source' is missing"), std::string::npos)
      << report->bad[0].reason;
}

TEST_F(CachePartialRead, TheHitPathReadsNoApartRow) {
  run_sql("DROP TABLE apart");
  EXPECT_TRUE(cache->lookup(key, fields, PayloadSelection::only({}, {"cubin:"})).hit());
  EXPECT_TRUE(warnings.empty());
}

TEST_F(CachePartialRead, GetOrCreateReturnsTheSelectionWhenProducedAndWhenHit) {
  auto other = fields_for("b");
  Producer producer = [] { return Expected<Contents>(four_kinds()); };
  auto produced = cache->get_or_create(make_key(other), other, producer, cubins_and_log);
  ASSERT_TRUE(produced.ok());
  EXPECT_EQ(produced->source, FetchSource::produced);
  auto hit = cache->get_or_create(make_key(other), other, producer, cubins_and_log);
  ASSERT_TRUE(hit.ok());
  EXPECT_EQ(hit->source, FetchSource::hit);
  EXPECT_EQ(names_of(hit->entry.payloads),
            (std::vector<std::string>{"log", "cubin:mm_0", "cubin:mm_1"}));
  EXPECT_EQ(produced->entry.payloads, hit->entry.payloads);
  EXPECT_EQ(cache->read(make_key(other)).entry.payloads.size(), 5u) << "all were stored";
}

}  // namespace
}  // namespace kiln::cache
