// The cache commands on the files of the cache folder: the size cap bounds them under `import`,
// `stats` shows them, `prune` and `clear` shrink them, a malformed database is replaced by one
// that exists afterwards, and an object damaged under a recomputed record checksum is dropped.
#include "run_cli.h"
#include "tests/cache/test_util.h"

#include "cache/bundle.h"
#include "cache/cache.h"
#include "cache/codec.h"
#include "cache/entry_codec.h"
#include "cache/key.h"
#include "cache/local/sqlite.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace kiln::testing {
namespace {

using nlohmann::json;
using cache::testing::file_size;
using cache::testing::k_empty_database;
using cache::testing::root_page;

constexpr uint64_t k_mib = uint64_t{1} << 20;


// An entry whose one cubin is `raw_bytes` zeros, carried as a zstd frame of a few dozen bytes
// (the store keeps cubins raw).
cache::StoredEntry compressible_entry(const std::string& name, uint64_t raw_bytes) {
  cache::StoredEntry e;
  e.info.fields = {{"arch", "sm_90"}, {"graph", "canonical:" + name}, {"graph_hash", "h-" + name}};
  cache::sort_fields(e.info.fields);
  e.info.key = cache::make_key(e.info.fields);
  e.info.summary = "{}";
  e.info.created_ms = e.info.last_used_ms = 1000;
  auto encoded = cache::encode(std::string(raw_bytes, '\0'), cache::Encoding::zstd);
  EXPECT_TRUE(encoded.ok());
  e.payloads.push_back({"cubin:k", std::move(*encoded), false});
  return e;
}

// Runs kiln as run_kiln does, from a forked process of its own, and gives its exit code and the
// largest resident set it reached (bytes): getrusage's RUSAGE_CHILDREN there counts that one
// kiln alone, not the other children this test process waited for.
std::pair<int, uint64_t> exit_and_peak(const std::vector<std::string>& args,
                                       const std::map<std::string, std::string>& env) {
  int fds[2];
  if (::pipe(fds) != 0) return {-1, 0};
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    CliResult r = run_kiln(args, {}, env);
    struct rusage usage {};
    ::getrusage(RUSAGE_CHILDREN, &usage);
    int64_t out[2] = {r.exit_code, static_cast<int64_t>(usage.ru_maxrss) * 1024};  // KiB
    ssize_t wrote = ::write(fds[1], out, sizeof out);
    ::_exit(wrote == sizeof out ? 0 : 1);
  }
  ::close(fds[1]);
  int64_t got[2] = {-1, 0};
  ssize_t n = pid > 0 ? ::read(fds[0], got, sizeof got) : 0;
  ::close(fds[0]);
  int status = 0;
  if (pid > 0) ::waitpid(pid, &status, 0);
  if (n != sizeof got) return {-1, 0};
  return {static_cast<int>(got[0]), static_cast<uint64_t>(got[1])};
}

class CacheDiskCli : public ::testing::Test {
protected:
  void SetUp() override {
    char name[] = "/tmp/kiln-cache-cli-test-XXXXXX";
    m_tmp = mkdtemp(name);
    m_dir = m_tmp + "/cache";
  }
  void TearDown() override { std::filesystem::remove_all(m_tmp); }

  CliResult kiln(std::vector<std::string> args, const std::map<std::string, std::string>& env = {}) {
    args.push_back("--cache-dir");
    args.push_back(m_dir);
    return run_kiln(args, {}, env);
  }
  // A bundle of `count` entries of `raw_bytes` each; returns its path.
  std::string bundle(const std::string& name, int count, uint64_t raw_bytes) {
    std::vector<cache::StoredEntry> entries;
    for (int i = 0; i < count; ++i)
      entries.push_back(compressible_entry(name + std::to_string(i), raw_bytes));
    std::string path = m_tmp + "/" + name + ".kbundle";
    EXPECT_TRUE(cache::write_bundle(path, entries).ok());
    return path;
  }
  uint64_t disk_bytes() const {
    return file_size(m_dir + "/kiln.db") + file_size(m_dir + "/kiln.db-wal");
  }
  // `kiln compile` of mlp.kg for sm_90 into the cache, which then holds that one entry; its key
  // ("" after a failure, reported).
  std::string compile_mlp() {
    const std::string mlp = std::string(KILN_EXAMPLES_DIR) + "/mlp.kg";
    CliResult compiled = kiln({"compile", mlp, "--arch", "sm_90", "--precision", "high"});
    EXPECT_EQ(compiled.exit_code, 0) << compiled.err;
    cache::Options options;
    options.dir = m_dir;
    auto listed = cache::Cache::open(options)->list();
    EXPECT_TRUE(listed.ok() && listed->size() == 1u);
    return listed.ok() && listed->size() == 1u ? listed->front().key : std::string();
  }
  json stats() {
    CliResult r = kiln({"stats", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json parsed = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << r.out;
    return parsed;
  }

  std::string m_tmp, m_dir;
};

// The reported case, at a small scale: a bundle of a few dozen KiB whose entries the store keeps
// as 1 MiB each, imported under a 4 MiB cap.
TEST_F(CacheDiskCli, ImportUnderTheCapKeepsTheFilesWithinItAndPruneAndClearShrinkThem) {
  std::string file = bundle("big", 24, k_mib);
  std::printf("bundle: %llu bytes\n", static_cast<unsigned long long>(file_size(file)));
  CliResult imported = kiln({"import", file}, {{"KILN_CACHE_MAX_SIZE", "4M"}});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  // What the cap did is said, not only what went in.
  EXPECT_NE(imported.out.find("imported 24 entries"), std::string::npos) << imported.out;
  EXPECT_NE(imported.out.find(" entries evicted to keep the cache within its size cap (4.0 MiB)"),
            std::string::npos)
      << imported.out;
  json s = stats();
  std::printf("after import: %s\n", s.dump().c_str());
  EXPECT_LE(s["bytes"].get<uint64_t>(), 4 * k_mib);
  EXPECT_EQ(s["disk_bytes"].get<uint64_t>(), disk_bytes());
  EXPECT_EQ(s["wal_bytes"].get<uint64_t>(), file_size(m_dir + "/kiln.db-wal"));
  EXPECT_LE(disk_bytes(), 4 * k_mib + k_empty_database);
  CliResult text = kiln({"stats"});
  EXPECT_NE(text.out.find("on disk       "), std::string::npos) << text.out;

  // Without a cap, the same bundle fills the files; prune and clear give the space back.
  ASSERT_EQ(kiln({"import", bundle("more", 12, k_mib)}, {{"KILN_CACHE_MAX_SIZE", "0"}}).exit_code,
            0);
  EXPECT_GE(disk_bytes(), 12 * k_mib);
  CliResult pruned = kiln({"prune", "--max-size", "2M"});
  ASSERT_EQ(pruned.exit_code, 0) << pruned.err;
  EXPECT_NE(pruned.out.find("on disk "), std::string::npos) << pruned.out;
  std::printf("prune --max-size 2M: %s", pruned.out.c_str());
  EXPECT_LE(disk_bytes(), 2 * k_mib + k_empty_database);
  CliResult cleared = kiln({"clear"});
  ASSERT_EQ(cleared.exit_code, 0) << cleared.err;
  std::printf("clear: %s", cleared.out.c_str());
  EXPECT_LE(disk_bytes(), k_empty_database);
  s = stats();
  EXPECT_EQ(s["entries"], 0);
  EXPECT_EQ(s["disk_bytes"].get<uint64_t>(), disk_bytes());
}

// The page of `name` (a table or an index) in the database file, with every page moved from the
// WAL into the file first.

// Overwrites bytes [from, to) of page `page` (1-based, 4 KiB pages) of `path` with 0xff.
void smash(const std::string& path, int64_t page, size_t from, size_t to) {
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  size_t start = static_cast<size_t>(page - 1) * 4096;
  ASSERT_LE(start + to, bytes.size());
  for (size_t i = start + from; i < start + to; ++i) bytes[i] = '\xff';
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

bool moved_aside_exists(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().rfind("kiln.db.corrupt-", 0) == 0) return true;
  return false;
}

TEST_F(CacheDiskCli, VerifyFixOnAMalformedDatabaseStartsTheNewDatabaseItReports) {
  ASSERT_EQ(kiln({"import", bundle("small", 3, 1000)}).exit_code, 0);
  std::string db = m_dir + "/kiln.db";
  // A damaged index: only SQLite's integrity check sees it.
  smash(db, root_page(db, "sqlite_autoindex_entries_1"), 100, 4096);
  CliResult checked = kiln({"verify"});
  EXPECT_EQ(checked.exit_code, 1);
  EXPECT_NE(checked.out.find("the database is malformed"), std::string::npos) << checked.out;
  CliResult fixed = kiln({"verify", "--fix"});
  EXPECT_EQ(fixed.exit_code, 1) << "the database was bad";
  EXPECT_NE(fixed.out.find("moved the database aside and started an empty one"),
            std::string::npos)
      << fixed.out << fixed.err;
  EXPECT_TRUE(std::filesystem::exists(db)) << "the new database it says it started";
  EXPECT_TRUE(moved_aside_exists(m_dir));
  CliResult again = kiln({"verify"});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("checked 0 entries, 0 bad"), std::string::npos) << again.out;
  EXPECT_EQ(stats()["entries"], 0);
}

TEST_F(CacheDiskCli, ClearOnAMalformedDatabaseLeavesAnEmptyOne) {
  ASSERT_EQ(kiln({"import", bundle("small", 3, 1000)}).exit_code, 0);
  std::string db = m_dir + "/kiln.db";
  smash(db, root_page(db, "entries"), 0, 4096);
  CliResult cleared = kiln({"clear"});
  EXPECT_EQ(cleared.exit_code, 0) << cleared.out << cleared.err;
  EXPECT_NE(cleared.out.find("malformed"), std::string::npos) << cleared.out;
  EXPECT_TRUE(std::filesystem::exists(db));
  EXPECT_FALSE(moved_aside_exists(m_dir)) << "clearing removes the malformed file too";
  EXPECT_EQ(stats()["entries"], 0);
}

// A CPU object damaged in a record whose record checksum was recomputed: the run drops the entry
// and compiles again instead of linking the damaged code.
TEST_F(CacheDiskCli, RunOnTheCpuDropsAnObjectDamagedUnderARecomputedRecordChecksum) {
  const std::string mlp = std::string(KILN_EXAMPLES_DIR) + "/mlp.kg";
  CliResult first = kiln({"run", mlp, "--target", "cpu", "--json"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  {
    auto db = cache::sql::Db::open(m_dir + "/kiln.db");
    ASSERT_TRUE(db.ok());
    auto st = (*db)->prepare("SELECT key, record FROM entries");
    ASSERT_TRUE(st.ok());
    ASSERT_TRUE(*st->step());
    std::string key = st->column_text(0);
    auto entry = cache::decode_entry(st->column_blob(1));
    ASSERT_TRUE(entry.ok()) << entry.error().message;
    bool damaged = false;
    for (cache::StoredPayload& p : entry->payloads) {
      if (p.name != "object") continue;
      // The ELF header's section header offset: a linker trusting it reads far out of bounds.
      ASSERT_GE(p.encoded.data.size(), 0x30u);
      for (size_t i = 0x28; i < 0x30; ++i) p.encoded.data[i] = '\x7f';
      damaged = true;
    }
    ASSERT_TRUE(damaged) << "the CPU target's entry holds an 'object' payload";
    auto update = (*db)->prepare("UPDATE entries SET record = ? WHERE key = ?");
    ASSERT_TRUE(update.ok());
    update->bind_blob(1, cache::encode_entry(*entry)).bind_text(2, key);
    ASSERT_TRUE(update->run().ok());
  }
  CliResult second = kiln({"run", mlp, "--target", "cpu", "--json"});
  EXPECT_EQ(second.signal, 0) << "no crash";
  EXPECT_EQ(second.exit_code, 0) << second.err;
  EXPECT_NE(second.err.find("dropped bad entry"), std::string::npos) << second.err;
  EXPECT_NE(second.err.find("payload 'object'"), std::string::npos) << second.err;
}

// A cache command on a cache folder it cannot use ends with an error saying why, not the
// compile's warning that it goes on without a cache (it does not go on).
TEST_F(CacheDiskCli, ACacheCommandOnACacheItCannotUseSaysWhy) {
  ASSERT_EQ(kiln({"import", bundle("small", 1, 1000)}).exit_code, 0);
  std::filesystem::remove(m_dir + "/usage");
  std::filesystem::create_directory(m_dir + "/usage");
  for (const char* command : {"stats", "ls", "verify", "clear"}) {
    CliResult r = kiln({command});
    EXPECT_EQ(r.exit_code, 1) << command;
    EXPECT_NE(r.err.find(std::string("kiln ") + command + ": cannot use the cache: '" + m_dir +
                         "/usage' is not a regular file"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("continuing without a cache"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("links"), std::string::npos) << "a folder is no link: " << r.err;
  }
}

// An entry whose checksums hold but whose artifact does not decode (a damaged build, or one a
// keyholder signed) fails every run that hits it: verify names it, --fix drops it, and a bundle
// holding it imports nothing.
TEST_F(CacheDiskCli, VerifyNamesAnEntryWhoseArtifactDoesNotDecodeAndFixDropsIt) {
  const std::string key = compile_mlp();
  ASSERT_FALSE(key.empty());
  CliResult good = kiln({"verify"});
  EXPECT_EQ(good.exit_code, 0) << good.out << good.err;
  {
    cache::Options options;
    options.dir = m_dir;
    auto store = cache::Cache::open(options);
    ASSERT_EQ(cache::testing::replace_payloads(*store, key, [](const std::string& name) { return name == "artifact"; },
                                               "{\"not\": \"an artifact\"}"),
              1);
  }
  CliResult checked = kiln({"verify"});
  EXPECT_EQ(checked.exit_code, 1) << checked.out << checked.err;
  EXPECT_NE(checked.out.find("bad " + key + ": its artifact does not decode: "), std::string::npos)
      << checked.out;
  EXPECT_NE(checked.out.find("checked 1 entries, 1 bad"), std::string::npos) << checked.out;
  CliResult as_json = kiln({"verify", "--json"});
  EXPECT_EQ(as_json.exit_code, 1);
  json report = json::parse(as_json.out, nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << as_json.out;
  ASSERT_EQ(report["bad"].size(), 1u) << as_json.out;
  EXPECT_EQ(report["bad"][0]["key"], key);
  EXPECT_EQ(report["bad"][0]["reason"].get<std::string>().rfind("its artifact does not decode", 0),
            0u)
      << as_json.out;
  const std::string bundle = m_tmp + "/undecodable.kbundle", other = m_tmp + "/other";
  ASSERT_EQ(kiln({"export", bundle}).exit_code, 0);
  CliResult refused = run_kiln({"import", bundle, "--cache-dir", other});
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("bad bundle '" + bundle + "': entry " + key +
                             ": its artifact does not decode: "),
            std::string::npos)
      << refused.err;
  EXPECT_FALSE(std::filesystem::exists(other)) << "no cache made for a refused bundle";
  CliResult fixed = kiln({"verify", "--fix"});
  EXPECT_EQ(fixed.exit_code, 1) << "the entry was bad";
  EXPECT_NE(fixed.out.find("removed " + key + ": its artifact"), std::string::npos) << fixed.out;
  CliResult again = kiln({"verify"});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("checked 0 entries, 0 bad"), std::string::npos) << again.out;
}

// A bundle whose entry's checksums hold but whose cubin the runtime would not load (cut short: a
// forged or damaged build) imports nothing, exit 2, naming the entry; the unforged one imports.
TEST_F(CacheDiskCli, ABundleHoldingACubinTheRuntimeWouldNotLoadImportsNothing) {
  const std::string key = compile_mlp();
  ASSERT_FALSE(key.empty());
  const std::string good = m_tmp + "/good.kbundle", cut = m_tmp + "/cut.kbundle";
  ASSERT_EQ(kiln({"export", good}).exit_code, 0);
  std::string kernel;
  {
    cache::Options options;
    options.dir = m_dir;
    auto store = cache::Cache::open(options);
    cache::Lookup entry = store->read(key);
    ASSERT_TRUE(entry.hit());
    std::string half;
    const std::string prefix = cache::k_payload_cubin_prefix;
    for (const cache::Payload& p : entry.entry.payloads) {
      if (p.name.compare(0, prefix.size(), prefix) != 0 || !kernel.empty()) continue;
      kernel = p.name.substr(prefix.size());
      half = p.bytes.substr(0, p.bytes.size() / 2);
    }
    ASSERT_FALSE(kernel.empty());
    ASSERT_EQ(cache::testing::replace_payloads(
                  *store, key, [&](const std::string& name) { return name == prefix + kernel; },
                  half),
              1);
  }
  ASSERT_EQ(kiln({"export", cut}).exit_code, 0);
  const std::string other = m_tmp + "/other";
  CliResult refused = run_kiln({"import", cut, "--cache-dir", other});
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("bad bundle '" + cut + "': entry " + key +
                             ": its cubins would not load: kernel '" + kernel + "': cubin: "),
            std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("; nothing was imported"), std::string::npos) << refused.err;
  EXPECT_FALSE(std::filesystem::exists(other)) << "no cache made for a refused bundle";
  CliResult imported = run_kiln({"import", good, "--cache-dir", other});
  EXPECT_EQ(imported.exit_code, 0) << imported.err;
  EXPECT_NE(imported.out.find("imported 1 entries"), std::string::npos) << imported.out;
}

// `kiln import` holds one entry in memory at a time, not the bundle: a bundle of 16 entries of
// 8 MiB of incompressible bytes (128 MiB) imports in well under its size. (It read the file
// whole and decoded every entry before storing any: about twice the bundle.) A file checksum
// that fails at the end, after every entry was read, still imports nothing.
TEST_F(CacheDiskCli, ImportHoldsOneEntryInMemoryNotTheBundle) {
  const int count = 16;
  const uint64_t each = 8 * k_mib;
  std::string path = m_tmp + "/large.kbundle";
  {
    std::vector<cache::StoredEntry> entries;
    uint64_t state = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < count; ++i) {
      cache::StoredEntry e = compressible_entry("large" + std::to_string(i), 1);
      std::string noise(each, '\0');
      for (size_t at = 0; at + 8 <= noise.size(); at += 8) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        std::memcpy(noise.data() + at, &state, 8);
      }
      e.payloads[0].encoded = cache::encode(noise, cache::Encoding::raw).value();
      entries.push_back(std::move(e));
    }
    ASSERT_TRUE(cache::write_bundle(path, entries).ok());
  }
  ASSERT_GT(file_size(path), count * each);
  // The file checksum damaged: every entry reads and checks, the end does not.
  const std::string damaged = m_tmp + "/damaged.kbundle";
  std::filesystem::copy_file(path, damaged);
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  CliResult refused = kiln({"import", damaged}, {{"KILN_CACHE_MAX_SIZE", "0"}});
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_EQ(refused.err, "kiln import: bad bundle '" + damaged + "': file checksum mismatch\n");
  EXPECT_FALSE(std::filesystem::exists(m_dir)) << "no cache made for a refused bundle";
  auto [imported, import_peak] =
      exit_and_peak({"import", path, "--cache-dir", m_dir}, {{"KILN_CACHE_MAX_SIZE", "0"}});
  ASSERT_EQ(imported, 0);
  EXPECT_LT(import_peak, count * each * 3 / 4) << "largest resident set of the import";
  std::printf("largest resident set of `kiln import` (128 MiB bundle): %.1f MiB\n",
              static_cast<double>(import_peak) / k_mib);
  CliResult stats = kiln({"stats", "--json"});
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_EQ(json::parse(stats.out)["entries"], count);
  // Export too writes one entry at a time (it held every entry, then the whole file).
  const std::string exported = m_tmp + "/exported.kbundle";
  auto [exported_code, export_peak] = exit_and_peak({"export", exported, "--cache-dir", m_dir}, {});
  ASSERT_EQ(exported_code, 0);
  EXPECT_LT(export_peak, count * each * 3 / 4) << "largest resident set of the export";
  std::printf("largest resident set of `kiln export` (the same entries): %.1f MiB\n",
              static_cast<double>(export_peak) / k_mib);
  CliResult again = run_kiln({"import", exported, "--cache-dir", m_tmp + "/again"}, {},
                             {{"KILN_CACHE_MAX_SIZE", "0"}});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("imported 16 entries (0 already present)"), std::string::npos)
      << again.out;
  EXPECT_EQ(std::filesystem::file_size(exported), std::filesystem::file_size(path));
}

}  // namespace
}  // namespace kiln::testing
