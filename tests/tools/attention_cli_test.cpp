// The fusion fallback policy from the CLI: an attention kiln cannot fuse runs unfused with a
// warning that names the reason and the bytes of its scores, and `--no-fallback` refuses it
// with exit 2; `kiln compile --json` shows one kernel for every example attention graph and for
// the mixed-precision chain (casts of the scores to f32 and of P to f16); a cast chain that runs
// unfused is shown by `kiln show` and refused by `--no-fallback`.
#include "run_cli.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace kiln::testing {
namespace {

using nlohmann::json;

// Head dim 320: past what the fused kernel takes.
const std::string k_wide = R"(graph wide {
  input q: f32[2, 33, 320]
  input k: f32[2, 40, 320]
  input v: f32[2, 40, 32]
  s = mul(matmul(q, k, transpose_b=true), 0.08)
  o = matmul(softmax(s, axis=-1), v)
  output o
}
)";

const char* k_reason = "attention at matmul 'o' runs unfused: head dim 320 > 256";

class AttentionCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("kiln-attention-cli-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    graph_ = (dir_ / "wide.kg").string();
    std::ofstream(graph_) << k_wide;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::vector<std::string> compile(std::vector<std::string> extra) {
    std::vector<std::string> args = {"compile", graph_, "--arch", "sm_90", "--precision", "high",
                                     "--cache-dir", (dir_ / "cache").string(), "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  std::filesystem::path dir_;
  std::string graph_;
};

TEST_F(AttentionCli, AnUnfusedAttentionIsWarnedAboutOnceAndRecorded) {
  CliResult r = run_kiln(compile({}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto out = json::parse(r.out);
  EXPECT_EQ(out["kernels"].size(), 3u);
  ASSERT_EQ(out["fallbacks"].size(), 1u);
  std::string line = out["fallbacks"][0];
  EXPECT_NE(line.find(k_reason), std::string::npos) << line;
  EXPECT_NE(line.find("its scores [2, 33, 40] f32, 10560 bytes (10.3 KiB)"), std::string::npos)
      << line;
  // One warning on stderr, on a miss and on a hit alike.
  for (int run = 0; run < 2; ++run) {
    if (run) r = run_kiln(compile({}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    size_t first = r.err.find(k_reason);
    ASSERT_NE(first, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find(k_reason, first + 1), std::string::npos) << "warned twice: " << r.err;
  }
}

TEST_F(AttentionCli, NoFallbackRefusesItWithExitTwoAndTheReason) {
  // The refusal comes before the cache: a hit of the unfused entry is refused too.
  ASSERT_EQ(run_kiln(compile({})).exit_code, 0);
  CliResult r = run_kiln(compile({"--no-fallback"}));
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.out.find(k_reason), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("refused by the fallback policy"), std::string::npos) << r.out;

  for (const char* command : {"emit", "run"}) {
    std::vector<std::string> args = {command, graph_, "--arch", "sm_90", "--no-fallback"};
    if (std::string(command) == "run") args.push_back("--emulate");
    CliResult e = run_kiln(args);
    EXPECT_EQ(e.exit_code, 2) << command << ": " << e.err;
    EXPECT_NE(e.err.find(k_reason), std::string::npos) << command << ": " << e.err;
  }
  CliResult both = run_kiln(compile({"--no-fallback", "--allow-fallback"}));
  EXPECT_EQ(both.exit_code, 2);
}

TEST_F(AttentionCli, EveryExampleAttentionGraphCompilesToOneKernel) {
  for (const char* name : {"attention.kg", "attention_dynamic.kg", "attention_causal.kg"}) {
    std::vector<std::string> args = {"compile", std::string(KILN_EXAMPLES_DIR) + "/" + name,
                                     "--arch", "sm_90", "--cache-dir", (dir_ / "cache").string(),
                                     "--json", "--no-fallback"};
    if (std::string(name) == "attention_dynamic.kg") {
      args.push_back("--dims");
      args.push_back("S=100");
    }
    CliResult r = run_kiln(args);
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.out << r.err;
    auto out = json::parse(r.out);
    ASSERT_EQ(out["kernels"].size(), 1u) << name;
    EXPECT_EQ(out["kernels"][0]["name"].get<std::string>().rfind("k0_attention_", 0), 0u);
    EXPECT_EQ(out["kernels"][0]["spill_bytes"], 0) << name;
    EXPECT_TRUE(out["fallbacks"].empty()) << name;
  }
}

// f16 attention written as mixed-precision code writes it: scores widened to f32, softmax in f32,
// P cast back to f16. `narrow` rounds the scores to bf16 instead, which the fused kernel does not.
std::string mixed_chain(const std::string& scores_cast) {
  return R"(graph mixed {
  input q: f16[2, 4, 48, 64]
  input k: f16[2, 4, 48, 64]
  input v: f16[2, 4, 48, 64]
  s = mul(cast(matmul(q, k, transpose_b=true), to=)" +
         scores_cast + R"(), 0.125)
  o = matmul(cast(softmax(s, axis=-1), to=f16), v)
  output o
}
)";
}

TEST_F(AttentionCli, TheMixedPrecisionChainIsOneKernelUnderNoFallback) {
  std::string file = (dir_ / "mixed.kg").string();
  std::ofstream(file) << mixed_chain("f32");
  CliResult r = run_kiln({"compile", file, "--arch", "sm_80", "--cache-dir",
                          (dir_ / "cache").string(), "--json", "--no-fallback"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto out = json::parse(r.out);
  ASSERT_EQ(out["kernels"].size(), 1u);
  EXPECT_EQ(out["kernels"][0]["name"].get<std::string>().rfind("k0_attention_f16", 0), 0u);
  EXPECT_TRUE(out["fallbacks"].empty());
}

TEST_F(AttentionCli, AnUnfusedCastChainIsShownAndRefused) {
  std::string file = (dir_ / "narrow.kg").string();
  std::ofstream(file) << mixed_chain("bf16");
  const std::string reason =
      "attention at matmul 'o' runs unfused: its scores go through cast #4 to bf16, a rounding "
      "the fused kernel (scores in fp32) does not do; its scores [2, 4, 48, 48] f16, 36864 bytes "
      "(36.0 KiB) are written and read back";
  std::vector<std::string> args = {"compile", file, "--arch", "sm_80", "--cache-dir",
                                   (dir_ / "cache").string(), "--json"};
  CliResult r = run_kiln(args);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto out = json::parse(r.out);
  EXPECT_EQ(out["kernels"].size(), 3u);
  ASSERT_EQ(out["fallbacks"].size(), 1u);
  EXPECT_EQ(out["fallbacks"][0], reason);
  EXPECT_NE(r.err.find("fallback: " + reason), std::string::npos) << r.err;
  CliResult shown = run_kiln({"show", out["key"].get<std::string>(), "--cache-dir",
                              (dir_ / "cache").string()});
  ASSERT_EQ(shown.exit_code, 0) << shown.err;
  EXPECT_NE(shown.out.find(reason), std::string::npos) << shown.out;

  args.push_back("--no-fallback");
  CliResult refused = run_kiln(args);
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.out.find(reason), std::string::npos) << refused.out;
  EXPECT_NE(refused.out.find("refused by the fallback policy"), std::string::npos) << refused.out;
}

}  // namespace
}  // namespace kiln::testing
