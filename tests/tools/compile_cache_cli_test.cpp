// `kiln compile` through the cache and the cache commands on its entries, as a user runs them.
#include "run_cli.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace kiln::testing {
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
                            "compile_ms", "lookup_us"}) {
    EXPECT_TRUE(second.contains(field)) << field;
  }
  for (const json& k : second["kernels"]) EXPECT_EQ(k["spill_bytes"], 0) << k;
}

TEST_F(CompileCacheCli, NoCacheNeverHitsAndStoresNothing) {
  for (int i = 0; i < 2; ++i) {
    CliResult r = kiln({"compile", k_mlp, "--arch", "sm_80", "--precision", "high", "--json",
                        "--no-cache"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["cache"], "miss");
  }
  json ls = json::parse(kiln({"ls", "--json"}).out);
  EXPECT_TRUE(ls["entries"].empty());
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
  EXPECT_GE(stats["misses"], 1);
  CliResult ptx = kiln({"show", key.substr(0, 8), "--ptx"});
  ASSERT_EQ(ptx.exit_code, 0) << ptx.err;
  EXPECT_NE(ptx.out.find("mma.sync.aligned.m16n8k8"), std::string::npos);
  CliResult source = kiln({"show", key, "--source"});
  EXPECT_NE(source.out.find("__global__"), std::string::npos);
}

TEST_F(CompileCacheCli, WhyNamesTheFieldThatDiffers) {
  compile("sm_90");
  CliResult why = kiln({"why", k_mlp, "--arch", "sm_80", "--precision", "high", "--json"});
  ASSERT_EQ(why.exit_code, 0) << why.err;
  json out = json::parse(why.out);
  EXPECT_EQ(out["cache"], "miss");
  ASSERT_EQ(out["nearest"].size(), 1u);
  ASSERT_EQ(out["nearest"][0]["differs"].size(), 1u);
  EXPECT_EQ(out["nearest"][0]["differs"][0]["field"], "arch");
  EXPECT_EQ(out["nearest"][0]["differs"][0]["requested"], "sm_80");
  EXPECT_EQ(out["nearest"][0]["differs"][0]["cached"], "sm_90");
  json same = json::parse(
      kiln({"why", k_mlp, "--arch", "sm_90", "--precision", "high", "--json"}).out);
  EXPECT_EQ(same["cache"], "hit");
}

TEST_F(CompileCacheCli, ExportedBundlePrewarmsAnotherCache) {
  std::string key = compile("sm_86")["key"];
  std::string bundle = m_dir + "/fleet.kbundle";
  ASSERT_EQ(kiln({"export", bundle}).exit_code, 0);
  std::string other = m_dir + "/other";
  CliResult imported = kiln({"import", bundle}, other);
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  json hit = compile("sm_86", other);
  EXPECT_EQ(hit["cache"], "hit");
  EXPECT_EQ(hit["key"], key);
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
}  // namespace kiln::testing
