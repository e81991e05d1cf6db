// Environment faults degrade the cache instead of failing: no directory, read-only, full disk.
#include "cache/cache.h"
#include "test_util.h"

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

namespace kiln::cache {
namespace {

using testing::contents_for;
using testing::fields_for;
using testing::options_in;
using testing::TempDir;

Producer producer_of(Contents contents, int* runs) {
  return [contents, runs]() -> Expected<Contents> {
    ++*runs;
    return contents;
  };
}

// A tmpfs mounted for the test's lifetime; `error` says why not when mounting is not permitted.
class Tmpfs {
public:
  Tmpfs(const std::string& dir, const std::string& options) : m_dir(dir) {
    std::filesystem::create_directories(dir);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) == 0)
      m_mounted = true;
    else
      error = std::strerror(errno);
  }
  ~Tmpfs() {
    if (m_mounted) ::umount2(m_dir.c_str(), MNT_DETACH);
  }
  bool remount_read_only() {
    return ::mount("tmpfs", m_dir.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, nullptr) == 0;
  }
  bool mounted() const { return m_mounted; }
  std::string error;

private:
  std::string m_dir;
  bool m_mounted = false;
};

TEST(CacheFaults, DirectoryUnderARegularFileDisablesTheCacheWithOneWarning) {
  TempDir tmp;
  std::ofstream(tmp.sub("file")) << "x";
  std::vector<std::string> warnings;
  auto cache = Cache::open(options_in(tmp.sub("file/sub"), &warnings));
  EXPECT_FALSE(cache->enabled());
  EXPECT_EQ(warnings.size(), 1u);
  EXPECT_FALSE(cache->disabled_reason().empty());
  // Work goes on uncached.
  auto fields = fields_for("a");
  int runs = 0;
  for (int i = 0; i < 2; ++i) {
    auto fetched =
        cache->get_or_create(make_key(fields), fields, producer_of(contents_for("a"), &runs));
    ASSERT_TRUE(fetched.ok());
    EXPECT_EQ(fetched->source, FetchSource::produced_uncached);
    EXPECT_EQ(fetched->entry.payloads, contents_for("a").payloads);
  }
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(cache->lookup(make_key(fields), fields).status, LookupStatus::failure);
  EXPECT_FALSE(cache->store(make_key(fields), fields, contents_for("a")).ok());
  EXPECT_EQ(warnings.size(), 1u) << "one warning, not one per call";
}

TEST(CacheFaults, ReadOnlyFilesystemDisablesTheCache) {
  TempDir tmp;
  Tmpfs fs(tmp.sub("ro"), "size=1m,mode=0700");
  if (!fs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << fs.error;
  ASSERT_TRUE(fs.remount_read_only());
  std::vector<std::string> warnings;
  auto cache = Cache::open(options_in(tmp.sub("ro/kiln"), &warnings));
  EXPECT_FALSE(cache->enabled());
  EXPECT_EQ(warnings.size(), 1u);
}

TEST(CacheFaults, ExistingCacheOnAFilesystemMadeReadOnlyDegrades) {
  TempDir tmp;
  Tmpfs fs(tmp.sub("ro"), "size=4m,mode=0700");
  if (!fs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << fs.error;
  std::vector<std::string> warnings;
  auto fields = fields_for("a");
  {
    auto cache = Cache::open(options_in(tmp.sub("ro"), &warnings));
    ASSERT_TRUE(cache->store(make_key(fields), fields, contents_for("a")).ok());
  }
  ASSERT_TRUE(fs.remount_read_only());
  auto cache = Cache::open(options_in(tmp.sub("ro"), &warnings));
  int runs = 0;
  auto fetched =
      cache->get_or_create(make_key(fields), fields, producer_of(contents_for("a"), &runs));
  ASSERT_TRUE(fetched.ok());
  EXPECT_EQ(fetched->entry.payloads, contents_for("a").payloads);
  EXPECT_LE(warnings.size(), 1u);
}

TEST(CacheFaults, FullDiskTurnsTheCacheOffAndWorkContinues) {
  TempDir tmp;
  Tmpfs fs(tmp.sub("full"), "size=256k,mode=0700");
  if (!fs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << fs.error;
  std::vector<std::string> warnings;
  auto cache = Cache::open(options_in(tmp.sub("full"), &warnings));
  if (!cache->enabled()) {
    // Too small even for an empty database: that is the same degraded path.
    EXPECT_EQ(warnings.size(), 1u);
    return;
  }
  // Incompressible payloads much larger than the filesystem.
  std::mt19937_64 rng(42);
  Contents big = contents_for("big");
  big.payloads[1].bytes.resize(1 << 20);
  for (char& c : big.payloads[1].bytes) c = static_cast<char>(rng());
  int runs = 0;
  auto fields = fields_for("big");
  auto fetched = cache->get_or_create(make_key(fields), fields, producer_of(big, &runs));
  ASSERT_TRUE(fetched.ok());
  EXPECT_EQ(fetched->source, FetchSource::produced_uncached);
  EXPECT_EQ(fetched->entry.payloads, big.payloads);
  EXPECT_FALSE(cache->enabled());
  EXPECT_EQ(warnings.size(), 1u);
  // Later calls still work, uncached, without more warnings.
  auto small = fields_for("small");
  auto again =
      cache->get_or_create(make_key(small), small, producer_of(contents_for("small"), &runs));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(warnings.size(), 1u);
}

// A disk the cache helped fill: the commands that read it (stats, ls, verify, export, why) still
// work, the uses they cannot record waiting in the usage file with one warning; prune, which
// needs room to log its removals, says so and points at clear; and clear frees the space by
// removing the database, where every command once failed and only deleting the files by hand
// helped.
TEST(CacheFaults, OnAFullDiskReadsGoOnAndClearFreesTheSpace) {
  TempDir tmp;
  Tmpfs fs(tmp.sub("full"), "size=2m,mode=0700");
  if (!fs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << fs.error;
  std::vector<std::string> warnings;
  std::string dir = tmp.sub("full/kiln");
  auto fields = fields_for("a");
  std::string key = make_key(fields);
  {
    auto cache = Cache::open(options_in(dir, &warnings));
    ASSERT_TRUE(cache->enabled());
    Contents a = contents_for("a");  // incompressible: removing it frees room for a new one
    std::mt19937_64 rng(7);
    a.payloads[1].bytes.resize(300000);
    for (char& c : a.payloads[1].bytes) c = static_cast<char>(rng());
    ASSERT_TRUE(cache->store(key, fields, a).ok());
    ASSERT_TRUE(cache->stats().ok());  // merged: nothing waits
    ASSERT_TRUE(cache->lookup(key, fields).hit());  // one use, waiting in the usage file
  }
  {
    // The rest of the disk, filled.
    std::ofstream filler(tmp.sub("full/filler"), std::ios::binary);
    std::string block(4096, '\0');
    while (filler.write(block.data(), static_cast<std::streamsize>(block.size()))) {
    }
  }
  ASSERT_TRUE(warnings.empty()) << warnings[0];
  auto cache = Cache::open(options_in(dir, &warnings));
  ASSERT_TRUE(cache->enabled()) << (warnings.empty() ? "" : warnings[0]);
  auto stats = cache->stats();
  ASSERT_TRUE(stats.ok()) << stats.error().message;
  EXPECT_EQ(stats->entries, 1u);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("could not record the uses since the last write"), std::string::npos)
      << warnings[0];
  auto listed = cache->list();
  ASSERT_TRUE(listed.ok()) << listed.error().message;
  EXPECT_EQ(listed->size(), 1u);
  auto verified = cache->verify(Fix::no);
  ASSERT_TRUE(verified.ok()) << verified.error().message;
  EXPECT_TRUE(verified->bad.empty());
  auto exported = cache->export_entries();
  ASSERT_TRUE(exported.ok()) << exported.error().message;
  EXPECT_EQ(exported->size(), 1u);
  EXPECT_EQ(warnings.size(), 1u) << "one warning";

  auto pruned = cache->prune(0, std::nullopt);
  ASSERT_FALSE(pruned.ok());
  EXPECT_NE(pruned.error().message.find("`kiln clear` removes the database"), std::string::npos)
      << pruned.error().message;
  auto cleared = cache->clear();
  ASSERT_TRUE(cleared.ok()) << cleared.error().message;
  EXPECT_TRUE(cleared->replaced_database);
  EXPECT_TRUE(cleared->disk_full);
  EXPECT_LT(cleared->disk_bytes_after, cleared->disk_bytes_before);
  auto after = cache->stats();
  ASSERT_TRUE(after.ok()) << after.error().message;
  EXPECT_EQ(after->entries, 0u);
  EXPECT_TRUE(cache->enabled());
}

}  // namespace
}  // namespace kiln::cache
