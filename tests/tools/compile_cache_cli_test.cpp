// `kiln compile` through the cache and the cache commands on its entries, as a user runs them.
#include "run_cli.h"
#include "tests/support/redis_server.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace kiln::testing::compile_cache_cli_test {
namespace {

using nlohmann::json;

const std::string k_mlp = std::string(KILN_EXAMPLES_DIR) + "/mlp.kg";

class CompileCacheCli : public ::testing::Test {
protected:
  void SetUp() override {
    char name[] = "/tmp/kiln-cli-test-XXXXXX";
    m_dir = mkdtemp(name);
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }

  // Runs a kiln command against this test's cache folder.
  CliResult kiln(std::vector<std::string> args, const std::string& dir = {}) {
    args.push_back("--cache-dir");
    args.push_back(dir.empty() ? m_dir : dir);
    return run_kiln(args);
  }
  json compile(const std::string& arch, const std::string& dir = {}) {
    CliResult r = kiln({"compile", k_mlp, "--arch", arch, "--precision", "high", "--json"}, dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    json parsed = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded()) << r.out;
    return parsed;
  }

  std::string m_dir;
};

TEST_F(CompileCacheCli, SecondCompileHitsWithTheSameKeyAndReport) {
  json first = compile("sm_90");
  json second = compile("sm_90");
  EXPECT_EQ(first["cache"], "miss");
  EXPECT_EQ(second["cache"], "hit");
  EXPECT_EQ(first["key"], second["key"]);
  EXPECT_EQ(first["kernels"], second["kernels"]);
  EXPECT_EQ(second["precision"], "high");
  for (const char* field : {"graph", "key", "cache", "arch", "precision", "kernels", "fallbacks",
                            "saved_ms", "lookup_us"}) {
    EXPECT_TRUE(second.contains(field)) << field;
  }
  // A hit names the original compile's time for what it is: time saved, not time spent.
  EXPECT_FALSE(second.contains("compile_ms"));
  EXPECT_NEAR(second["saved_ms"].get<double>(), first["cpu_ms"].get<double>(), 0.5)
      << "a hit saves the CPU time the compile cost (the cache keeps whole milliseconds)";
  EXPECT_GT(first["cpu_ms"].get<double>(), 0);
  EXPECT_FALSE(first.contains("saved_ms"));
  double ms = first["compile_ms"];
  EXPECT_EQ(ms, std::round(ms * 10) / 10) << "rounded to 0.1 ms";
  int matmuls = 0;
  for (const json& k : second["kernels"]) {
    EXPECT_EQ(k["spill_bytes"], 0) << k;
    EXPECT_EQ(k["local_bytes"], 0) << k;
    // Every kernel says where its configuration came from (the analytic model), hit or miss,
    // and a matmul or attention kernel names its tile.
    EXPECT_EQ(k["schedule"], "model") << k;
    std::string name = k["name"];
    if (name.find("_matmul_") == std::string::npos &&
        name.find("_attention_") == std::string::npos) {
      EXPECT_FALSE(k.contains("tile")) << k;
      continue;
    }
    matmuls += name.find("_matmul_") != std::string::npos;
    EXPECT_NE(k["tile"].get<std::string>().find(" warps, "), std::string::npos) << k;
  }
  EXPECT_GE(matmuls, 2);
}

TEST_F(CompileCacheCli, NoCacheNeverHitsAndStoresNothing) {
  for (int i = 0; i < 2; ++i) {
    CliResult r = kiln({"compile", k_mlp, "--arch", "sm_80", "--precision", "high", "--json",
                        "--no-cache"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["cache"], "miss");
  }
  // Nothing was stored, so there is no cache to list: exit 1, said as JSON, and none is made.
  CliResult ls = kiln({"ls", "--json"});
  EXPECT_EQ(ls.exit_code, 1);
  json error = json::parse(ls.out);
  EXPECT_NE(error["error"].get<std::string>().find("no cache at"), std::string::npos) << ls.out;
  EXPECT_EQ(error["command"], "ls");
  EXPECT_FALSE(std::filesystem::exists(m_dir + "/kiln.db"));
}

TEST_F(CompileCacheCli, LsStatsAndShowDescribeTheEntry) {
  std::string key = compile("sm_90")["key"];
  compile("sm_90");
  json ls = json::parse(kiln({"ls", "--json"}).out);
  ASSERT_EQ(ls["entries"].size(), 1u);
  EXPECT_EQ(ls["entries"][0]["key"], key);
  EXPECT_EQ(ls["entries"][0]["arch"], "sm_90");
  EXPECT_EQ(ls["entries"][0]["precision"], "high");
  json stats = json::parse(kiln({"stats", "--json"}).out);
  EXPECT_EQ(stats["entries"], 1);
  EXPECT_EQ(stats["hits"], 1);
  EXPECT_EQ(stats["hit_rate"], 0.5) << "one hit in two lookups";
  EXPECT_GE(stats["misses"], 1);
  CliResult ptx = kiln({"show", key.substr(0, 8), "--ptx"});
  ASSERT_EQ(ptx.exit_code, 0) << ptx.err;
  EXPECT_NE(ptx.out.find("mma.sync.aligned.m16n8k8"), std::string::npos);
  CliResult source = kiln({"show", key, "--source"});
  EXPECT_NE(source.out.find("__global__"), std::string::npos);
  // --json describes the entry; beside a text it is refused (it was ignored: raw PTX, exit 0).
  CliResult both = kiln({"show", key, "--ptx", "--json"});
  EXPECT_EQ(both.exit_code, 2) << both.out;
  EXPECT_NE(both.out.find("--json excludes --ptx"), std::string::npos) << both.out;
}

// `why` names only the option that differs, not the whole option list.
TEST_F(CompileCacheCli, WhyShowsOnlyTheOptionThatDiffers) {
  compile("sm_90");
  CliResult why = kiln({"why", k_mlp, "--arch", "sm_75", "--precision", "high", "--allow-fallback"});
  EXPECT_EQ(why.exit_code, 1) << why.err;
  EXPECT_NE(why.out.find("options (fallback=allow here, fallback=refuse cached)"),
            std::string::npos)
      << why.out;
  EXPECT_EQ(why.out.find("nvrtc="), std::string::npos) << why.out;
}

// A field one side lacks is "none" there: a CPU entry has no arch (it printed "sm_90 here,
// cached", a blank).
TEST_F(CompileCacheCli, WhyNamesAFieldTheCachedEntryLacksAsNone) {
  ASSERT_EQ(kiln({"compile", k_mlp, "--target", "cpu", "--precision", "high"}).exit_code, 0);
  CliResult why = kiln({"why", k_mlp, "--arch", "sm_90", "--precision", "high"});
  EXPECT_EQ(why.exit_code, 1) << why.err;
  EXPECT_NE(why.out.find("arch (sm_90 here, none cached)"), std::string::npos) << why.out;
  EXPECT_EQ(why.out.find(",  cached"), std::string::npos) << why.out;
}

TEST_F(CompileCacheCli, ShowGraphPrintsTheCachedGraphsText) {
  json compiled = compile("sm_90");
  CliResult shown = kiln({"show", compiled["key"].get<std::string>().substr(0, 10), "--graph"});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find("graph cached"), std::string::npos) << shown.out;
  std::string file = m_dir + "/shown.kg";
  std::ofstream(file) << shown.out;
  CliResult hashed = run_kiln({"hash", file});
  ASSERT_EQ(hashed.exit_code, 0) << hashed.err;
  EXPECT_EQ(hashed.out, compiled["graph"].get<std::string>() + "\n") << "the same graph";
}

TEST_F(CompileCacheCli, WhyNamesTheFieldThatDiffers) {
  compile("sm_90");
  CliResult why = kiln({"why", k_mlp, "--arch", "sm_80", "--precision", "high", "--json"});
  ASSERT_EQ(why.exit_code, 1) << "a compile would miss: exit 1. " << why.err;
  json out = json::parse(why.out);
  EXPECT_EQ(out["cache"], "miss");
  ASSERT_EQ(out["nearest"].size(), 1u);
  ASSERT_EQ(out["nearest"][0]["differs"].size(), 1u);
  EXPECT_EQ(out["nearest"][0]["differs"][0]["field"], "arch");
  EXPECT_EQ(out["nearest"][0]["differs"][0]["requested"], "sm_80");
  EXPECT_EQ(out["nearest"][0]["differs"][0]["cached"], "sm_90");
  CliResult same_run = kiln({"why", k_mlp, "--arch", "sm_90", "--precision", "high", "--json"});
  EXPECT_EQ(same_run.exit_code, 0) << "a compile would hit: exit 0";
  json same = json::parse(same_run.out);
  EXPECT_EQ(same["cache"], "hit");
}

// sm_90 and sm_90a entries are apart, and `why` says why and what to give instead.
TEST_F(CompileCacheCli, WhyExplainsAnSm90AgainstSm90aMiss) {
  json plain = compile("sm_90");
  json specific = compile("sm_90a");
  EXPECT_EQ(specific["cache"], "miss") << "sm_90a is not served sm_90's kernels";
  EXPECT_EQ(specific["arch"], "sm_90a");
  EXPECT_NE(specific["key"], plain["key"]);
  EXPECT_EQ(compile("sm_90a")["cache"], "hit");

  std::string other = m_dir + "/other";
  compile("sm_90", other);
  CliResult text = kiln({"why", k_mlp, "--arch", "sm_90a", "--precision", "high"}, other);
  EXPECT_EQ(text.exit_code, 1) << text.err;
  EXPECT_NE(text.out.find("arch (sm_90a here, sm_90 cached)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("sm_90a and sm_90 are separate targets: sm_90a kernels may use that "
                          "arch's own instructions and load only on compute capability 9.0"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("Give --arch sm_90 to use the cached entry"), std::string::npos)
      << text.out;
  CliResult js = kiln({"why", k_mlp, "--arch", "sm_90a", "--precision", "high", "--json"}, other);
  json out = json::parse(js.out);
  ASSERT_EQ(out["nearest"].size(), 1u);
  const json& diff = out["nearest"][0]["differs"][0];
  EXPECT_EQ(diff["field"], "arch");
  EXPECT_EQ(diff["requested"], "sm_90a");
  EXPECT_EQ(diff["cached"], "sm_90");
  ASSERT_TRUE(diff.contains("note"));
  // Archs that differ in more than the suffix get no such note.
  CliResult other_arch = kiln({"why", k_mlp, "--arch", "sm_80", "--precision", "high", "--json"},
                              other);
  json far = json::parse(other_arch.out);
  ASSERT_EQ(far["nearest"].size(), 1u);
  ASSERT_EQ(far["nearest"][0]["differs"].size(), 1u);
  EXPECT_FALSE(far["nearest"][0]["differs"][0].contains("note"));
  // Nor where something else differs too: giving the cached arch would still miss.
  CliResult two = kiln({"why", k_mlp, "--arch", "sm_90a", "--precision", "medium", "--json"}, other);
  json both = json::parse(two.out);
  ASSERT_EQ(both["nearest"].size(), 1u);
  ASSERT_EQ(both["nearest"][0]["differs"].size(), 2u);
  for (const json& d : both["nearest"][0]["differs"]) EXPECT_FALSE(d.contains("note")) << d;

  CliResult b200 = kiln({"compile", k_mlp, "--arch", "sm_100a"});
  EXPECT_EQ(b200.exit_code, 2);
  EXPECT_NE(b200.err.find("kiln plans arch-specific code for sm_90a only; give sm_100"),
            std::string::npos)
      << b200.err;
}

// `why` on a machine whose cache lacks the key says what the fleet's tier holds for it: present
// (a compile would hit remotely), rejected (and why) or absent.
TEST_F(CompileCacheCli, WhySaysWhatTheRemoteTierHoldsForAMiss) {
  RedisServer server;
  if (!server.installed()) GTEST_SKIP() << "redis-server is not installed";
  ASSERT_TRUE(server.started()) << server.error();
  std::string first = m_dir + "/first", second = m_dir + "/second";
  CliResult stored = kiln({"compile", k_mlp, "--arch", "sm_90", "--precision", "high",
                           "--remote", server.url()}, first);
  ASSERT_EQ(stored.exit_code, 0) << stored.err;
  compile("sm_80", second);  // the second machine's cache, without the sm_90 entry

  std::string tier =
      "  remote redis 127.0.0.1:" + std::to_string(server.port()) + "/0 (prefix kiln:): ";
  CliResult present = kiln({"why", k_mlp, "--arch", "sm_90", "--precision", "high", "--remote",
                            server.url()}, second);
  EXPECT_EQ(present.exit_code, 0) << present.err;
  EXPECT_NE(present.out.find(" would miss\n" + tier + "present (this compile would hit remotely)\n"),
            std::string::npos)
      << present.out;

  // With a secret set, the unsigned entry is refused, as a compile would refuse it.
  std::vector<std::string> args = {"why", k_mlp, "--arch", "sm_90", "--precision", "high",
                                   "--remote", server.url(), "--cache-dir", second};
  CliResult rejected = run_kiln(args, "", {{"KILN_REMOTE_KEY", "a secret of 16 b"}});
  EXPECT_EQ(rejected.exit_code, 1) << rejected.err;
  EXPECT_NE(rejected.out.find(tier + "rejected ("), std::string::npos) << rejected.out;
  EXPECT_NE(rejected.out.find("; a compile here would compile it afresh)\n"), std::string::npos)
      << rejected.out;

  CliResult absent = kiln({"why", k_mlp, "--arch", "sm_86", "--precision", "high", "--remote",
                           server.url()}, second);
  EXPECT_EQ(absent.exit_code, 1) << absent.err;
  EXPECT_NE(absent.out.find(tier + "absent\n"), std::string::npos) << absent.out;

  // A machine with no cache yet: its first compile would hit remotely, and why says so (and
  // makes no cache). Without a remote tier there is nothing to ask.
  std::string none = m_dir + "/none";
  CliResult bare = kiln({"why", k_mlp, "--arch", "sm_90", "--precision", "high", "--remote",
                         server.url()}, none);
  EXPECT_EQ(bare.exit_code, 0) << bare.err;
  EXPECT_NE(bare.out.find(" would miss\n" + tier + "present (this compile would hit remotely)\n" +
                          "  local: no cache at '" + none + "'\n"),
            std::string::npos)
      << bare.out;
  EXPECT_EQ(bare.err, "");
  CliResult bare_json = kiln({"why", k_mlp, "--arch", "sm_90", "--precision", "high", "--remote",
                              server.url(), "--json"}, none);
  EXPECT_EQ(bare_json.exit_code, 0) << bare_json.err;
  json parsed = json::parse(bare_json.out, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << bare_json.out;
  EXPECT_EQ(parsed["cache"], "miss");
  EXPECT_EQ(parsed["remote"], "present");
  EXPECT_EQ(parsed["local"], "no cache at '" + none + "'");
  EXPECT_EQ(parsed["nearest"], json::array());
  CliResult bare_absent = kiln({"why", k_mlp, "--arch", "sm_86", "--precision", "high",
                                "--remote", server.url()}, none);
  EXPECT_EQ(bare_absent.exit_code, 1) << bare_absent.err;
  EXPECT_NE(bare_absent.out.find(tier + "absent\n"), std::string::npos) << bare_absent.out;
  CliResult alone = kiln({"why", k_mlp, "--arch", "sm_90", "--precision", "high"}, none);
  EXPECT_EQ(alone.exit_code, 1);
  EXPECT_EQ(alone.out, "");
  EXPECT_NE(alone.err.find("no cache at '" + none + "'"), std::string::npos) << alone.err;
  EXPECT_FALSE(std::filesystem::exists(none)) << "asking about a cache never makes one";
}

TEST_F(CompileCacheCli, ExportedBundlePrewarmsAnotherCache) {
  std::string key = compile("sm_86")["key"];
  std::string bundle = m_dir + "/fleet.kbundle";
  ASSERT_EQ(kiln({"export", bundle}).exit_code, 0);
  CliResult again = kiln({"export", bundle});
  EXPECT_EQ(again.exit_code, 2) << "an existing file is not replaced silently";
  EXPECT_NE(again.err.find("kiln export: '" + bundle + "' exists; pass --force"), std::string::npos)
      << again.err;
  EXPECT_EQ(kiln({"export", bundle, "--force"}).exit_code, 0);
  EXPECT_EQ(std::filesystem::status(bundle).permissions() & std::filesystem::perms::all,
            std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  // --force replaces a regular file only: a pipe, a link or a folder stays (a device too: as
  // root, /dev/full once became a bundle).
  std::string pipe = m_dir + "/pipe", link = m_dir + "/link", folder = m_dir + "/folder";
  ASSERT_EQ(::mkfifo(pipe.c_str(), 0600), 0);
  std::filesystem::create_symlink(bundle, link);
  std::filesystem::create_directory(folder);
  for (const std::string& path : {pipe, link, folder}) {
    CliResult kept = kiln({"export", path, "--force"});
    EXPECT_EQ(kept.exit_code, 2) << path;
    EXPECT_EQ(kept.err, "kiln export: '" + path +
                            "' is not a regular file; only a regular file is replaced\n");
  }
  EXPECT_TRUE(std::filesystem::is_fifo(pipe));
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_TRUE(std::filesystem::is_directory(folder));
  std::string other = m_dir + "/other";
  CliResult imported = kiln({"import", bundle}, other);
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  json hit = compile("sm_86", other);
  EXPECT_EQ(hit["cache"], "hit");
  EXPECT_EQ(hit["key"], key);
}

TEST_F(CompileCacheCli, ABundleWithCpuTargetEntriesIsImportedOnlyWhenAllowed) {
  CliResult compiled = kiln({"compile", k_mlp, "--target", "cpu", "--precision", "highest"});
  ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
  std::string bundle = m_dir + "/cpu.kbundle";
  ASSERT_EQ(kiln({"export", bundle}).exit_code, 0);
  std::string other = m_dir + "/other";
  CliResult refused = kiln({"import", bundle}, other);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("holds 1 CPU-target or emulated entries (host machine code"), std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("--allow-native-code"), std::string::npos) << refused.err;
  EXPECT_FALSE(std::filesystem::exists(other + "/kiln.db")) << "nothing was imported";
  CliResult allowed = kiln({"import", bundle, "--allow-native-code"}, other);
  EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
  EXPECT_NE(allowed.out.find("imported 1 entries"), std::string::npos) << allowed.out;
}

TEST_F(CompileCacheCli, AnEmptyOrShortRemoteKeyIsAnErrorNamingTheVariable) {
  const std::pair<std::string, std::string> cases[] = {
      {k_set_empty, "kiln compile: KILN_REMOTE_KEY is set but empty"},
      {"only 15 bytes..", "kiln compile: KILN_REMOTE_KEY is 15 bytes long; a secret needs at least 16"}};
  for (const auto& [secret, message] : cases) {
    CliResult r = run_kiln({"compile", k_mlp, "--arch", "sm_90", "--cache-dir", m_dir}, "",
                           {{"KILN_REMOTE_KEY", secret}, {"KILN_REMOTE_CACHE", "redis://127.0.0.1:1"}});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    CliResult version = run_kiln({"--version"}, "", {{"KILN_REMOTE_KEY", secret}});
    EXPECT_EQ(version.exit_code, 0);
    EXPECT_EQ(version.out.find("entries signed"), std::string::npos) << version.out;
    EXPECT_NE(version.out.find(message.substr(std::string("kiln compile: ").size())), std::string::npos)
        << version.out;
  }
  CliResult good = run_kiln({"--version"}, "", {{"KILN_REMOTE_KEY", "a secret of 16 b"}});
  EXPECT_NE(good.out.find("entries signed (KILN_REMOTE_KEY)"), std::string::npos) << good.out;
}

TEST_F(CompileCacheCli, ReadOnlyCommandsOnAMistypedFolderSayThereIsNoCacheAndCreateNothing) {
  std::string typo = m_dir + "/typo";
  for (std::vector<std::string> args :
       {std::vector<std::string>{"ls"}, {"stats"}, {"verify"}, {"show", "abcd"},
        {"why", k_mlp, "--arch", "sm_90"}}) {
    CliResult r = kiln(args, typo);
    EXPECT_EQ(r.exit_code, 1) << args[0] << ": " << r.err;
    EXPECT_NE(r.err.find("kiln " + args[0] + ": no cache at '" + typo + "'"), std::string::npos)
        << args[0] << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(typo)) << args[0] << " created the folder";
  }
}

TEST_F(CompileCacheCli, VerifyPruneAndClear) {
  compile("sm_90");
  compile("sm_80");
  EXPECT_EQ(kiln({"verify"}).exit_code, 0);
  ASSERT_EQ(kiln({"prune", "--max-size", "0"}).exit_code, 0);
  EXPECT_TRUE(json::parse(kiln({"ls", "--json"}).out)["entries"].empty());
  compile("sm_90");
  ASSERT_EQ(kiln({"clear"}).exit_code, 0);
  EXPECT_TRUE(json::parse(kiln({"ls", "--json"}).out)["entries"].empty());
  EXPECT_EQ(compile("sm_90")["cache"], "miss");
}

TEST_F(CompileCacheCli, BadArchOrModeExitsTwoAndMissingNvrtcExitsOne) {
  EXPECT_EQ(kiln({"compile", k_mlp, "--arch", "sm_12", "--precision", "high"}).exit_code, 2);
  EXPECT_EQ(kiln({"compile", k_mlp, "--arch", "sm_90", "--precision", "fast"}).exit_code, 2);
  CliResult refused = kiln({"compile", k_mlp, "--arch", "sm_75", "--precision", "high"});
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("sm_75"), std::string::npos) << refused.err;
  std::vector<std::string> args = {"compile", k_mlp, "--arch", "sm_90", "--precision",
                                   "high", "--cache-dir", m_dir};
  CliResult no_nvrtc = run_kiln(args, {}, {{"KILN_NVRTC_PATH", "/nonexistent/libnvrtc.so"}});
  EXPECT_EQ(no_nvrtc.exit_code, 1);
  EXPECT_NE(no_nvrtc.err.find("NVRTC"), std::string::npos) << no_nvrtc.err;
}

}  // namespace
}  // namespace kiln::testing::compile_cache_cli_test

namespace kiln::testing::compile_cache_cli_test {
namespace {

// Inputs that once crashed or exhausted memory: each must end in a clear error or in bounded work.
class RobustnessCli : public ::testing::Test {
protected:
  void SetUp() override {
    char name[] = "/tmp/kiln-robust-test-XXXXXX";
    m_dir = mkdtemp(name);
  }
  void TearDown() override { std::filesystem::remove_all(m_dir); }
  std::string write(const std::string& name, const std::string& text) {
    std::string path = m_dir + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string m_dir;
};

TEST_F(RobustnessCli, ImportOfADirectoryOrADeviceIsBadInput) {
  for (const std::string& path : {m_dir, std::string("/dev/zero")}) {
    CliResult r = run_kiln({"import", path, "--cache-dir", m_dir + "/cache"});
    EXPECT_EQ(r.signal, 0) << path;
    EXPECT_EQ(r.exit_code, 2) << path << ": " << r.err;
    EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  }
}

TEST_F(RobustnessCli, EmptyCacheDirIsBadUsageNotTheDefaultCache) {
  for (std::vector<std::string> args : {std::vector<std::string>{"stats", "--cache-dir", ""},
                                        std::vector<std::string>{"compile", k_mlp, "--cache-dir", ""},
                                        std::vector<std::string>{"ls", "--cache-dir", ""}}) {
    CliResult r = run_kiln(args);
    EXPECT_EQ(r.exit_code, 2) << args[0];
    EXPECT_NE(r.err.find("--cache-dir: must name a directory"), std::string::npos) << r.err;
  }
}

// An empty value is bad usage, not the option left out (a prune past the cap of everything
// else, a pull of every graph); nothing is removed.
TEST_F(CompileCacheCli, AnEmptyPruneOrPullValueIsBadUsage) {
  compile("sm_90");
  for (std::vector<std::string> args : {std::vector<std::string>{"prune", "--older-than", ""},
                                        std::vector<std::string>{"prune", "--max-size", ""},
                                        std::vector<std::string>{"pull", "--graph", ""}}) {
    CliResult r = kiln(args);
    EXPECT_EQ(r.exit_code, 2) << args[1] << ": " << r.err;
    EXPECT_NE(r.err.find(args[1] + ": must not be empty"), std::string::npos) << r.err;
  }
  EXPECT_EQ(json::parse(kiln({"ls", "--json"}).out)["entries"].size(), 1u);
}

TEST_F(RobustnessCli, ExportRefusesToOverwriteTheLiveDatabase) {
  std::string cache = m_dir + "/cache";
  ASSERT_EQ(run_kiln({"compile", k_mlp, "--arch", "sm_90", "--cache-dir", cache}).exit_code, 0);
  CliResult r = run_kiln({"export", cache + "/kiln.db", "--cache-dir", cache});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("refusing to export over"), std::string::npos) << r.err;
  CliResult verify = run_kiln({"verify", "--cache-dir", cache});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  CliResult again = run_kiln({"compile", k_mlp, "--arch", "sm_90", "--json", "--cache-dir", cache});
  EXPECT_NE(again.out.find("\"cache\":\"hit\""), std::string::npos) << again.out;
}

TEST_F(RobustnessCli, HugeGraphIsRefusedBeforeTheReferenceAllocates) {
  std::string huge =
      write("huge.kg", "graph h {\n  input x: f32[2147483647]\n  y = relu(x)\n  output y\n}\n");
  // audit's --max-memory (4G by default) refuses it as run's does, exit 2; run without one
  // is refused by the reference's own limit, exit 1.
  CliResult audit = run_kiln({"audit", huge, "--precision", "high"});
  EXPECT_EQ(audit.signal, 0);
  EXPECT_EQ(audit.exit_code, 2) << audit.err;
  EXPECT_NE(audit.err.find("needs about 34359738352 bytes of host tensors, above --max-memory 4G "
                           "(4294967296 bytes)"),
            std::string::npos)
      << audit.err;
  CliResult r = run_kiln({"run", huge, "--emulate", "--precision", "high"});
  EXPECT_EQ(r.signal, 0);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("above the limit"), std::string::npos) << r.err;
}

TEST_F(RobustnessCli, LongFusedChainEmitsInLinearSpace) {
  std::string text = "graph c {\n  input x: f32[64]\n  v0 = relu(x)\n";
  const int n = 20000;
  for (int i = 1; i < n; ++i) {
    text += "  v" + std::to_string(i) + " = relu(v" + std::to_string(i - 1) + ")\n";
  }
  text += "  output v" + std::to_string(n - 1) + "\n}\n";
  CliResult r = run_kiln({"emit", write("chain.kg", text), "--arch", "sm_90", "--no-prelude"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // One fused kernel whose describing comment is cut, not 20,000 nested calls long.
  size_t comment = r.out.find("// k0_");
  ASSERT_NE(comment, std::string::npos) << r.out.substr(0, 300);
  std::string first_line = r.out.substr(comment, r.out.find('\n', comment) - comment);
  EXPECT_LT(first_line.size(), 200u) << first_line.substr(0, 300);
  EXPECT_NE(first_line.find("..."), std::string::npos) << first_line;
}

}  // namespace
}  // namespace kiln::testing::compile_cache_cli_test
