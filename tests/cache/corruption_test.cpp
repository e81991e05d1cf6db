// Damaged entries and databases: flipped bytes, truncated records, missing rows, garbage files.
#include "cache/cache.h"
#include "cache/local/sqlite.h"
#include "test_util.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

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

  std::string record() { return testing::read_record(*db, key); }
  void set_record(const std::string& bytes) { testing::write_record(*db, key, bytes); }
  // Rewrites the record's "arch" field and its checksum to match; false if it does not decode.
  bool alter_arch_keeping_the_checksum() {
    auto entry = decode_entry(record());
    if (!entry.ok()) return false;
    for (KeyField& f : entry->info.fields)
      if (f.name == "arch") f.value = "sm_80";
    set_record(encode_entry(*entry));
    return true;
  }

  TempDir tmp;
  std::vector<std::string> warnings;
  std::unique_ptr<Cache> cache;
  std::unique_ptr<sql::Db> db;
  std::vector<KeyField> fields = fields_for("a");
  std::string key = make_key(fields);
};

TEST_F(CacheCorruption, FlippedByteInTheRecordIsDroppedAndReported) {
  std::string bytes = record();
  testing::flip(bytes, static_cast<long>(bytes.size() / 2));
  set_record(bytes);
  EXPECT_FALSE(cache->lookup(key, fields).hit());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("dropped bad entry " + key), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("checksum mismatch"), std::string::npos) << warnings[0];
  EXPECT_EQ(cache->stats()->entries, 0u);
  EXPECT_EQ(cache->stats()->errors, 1u);
}

// A damaged record whose column holds text, not a blob: SQLite measures text in characters (up
// to a NUL), so the drop compares it as bytes, or the entry would never be dropped.
TEST_F(CacheCorruption, ADamagedRecordStoredAsTextIsDroppedToo) {
  std::string bytes = record();
  testing::flip(bytes, static_cast<long>(bytes.size() / 2));
  set_record(bytes);
  run_sql("UPDATE entries SET record = CAST(record AS TEXT) WHERE key = '" + key + "'");
  ASSERT_EQ(db->query_int("SELECT typeof(record) = 'text' FROM entries").value(), 1);
  EXPECT_FALSE(cache->lookup(key, fields).hit());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("dropped bad entry " + key), std::string::npos) << warnings[0];
  EXPECT_EQ(cache->stats()->entries, 0u);
}

TEST_F(CacheCorruption, FlippedByteInAPayloadKeptApartIsDropped) {
  std::string data;
  {
    auto st = db->prepare("SELECT data FROM apart WHERE name = 'ptx:mm_0'");
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(*st->step());
    data = st->column_blob(0);
  }
  testing::flip(data, static_cast<long>(data.size() / 2));
  auto st = db->prepare("UPDATE apart SET data = ? WHERE name = 'ptx:mm_0'");
  ASSERT_TRUE(st.ok());
  st->bind_blob(1, data);
  ASSERT_TRUE(st->run().ok());
  EXPECT_FALSE(cache->lookup(key, fields).hit());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("payload 'ptx:mm_0'"), std::string::npos) << warnings[0];
}

TEST_F(CacheCorruption, TruncatedRecordIsDropped) {
  std::string bytes = record();
  set_record(bytes.substr(0, bytes.size() - 7));
  EXPECT_FALSE(cache->lookup(key, fields).hit());
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_EQ(cache->stats()->entries, 0u);
}

TEST_F(CacheCorruption, EmptiedApartBlobIsDropped) {
  run_sql("UPDATE apart SET data = x'' WHERE name = 'source'");
  EXPECT_FALSE(cache->read(key).hit());
  EXPECT_EQ(warnings.size(), 1u);
}

TEST_F(CacheCorruption, MissingApartRowIsDropped) {
  run_sql("DELETE FROM apart WHERE name = 'log'");
  EXPECT_FALSE(cache->lookup(key, fields).hit());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("payload 'log' is missing"), std::string::npos) << warnings[0];
}

TEST_F(CacheCorruption, RecordWithAlteredFieldAndRecomputedChecksumFailsTheKeyCheck) {
  ASSERT_TRUE(alter_arch_keeping_the_checksum());
  EXPECT_FALSE(cache->read(key).hit());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("do not hash to the key"), std::string::npos) << warnings[0];
}

// A lookup with the request's fields does not hash the stored ones again: it compares them.
TEST_F(CacheCorruption, RecordWithAlteredFieldFailsTheRequestsFields) {
  ASSERT_TRUE(alter_arch_keeping_the_checksum());
  EXPECT_FALSE(cache->lookup(key, fields).hit());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("stored key fields differ from the request"), std::string::npos)
      << warnings[0];
  EXPECT_EQ(cache->stats()->entries, 0u);
}

TEST_F(CacheCorruption, AnotherKeysRecordIsDropped) {
  auto other = fields_for("b");
  ASSERT_TRUE(cache->store(make_key(other), other, contents_for("b")).ok());
  set_record(testing::read_record(*db, make_key(other)));
  EXPECT_FALSE(cache->lookup(key, fields).hit());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("belongs to key"), std::string::npos) << warnings[0];
}

TEST_F(CacheCorruption, VerifyListsBadEntriesAndFixRemovesThem) {
  auto other = fields_for("b");
  ASSERT_TRUE(cache->store(make_key(other), other, contents_for("b")).ok());
  std::string bytes = record();
  testing::flip(bytes, 20);
  set_record(bytes);
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

// An entry another process replaces between verify's check and --fix's drop is left alone: the
// drop removed whatever was at the key then, a good entry included.
TEST_F(CacheCorruption, VerifyFixLeavesAnEntryReplacedSinceItsCheck) {
  auto other = fields_for("b");
  const std::string other_key = make_key(other);
  ASSERT_TRUE(cache->store(other_key, other, contents_for("b", 3000)).ok());
  auto elsewhere = Cache::open(options_in(tmp.path(), &warnings));  // another process's
  ASSERT_TRUE(elsewhere->enabled());
  int checks = 0;
  auto report = cache->verify(Fix::yes, [&](Entry entry) -> std::string {
    ++checks;
    if (entry.info.key == other_key) {
      EXPECT_TRUE(elsewhere->store(other_key, other, contents_for("b", 4000)).ok());
    }
    return "refused by the check";
  });
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_EQ(checks, 2);
  ASSERT_EQ(report->bad.size(), 2u);
  EXPECT_TRUE(report->removed);
  for (const BadEntry& b : report->bad) {
    EXPECT_EQ(b.replaced, b.key == other_key) << b.key;
    EXPECT_EQ(b.reason, "refused by the check");
  }
  EXPECT_FALSE(cache->read(key).hit());
  auto kept = cache->read(other_key);
  ASSERT_TRUE(kept.hit());
  const Payload* ptx = kept.entry.find_payload("ptx:mm_0");
  ASSERT_NE(ptx, nullptr);
  EXPECT_EQ(ptx->bytes.size(), 4000u) << "the replacement, not the checked entry";
}

// Sizes, times and counters edited to -1 or 2^63 - 1: stats summed them (SQLite failed the sum
// with "integer overflow"), prune printed petabytes, ls a negative compile time, and a hit's
// count could not be added. Each now reads within its bound and every command works.
TEST_F(CacheCorruption, CountersAndSizesEditedPastTheirRangeReadWithinBounds) {
  auto other = fields_for("b");
  ASSERT_TRUE(cache->store(make_key(other), other, contents_for("b", 3000)).ok());
  run_sql("UPDATE entries SET stored_bytes = 9223372036854775807, raw_bytes = 9223372036854775807,"
          " hits = 9223372036854775807, compile_ms = -1");
  run_sql("INSERT INTO stats(name, value) VALUES('hits', 9223372036854775807), "
          "('time_saved_ms', -5) ON CONFLICT(name) DO UPDATE SET value = excluded.value");
  const uint64_t size_bound = uint64_t{1} << 36;
  auto stats = cache->stats();
  ASSERT_TRUE(stats.ok()) << stats.error().message;
  EXPECT_EQ(stats->entries, 2u);
  EXPECT_EQ(stats->bytes, 2 * size_bound);
  EXPECT_EQ(stats->raw_bytes, 2 * size_bound);
  EXPECT_EQ(stats->hits, uint64_t{1} << 62);
  EXPECT_EQ(stats->time_saved_ms, 0u);
  auto listed = cache->list();
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  for (const EntryInfo& e : *listed) {
    EXPECT_EQ(e.compile_ms, 0);
    EXPECT_EQ(e.stored_bytes, size_bound);
    EXPECT_EQ(e.hits, int64_t{1} << 62);
  }
  // A hit's count and the counters are added to the edited values and written.
  ASSERT_TRUE(cache->lookup(key, fields).hit());
  ASSERT_TRUE(cache->flush().ok());
  EXPECT_EQ(db->query_int("SELECT value FROM stats WHERE name = 'hits'").value(),
            (int64_t{1} << 62) + 1);
  EXPECT_EQ(db->query_int("SELECT hits FROM entries WHERE key = '" + key + "'").value(),
            (int64_t{1} << 62) + 1);
  EXPECT_GE(db->query_int("SELECT value FROM stats WHERE name = 'time_saved_ms'").value(), 0);
  auto pruned = cache->prune(uint64_t{1} << 30, std::nullopt);
  ASSERT_TRUE(pruned.ok()) << pruned.error().message;
  EXPECT_EQ(pruned->removed, 2u);
  EXPECT_EQ(pruned->freed_bytes, 2 * size_bound);
  for (const std::string& w : warnings) ADD_FAILURE() << w;
}

// The rows ls, why and pull read instead of the record (the fields index, the summary and time
// columns) edited by hand: verify names the difference and --fix drops the entry. verify checked
// the record alone, so an edited arch there sent `why` astray unseen.
TEST_F(CacheCorruption, VerifyNamesIndexRowsThatDisagreeWithTheRecord) {
  const std::string where = " WHERE key = '" + key + "'";
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"UPDATE fields SET value = 'sm_80'" + where + " AND name = 'arch'",
       "its index says arch = sm_80, its record sm_90"},
      {"DELETE FROM fields" + where + " AND name = 'arch'",
       "its index lacks field 'arch', its record has it"},
      {"INSERT INTO fields(key, name, value) VALUES('" + key + "', 'zz', 'x')",
       "its index has field 'zz', its record not"},
      {"UPDATE entries SET compile_ms = 7" + where, "its compile_ms column says 7, its record 250"},
      {"UPDATE entries SET summary = '{}'" + where, "its summary column is not its record's"},
      {"UPDATE entries SET raw_bytes = raw_bytes + 1" + where, "its raw_bytes column says "}};
  for (const auto& [edit, why] : edits) {
    SCOPED_TRACE(edit);
    ASSERT_TRUE(cache->store(key, fields, contents_for("a", 5000)).ok());
    ASSERT_TRUE(cache->verify(Fix::no)->bad.empty());
    run_sql(edit);
    auto report = cache->verify(Fix::no);
    ASSERT_TRUE(report.ok()) << report.error().message;
    ASSERT_EQ(report->bad.size(), 1u);
    EXPECT_EQ(report->bad[0].key, key);
    EXPECT_EQ(report->bad[0].reason.rfind(why, 0), 0u) << report->bad[0].reason;
    report = cache->verify(Fix::yes);
    ASSERT_TRUE(report.ok());
    EXPECT_TRUE(report->removed);
    EXPECT_EQ(cache->stats()->entries, 0u);
  }
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

// A database whose tables are not its version's (a table dropped, a user_version set by hand)
// is moved aside as a malformed one is, and a new one started: every command used to fail on it
// with raw SQL, `kiln verify --fix` and `kiln clear` included.
TEST(CacheCorruptDatabase, ADamagedSchemaIsMovedAsideAndRecreated) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"DROP TABLE fields", "no table 'fields'"},
      {"DROP TABLE apart", "no table 'apart'"},
      {"PRAGMA user_version=1", "schema version 1 does not migrate: table apart already exists"},
      {"PRAGMA user_version=-1", "schema version -1"}};
  for (const auto& [damage, why] : cases) {
    SCOPED_TRACE(damage);
    TempDir tmp;
    auto fields = fields_for("a");
    {
      std::vector<std::string> first;
      auto cache = Cache::open(options_in(tmp.path(), &first));
      ASSERT_TRUE(cache->store(make_key(fields), fields, contents_for("a")).ok());
    }
    {
      auto db = sql::Db::open(tmp.sub("kiln.db"));
      ASSERT_TRUE(db.ok());
      ASSERT_TRUE((*db)->exec(damage).ok());
    }
    std::vector<std::string> warnings;
    auto cache = Cache::open(options_in(tmp.path(), &warnings));
    ASSERT_TRUE(cache->enabled()) << cache->disabled_reason();
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("is not a valid database (" + why + "); moved it to"),
              std::string::npos)
        << warnings[0];
    EXPECT_FALSE(cache->lookup(make_key(fields), fields).hit());
    ASSERT_TRUE(cache->store(make_key(fields), fields, contents_for("a")).ok());
    EXPECT_TRUE(cache->lookup(make_key(fields), fields).hit());
    EXPECT_EQ(cache->stats()->entries, 1u);
  }
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


// Holds locks/kiln.db-repair.gate as another process would (flock is per open file, so this
// process's own store conflicts with it too).
struct HeldGate {
  HeldGate(const std::string& dir, int operation) {
    std::filesystem::create_directories(dir + "/locks");
    std::filesystem::permissions(dir + "/locks", std::filesystem::perms::owner_all);
    fd = ::open((dir + "/locks/kiln.db-repair.gate").c_str(), O_RDWR | O_CREAT, 0600);
    held = fd >= 0 && ::flock(fd, operation | LOCK_NB) == 0;
  }
  ~HeldGate() {
    if (fd >= 0) ::close(fd);
  }
  int fd = -1;
  bool held = false;
};

void write_garbage_db(const std::string& path) {
  std::ofstream garbage(path, std::ios::binary);
  for (int i = 0; i < 1000; ++i) garbage << "this is not an sqlite database " << i << "\n";
}

TEST(CacheCorruptDatabase, ARepairWaitsWhileAnotherProcessIsOpeningTheDatabase) {
  TempDir tmp;
  write_garbage_db(tmp.sub("kiln.db"));
  std::vector<std::string> warnings;
  auto options = options_in(tmp.path(), &warnings);
  options.busy_timeout_ms = 200;
  {
    HeldGate opener(tmp.path(), LOCK_SH);  // mid-open: the file may not be renamed under it
    ASSERT_TRUE(opener.held);
    auto cache = Cache::open(options);
    EXPECT_FALSE(cache->enabled());
    EXPECT_NE(cache->disabled_reason().find("could not be repaired"), std::string::npos)
        << cache->disabled_reason();
    EXPECT_TRUE(std::filesystem::exists(tmp.sub("kiln.db"))) << "moved while being opened";
  }
  auto cache = Cache::open(options);  // the opener is done: now the repair goes ahead
  ASSERT_TRUE(cache->enabled()) << cache->disabled_reason();
  EXPECT_NE(warnings.back().find("moved it to"), std::string::npos) << warnings.back();
}

TEST(CacheCorruptDatabase, OpeningWaitsWhileAnotherProcessRepairs) {
  TempDir tmp;
  std::vector<std::string> warnings;
  auto options = options_in(tmp.path(), &warnings);
  options.busy_timeout_ms = 200;
  {
    HeldGate repairer(tmp.path(), LOCK_EX);  // between renaming kiln.db and removing its journal
    ASSERT_TRUE(repairer.held);
    auto cache = Cache::open(options);
    EXPECT_FALSE(cache->enabled());
    EXPECT_NE(cache->disabled_reason().find("repairing"), std::string::npos)
        << cache->disabled_reason();
    EXPECT_FALSE(std::filesystem::exists(tmp.sub("kiln.db"))) << "created during the repair";
  }
  auto cache = Cache::open(options);
  EXPECT_TRUE(cache->enabled()) << cache->disabled_reason();
}

}  // namespace
}  // namespace kiln::cache
