// Export and import of bundles: round trip, and rejection of damaged bundles.
#include "cache/bundle.h"
#include "cache/cache.h"
#include "test_util.h"
#include "support/byte_writer.h"

#include <xxhash.h>

#include <fstream>
#include <iterator>

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>

namespace kiln::cache {
namespace {

using testing::contents_for;
using testing::fields_for;
using testing::options_in;
using testing::TempDir;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

class CacheBundle : public ::testing::Test {
protected:
  void SetUp() override {
    auto cache = Cache::open(options_in(tmp.sub("from"), &warnings));
    for (const char* g : {"a", "b", "c"}) {
      auto fields = fields_for(g);
      ASSERT_TRUE(cache->store(make_key(fields), fields, contents_for(g, 3000)).ok());
    }
    auto entries = cache->export_entries();
    ASSERT_TRUE(entries.ok());
    ASSERT_EQ(entries->size(), 3u);
    ASSERT_TRUE(write_bundle(bundle, *entries).ok());
  }

  TempDir tmp;
  std::vector<std::string> warnings;
  std::string bundle = tmp.sub("cache.kbundle");
};

TEST_F(CacheBundle, ImportedEntriesAreHitsInTheOtherCache) {
  auto entries = read_bundle(bundle);
  ASSERT_TRUE(entries.ok()) << entries.error().message;
  auto other = Cache::open(options_in(tmp.sub("to"), &warnings));
  auto report = other->import_entries(*entries);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->imported, 3u);
  for (const char* g : {"a", "b", "c"}) {
    auto fields = fields_for(g);
    Lookup found = other->lookup(make_key(fields), fields);
    ASSERT_TRUE(found.hit()) << g;
    EXPECT_EQ(found.entry.payloads, contents_for(g, 3000).payloads);
  }
  report = other->import_entries(*entries);
  EXPECT_EQ(report->imported, 0u);
  EXPECT_EQ(report->already_present, 3u);
}

TEST_F(CacheBundle, FlippedByteIsRejected) {
  std::string data = read_file(bundle);
  data[data.size() / 2] ^= 0x20;
  write_file(bundle, data);
  auto entries = read_bundle(bundle);
  ASSERT_FALSE(entries.ok());
  EXPECT_NE(entries.error().message.find("bad bundle"), std::string::npos);
}

TEST_F(CacheBundle, TruncatedBundleIsRejected) {
  std::string data = read_file(bundle);
  write_file(bundle, data.substr(0, data.size() - 100));
  EXPECT_FALSE(read_bundle(bundle).ok());
}

TEST_F(CacheBundle, BadPayloadIsRejectedEvenWithAValidFileChecksum) {
  auto entries = read_bundle(bundle);
  ASSERT_TRUE(entries.ok());
  (*entries)[1].payloads[0].encoded.checksum ^= 1;
  ASSERT_TRUE(write_bundle(bundle, *entries, Replace::yes).ok());
  auto reread = read_bundle(bundle);
  ASSERT_FALSE(reread.ok());
  EXPECT_NE(reread.error().message.find("entry 1"), std::string::npos) << reread.error().message;
  EXPECT_NE(reread.error().message.find("checksum mismatch"), std::string::npos);
}

// A decompression bomb: a few hundred bytes declaring a 1 GiB payload (a real zstd frame of it
// would be about 32 KB), under a valid record and file checksum. Refused from the declared size,
// before anything is decompressed or allocated.
TEST_F(CacheBundle, ADecompressionBombIsRefusedBeforeDecoding) {
  auto entries = read_bundle(bundle);
  ASSERT_TRUE(entries.ok());
  (*entries)[0].payloads[0].encoded.raw_size = uint64_t{1} << 30;
  ASSERT_TRUE(write_bundle(bundle, *entries, Replace::yes).ok());
  auto start = std::chrono::steady_clock::now();
  auto reread = read_bundle(bundle);
  ASSERT_FALSE(reread.ok());
  EXPECT_NE(reread.error().message.find("over the limit"), std::string::npos)
      << reread.error().message;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST_F(CacheBundle, ExportRefusesToReplaceAFileAndWritesItPrivately) {
  auto entries = read_bundle(bundle);
  ASSERT_TRUE(entries.ok());
  Status again = write_bundle(bundle, *entries);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.error().message.find("exists"), std::string::npos) << again.error().message;
  std::string fresh = tmp.sub("fresh.kbundle");
  ASSERT_TRUE(write_bundle(fresh, *entries).ok());
  struct stat st {};
  ASSERT_EQ(::stat(fresh.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Status nowhere = write_bundle(tmp.sub("no/such/dir/x.kbundle"), *entries);
  ASSERT_FALSE(nowhere.ok());
  EXPECT_NE(nowhere.error().message.find("No such file or directory"), std::string::npos)
      << nowhere.error().message;
}

TEST_F(CacheBundle, EveryTruncationIsRejected) {
  const std::string data = read_file(bundle);
  for (size_t size = 0; size < data.size(); ++size) {
    EXPECT_FALSE(parse_bundle(data.substr(0, size), "b").ok()) << "truncated to " << size;
  }
}

TEST_F(CacheBundle, DamageUnderAValidFileChecksumNeverYieldsABadEntry) {
  // Change each byte in turn and re-seal the file checksum, so that the length checks and the
  // per-entry checks are what stands between the damage and the cache.
  const std::string data = read_file(bundle);
  for (size_t at = 8; at + 8 < data.size(); ++at) {
    std::string damaged = data;
    damaged[at] = static_cast<char>(damaged[at] ^ 0xff);
    uint64_t sum = XXH3_64bits(damaged.data(), damaged.size() - 8);
    for (int i = 0; i < 8; ++i) damaged[damaged.size() - 8 + i] = static_cast<char>(sum >> (8 * i));
    auto entries = parse_bundle(damaged, "b");
    if (!entries) continue;
    for (const StoredEntry& e : *entries) EXPECT_TRUE(verify_stored(e).ok()) << "byte " << at;
  }
}

// BundleReader gives the entries one at a time, each checked; the file checksum is checked
// after the last, so a damaged one fails only there (a caller reads through before it acts).
TEST_F(CacheBundle, TheReaderGivesEntriesOneAtATimeAndTheFileChecksumLast) {
  auto reader = BundleReader::open(bundle);
  ASSERT_TRUE(reader.ok()) << reader.error().message;
  EXPECT_EQ((*reader)->count(), 3u);
  EXPECT_FALSE((*reader)->identity().empty());
  std::vector<std::string> keys;
  for (;;) {
    auto entry = (*reader)->next();
    ASSERT_TRUE(entry.ok()) << entry.error().message;
    if (!*entry) break;
    keys.push_back((*entry)->info.key);
  }
  EXPECT_EQ(keys.size(), 3u);
  EXPECT_FALSE((*reader)->next().value().has_value()) << "nothing after the end";

  std::string data = read_file(bundle);
  data.back() ^= 0x01;
  write_file(bundle, data);
  reader = BundleReader::open(bundle);
  ASSERT_TRUE(reader.ok());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE((*reader)->next().value().has_value()) << i;
  auto end = (*reader)->next();
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.error().message, "bad bundle '" + bundle + "': file checksum mismatch");
  EXPECT_FALSE((*reader)->next().ok()) << "a reader that failed stays failed";
  EXPECT_FALSE(read_bundle(bundle).ok());
  // In memory, the same.
  auto over = BundleReader::over(data, "b");
  ASSERT_TRUE(over.ok());
  EXPECT_EQ((*over)->identity(), "");
  EXPECT_FALSE(parse_bundle(data, "b").ok());
  // Only a regular file is opened.
  auto folder = BundleReader::open(tmp.path());
  ASSERT_FALSE(folder.ok());
  EXPECT_NE(folder.error().message.find("not a regular file"), std::string::npos);
}

// A version-1 bundle (fields inline, every payload a zstd frame) is still read, whole, through
// the reader as through read_bundle; damaged, it is refused.
// A second read told the first's record fingerprints stops at the first entry that is another, or
// at another number of entries: what kiln import stores is what it checked.
TEST_F(CacheBundle, ASecondReadRefusesEntriesUnlikeTheFirstReadsOnes) {
  std::vector<Fingerprint> sums;
  {
    auto first = BundleReader::open(bundle);
    ASSERT_TRUE(first.ok());
    for (;;) {
      auto entry = (*first)->next();
      ASSERT_TRUE(entry.ok());
      if (!*entry) break;
      sums.push_back((*first)->record_fingerprint());
    }
  }
  ASSERT_EQ(sums.size(), 3u);
  auto same = BundleReader::open(bundle);
  ASSERT_TRUE(same.ok());
  (*same)->expect(sums);
  int read = 0;
  for (auto e = (*same)->next(); e.ok() && *e; e = (*same)->next()) ++read;
  EXPECT_EQ(read, 3);
  // Another bundle at the path: entry 1 replaced by another (a valid one).
  auto entries = read_bundle(bundle);
  ASSERT_TRUE(entries.ok());
  auto fields = fields_for("d");
  auto other = Cache::open(options_in(tmp.sub("d"), &warnings));
  ASSERT_TRUE(other->store(make_key(fields), fields, contents_for("d", 100)).ok());
  (*entries)[1] = other->export_entries().value().at(0);
  ASSERT_TRUE(write_bundle(bundle, *entries, Replace::yes).ok());
  auto changed = BundleReader::open(bundle);
  ASSERT_TRUE(changed.ok());
  (*changed)->expect(sums);
  EXPECT_TRUE((*changed)->next().ok());
  auto second = (*changed)->next();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().message,
            "bundle '" + bundle + "' changed since it was checked: entry 1 is another");
  // One entry fewer.
  entries->resize(1);
  ASSERT_TRUE(write_bundle(bundle, *entries, Replace::yes).ok());
  auto fewer = BundleReader::open(bundle);
  ASSERT_TRUE(fewer.ok());
  (*fewer)->expect(sums);
  EXPECT_TRUE((*fewer)->next().ok());
  auto end = (*fewer)->next();
  ASSERT_FALSE(end.ok());
  EXPECT_EQ(end.error().message,
            "bundle '" + bundle + "' changed since it was checked: another number of entries");
}

// Cache::import_from takes entries one at a time; a source that fails part of the way stops the
// import there, the entries before it imported, and says why.
TEST_F(CacheBundle, AnImportFromASourceThatFailsStopsThereKeepingWhatCameBefore) {
  auto entries = read_bundle(bundle);
  ASSERT_TRUE(entries.ok());
  auto to = Cache::open(options_in(tmp.sub("to"), &warnings));
  size_t at = 0;
  auto report = to->import_from([&]() -> Expected<std::optional<StoredEntry>> {
    if (at == 2) return make_error("the source broke");
    return std::optional<StoredEntry>((*entries)[at++]);
  });
  ASSERT_TRUE(report.ok()) << report.error().message;
  EXPECT_EQ(report->imported, 2u);
  EXPECT_EQ(report->stopped, "the source broke");
  EXPECT_EQ(to->stats()->entries, 2u);
  // An empty source imports nothing and says nothing stopped it.
  report = to->import_from([]() -> Expected<std::optional<StoredEntry>> {
    return std::optional<StoredEntry>();
  });
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->imported, 0u);
  EXPECT_EQ(report->stopped, "");
}

TEST_F(CacheBundle, AVersionOneBundleIsStillRead) {
  auto entries = read_bundle(bundle);
  ASSERT_TRUE(entries.ok());
  ByteWriter w;
  w.raw("KILNBNDL");
  w.u64(1);
  w.u64(entries->size());
  for (const StoredEntry& e : *entries) {
    w.str(e.info.key);
    w.str(e.info.summary);
    w.u64(static_cast<uint64_t>(e.info.compile_ms));
    w.u64(static_cast<uint64_t>(e.info.created_ms));
    w.u64(e.info.fields.size());
    for (const KeyField& f : e.info.fields) {
      w.str(f.name);
      w.str(f.value);
    }
    w.u64(e.payloads.size());
    for (const StoredPayload& p : e.payloads) {
      auto raw = decode(p.encoded);
      ASSERT_TRUE(raw.ok());
      Encoded frame = encode(*raw, Encoding::zstd).value();
      w.str(p.name);
      w.u64(frame.raw_size);
      w.u64(frame.checksum);
      w.str(frame.data);
    }
  }
  std::string data = w.take();
  ByteWriter tail;
  tail.u64(XXH3_64bits(data.data(), data.size()));
  data += tail.take();
  const std::string old = tmp.sub("old.kbundle");
  write_file(old, data);
  auto reread = read_bundle(old);
  ASSERT_TRUE(reread.ok()) << reread.error().message;
  ASSERT_EQ(reread->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*reread)[i].info.key, (*entries)[i].info.key);
    auto verified = verify_stored((*reread)[i]);
    ASSERT_TRUE(verified.ok()) << verified.error().message;
    EXPECT_EQ(verified->payloads, verify_stored((*entries)[i]).value().payloads);
  }
  data[data.size() / 2] ^= 0x20;
  write_file(old, data);
  auto damaged = read_bundle(old);
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.error().message, "bad bundle '" + old + "': file checksum mismatch");
}

TEST_F(CacheBundle, NonBundleFileIsRejected) {
  write_file(bundle, "hello, this is not a bundle at all, but long enough to have a header");
  auto entries = read_bundle(bundle);
  ASSERT_FALSE(entries.ok());
  EXPECT_NE(entries.error().message.find("not a kiln cache bundle"), std::string::npos);
  EXPECT_FALSE(read_bundle(tmp.sub("missing")).ok());
}

}  // namespace
}  // namespace kiln::cache
