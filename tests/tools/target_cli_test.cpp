// `--target cpu` from the CLI: run checks native kernels against fp64 through the cache, compile
// reports the CPU target and hits the second time, emit --llvm prints the IR, bad targets and
// conflicting flags are usage errors.
#include "run_cli.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

namespace kiln::testing::target_cli_test {
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
  // The forms the CLI takes, not the library's (cuda:sm_XX is --arch here).
  EXPECT_EQ(unknown.err, "kiln run: --target gpu: unknown target (expected cuda or cpu[:NAME]; a "
                         "CUDA arch is --arch sm_XX, the emulator `kiln run --emulate`)\n");
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
  // The emulate target is the runtime's; on the command line it is --emulate.
  for (const char* command : {"compile", "run"}) {
    CliResult emulate = run_kiln({command, k_mlp, "--target", "emulate:sm_80"}, {}, env());
    EXPECT_EQ(emulate.exit_code, 2) << command;
    EXPECT_NE(emulate.err.find("kiln run --emulate"), std::string::npos) << emulate.err;
  }
}

// An unknown CPU is kiln's one clear error, without LLVM's own warning about the name.
TEST_F(TargetCli, AnUnknownCpuIsOneErrorWithoutLlvmsWarning) {
  for (const char* command : {"run", "compile", "emit"}) {
    CliResult r = run_kiln({command, k_mlp, "--target", "cpu:bogus"}, {}, env());
    EXPECT_EQ(r.exit_code, 2) << command;
    EXPECT_EQ(r.err.find("not a recognized processor"), std::string::npos) << r.err;
    // One line: "kiln run: --target cpu:bogus: unknown cpu 'bogus' for x86_64-... (try ...)".
    EXPECT_EQ(r.err.rfind("kiln " + std::string(command) +
                              ": --target cpu:bogus: unknown cpu 'bogus' for ", 0),
              0u)
        << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// A CPU plugin that cannot be loaded is this machine's failure (exit 1), not bad usage: the
// message names the file tried and KILN_CPU_PLUGIN. It was exit 2, as an unknown CPU is.
TEST_F(TargetCli, AMissingCpuPluginIsAFailureNotBadUsage) {
  auto missing = env();
  missing["KILN_CPU_PLUGIN"] = dir + "/no-such-plugin.so";
  for (const char* command : {"run", "compile", "emit", "why"}) {
    for (const char* target : {"cpu", "cpu:x86-64-v3"}) {
      CliResult r = run_kiln({command, k_mlp, "--target", target}, {}, missing);
      EXPECT_EQ(r.exit_code, 1) << command << " " << target << ": " << r.err;
      EXPECT_NE(r.err.find("set KILN_CPU_PLUGIN"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("no-such-plugin.so"), std::string::npos) << r.err;
    }
  }
  // With the plugin there, an unknown name is still the user's (exit 2).
  EXPECT_EQ(run_kiln({"compile", k_mlp, "--target", "cpu:bogus"}, {}, env()).exit_code, 2);
}

// A 32-bit x86 CPU is a name LLVM knows, but kiln compiles 64-bit code: refused, as LLVM would
// otherwise abort the process on the first compile.
TEST_F(TargetCli, AThirtyTwoBitCpuIsRefused) {
  for (const char* cpu : {"cpu:i386", "cpu:pentium4"}) {
    for (const char* command : {"run", "compile", "emit"}) {
      CliResult r = run_kiln({command, k_mlp, "--target", cpu}, {}, env());
      EXPECT_EQ(r.exit_code, 2) << command << " " << cpu << ": " << r.err;
      EXPECT_NE(r.err.find("cannot run 64-bit code"), std::string::npos) << r.err;
      EXPECT_EQ(r.err.find("LLVM ERROR"), std::string::npos) << r.err;
    }
  }
}

// A graph the CPU target cannot compile (an attention over head dim 300) is a usage error under
// run too, as under compile and emit: run checks the request before compiling (it said exit 1).
TEST_F(TargetCli, AGraphTheCpuTargetRefusesIsAUsageErrorUnderEveryCommand) {
  std::filesystem::create_directories(dir);
  std::string wide = dir + "/wide.kg";
  std::ofstream(wide) << "graph wide {\n  input q: f32[4, 300]\n  y = attention(q, q, q)\n"
                         "  output y\n}\n";
  for (const char* command : {"run", "compile", "emit"}) {
    CliResult r = run_kiln({command, wide, "--target", "cpu", "--precision", "high"}, {}, env());
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.err;
    EXPECT_NE(r.err.find("wide.kg:3:7: error: attention 'y': head dim 300 > 256"),
              std::string::npos)
        << r.err;
  }
}

// --arch names a CUDA arch: with --target cpu it is refused by every command that takes both.
TEST_F(TargetCli, ArchWithTheCpuTargetIsAUsageError) {
  CliResult run = run_kiln({"run", k_mlp, "--target", "cpu", "--arch", "sm_90"}, {}, env());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err,
            "kiln run: --arch applies to CUDA targets only; --target cpu runs on the CPU\n");
  for (const char* command : {"compile", "emit", "why"}) {
    CliResult r = run_kiln({command, k_mlp, "--target", "cpu", "--arch", "sm_90"}, {}, env());
    EXPECT_EQ(r.exit_code, 2) << command;
    EXPECT_NE(r.err.find("--arch names a CUDA arch"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << "nothing ran";
}

// compute_XX is a virtual arch: refused by name, where sm_90, sm90 and 90 all mean sm_90.
TEST_F(TargetCli, AVirtualArchIsRefusedAndSmSpellingsStillWork) {
  const std::string says =
      "arch 'compute_90' is a virtual arch (compute_XX, PTX only); kiln compiles for a real "
      "arch: give sm_90\n";
  CliResult compile = run_kiln({"compile", k_mlp, "--arch", "compute_90", "--no-cache"}, {}, env());
  EXPECT_EQ(compile.exit_code, 2);
  EXPECT_EQ(compile.err, "kiln compile: " + says);
  CliResult run = run_kiln({"run", k_mlp, "--emulate", "--arch", "compute_90"}, {}, env());
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(run.err, "kiln run: " + says);
  CliResult audit = run_kiln({"audit", k_mlp, "--precision", "auto", "--arch", "compute_90"});
  EXPECT_EQ(audit.exit_code, 2);
  EXPECT_EQ(audit.err, "kiln audit: " + says);
  CliResult sm = run_kiln({"emit", k_mlp, "--arch", "sm_90", "--precision", "high"});
  ASSERT_EQ(sm.exit_code, 0) << sm.err;
  for (const char* spelling : {"sm90", "90"}) {
    CliResult r = run_kiln({"emit", k_mlp, "--arch", spelling, "--precision", "high"});
    EXPECT_EQ(r.exit_code, 0) << spelling << ": " << r.err;
    EXPECT_EQ(r.out, sm.out) << spelling;
  }
}

// run --max-memory refuses, exit 2 and before compiling or allocating anything, a run whose
// estimated host memory is above it, naming both; at the estimate itself it runs.
TEST_F(TargetCli, RunMaxMemoryRefusesARunEstimatedAboveIt) {
  CliResult refused = run_kiln({"run", k_mlp, "--target", "cpu", "--precision", "highest",
                                "--max-memory", "64M"}, {}, env());
  EXPECT_EQ(refused.exit_code, 2);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(refused.err, m,
                               std::regex("kiln run: graph 'mlp' needs about ([0-9]+) bytes of "
                                          "host memory, above --max-memory 64M \\(67108864 "
                                          "bytes\\)\n")))
      << refused.err;
  EXPECT_FALSE(std::filesystem::exists(dir)) << "refused before compiling";
  // mlp's inputs (4,820,736 floats) as doubles twice, drawn and the reference's own copy, are
  // already more than 64M.
  int64_t needs = std::stoll(m[1].str());
  EXPECT_GT(needs, int64_t{2} * 4820736 * 8);
  CliResult at_estimate = run_kiln({"run", k_mlp, "--target", "cpu", "--precision", "highest",
                                    "--max-memory", std::to_string(needs)}, {}, env());
  EXPECT_EQ(at_estimate.exit_code, 0) << at_estimate.err;
  CliResult bad = run_kiln({"run", k_mlp, "--target", "cpu", "--max-memory", "lots"}, {}, env());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_EQ(bad.err,
            "kiln run: --max-memory 'lots' is not a size (bytes, or a number with K, M or G)\n");
}

// The estimate counts an i64 tensor's exact values beside its doubles: twice an i32 graph's.
TEST_F(TargetCli, RunMaxMemoryCountsI64TensorsAtSixteenBytesAnElement) {
  std::filesystem::path graphs = dir + "_graphs";
  std::filesystem::create_directories(graphs);
  auto needs = [&](const std::string& dtype) -> int64_t {
    std::string path = (graphs / (dtype + ".kg")).string();
    std::ofstream(path) << "graph g {\n  input a: " << dtype << "[1048576]\n  b = add(a, 1)\n"
                        << "  output b\n}\n";
    CliResult r = run_kiln({"run", path, "--target", "cpu", "--max-memory", "1K"}, {}, env());
    std::smatch m;
    if (!std::regex_search(r.err, m, std::regex("needs about ([0-9]+) bytes"))) {
      ADD_FAILURE() << r.err;
      return 0;
    }
    return std::stoll(m[1].str());
  };
  int64_t i32 = needs("i32"), i64 = needs("i64");
  std::filesystem::remove_all(graphs);
  EXPECT_GE(i64, int64_t{2} * 1048576 * 16) << "drawn and the reference's own copy, exact too";
  EXPECT_EQ(i64, 2 * i32);
}

}  // namespace
}  // namespace kiln::testing::target_cli_test
