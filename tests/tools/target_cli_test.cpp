// `--target cpu` from the CLI: run checks native kernels against fp64 through the cache, compile
// reports the CPU target and hits the second time, emit --llvm prints the IR, bad targets and
// conflicting flags are usage errors.
#include "run_cli.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <filesystem>

namespace kiln::testing {
namespace {

using nlohmann::json;

const std::string k_mlp = std::string(KILN_EXAMPLES_DIR) + "/mlp.kg";
const std::string k_dynamic = std::string(KILN_EXAMPLES_DIR) + "/attention_dynamic.kg";

class TargetCli : public ::testing::Test {
protected:
  void SetUp() override {
    dir = (std::filesystem::temp_directory_path() /
           ("kiln-target-cli-" + std::to_string(::getpid())))
              .string();
    std::filesystem::remove_all(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::map<std::string, std::string> env() const {
    return {{"KILN_CACHE_DIR", dir}, {"KILN_REMOTE_CACHE", ""}};
  }
  std::string dir;
};

TEST_F(TargetCli, RunOnTheCpuChecksAgainstFp64) {
  CliResult r = run_kiln({"run", k_dynamic, "--target", "cpu", "--dims", "S=37", "--precision",
                          "tf32x3", "--json"}, {}, env());
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  json report = json::parse(r.out);
  EXPECT_TRUE(report["ok"].get<bool>());
  EXPECT_EQ(report["device"], "CPU");
  EXPECT_EQ(report["arch"].get<std::string>().rfind("cpu:", 0), 0u) << report["arch"];
  EXPECT_EQ(report["precision"], "tf32x3");
}

TEST_F(TargetCli, CompileStoresTheObjectAndHitsTheSecondTime) {
  CliResult first = run_kiln({"compile", k_mlp, "--target", "cpu:x86-64-v3", "--precision",
                              "high", "--json"}, {}, env());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  json a = json::parse(first.out);
  EXPECT_EQ(a["cache"], "miss");
  EXPECT_EQ(a["arch"], "cpu:x86-64-v3");
  CliResult second = run_kiln({"compile", k_mlp, "--target", "cpu:x86-64-v3", "--precision",
                               "high", "--json"}, {}, env());
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(json::parse(second.out)["cache"], "hit");
  // Another CPU is another key.
  CliResult other = run_kiln({"compile", k_mlp, "--target", "cpu:x86-64-v4", "--precision",
                              "high", "--json"}, {}, env());
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(json::parse(other.out)["cache"], "miss");
  CliResult ls = run_kiln({"ls", "--json"}, {}, env());
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  std::vector<std::string> targets;
  json listed = json::parse(ls.out);
  for (const json& e : listed["entries"]) targets.push_back(e["arch"]);
  std::sort(targets.begin(), targets.end());
  EXPECT_EQ(targets, (std::vector<std::string>{"cpu:x86-64-v3", "cpu:x86-64-v4"}));
}

TEST_F(TargetCli, EmitLlvmPrintsTheKernelsIr) {
  CliResult r = run_kiln({"emit", k_mlp, "--target", "cpu", "--llvm", "--precision", "highest"},
                         {}, env());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("define void @kiln_k0_matmul"), std::string::npos);
  EXPECT_NE(r.out.find("define void @kiln_k1_matmul"), std::string::npos);
  EXPECT_NE(r.out.find("@llvm.fma.v"), std::string::npos);  // the micro-kernel's vector FMA
}

TEST_F(TargetCli, BadTargetsAndConflictsAreUsageErrors) {
  CliResult unknown = run_kiln({"run", k_mlp, "--target", "gpu"}, {}, env());
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("unknown target 'gpu'"), std::string::npos) << unknown.err;
  CliResult cpu = run_kiln({"compile", k_mlp, "--target", "cpu:pentium-9000"}, {}, env());
  EXPECT_EQ(cpu.exit_code, 2);
  EXPECT_NE(cpu.err.find("pentium-9000"), std::string::npos) << cpu.err;
  CliResult both = run_kiln({"run", k_mlp, "--target", "cpu", "--emulate"}, {}, env());
  EXPECT_EQ(both.exit_code, 2);
  CliResult arch = run_kiln({"compile", k_mlp, "--target", "cpu", "--arch", "sm_90"}, {}, env());
  EXPECT_EQ(arch.exit_code, 2);
  CliResult llvm = run_kiln({"emit", k_mlp, "--llvm", "--arch", "sm_90"}, {}, env());
  EXPECT_EQ(llvm.exit_code, 2);
  EXPECT_NE(llvm.err.find("--target cpu"), std::string::npos) << llvm.err;
}

}  // namespace
}  // namespace kiln::testing
